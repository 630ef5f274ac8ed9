// Bundles the divergence chart (chart/src, uPlot) into one IIFE, global `RcaChart`: rca_lsp/data/chart.bundle.js,
// committed as Python package data so the HTML report works without Node; the VS Code webview loads the same file
// (copied into dist/ by esbuild.mjs). `--check` rebuilds in memory and fails when the committed file differs
// (the build is reproducible: same sources + same locked esbuild/uPlot = same bytes).
import * as esbuild from 'esbuild';
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
export const BUNDLE = join(here, '..', '..', '..', 'rca_lsp', 'data', 'chart.bundle.js');

export async function buildChart() {
  const result = await esbuild.build({
    entryPoints: [join(here, 'src', 'index.ts')],
    absWorkingDir: here,
    bundle: true,
    format: 'iife',
    globalName: 'RcaChart',
    platform: 'browser',
    target: 'es2020',
    minify: true,
    legalComments: 'inline',
    loader: { '.css': 'text' },
    charset: 'utf8',
    write: false,
    logLevel: 'warning',
  });
  return result.outputFiles[0].contents;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const built = Buffer.from(await buildChart());
  const name = relative(process.cwd(), BUNDLE);
  if (process.argv.includes('--check')) {
    let committed = Buffer.alloc(0);
    try {
      committed = readFileSync(BUNDLE);
    } catch {
      // missing: differs
    }
    if (!committed.equals(built)) {
      console.error(`${name} is not the build of editors/vscode/chart/src: run "node chart/build.mjs" in editors/vscode and commit it`);
      process.exit(1);
    }
    console.log(`${name}: up to date (${built.length} bytes)`);
  } else {
    writeFileSync(BUNDLE, built);
    console.log(`wrote ${name} (${built.length} bytes)`);
  }
}
