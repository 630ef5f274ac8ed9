/** The slice of the ms-python.python extension API used here (see @vscode/python-extension). */
import * as vscode from 'vscode';

interface EnvironmentPath {
  id: string;
  path: string;
}

interface ResolvedEnvironment {
  executable?: { uri?: vscode.Uri };
}

interface PythonExtensionApi {
  environments?: {
    getActiveEnvironmentPath(resource?: vscode.Uri | vscode.WorkspaceFolder): EnvironmentPath;
    resolveEnvironment(env: EnvironmentPath | string): Promise<ResolvedEnvironment | undefined>;
    onDidChangeActiveEnvironmentPath?: vscode.Event<unknown>;
  };
  settings?: {
    getExecutionDetails?(resource?: vscode.Uri): { execCommand: string[] | undefined };
  };
}

export const PYTHON_EXTENSION_ID = 'ms-python.python';

async function api(): Promise<PythonExtensionApi | undefined> {
  const ext = vscode.extensions.getExtension<PythonExtensionApi>(PYTHON_EXTENSION_ID);
  if (!ext) {
    return undefined;
  }
  if (!ext.isActive) {
    const timeout = new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), 15000));
    await Promise.race([ext.activate(), timeout]);
    if (!ext.isActive) {
      return undefined;
    }
  }
  return ext.exports;
}

/** The active interpreter of the Python extension for a resource, or undefined when not installed / none. */
export async function pythonExtensionInterpreter(resource?: vscode.Uri): Promise<string | undefined> {
  const a = await api();
  if (!a) {
    return undefined;
  }
  if (a.environments) {
    const envPath = a.environments.getActiveEnvironmentPath(resource);
    const resolved = await a.environments.resolveEnvironment(envPath);
    const exe = resolved?.executable?.uri?.fsPath;
    if (exe) {
      return exe;
    }
    if (envPath?.path) {
      return envPath.path;
    }
  }
  const cmd = a.settings?.getExecutionDetails?.(resource)?.execCommand;
  return cmd && cmd.length === 1 ? cmd[0] : undefined;
}

/** Subscribes to interpreter changes in the Python extension (when it is installed and active). */
export async function onPythonInterpreterChange(listener: () => void): Promise<vscode.Disposable | undefined> {
  const a = await api();
  const ev = a?.environments?.onDidChangeActiveEnvironmentPath;
  return ev ? ev(() => listener()) : undefined;
}
