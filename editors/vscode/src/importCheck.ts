/** Checks that `rca_lsp` is importable with an interpreter. No `vscode` import. */
import { execFile } from 'node:child_process';

export interface ImportCheckResult {
  ok: boolean;
  /** Short reason when not ok: "not found", "ModuleNotFoundError: ...", "timed out", ... */
  reason?: string;
  /** Full stderr/stdout for the output channel. */
  output?: string;
  version?: string;
}

const SCRIPT = [
  'import sys',
  'try:',
  '    import {module}',
  'except BaseException as e:',
  '    sys.stderr.write(type(e).__name__ + ": " + str(e))',
  '    sys.exit(3)',
  'v = getattr({module}, "__version__", "")',
  'sys.stdout.write(str(v))',
].join('\n');

export function checkImport(python: string, module = 'rca_lsp', timeoutMs = 30000, cwd?: string): Promise<ImportCheckResult> {
  return new Promise((resolve) => {
    execFile(
      python,
      ['-c', SCRIPT.split('{module}').join(module)],
      { timeout: timeoutMs, windowsHide: true, cwd, env: { ...process.env, PYTHONIOENCODING: 'utf-8' } },
      (error, stdout, stderr) => {
        const output = `${stdout ?? ''}${stderr ?? ''}`.trim();
        if (!error) {
          resolve({ ok: true, version: String(stdout).trim() || undefined, output });
          return;
        }
        const err = error as NodeJS.ErrnoException & { killed?: boolean; code?: number | string };
        let reason: string;
        if (err.code === 'ENOENT') {
          reason = 'interpreter not found';
        } else if (err.code === 'EACCES') {
          reason = 'interpreter not executable';
        } else if (err.killed) {
          reason = `timed out after ${Math.round(timeoutMs / 1000)} s`;
        } else {
          const lastLine = String(stderr ?? '').trim().split(/\r?\n/).pop();
          reason = lastLine || `exit code ${String(err.code)}`;
        }
        resolve({ ok: false, reason, output });
      },
    );
  });
}
