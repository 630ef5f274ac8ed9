/**
 * Interpreter resolution. Pure: no `vscode` import, every side effect is injected, so the order is unit-tested.
 *
 * Order: setting `rcaLsp.interpreter` (workspace-level values only in a trusted workspace)
 *        -> the Python extension's active environment (when that extension is installed)
 *        -> `python3` on PATH (then `python`).
 */
import * as path from 'node:path';
import * as fs from 'node:fs';
import { expandVariables, VariableContext } from './settings';

/** The shape of `WorkspaceConfiguration.inspect<string>()` that matters here. */
export interface SettingInspect {
  globalValue?: string;
  workspaceValue?: string;
  workspaceFolderValue?: string;
}

export type InterpreterSource = 'setting' | 'python-extension' | 'path';

export interface ResolvedInterpreter {
  /** Absolute path (or bare command) of the Python executable. */
  python: string;
  source: InterpreterSource;
  /** Human-readable explanation for the output channel. */
  detail: string;
}

export interface ResolveInputs {
  setting?: SettingInspect;
  trusted: boolean;
  vars: VariableContext;
  /** Returns the Python extension's active interpreter, or undefined when it is not installed / has none. */
  pythonExtension?: () => Promise<string | undefined>;
  /** Finds an executable on PATH. */
  which: (name: string) => string | undefined;
  /** The workspace folders (fsPaths): in an untrusted workspace no interpreter inside them is run. */
  workspaceFolders?: readonly string[];
  /** Told of each interpreter passed over because it is inside the untrusted workspace. */
  onUntrusted?: (python: string, source: InterpreterSource) => void;
}

function nonEmpty(v: string | undefined): string | undefined {
  if (typeof v !== 'string') {
    return undefined;
  }
  const t = v.trim();
  return t.length > 0 ? t : undefined;
}

/**
 * The interpreter setting to use. In an untrusted workspace the workspace and folder values are ignored
 * (they could point at a program shipped by the workspace), only the user's own value counts.
 */
export function pickInterpreterSetting(
  inspect: SettingInspect | undefined,
  trusted: boolean,
): { value: string; level: 'workspaceFolder' | 'workspace' | 'user' } | undefined {
  if (!inspect) {
    return undefined;
  }
  if (trusted) {
    const folder = nonEmpty(inspect.workspaceFolderValue);
    if (folder) {
      return { value: folder, level: 'workspaceFolder' };
    }
    const ws = nonEmpty(inspect.workspaceValue);
    if (ws) {
      return { value: ws, level: 'workspace' };
    }
  }
  const user = nonEmpty(inspect.globalValue);
  return user ? { value: user, level: 'user' } : undefined;
}

/** True when the workspace sets an interpreter that is being ignored because the workspace is untrusted. */
export function ignoredUntrustedSetting(inspect: SettingInspect | undefined, trusted: boolean): boolean {
  if (trusted || !inspect) {
    return false;
  }
  return !!(nonEmpty(inspect.workspaceFolderValue) || nonEmpty(inspect.workspaceValue));
}

/** The real path of a file, or the path itself when it cannot be resolved. */
function realpathOr(p: string): string {
  try {
    return fs.realpathSync(p);
  } catch {
    return p;
  }
}

/** True when the absolute path `file` (as written or with its links resolved) is inside one of `folders`. */
export function insideFolders(file: string, folders: readonly string[], realpath: (p: string) => string = realpathOr): boolean {
  if (!path.isAbsolute(file)) {
    return false; // a bare command: found on PATH, never in the workspace
  }
  const files = [path.resolve(file), realpath(file)];
  const dirs = folders.flatMap((f) => [path.resolve(f), realpath(f)]);
  return files.some((f) => dirs.some((d) => f === d || f.startsWith(d.endsWith(path.sep) ? d : d + path.sep)));
}

export async function resolveInterpreter(inputs: ResolveInputs): Promise<ResolvedInterpreter | undefined> {
  // Untrusted: an interpreter inside the workspace (`${workspaceFolder}/.venv/bin/python` in the user's settings,
  // the workspace's environment chosen in the Python extension) would run the workspace's code.
  const usable = (r: ResolvedInterpreter): ResolvedInterpreter | undefined => {
    if (inputs.trusted || !insideFolders(r.python, inputs.workspaceFolders ?? [])) {
      return r;
    }
    inputs.onUntrusted?.(r.python, r.source);
    return undefined;
  };
  const picked = pickInterpreterSetting(inputs.setting, inputs.trusted);
  if (picked) {
    const python = expandVariables(picked.value, inputs.vars);
    const found = usable({ python, source: 'setting', detail: `setting rcaLsp.interpreter (${picked.level} value)` });
    if (found) {
      return found;
    }
  }
  if (inputs.pythonExtension) {
    let fromExt: string | undefined;
    try {
      fromExt = nonEmpty(await inputs.pythonExtension());
    } catch {
      fromExt = undefined;
    }
    const found = fromExt ? usable({ python: fromExt, source: 'python-extension', detail: "the Python extension's active environment" }) : undefined;
    if (found) {
      return found;
    }
  }
  for (const name of ['python3', 'python']) {
    const onPath = inputs.which(name);
    const found = onPath ? usable({ python: onPath, source: 'path', detail: `${name} on PATH` }) : undefined;
    if (found) {
      return found;
    }
  }
  return undefined;
}

/** `which`: the first executable file called `name` in the PATH entries. */
export function whichOnPath(
  name: string,
  envPath: string | undefined = process.env.PATH,
  isExecutable: (p: string) => boolean = defaultIsExecutable,
  platform: NodeJS.Platform = process.platform,
): string | undefined {
  if (!envPath) {
    return undefined;
  }
  const sep = platform === 'win32' ? ';' : ':';
  const exts = platform === 'win32' ? ['.exe', '.cmd', '.bat', ''] : [''];
  for (const dir of envPath.split(sep)) {
    if (!dir) {
      continue;
    }
    for (const ext of exts) {
      const candidate = path.join(dir, name + ext);
      if (isExecutable(candidate)) {
        return candidate;
      }
    }
  }
  return undefined;
}

function defaultIsExecutable(p: string): boolean {
  try {
    const st = fs.statSync(p);
    if (!st.isFile()) {
      return false;
    }
    fs.accessSync(p, fs.constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** Quote an argument for display in a shell command line (POSIX-ish; good enough to copy-paste). */
export function shellQuote(arg: string): string {
  if (/^[A-Za-z0-9_@%+=:,./-]+$/.test(arg)) {
    return arg;
  }
  return `'${arg.replace(/'/g, `'\\''`)}'`;
}

/**
 * Remembers which interpreters the "not importable" message was already shown for, so it is shown once
 * (per interpreter) and never in a loop. `reset()` on an explicit user restart.
 */
export class OnceGate {
  private readonly seen = new Set<string>();
  shouldShow(key: string): boolean {
    if (this.seen.has(key)) {
      return false;
    }
    this.seen.add(key);
    return true;
  }
  reset(): void {
    this.seen.clear();
  }
}
