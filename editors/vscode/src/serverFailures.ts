/**
 * What one language client's server went through, start after start, and the one message each failure gets: the
 * extension's, saying why with the last line the server printed. Pure: no `vscode` import.
 *
 * vscode-languageclient 9 would say these failures too, each in a notification of its own (lib/common/client.js):
 * - start()'s catch, for every start that fails (one the extension asked for, or its own restart after a crash):
 *   "<name> client: couldn't create connection to server." with showNotification 'force', which no option turns off;
 * - the restart after a crash, when that start fails: "Restarting server failed", 'force' as well;
 * - a close whose error handler answers DoNotRestart without `handled: true`: "Connection to server got closed.
 *   Server will not be restarted." or the handler's message (the default's "The <name> server crashed 5 times in the
 *   last 3 minutes. ..."), 'force';
 * - an error whose handler answers without `handled: true`: "connection to server is erroring", 'force';
 * - a failed initialize without an initializationFailedHandler: the error's message (client.ts sets one).
 * The error handler answers `handled: true` (client.ts), and `libraryNotification` keeps the two that only 'force'
 * decides out while the server does not run.
 */
import { commandLine, lastPrinted, SERVE_ARGS } from './install';

/** How much of the end of what the server wrote to stderr is kept for the messages. */
const STDERR_KEPT = 4096;

/**
 * Restarts of a crashed server before the client gives up: vscode-languageclient's default handler restarts it
 * unless this many restarts came within its 3 minutes.
 */
export const CRASH_RESTARTS = 4;

/**
 * Whether vscode-languageclient may show a notification for a message it logs (its `showNotification`, changed):
 * one it forces only while the server runs. Before (a start, its own restart after a crash) and while it stops, the
 * extension says each failure itself; a notification it does not force is left to revealOutputChannelOn.
 */
export function libraryNotification(showNotification: boolean | 'force', running: boolean): boolean | 'force' {
  return showNotification === 'force' && !running ? false : showNotification;
}

/** A server that ran and crashed too often, given up on. */
export function crashedMessage(python: string, stderr: string): string {
  return (
    `rca-lsp: the server (${commandLine(python, SERVE_ARGS)}) crashed ${CRASH_RESTARTS + 1} times in the last 3 minutes and ` +
    `is not started again. ${lastPrinted(stderr)}. The output channel has all it printed.`
  );
}

/** A server that ran and crashed, whose process could not be started again (its interpreter gone, ...). */
export function restartFailureMessage(python: string, error: string): string {
  return `rca-lsp: the server (${commandLine(python, SERVE_ARGS)}) crashed and could not be started again: ${error}.`;
}

/**
 * One client's server, start after start: what it printed, whether it ever ran, and why it was stopped for good,
 * said once through `say` when that is for the client to say. A start the extension asked for that fails is said
 * by the extension from the start's end (`failure` tells whether it was said here already).
 */
export class ServerFailures {
  private printed = '';
  private ran = false;
  private isRetired = false;
  private reason: string | undefined;

  constructor(
    private readonly python: string,
    private readonly say: (message: string) => void,
  ) {}

  /** The end of what the last server started wrote to stderr. */
  get stderr(): string {
    return this.printed;
  }

  /** Why the last server started was stopped for good, once said, if it was. */
  get failure(): string | undefined {
    return this.reason;
  }

  /** Whether the extension stops the client: nothing is started or said any more. */
  get retired(): boolean {
    return this.isRetired;
  }

  /** A server process is being started: what it prints and why it stops are its own. */
  starting(): void {
    this.printed = '';
    this.reason = undefined;
  }

  /** What the server wrote to stderr. */
  append(text: string): void {
    this.printed = (this.printed + text).slice(-STDERR_KEPT);
  }

  /** The server answered initialize: from now on a close is a crash. */
  answered(): void {
    this.ran = true;
  }

  retire(): void {
    this.isRetired = true;
  }

  /** Gives the server up for `message`, said now. */
  giveUp(message: string): void {
    this.reason = message;
    this.say(message);
  }

  /**
   * The connection closed: whether to start the server again. One that never ran is not (it would fail alike; the
   * start's end is said by whoever started it), nor one given up on or stopped. A crash of one that ran is
   * vscode-languageclient's default handling's to decide (`defaultRestarts`, which counts it); when that gives up,
   * it is said here.
   */
  async closed(defaultRestarts: () => Promise<boolean>): Promise<boolean> {
    if (!this.ran || this.isRetired || this.reason !== undefined) {
      return false;
    }
    if (await defaultRestarts()) {
      return true;
    }
    this.giveUp(crashedMessage(this.python, this.printed));
    return false;
  }

  /**
   * The server's process could not be started (`error`: ENOENT, EACCES, ...). Said here when the client was starting
   * it again after a crash; a first start's failure is said by whoever started it.
   */
  startFailed(error: string): void {
    if (this.ran && !this.isRetired) {
      this.giveUp(restartFailureMessage(this.python, error));
    }
  }
}
