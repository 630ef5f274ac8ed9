/** Running the server's `workspace/executeCommand` commands: one way to send them, show progress and report failure. */
import * as vscode from 'vscode';
import { ExecuteCommandRequest, LanguageClient } from 'vscode-languageclient/node';

export const SERVER_COMMAND_WRITE_OUTPUTS = 'rcaLsp.server.writeOutputs';
export const SERVER_COMMAND_SUGGEST_MAPPING = 'rcaLsp.server.suggestMapping';

/** True when the running server offers the command (from its initialize result). */
export function serverOffers(client: LanguageClient | undefined, command: string): boolean {
  return (client?.initializeResult?.capabilities.executeCommandProvider?.commands ?? []).includes(command);
}

/**
 * Sends `command` with the mapping file's URI, with a progress notification titled `title` ("writing the analysis
 * outputs"). Resolves with `{answer}` (the server's answer, possibly none), or undefined after telling the user (and the output) what failed.
 */
export async function runServerCommand<T>(
  client: LanguageClient,
  output: vscode.LogOutputChannel,
  command: string,
  uri: vscode.Uri,
  title: string,
): Promise<{ answer: T | null | undefined } | undefined> {
  try {
    const answer = await vscode.window.withProgress(
      { location: vscode.ProgressLocation.Notification, title: `rca-lsp: ${title}…` },
      () => client.sendRequest(ExecuteCommandRequest.type, { command, arguments: [uri.toString()] }) as Promise<T | null>,
    );
    return { answer };
  } catch (e) {
    const msg = `rca-lsp: ${title} failed: ${e instanceof Error ? e.message : String(e)}`;
    output.error(msg);
    void vscode.window.showErrorMessage(msg);
    return undefined;
  }
}
