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
//   - dragging a range zooms in to every module; a double click zooms out;
//   - no text is clipped, at 1400 and at 800 CSS px wide (zoomed out, and zoomed in on the last modules): every
//     text the chart draws on its canvas (recorded from fillText with its transform and measured box) lies inside
//     the canvas, and every marker label inside the chart.
// And an empty mapping's page: it says nothing was compared, without a page error.
// Environment: RCA_LSP_PYTHON (default <repo>/.venv/bin/python), CHROMIUM (default /usr/bin/chromium),
// RCA_LSP_REPORT_FIXTURES (comma-separated subset).
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { chromium } from 'playwright-core';
import { clippedTexts, recordCanvasTexts } from '../chartText.mjs';

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

/** Every text drawn so far inside its canvas, and every marker inside the chart (and the page's width). */
async function assertNothingClipped(page, where) {
  const texts = await page.evaluate(() => globalThis.rcaTexts);
  assert(texts.length > 0, `${where}: no text drawn`);
  const cut = clippedTexts(texts);
  assert(cut.length === 0, `${where}: texts cut at the canvas edge: ${cut.slice(0, 5).join('; ')}`);
  const root = await page.locator('#rca-chart').boundingBox();
  const width = page.viewportSize().width;
  for (const marker of await page.locator('.rca-marker').all()) {
    const box = await marker.boundingBox();
    assert(box.x >= root.x - 1 && box.x + box.width <= Math.min(root.x + root.width, width) + 1,
      `${where}: marker "${await marker.innerText()}" at ${Math.round(box.x)}..${Math.round(box.x + box.width)} outside the chart (${Math.round(root.x)}..${Math.round(root.x + root.width)})`);
  }
}

/** Drags over the plot from fraction `from` to `to` of its width (zooms in). */
async function zoom(page, from, to) {
  const over = await page.locator('.u-over').boundingBox();
  await page.mouse.move(over.x + over.width * from + 2, over.y + 20);
  await page.mouse.down();
  await page.mouse.move(over.x + over.width * to - 2, over.y + 20, { steps: 5 });
  await page.mouse.up();
  await page.waitForTimeout(150);
}

/** At a narrow width: zoomed out, then zoomed in on the last third (a tick per module up to the right edge). */
async function checkNarrow(browser, name, outDir, width) {
  const context = await browser.newContext({ viewport: { width, height: 800 }, offline: true });
  await context.addInitScript(recordCanvasTexts);
  const page = await context.newPage();
  try {
    await page.goto(pathToFileURL(path.join(outDir, 'output_5_root_cause_report.html')).href);
    await page.locator('#rca-chart[data-details="loaded"]').waitFor({ state: 'attached', timeout: 20000 });
    await page.waitForTimeout(100);
    await assertNothingClipped(page, `${width} px`);
    await zoom(page, 2 / 3, 1);
    await assertNothingClipped(page, `${width} px, zoomed in on the last third`);
    await page.screenshot({ path: path.join(artifacts, `report-${name}-${width}px.png`), fullPage: true });
  } finally {
    await context.close();
  }
}

async function checkReport(browser, name, outDir) {
  const report = JSON.parse(fs.readFileSync(path.join(outDir, 'output_5_root_cause_report.json'), 'utf8'));
  const expected = report.first_divergence?.train_key ?? null;
  const context = await browser.newContext({ viewport: { width: 1400, height: 800 }, offline: true });
  await context.addInitScript(recordCanvasTexts);
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
      // hovering at the marker's module shows the card of that module
      const over = await page.locator('.u-over').boundingBox();
      await page.mouse.move(over.x + Number(await markers.getAttribute('data-x')), over.y + over.height / 2);
      const card = page.locator('.rca-card:not([hidden])');
      await card.waitFor({ state: 'visible', timeout: 5000 });
      const text = await card.innerText();
      assert(text.includes(expected), `the card at the marker is not the module's: ${text.slice(0, 300)}`);
      assert(/first divergence/.test(text) && /verdict:/.test(text) && /train/.test(text) && /rollout/.test(text), `card: ${text.slice(0, 300)}`);
      await page.screenshot({ path: path.join(artifacts, `report-${name}.png`), fullPage: true });
    }
    // several calls: each can be chosen, and the choice survives a reload of the page
    const calls = page.locator('select.rca-call');
    if ((await calls.count()) > 0) {
      const values = await calls.locator('option').evaluateAll((os) => os.map((o) => o.value));
      for (const value of values) {
        await calls.selectOption(value);
        await page.waitForTimeout(150);
      }
      await page.reload();
      await page.locator('#rca-chart[data-details="loaded"]').waitFor({ state: 'attached', timeout: 20000 });
      const kept = await page.locator('select.rca-call').inputValue();
      assert(kept === values[values.length - 1], `after a reload the call is ${kept}, not ${values[values.length - 1]}`);
      await page.locator('select.rca-call').selectOption(String(report.first_divergence?.call_index ?? values[0]));
    }
    // a side merged from ranks: each rank's own copy (and the worst rank of each module); a rank the report names
    // as holding a different copy of a replicated tensor, or as the one differing rank by rank, shows where it parts
    const ranks = page.locator('select.rca-rank');
    if ((await ranks.count()) > 0) {
      // (ranks of other data-parallel groups are not charted: a disagreement may name one the chart has no view of)
      const named = new Map();
      for (const d of report.disagreements.filter((x) => x.across === 'ranks')) {
        for (const member of d.members) {
          named.set(`${d.side}:${member}`, named.get(`${d.side}:${member}`) ?? d.key);
        }
      }
      const paired = [];
      for (const verdict of report.first_divergence?.rank_by_rank ?? []) {
        const rank = /^rank (\d+):/.exec(verdict)?.[1];
        if (rank !== undefined) {
          named.set(`both:${rank}`, report.first_divergence.train_key);
          paired.push(`both:${rank}`);
        }
      }
      const values = await ranks.locator('option').evaluateAll((os) => os.map((o) => o.value));
      assert(values[0] === '' && values[1] === 'worst' && values.length > 3, `rank views: ${values.join(', ')}`);
      for (const key of paired) {
        assert(values.includes(key), `the report names ${key} rank by rank, the chart has no view of it: ${values.join(', ')}`);
      }
      for (const value of values) {
        await ranks.selectOption(value);
        await page.locator(`#rca-chart[data-rank="${value}"]`).waitFor({ state: 'attached', timeout: 5000 });
        await page.waitForTimeout(150);
        const marker = page.locator('.rca-marker-rank');
        if (named.has(value)) {
          assert((await marker.count()) === 1, `rank ${value}: no marker, the report names ${named.get(value)}`);
          assert((await marker.getAttribute('data-train-key')) === named.get(value), `rank ${value}: the marker is at ${await marker.getAttribute('data-train-key')}, the report names ${named.get(value)}`);
          await page.screenshot({ path: path.join(artifacts, `report-${name}-rank-${value.replace(':', '')}.png`), fullPage: true });
        }
      }
      // the choice survives a reload of the page (kept in its address)
      const last = values[values.length - 1];
      await ranks.selectOption(last);
      await page.reload();
      await page.locator('#rca-chart[data-details="loaded"]').waitFor({ state: 'attached', timeout: 20000 });
      assert((await page.locator('select.rca-rank').inputValue()) === last, `after a reload the view is ${await page.locator('select.rca-rank').inputValue()}, not ${last}`);
      await page.locator('select.rca-rank').selectOption('');
    }
    // zoom in on the first third, then out again
    await zoom(page, 0, 1 / 3);
    const over = await page.locator('.u-over').boundingBox();
    await page.mouse.dblclick(over.x + over.width / 2, over.y + over.height / 2);
    await page.waitForTimeout(100);
    await assertNothingClipped(page, '1400 px');
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
        await checkNarrow(browser, name, outDir, 800);
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
