/**
 * What is wrong with the server an interpreter has (not importable, too old) and the command that installs this
 * extension's own server there: the rca_lsp wheel packaged into the .vsix (`server/`), built from the same checkout
 * as the extension, so the version that gets installed is the one this client was built and tested with.
 * Pure apart from reading the extension folder and running the command: no `vscode` import.
 */
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { ImportCheckResult } from './importCheck';
import { shellQuote } from './interpreter';
import { versionProblem } from './serverVersion';

/** The folder of the .vsix that holds the rca_lsp wheel (scripts/package.mjs puts it there). */
export const WHEEL_FOLDER = 'server';

/** The one rca_lsp wheel bundled in the extension folder, or undefined (a development build without one). */
export function bundledWheel(extensionDir: string): string | undefined {
  const dir = path.join(extensionDir, WHEEL_FOLDER);
  const wheels = fs.existsSync(dir) ? fs.readdirSync(dir).filter((f) => /^rca_lsp-.+\.whl$/.test(f)) : [];
  return wheels.length === 1 ? path.join(dir, wheels[0]) : undefined;
}

/** The pip arguments that install a wheel (never prompting: the command runs without a terminal). */
export function installArgs(wheel: string): string[] {
  return ['-m', 'pip', 'install', '--no-input', wheel];
}

/** A command line as the user may copy it into a shell. */
export function commandLine(python: string, args: string[]): string {
  return [python, ...args].map(shellQuote).join(' ');
}

export type ServerProblemKind = 'noInterpreter' | 'notInstalled' | 'tooOld';

export interface ServerProblem {
  kind: ServerProblemKind;
  message: string;
  /** The pip arguments that fix it with the bundled wheel, when the extension has one. */
  install?: string[];
}

/**
 * Why the server cannot be started with `python` (after the import check), or undefined when it can.
 * `wheel`: the bundled wheel, offered as the fix.
 */
export function serverProblem(python: string, check: ImportCheckResult, wheel: string | undefined): ServerProblem | undefined {
  if (!check.ok && (check.reason === 'interpreter not found' || check.reason === 'interpreter not executable')) {
    return {
      kind: 'noInterpreter',
      message:
        `rca-lsp: the Python interpreter ${python} was ${check.reason === 'interpreter not found' ? 'not found' : 'not executable'}. ` +
        'Set rcaLsp.interpreter to a Python 3.11+ interpreter.',
    };
  }
  const why = check.ok ? versionProblem(check.version) : undefined;
  if (check.ok && !why) {
    return undefined;
  }
  const install = wheel ? installArgs(wheel) : undefined;
  const fix = install
    ? `Install this extension's rca_lsp there with: ${commandLine(python, install)}`
    : `Install it there from a source checkout with: ${commandLine(python, ['-m', 'pip', 'install', '-e'])} <path to the rca-lsp checkout>`;
  const message = check.ok
    ? `rca-lsp: the rca_lsp of ${python} cannot be used: ${why}. ${fix}, or choose another interpreter in the setting rcaLsp.interpreter.`
    : `rca-lsp: the Python package "rca_lsp" is not importable with ${python} (${check.reason ?? 'unknown error'}). ${fix}, ` +
      'or choose another interpreter in the setting rcaLsp.interpreter.';
  return { kind: check.ok ? 'tooOld' : 'notInstalled', message, install };
}

/** The arguments that start the server with an interpreter. */
export const SERVE_ARGS = ['-m', 'rca_lsp', 'serve'];

/**
 * Why the server did not get going once started: the last line it printed (`stderr`, the end of what it wrote
 * there: a traceback ends with the error) or else the client's error.
 */
export function startFailureMessage(python: string, stderr: string, error: string): string {
  const last = lastLine(stderr);
  return (
    `rca-lsp: the server (${commandLine(python, SERVE_ARGS)}) stopped before it was ready: ${last ?? error}. ` +
    'The output channel has all it printed.'
  );
}

/** "The last line it printed: <it>" (a traceback ends with the error), or "It printed nothing". */
export function lastPrinted(text: string): string {
  const last = lastLine(text);
  return last ? `The last line it printed: ${last}` : 'It printed nothing';
}

/** The last non-blank line of what a program printed, trimmed (a traceback ends with the error), or undefined. */
export function lastLine(text: string): string | undefined {
  return text
    .split(/\r?\n/)
    .map((line) => line.trim())
    .filter(Boolean)
    .pop();
}

/** Runs `python args` in `cwd`, passing its output on as it comes; resolves with the exit code (or the error). */
export function runCommand(
  python: string,
  args: string[],
  cwd: string,
  onOutput: (text: string) => void,
  cancel?: { onCancellationRequested(listener: () => void): unknown },
): Promise<{ code: number | null; error?: string }> {
  return new Promise((resolve) => {
    const child = spawn(python, args, { cwd, windowsHide: true, env: { ...process.env, PYTHONIOENCODING: 'utf-8' } });
    child.stdout.on('data', (d: Buffer) => onOutput(d.toString('utf8')));
    child.stderr.on('data', (d: Buffer) => onOutput(d.toString('utf8')));
    child.on('error', (e) => resolve({ code: null, error: e.message }));
    child.on('close', (code) => resolve({ code }));
    cancel?.onCancellationRequested(() => child.kill());
  });
}
