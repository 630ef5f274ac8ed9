/**
 * How long a started server may take to answer `initialize`, and giving up on one that does not: vscode-languageclient
 * waits for the answer forever, and a client waiting for it can be neither stopped nor restarted. Pure: no `vscode`
 * import.
 */
import { commandLine, lastPrinted, SERVE_ARGS } from './install';

/** Seconds a server may take to answer initialize: its imports, reading its settings, ... (rcaLsp.initializeTimeout). */
export const DEFAULT_INITIALIZE_TIMEOUT = 60;

/** The setting rcaLsp.initializeTimeout as used: a positive number of seconds, else the default and why. */
export function initializeTimeout(raw: unknown): { seconds: number; problem?: string } {
  if (raw === undefined || raw === null) {
    return { seconds: DEFAULT_INITIALIZE_TIMEOUT };
  }
  if (typeof raw === 'number' && Number.isFinite(raw) && raw > 0) {
    return { seconds: raw };
  }
  return {
    seconds: DEFAULT_INITIALIZE_TIMEOUT,
    problem: `rcaLsp.initializeTimeout must be a positive number of seconds, not ${JSON.stringify(raw)}; using ${DEFAULT_INITIALIZE_TIMEOUT}`,
  };
}

/** What is said when a server did not answer initialize in time: the last line it printed (stderr) tells what it did. */
export function initializeTimeoutMessage(python: string, seconds: number, stderr: string): string {
  return (
    `rca-lsp: the server (${commandLine(python, SERVE_ARGS)}) did not answer initialize within ${seconds} s and was stopped. ` +
    `${lastPrinted(stderr)}. The output channel has all it printed; rcaLsp.initializeTimeout sets how long it may take.`
  );
}

export interface Timers {
  set(fn: () => void, ms: number): unknown;
  clear(handle: unknown): void;
}

const NODE_TIMERS: Timers = {
  set: (fn, ms) => setTimeout(fn, ms),
  clear: (handle) => clearTimeout(handle as ReturnType<typeof setTimeout>),
};

/**
 * Gives up on a server process that does not answer initialize in time. Each process the client starts is watched
 * from its start until it answered or ended; one that neither answered nor ended after `ms` is given up on, once:
 * `onGiveUp` is called with it (to kill it and say so). A process is whatever identifies it (its ChildProcess).
 */
export class InitializeWatchdog<P> {
  private watched: P | undefined;
  private handle: unknown;

  constructor(
    private readonly ms: number,
    private readonly onGiveUp: (process: P) => void,
    private readonly timers: Timers = NODE_TIMERS,
  ) {}

  /** A server process started: it must answer within `ms`. */
  started(process: P): void {
    this.unwatch();
    this.watched = process;
    this.handle = this.timers.set(() => {
      this.handle = undefined;
      this.watched = undefined;
      this.onGiveUp(process);
    }, this.ms);
  }

  /** The server answered initialize (the client runs). */
  answered(): void {
    this.unwatch();
  }

  /** A server process ended (a crash, a stop): no longer watched. An older process's end changes nothing. */
  ended(process: P): void {
    if (this.watched === process) {
      this.unwatch();
    }
  }

  dispose(): void {
    this.unwatch();
  }

  private unwatch(): void {
    if (this.handle !== undefined) {
      this.timers.clear(this.handle);
      this.handle = undefined;
    }
    this.watched = undefined;
  }
}
