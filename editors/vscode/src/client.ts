/** Creates the language client for `python -m rca_lsp serve`: how it starts, which files and settings it gets. */
import * as vscode from 'vscode';
import { LanguageClient, LanguageClientOptions, RevealOutputChannelOn, ServerOptions, TransportKind } from 'vscode-languageclient/node';
import { documentSelector } from './files';
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

export function createClient(inputs: ClientInputs): LanguageClient {
  const serverOptions: ServerOptions = {
    command: inputs.python,
    args: ['-m', 'rca_lsp', 'serve'],
    transport: TransportKind.stdio,
    options: { cwd: inputs.cwd, env: { ...process.env, PYTHONUNBUFFERED: '1', PYTHONIOENCODING: 'utf-8' } },
  };
  const clientOptions: LanguageClientOptions = {
    documentSelector: documentSelector(),
    diagnosticCollectionName: 'rca-lsp',
    outputChannel: inputs.output,
    traceOutputChannel: inputs.output,
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
  client.onNotification('rcaLsp/status', (params: unknown) => {
    if (!isStatusParams(params)) {
      inputs.output.warn(`Ignoring malformed rcaLsp/status: ${JSON.stringify(params)}`);
      return;
    }
    inputs.onStatus({ ...params, uri: params.uri ? normaliseUri(params.uri) : undefined });
  });
  return client;
}

function normaliseUri(uri: string): string {
  try {
    return vscode.Uri.parse(uri).toString();
  } catch {
    return uri;
  }
}
