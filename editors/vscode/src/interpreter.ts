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

export async function resolveInterpreter(inputs: ResolveInputs): Promise<ResolvedInterpreter | undefined> {
  const picked = pickInterpreterSetting(inputs.setting, inputs.trusted);
  if (picked) {
    const python = expandVariables(picked.value, inputs.vars);
    return { python, source: 'setting', detail: `setting rcaLsp.interpreter (${picked.level} value)` };
  }
  if (inputs.pythonExtension) {
    let fromExt: string | undefined;
    try {
      fromExt = nonEmpty(await inputs.pythonExtension());
    } catch {
      fromExt = undefined;
    }
    if (fromExt) {
      return { python: fromExt, source: 'python-extension', detail: "the Python extension's active environment" };
    }
  }
  for (const name of ['python3', 'python']) {
    const found = inputs.which(name);
    if (found) {
      return { python: found, source: 'path', detail: `${name} on PATH` };
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
