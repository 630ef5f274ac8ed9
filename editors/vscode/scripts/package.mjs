// `npm run package`: bundle with esbuild, then `vsce package` into exactly one rca-lsp-<version>.vsix (offline).
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
for (const f of readdirSync(root)) {
  if (f.endsWith('.vsix')) {
    rmSync(join(root, f));
  }
}
const out = `${pkg.name}-${pkg.version}.vsix`;
const vsce = join(root, 'node_modules', '@vscode', 'vsce', 'vsce');
// vsce runs the vscode:prepublish script (the production esbuild bundle) itself. --no-dependencies: everything is
// bundled into dist/extension.js, so vsce need not list node_modules (keeps packaging offline and fast).
execFileSync(process.execPath, [vsce, 'package', '--no-dependencies', '--allow-missing-repository', '-o', out], {
  cwd: root,
  stdio: 'inherit',
});
console.log(`packaged ${join(root, out)}`);
