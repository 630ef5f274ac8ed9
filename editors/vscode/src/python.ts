/** VS Code glue of the interpreter resolution (interpreter.ts): the setting, workspace trust, the Python extension. */
import * as os from 'node:os';
import * as vscode from 'vscode';
import { ignoredUntrustedSetting, ResolvedInterpreter, resolveInterpreter, whichOnPath } from './interpreter';
import { onPythonInterpreterChange, pythonExtensionInterpreter } from './pythonExtension';
import { SECTION, VariableContext } from './settings';

/** The variables of settings for a resource: its workspace folder (else the first one) and the home folder. */
export function variablesFor(resource?: vscode.Uri): VariableContext {
  const folder = (resource && vscode.workspace.getWorkspaceFolder(resource)) ?? vscode.workspace.workspaceFolders?.[0];
  return { workspaceFolder: folder?.uri.fsPath, userHome: os.homedir() };
}

/** The interpreter to run the server with for a resource; says in the output when a workspace value is ignored. */
export async function resolvePython(resource: vscode.Uri | undefined, output: vscode.LogOutputChannel): Promise<ResolvedInterpreter | undefined> {
  const inspect = vscode.workspace.getConfiguration(SECTION, resource).inspect<string>('interpreter');
  const trusted = vscode.workspace.isTrusted;
  if (ignoredUntrustedSetting(inspect, trusted)) {
    output.warn(
      'The workspace sets rcaLsp.interpreter, which is ignored because the workspace is not trusted. ' +
        'Trust the workspace or set the interpreter in your user settings.',
    );
  }
  const interpreter = await resolveInterpreter({
    setting: inspect,
    trusted,
    vars: variablesFor(resource),
    pythonExtension: () => pythonExtensionInterpreter(resource),
    which: (name) => whichOnPath(name),
    workspaceFolders: (vscode.workspace.workspaceFolders ?? []).filter((f) => f.uri.scheme === 'file').map((f) => f.uri.fsPath),
    onUntrusted: (python, source) => {
      const msg =
        `rca-lsp: ${python} (${source === 'setting' ? 'rcaLsp.interpreter' : source === 'path' ? 'on PATH' : "the Python extension's environment"}) ` +
        'is inside the workspace, which is not trusted: it is not run. Trust the workspace or choose an interpreter outside it.';
      output.warn(msg);
      void vscode.window.showWarningMessage(msg);
    },
  });
  if (interpreter) {
    output.info(`Interpreter: ${interpreter.python} (from ${interpreter.detail})`);
  }
  return interpreter;
}

/**
 * The server's working directory. In an untrusted workspace never the workspace: `python -m` puts the working
 * directory first on sys.path, so a workspace could shadow rca_lsp with its own code.
 */
export function serverCwd(extensionDir: string): string {
  const folder = vscode.workspace.workspaceFolders?.[0]?.uri;
  return vscode.workspace.isTrusted && folder?.scheme === 'file' ? folder.fsPath : extensionDir;
}

/** Calls `listener` when the Python extension's active environment changes (when that extension is installed). */
export async function watchPythonEnvironment(
  listener: () => void,
  output: vscode.LogOutputChannel,
): Promise<vscode.Disposable | undefined> {
  try {
    return await onPythonInterpreterChange(listener);
  } catch (e) {
    output.warn(`Cannot watch the Python extension's environment: ${String(e)}`);
    return undefined;
  }
}
