// `npm run package`: the rca_lsp wheel of this checkout into server/ (the extension offers to install it, see
// src/install.ts), bundle with esbuild, then `vsce package` into exactly one rca-lsp-<version>.vsix (offline).
//   RCA_LSP_PYTHON  the Python that builds the wheel (default: <repo>/.venv/bin/python, else python3)
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const repo = join(root, '..', '..');
const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
for (const f of readdirSync(root)) {
  if (f.endsWith('.vsix')) {
    rmSync(join(root, f));
  }
}

const venvPython = join(repo, '.venv', 'bin', 'python');
const python = process.env.RCA_LSP_PYTHON || (existsSync(venvPython) ? venvPython : 'python3');
const wheels = join(root, 'server');
rmSync(wheels, { recursive: true, force: true });
mkdirSync(wheels);
execFileSync(python, ['-m', 'pip', 'wheel', '--quiet', '--no-deps', '--wheel-dir', wheels, repo], { stdio: 'inherit' });
const built = readdirSync(wheels).filter((f) => /^rca_lsp-.+\.whl$/.test(f));
if (built.length !== 1) {
  throw new Error(`expected one rca_lsp wheel in ${wheels}, found ${built.join(', ') || 'none'}`);
}
console.log(`bundled ${built[0]}`);

const out = `${pkg.name}-${pkg.version}.vsix`;
const vsce = join(root, 'node_modules', '@vscode', 'vsce', 'vsce');
// vsce runs the vscode:prepublish script (the production esbuild bundle) itself. --no-dependencies: everything is
// bundled into dist/extension.js, so vsce need not list node_modules (keeps packaging offline and fast).
execFileSync(process.execPath, [vsce, 'package', '--no-dependencies', '--allow-missing-repository', '-o', out], {
  cwd: root,
  stdio: 'inherit',
});
console.log(`packaged ${join(root, out)}`);
