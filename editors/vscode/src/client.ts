/** Creates the language client for `python -m rca_lsp serve`: how it starts, which files and settings it gets. */
import { ChildProcess } from 'node:child_process';
import * as vscode from 'vscode';
import {
  CloseAction,
  CloseHandlerResult,
  ErrorAction,
  ErrorHandler,
  ErrorHandlerResult,
  LanguageClient,
  LanguageClientOptions,
  Message,
  RevealOutputChannelOn,
  ServerOptions,
  State,
} from 'vscode-languageclient/node';
import { documentSelector } from './files';
import { SERVE_ARGS } from './install';
import { exited, isRunning, killProcess, startProcess } from './serverProcess';
import { serverGone } from './serverGone';
import { SECTION, ServerSettings } from './settings';
import { InitializeWatchdog, initializeTimeoutMessage } from './startWatchdog';
import { isStatusParams, StatusParams } from './status';

export interface ClientInputs {
  python: string;
  cwd: string;
  output: vscode.LogOutputChannel;
  /** The translated `rcaLsp` settings for a resource (undefined: the current scope). */
  settings: (resource?: vscode.Uri) => ServerSettings;
  /** A well-formed `rcaLsp/status` notification, its uri normalised. */
  onStatus: (params: StatusParams) => void;
  /** Seconds a started server may take to answer initialize. */
  initializeTimeout: number;
  /** A server that did not answer initialize in time was killed: why, in words. */
  onGiveUp: (message: string) => void;
}

export interface RcaClient {
  client: LanguageClient;
  /** The end of what the server wrote to stderr (also in the output channel): why it stopped, when it did. */
  stderr(): string;
  /** Why the last server started was given up on (it did not answer initialize in time), if it was. */
  givenUp(): string | undefined;
  /** For a stop: no server is started again, and one being started is killed. */
  retire(): void;
  /** Once the client stopped: waits up to `graceMs` for the server to exit, then kills it. */
  ensureExit(graceMs: number): Promise<void>;
}

const STDERR_KEPT = 4096;

export function createClient(inputs: ClientInputs): RcaClient {
  let stderr = '';
  let server: ChildProcess | undefined;
  let givenUp: string | undefined; // why the last server started was given up on
  let retired = false;
  const errors: { handler?: ErrorHandler } = {};
  const watchdog = new InitializeWatchdog<ChildProcess>(inputs.initializeTimeout * 1000, (child) => {
    givenUp = initializeTimeoutMessage(inputs.python, inputs.initializeTimeout, stderr);
    killProcess(child); // the connection closes (the error handler then finds it given up on), and the start fails
    inputs.onGiveUp(givenUp);
  });
  // vscode-languageclient writes the server's stderr, and only that, with `append` to `outputChannel`
  const outputChannel = new Proxy(inputs.output, {
    get(target, prop) {
      if (prop === 'append') {
        return (text: string) => {
          stderr = (stderr + text).slice(-STDERR_KEPT);
          target.append(text);
        };
      }
      const value: unknown = Reflect.get(target, prop, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
  // The extension starts the process (vscode-languageclient would, and never end one that does not answer initialize);
  // the arguments are those vscode-languageclient gave it for a stdio transport.
  const serverOptions: ServerOptions = async () => {
    if (retired) {
      throw new Error('the client is stopping');
    }
    const env = { ...process.env, PYTHONUNBUFFERED: '1', PYTHONIOENCODING: 'utf-8' };
    const child = await startProcess(inputs.python, [...SERVE_ARGS, '--stdio'], inputs.cwd, env);
    server = child;
    stderr = ''; // what this process prints
    givenUp = undefined;
    child.on('error', (e) => inputs.output.warn(`The server process: ${e.message}`));
    child.on('exit', (code, signal) => {
      watchdog.ended(child);
      inputs.output.info(`The server process (pid ${child.pid}) exited with ${signal ? `signal ${signal}` : `code ${code}`}.`);
    });
    if (retired) {
      killProcess(child); // stopped while it started
    } else {
      watchdog.started(child);
    }
    return child;
  };
  const clientOptions: LanguageClientOptions = {
    documentSelector: documentSelector(),
    diagnosticCollectionName: 'rca-lsp',
    outputChannel,
    traceOutputChannel: inputs.output,
    errorHandler: {
      error: (error, message, count) => errors.handler?.error(error, message, count) ?? { action: ErrorAction.Continue },
      closed: () => errors.handler?.closed() ?? { action: CloseAction.DoNotRestart },
    },
    revealOutputChannelOn: RevealOutputChannelOn.Never,
    // The server's stop is said by the controller, from what it printed; not also as the answer that never came
    // ('Pending response rejected since connection got disposed').
    initializationFailedHandler: (error) => {
      inputs.output.error(`Server initialization failed: ${error instanceof Error ? error.message : String(error)}`);
      return false;
    },
    initializationOptions: () => inputs.settings(),
    middleware: {
      workspace: {
        // The server asks for section rcaLsp: answer with the translated settings of the scope it names.
        configuration: async (params, token, next) => {
          const answer = await next(params, token);
          if (!Array.isArray(answer)) {
            return answer;
          }
          return params.items.map((item, i) =>
            item.section === SECTION ? inputs.settings(item.scopeUri ? vscode.Uri.parse(item.scopeUri) : undefined) : answer[i],
          );
        },
      },
    },
  };
  const client = new LanguageClient('rcaLsp', 'rca-lsp', serverOptions, clientOptions);
  errors.handler = new StartedOnlyErrorHandler(client, () => retired || givenUp !== undefined);
  client.onDidChangeState((e) => {
    if (e.newState === State.Running) {
      watchdog.answered();
    }
  });
  client.onNotification('rcaLsp/status', (params: unknown) => {
    if (!isStatusParams(params)) {
      inputs.output.warn(`Ignoring malformed rcaLsp/status: ${JSON.stringify(params)}`);
      return;
    }
    inputs.onStatus({ ...params, uri: params.uri ? normaliseUri(params.uri) : undefined });
  });
  return {
    client,
    stderr: () => stderr,
    givenUp: () => givenUp,
    retire: () => {
      retired = true;
      watchdog.dispose();
      if (server && client.state === State.Starting) {
        killProcess(server);
      }
    },
    ensureExit: async (graceMs) => {
      const child = server;
      if (child && isRunning(child) && !(await exited(child, graceMs))) {
        inputs.output.warn(`The server process (pid ${child.pid}) did not exit after the client stopped: killing it.`);
        killProcess(child);
      }
    },
  };
}

/**
 * The client's own error handling (restart a crashed server a few times, then say so) once the server ran; a server
 * that stops before it is ready is not restarted (it would fail alike) and nothing is said here: the controller says
 * why, once, from what the server printed. Nor is one given up on (it did not answer initialize in time, or the client
 * is being stopped), even after a crash. A write failing because the server is gone is no reason to stop: the
 * connection's close follows and is handled as a crash.
 */
class StartedOnlyErrorHandler implements ErrorHandler {
  private ran = false;
  private readonly fallback: ErrorHandler;

  constructor(
    client: LanguageClient,
    private readonly givenUp: () => boolean,
  ) {
    this.fallback = client.createDefaultErrorHandler();
    client.onDidChangeState((e) => {
      this.ran ||= e.newState === State.Running;
    });
  }

  error(error: Error, message: Message | undefined, count: number | undefined): ErrorHandlerResult | Promise<ErrorHandlerResult> {
    if (serverGone(error)) {
      // A write to a server that just exited. The default handler shuts the client down on such an error (it has
      // no count): the close that follows then finds the client stopping, so the crash is neither restarted nor
      // counted, and no 'crashed 5 times' is ever said. Logged only; the close decides.
      return { action: ErrorAction.Continue, handled: true };
    }
    return this.fallback.error(error, message, count);
  }

  closed(): CloseHandlerResult | Promise<CloseHandlerResult> {
    return this.ran && !this.givenUp() ? this.fallback.closed() : { action: CloseAction.DoNotRestart, handled: true };
  }
}

function normaliseUri(uri: string): string {
  try {
    return vscode.Uri.parse(uri).toString();
  } catch {
    return uri;
  }
}
