/** Installing the bundled server into an interpreter, once the user agreed: the command and its output in the output channel. */
import * as vscode from 'vscode';
import { commandLine, runCommand } from './install';

/** Runs `python args` (pip) in `cwd` with a cancellable progress notification; true when it succeeded. */
export async function installWithConsentGiven(
  python: string,
  args: string[],
  cwd: string,
  output: vscode.LogOutputChannel,
): Promise<boolean> {
  const command = commandLine(python, args);
  output.show(true);
  output.info(`Installing the server: ${command}`);
  let pending = ''; // output arrives in chunks: log whole lines
  const onText = (text: string): void => {
    const lines = (pending + text).split(/\r?\n/);
    pending = lines.pop() ?? '';
    lines.forEach((line) => logLine(output, line));
  };
  const result = await vscode.window.withProgress(
    { location: vscode.ProgressLocation.Notification, title: `rca-lsp: ${command}`, cancellable: true },
    (_progress, token) => runCommand(python, args, cwd, onText, token),
  );
  logLine(output, pending);
  if (result.code === 0) {
    output.info('The server is installed.');
    return true;
  }
  const how = result.error ?? (result.code === null ? 'it was stopped' : `exit code ${result.code}`);
  output.error(`Installing the server failed (${how}): ${command}`);
  const choice = await vscode.window.showErrorMessage(
    `rca-lsp: installing the server failed (${how}). The output channel has the command and what it printed.`,
    'Show Output',
  );
  if (choice) {
    output.show(true);
  }
  return false;
}

function logLine(output: vscode.LogOutputChannel, line: string): void {
  if (line.trim()) {
    output.info(`  ${line}`);
  }
}
