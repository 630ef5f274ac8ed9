// Used by bench_chart.py: opens a chart page in headless Chromium N times and prints the render figures.
//   node chart_render.mjs PAGE.html REPEAT CHROMIUM
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const require = createRequire(join(dirname(fileURLToPath(import.meta.url)), '..', 'editors', 'vscode', 'package.json'));
const { chromium } = require('playwright-core');
const [page, repeat = '5', executablePath = '/usr/bin/chromium'] = process.argv.slice(2);

const browser = await chromium.launch({
  executablePath,
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync', '--disable-dev-shm-usage'],
});
const rows = [];
try {
  for (let i = 0; i < Number(repeat); i++) {
    const context = await browser.newContext({ viewport: { width: 1400, height: 800 }, offline: true });
    const tab = await context.newPage();
    await tab.goto(pathToFileURL(page).href);
    await tab.locator('#rca-chart[data-rendered]').waitFor({ state: 'attached', timeout: 60000 });
    const mount = Number(await tab.locator('#rca-chart').getAttribute('data-rendered'));
    const sincePage = Number(await tab.locator('#rca-chart').getAttribute('data-drawn-at'));
    const aggregated = await tab.evaluate(() => document.querySelector('.u-legend') !== null);
    // zoom: drag over a window of ~3000 modules around the first divergence, time until it is drawn in detail
    const over = await tab.locator('.u-over').boundingBox();
    const marker = await tab.locator('.rca-marker-divergence').boundingBox();
    const total = await tab.evaluate(async () => (await RcaChart.unpack(document.getElementById('rca-chart-data').textContent)).calls[0].modules.label.length);
    const half = (over.width * 1500) / total;
    const x = marker.x + marker.width / 2;
    await tab.evaluate(() => {
      window.__zoomStart = performance.now();
    });
    await tab.mouse.move(x - half, over.y + 30);
    await tab.mouse.down();
    await tab.mouse.move(x + half, over.y + 30, { steps: 2 });
    await tab.mouse.up();
    const zoom = await tab.evaluate(() => new Promise((resolve) => requestAnimationFrame(() => resolve(performance.now() - window.__zoomStart))));
    const detail = await tab.locator('canvas').evaluate(() => document.querySelector('.rca-plot') !== null);
    // the worst-rank view (when the chart has rank views): computed when chosen, until its frame is drawn
    await tab.locator('#rca-chart[data-details="loaded"]').waitFor({ state: 'attached', timeout: 60000 });
    const worst = await tab.evaluate(() => {
      const select = document.querySelector('select.rca-rank');
      if (!select) {
        return undefined;
      }
      const start = performance.now();
      select.value = 'worst';
      select.dispatchEvent(new Event('change'));
      return new Promise((resolve) => requestAnimationFrame(() => resolve(performance.now() - start)));
    });
    rows.push({ mount, sincePage, zoom, worst, ok: aggregated && detail });
    await context.close();
  }
} finally {
  await browser.close();
}
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
for (const [i, r] of rows.entries()) {
  const worst = r.worst === undefined ? '' : `; worst-rank view chosen -> drawn ${r.worst.toFixed(0)} ms`;
  console.log(`run ${i + 1}: mount -> drawn ${r.mount.toFixed(0)} ms; page -> drawn ${r.sincePage.toFixed(0)} ms; drag-zoom to detail (incl. the mouse events) ${r.zoom.toFixed(0)} ms${worst}`);
}
const m = median(rows.map((r) => r.mount));
const p = median(rows.map((r) => r.sincePage));
console.log(`median of ${rows.length}: mount -> drawn ${m.toFixed(0)} ms, page -> drawn ${p.toFixed(0)} ms, zoom ${median(rows.map((r) => r.zoom)).toFixed(0)} ms (target: < 1000 ms: ${p < 1000 ? 'met' : 'NOT met'})`);
