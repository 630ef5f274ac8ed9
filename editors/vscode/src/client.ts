/** Creates the language client for `python -m rca_lsp serve`: how it starts, which files and settings it gets. */
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
  TransportKind,
} from 'vscode-languageclient/node';
import { documentSelector } from './files';
import { SERVE_ARGS } from './install';
import { serverGone } from './serverGone';
import { SECTION, ServerSettings } from './settings';
import { isStatusParams, StatusParams } from './status';

export interface ClientInputs {
  python: string;
  cwd: string;
  output: vscode.LogOutputChannel;
  /** The translated `rcaLsp` settings for a resource (undefined: the current scope). */
  settings: (resource?: vscode.Uri) => ServerSettings;
  /** A well-formed `rcaLsp/status` notification, its uri normalised. */
  onStatus: (params: StatusParams) => void;
}

export interface RcaClient {
  client: LanguageClient;
  /** The end of what the server wrote to stderr (also in the output channel): why it stopped, when it did. */
  stderr(): string;
}

const STDERR_KEPT = 4096;

export function createClient(inputs: ClientInputs): RcaClient {
  let stderr = '';
  const errors: { handler?: ErrorHandler } = {};
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
  const serverOptions: ServerOptions = {
    command: inputs.python,
    args: SERVE_ARGS,
    transport: TransportKind.stdio,
    options: { cwd: inputs.cwd, env: { ...process.env, PYTHONUNBUFFERED: '1', PYTHONIOENCODING: 'utf-8' } },
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
  errors.handler = new StartedOnlyErrorHandler(client);
  client.onNotification('rcaLsp/status', (params: unknown) => {
    if (!isStatusParams(params)) {
      inputs.output.warn(`Ignoring malformed rcaLsp/status: ${JSON.stringify(params)}`);
      return;
    }
    inputs.onStatus({ ...params, uri: params.uri ? normaliseUri(params.uri) : undefined });
  });
  return { client, stderr: () => stderr };
}

/**
 * The client's own error handling (restart a crashed server a few times, then say so) once the server ran; a server
 * that stops before it is ready is not restarted (it would fail alike) and nothing is said here: the controller says
 * why, once, from what the server printed. A write failing because the server is gone is no reason to stop: the
 * connection's close follows and is handled as a crash.
 */
class StartedOnlyErrorHandler implements ErrorHandler {
  private ran = false;
  private readonly fallback: ErrorHandler;

  constructor(client: LanguageClient) {
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
    return this.ran ? this.fallback.closed() : { action: CloseAction.DoNotRestart, handled: true };
  }
}

function normaliseUri(uri: string): string {
  try {
    return vscode.Uri.parse(uri).toString();
  } catch {
    return uri;
  }
}
