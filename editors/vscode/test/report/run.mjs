#!/usr/bin/env node
// The HTML report (output_5_root_cause_report.html) in headless Chromium, on every real fixture under fixtures/:
// `python -m rca_lsp analyze` writes it, the page is opened from disk with the network cut off, screenshotted
// (test-artifacts/report-<fixture>.png), and checked:
//   - the chart renders, no page error, no request leaves the file (self-contained, no CDN);
//   - the first-divergence marker names the module output_5_root_cause_report.json names as first_divergence
//     (none when the report has none), and hovering at the marker shows that module's card (train key, both
//     sides' statistics, verdict);
//   - a train side merged from ranks: every rank's view; where the report names a rank whose replica disagrees,
//     that rank's marker sits at the module it names;
//   - dragging a range zooms in to every module; a double click zooms out.
// And an empty mapping's page: it says nothing was compared, without a page error.
// Environment: RCA_LSP_PYTHON (default <repo>/.venv/bin/python), CHROMIUM (default /usr/bin/chromium),
// RCA_LSP_REPORT_FIXTURES (comma-separated subset).
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { chromium } from 'playwright-core';

const here = path.dirname(fileURLToPath(import.meta.url));
const extRoot = path.resolve(here, '..', '..');
const repoRoot = path.resolve(extRoot, '..', '..');
const artifacts = path.join(extRoot, 'test-artifacts');
const python = process.env.RCA_LSP_PYTHON || path.join(repoRoot, '.venv', 'bin', 'python');
const chromiumPath = process.env.CHROMIUM || '/usr/bin/chromium';
const only = (process.env.RCA_LSP_REPORT_FIXTURES || '').split(',').filter(Boolean);

const fixtures = fs
  .readdirSync(path.join(repoRoot, 'fixtures'))
  .filter((name) => fs.existsSync(path.join(repoRoot, 'fixtures', name, 'mapping_key.json')))
  .filter((name) => only.length === 0 || only.includes(name))
  .sort();

function assert(cond, msg) {
  if (!cond) {
    throw new Error(msg);
  }
}

const results = [];
function record(name, error) {
  results.push({ name, ok: !error });
  process.stdout.write(error ? `not ok - ${name}: ${error.message.split('\n')[0]}\n` : `ok - ${name}\n`);
}

/** The fixture's rca-lsp.toml `rollout_step` (e.g. "all": engine steps joined as calls) as the CLI option. */
function rolloutStep(folder) {
  const config = path.join(folder, 'rca-lsp.toml');
  const found = fs.existsSync(config) && /^\s*rollout_step\s*=\s*"?([^"\n]+?)"?\s*$/m.exec(fs.readFileSync(config, 'utf8'));
  return found ? ['--rollout-step', found[1]] : [];
}

async function checkReport(browser, name, outDir) {
  const report = JSON.parse(fs.readFileSync(path.join(outDir, 'output_5_root_cause_report.json'), 'utf8'));
  const expected = report.first_divergence?.train_key ?? null;
  const context = await browser.newContext({ viewport: { width: 1400, height: 800 }, offline: true });
  const page = await context.newPage();
  const errors = [];
  const outside = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  page.on('console', (m) => m.type() === 'error' && errors.push(m.text()));
  page.on('request', (r) => !/^(file|data):/.test(r.url()) && outside.push(r.url()));
  try {
    await page.goto(pathToFileURL(path.join(outDir, 'output_5_root_cause_report.html')).href);
    await page.locator('#rca-chart[data-rendered]').waitFor({ state: 'attached', timeout: 20000 });
    await page.locator('#rca-chart[data-details="loaded"]').waitFor({ state: 'attached', timeout: 20000 });
    const markers = page.locator('.rca-marker-divergence');
    if (expected === null) {
      assert((await markers.count()) === 0, 'a first-divergence marker, but the report names none');
      const summary = await page.locator('.rca-summary').innerText();
      assert(/no credible divergence/.test(summary), `summary: ${summary}`);
      await page.screenshot({ path: path.join(artifacts, `report-${name}.png`), fullPage: true });
    } else {
      assert((await markers.count()) === 1, `${await markers.count()} first-divergence markers`);
      const marked = await markers.getAttribute('data-train-key');
      assert(marked === expected, `the marker is at ${marked}, the report names ${expected}`);
      // hovering at the marker shows the card of that module
      const box = await markers.boundingBox();
      const over = await page.locator('.u-over').boundingBox();
      await page.mouse.move(box.x + box.width / 2, over.y + over.height / 2);
      const card = page.locator('.rca-card:not([hidden])');
      await card.waitFor({ state: 'visible', timeout: 5000 });
      const text = await card.innerText();
      assert(text.includes(expected), `the card at the marker is not the module's: ${text.slice(0, 300)}`);
      assert(/first divergence/.test(text) && /verdict:/.test(text) && /train/.test(text) && /rollout/.test(text), `card: ${text.slice(0, 300)}`);
      await page.screenshot({ path: path.join(artifacts, `report-${name}.png`), fullPage: true });
    }
    // a train side merged from ranks: each rank's own copy; a rank the report names as holding a different copy
    // of a replicated tensor shows where it parts
    const ranks = page.locator('select.rca-rank');
    if ((await ranks.count()) > 0) {
      const named = new Map();
      for (const d of report.disagreements.filter((x) => x.side === 'train' && x.across === 'ranks')) {
        for (const member of d.members) {
          named.set(String(member), named.get(String(member)) ?? d.key);
        }
      }
      for (const value of await ranks.locator('option').evaluateAll((os) => os.map((o) => o.value).filter(Boolean))) {
        await ranks.selectOption(value);
        await page.waitForTimeout(200);
        const marker = page.locator('.rca-marker-rank');
        if (named.has(value)) {
          assert((await marker.count()) === 1, `rank ${value}: no marker, the report names ${named.get(value)}`);
          assert((await marker.getAttribute('data-train-key')) === named.get(value), `rank ${value}: the marker is at ${await marker.getAttribute('data-train-key')}, the report names ${named.get(value)}`);
          await page.screenshot({ path: path.join(artifacts, `report-${name}-rank${value}.png`), fullPage: true });
        }
      }
      await ranks.selectOption('');
    }
    // zoom in on the first third, then out again
    const over = await page.locator('.u-over').boundingBox();
    await page.mouse.move(over.x + 5, over.y + 20);
    await page.mouse.down();
    await page.mouse.move(over.x + over.width / 3, over.y + 20, { steps: 5 });
    await page.mouse.up();
    await page.waitForTimeout(100);
    await page.mouse.dblclick(over.x + over.width / 2, over.y + over.height / 2);
    await page.waitForTimeout(100);
    assert(errors.length === 0, `page errors: ${errors.join(' | ')}`);
    assert(outside.length === 0, `requests outside the file: ${outside.join(', ')}`);
  } finally {
    await context.close();
  }
}

async function main() {
  fs.mkdirSync(artifacts, { recursive: true });
  const base = fs.mkdtempSync(path.join(os.tmpdir(), 'rca-report-'));
  const browser = await chromium.launch({
    executablePath: chromiumPath,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', '--disable-dev-shm-usage'],
  });
  try {
    for (const name of fixtures) {
      const folder = path.join(repoRoot, 'fixtures', name);
      const outDir = path.join(base, name);
      try {
        execFileSync(python, ['-m', 'rca_lsp', 'analyze', '--train', path.join(folder, 'train'), '--rollout',
          path.join(folder, 'rollout'), '--mapping-key', path.join(folder, 'mapping_key.json'), '--out-dir', outDir,
          ...rolloutStep(folder)],
        { stdio: ['ignore', 'ignore', 'pipe'] });
        await checkReport(browser, name, outDir);
        record(`report ${name}`);
      } catch (e) {
        record(`report ${name}`, e instanceof Error ? e : new Error(String(e)));
      }
    }
    // an empty mapping: the page says nothing was compared, without an error
    try {
      const folder = path.join(repoRoot, 'fixtures', 'missing_activation');
      const empty = path.join(base, 'empty');
      fs.mkdirSync(empty);
      fs.writeFileSync(path.join(empty, 'mapping_key.json'), '{}');
      execFileSync(python, ['-m', 'rca_lsp', 'analyze', '--train', path.join(folder, 'train'), '--rollout',
        path.join(folder, 'rollout'), '--mapping-key', path.join(empty, 'mapping_key.json'), '--out-dir', path.join(empty, 'o')],
      { stdio: ['ignore', 'ignore', 'pipe'] });
      const context = await browser.newContext({ offline: true });
      const page = await context.newPage();
      const errors = [];
      page.on('pageerror', (e) => errors.push(String(e)));
      await page.goto(pathToFileURL(path.join(empty, 'o', 'output_5_root_cause_report.html')).href);
      await page.locator('#rca-chart[data-rendered="empty"]').waitFor({ state: 'attached', timeout: 20000 });
      const text = await page.locator('#rca-chart').innerText();
      await context.close();
      assert(/nothing to chart/.test(text) && errors.length === 0, `page: ${text.slice(0, 200)}; errors: ${errors.join(' | ')}`);
      record('report of an empty mapping');
    } catch (e) {
      record('report of an empty mapping', e instanceof Error ? e : new Error(String(e)));
    }
  } finally {
    await browser.close();
    fs.rmSync(base, { recursive: true, force: true });
  }
  const failed = results.filter((r) => !r.ok).length;
  process.stdout.write(`report: ${results.length - failed} passed, ${failed} failed\n`);
  process.exitCode = failed || results.length === 0 ? 1 : 0;
}

await main();
