/** The editor commands that run a server command on a mapping file: which file, and what to do with the answer. */
import * as vscode from 'vscode';
import { LanguageClient } from 'vscode-languageclient/node';
import { isMappingFileName, MAPPING_FIND_GLOB, MAPPING_LANGUAGES } from './files';
import { runServerCommand, SERVER_COMMAND_SUGGEST_MAPPING, SERVER_COMMAND_WRITE_OUTPUTS } from './serverCommands';

interface WriteOutputsResult {
  outDir?: string;
  reportMarkdown?: string;
}

interface SuggestMappingResult {
  content?: string;
  coverage?: string;
}

export function isMappingDocument(doc: vscode.TextDocument): boolean {
  return (
    doc.uri.scheme === 'file' &&
    (MAPPING_LANGUAGES as readonly string[]).includes(doc.languageId) &&
    isMappingFileName(doc.uri.path)
  );
}

/** The mapping file a command applies to: the argument, the active editor, a visible one, or a pick. */
export async function targetMappingUri(arg: unknown): Promise<vscode.Uri | undefined> {
  if (arg instanceof vscode.Uri) {
    return arg;
  }
  if (typeof arg === 'string' && arg) {
    return vscode.Uri.parse(arg);
  }
  const active = vscode.window.activeTextEditor?.document;
  if (active && isMappingDocument(active)) {
    return active.uri;
  }
  const visible = vscode.window.visibleTextEditors.map((e) => e.document).filter(isMappingDocument);
  if (visible.length === 1) {
    return visible[0].uri;
  }
  const candidates = new Map<string, vscode.Uri>();
  for (const d of vscode.workspace.textDocuments.filter(isMappingDocument)) {
    candidates.set(d.uri.toString(), d.uri);
  }
  for (const u of await vscode.workspace.findFiles(MAPPING_FIND_GLOB, '**/{node_modules,.git,.venv}/**', 50)) {
    candidates.set(u.toString(), u);
  }
  const all = [...candidates.values()];
  if (all.length <= 1) {
    return all[0];
  }
  const pick = await vscode.window.showQuickPick(
    all.map((u) => ({ label: vscode.workspace.asRelativePath(u), uri: u })),
    { placeHolder: 'Mapping-key file to analyse' },
  );
  return pick?.uri;
}

/** Writes the analysis outputs of a mapping file and opens the report's preview. */
export async function writeReport(client: LanguageClient, output: vscode.LogOutputChannel, uri: vscode.Uri): Promise<void> {
  await vscode.workspace.openTextDocument(uri); // make sure the server has the document
  const sent = await runServerCommand<WriteOutputsResult>(client, output, SERVER_COMMAND_WRITE_OUTPUTS, uri, 'writing the outputs');
  if (!sent) {
    return;
  }
  const result = sent.answer;
  if (!result || typeof result.reportMarkdown !== 'string') {
    output.error(`writeOutputs returned no report: ${JSON.stringify(result)}`);
    void vscode.window.showErrorMessage('rca-lsp: the server wrote no report.');
    return;
  }
  output.info(`Wrote the analysis outputs to ${result.outDir ?? '?'}; report ${result.reportMarkdown}`);
  await vscode.commands.executeCommand('markdown.showPreview', vscode.Uri.file(result.reportMarkdown));
  void vscode.window.showInformationMessage(`rca-lsp: wrote the analysis outputs to ${result.outDir ?? result.reportMarkdown}`);
}

/** Opens the server's suggested mapping for the pair of a mapping file in a new editor; its coverage goes to the output. */
export async function suggestMapping(client: LanguageClient, output: vscode.LogOutputChannel, uri: vscode.Uri): Promise<void> {
  const sent = await runServerCommand<SuggestMappingResult>(client, output, SERVER_COMMAND_SUGGEST_MAPPING, uri, 'suggesting a mapping');
  if (!sent) {
    return;
  }
  const result = sent.answer;
  if (!result || typeof result.content !== 'string') {
    void vscode.window.showErrorMessage('rca-lsp: the server returned no suggestion.');
    return;
  }
  const doc = await vscode.workspace.openTextDocument({ language: 'json', content: result.content });
  await vscode.window.showTextDocument(doc, { preview: false });
  if (result.coverage) {
    output.info(`Suggested mapping for ${vscode.workspace.asRelativePath(uri)}: coverage ${result.coverage}`);
  }
}
