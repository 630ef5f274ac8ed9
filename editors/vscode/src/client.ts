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
import { CRASH_RESTARTS, libraryNotification, ServerFailures } from './serverFailures';
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
  /**
   * The client stopped its server for good by itself (it did not answer initialize in time, it crashed too often, it
   * crashed and could not be started again): why, in words, once. The only message about it: see serverFailures.ts.
   */
  onFailure: (message: string) => void;
}

export interface RcaClient {
  client: LanguageClient;
  /** The end of what the server wrote to stderr (also in the output channel): why it stopped, when it did. */
  stderr(): string;
  /** Why the last server started was stopped for good by the client (said through onFailure), if it was. */
  failure(): string | undefined;
  /** For a stop: no server is started again, and one being started is killed. */
  retire(): void;
  /** Once the client stopped: waits up to `graceMs` for the server to exit, then kills it. */
  ensureExit(graceMs: number): Promise<void>;
}

export function createClient(inputs: ClientInputs): RcaClient {
  let server: ChildProcess | undefined;
  const failures = new ServerFailures(inputs.python, inputs.onFailure);
  const errors: { handler?: ErrorHandler } = {};
  const watchdog = new InitializeWatchdog<ChildProcess>(inputs.initializeTimeout * 1000, (child) => {
    // given up on before the kill: the connection closes (the error handler then finds it given up on), the start fails
    failures.giveUp(initializeTimeoutMessage(inputs.python, inputs.initializeTimeout, failures.stderr));
    killProcess(child);
  });
  // vscode-languageclient writes the server's stderr, and only that, with `append` to `outputChannel`
  const outputChannel = new Proxy(inputs.output, {
    get(target, prop) {
      if (prop === 'append') {
        return (text: string) => {
          failures.append(text);
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
    if (failures.retired) {
      throw new Error('the client is stopping');
    }
    failures.starting();
    const env = { ...process.env, PYTHONUNBUFFERED: '1', PYTHONIOENCODING: 'utf-8' };
    let child: ChildProcess;
    try {
      child = await startProcess(inputs.python, [...SERVE_ARGS, '--stdio'], inputs.cwd, env);
    } catch (e) {
      failures.startFailed(e instanceof Error ? e.message : String(e));
      throw e;
    }
    server = child;
    child.on('error', (e) => inputs.output.warn(`The server process: ${e.message}`));
    child.on('exit', (code, signal) => {
      watchdog.ended(child);
      inputs.output.info(`The server process (pid ${child.pid}) exited with ${signal ? `signal ${signal}` : `code ${code}`}.`);
    });
    if (failures.retired) {
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
  const client = new QuietStartLanguageClient('rcaLsp', 'rca-lsp', serverOptions, clientOptions);
  errors.handler = new OneMessageErrorHandler(client, failures);
  client.onDidChangeState((e) => {
    if (e.newState === State.Running) {
      watchdog.answered();
      failures.answered();
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
    stderr: () => failures.stderr,
    failure: () => failures.failure,
    retire: () => {
      failures.retire();
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
 * A language client whose notifications that no option turns off (start()'s "couldn't create connection to server",
 * "Restarting server failed") are shown only while its server runs: every failure before is the extension's to say
 * (serverFailures.ts).
 */
class QuietStartLanguageClient extends LanguageClient {
  override error(message: string, data?: unknown, showNotification: boolean | 'force' = true): void {
    super.error(message, data, libraryNotification(showNotification, this.state === State.Running));
  }
}

/**
 * Restarts and gives up as ServerFailures decides (vscode-languageclient's default handling for a crash of a server
 * that ran), and leaves every message to the extension (`handled`). A write failing because the server is gone is no
 * reason to stop: the connection's close follows and is handled as a crash.
 */
class OneMessageErrorHandler implements ErrorHandler {
  private readonly byDefault: ErrorHandler;

  constructor(
    client: LanguageClient,
    private readonly failures: ServerFailures,
  ) {
    this.byDefault = client.createDefaultErrorHandler(CRASH_RESTARTS);
  }

  error(error: Error, message: Message | undefined, count: number | undefined): ErrorHandlerResult | Promise<ErrorHandlerResult> {
    if (serverGone(error)) {
      // A write to a server that just exited. The default handler shuts the client down on such an error (it has
      // no count): the close that follows then finds the client stopping, so the crash is neither restarted nor
      // counted, and no 'crashed 5 times' is ever said. Logged only; the close decides.
      return { action: ErrorAction.Continue, handled: true };
    }
    return this.byDefault.error(error, message, count);
  }

  async closed(): Promise<CloseHandlerResult> {
    const restart = await this.failures.closed(async () => (await this.byDefault.closed()).action === CloseAction.Restart);
    return { action: restart ? CloseAction.Restart : CloseAction.DoNotRestart, handled: true };
  }
}

function normaliseUri(uri: string): string {
  try {
    return vscode.Uri.parse(uri).toString();
  } catch {
    return uri;
  }
}
