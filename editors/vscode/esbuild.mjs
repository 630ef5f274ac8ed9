// Bundles src/extension.ts (and vscode-languageclient) into dist/extension.js, and copies the divergence chart's
// bundle (rca_lsp/data/chart.bundle.js, built by chart/build.mjs) to dist/ for the webview: the same file the HTML
// report inlines.
import * as esbuild from 'esbuild';
import { copyFileSync, mkdirSync } from 'node:fs';
import { BUNDLE } from './chart/build.mjs';

const production = process.argv.includes('--production');
const watch = process.argv.includes('--watch');

const ctx = await esbuild.context({
  entryPoints: ['src/extension.ts'],
  bundle: true,
  format: 'cjs',
  platform: 'node',
  target: 'node18',
  outfile: 'dist/extension.js',
  external: ['vscode'],
  minify: production,
  sourcemap: !production,
  sourcesContent: false,
  logLevel: 'info',
});

mkdirSync('dist', { recursive: true });
copyFileSync(BUNDLE, 'dist/chart.bundle.js');

if (watch) {
  await ctx.watch();
} else {
  await ctx.rebuild();
  await ctx.dispose();
}
