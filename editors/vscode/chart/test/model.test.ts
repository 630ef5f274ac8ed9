import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { buckets, DETAIL_LIMIT, LOWEST, plotted, rawErrors, ticks, toNumber, view } from '../src/model';
import { chart } from './chart';

test('non-finite errors arrive as strings and are drawn at the top, exact agreement on the floor', () => {
  assert.equal(toNumber('Infinity'), Infinity);
  assert.ok(Number.isNaN(toNumber('NaN')));
  assert.equal(toNumber(null), null);
  assert.equal(plotted(Infinity, 100), 100);
  assert.equal(plotted(NaN, 100), 100);
  assert.equal(plotted(0, 100), LOWEST);
  assert.equal(plotted(3e-3, 100), 3e-3);
});

test('zoomed out, every point is the worst module of a stretch that stays within one layer', () => {
  const n = 100_000;
  const fault = 61_234;
  const { data, call } = chart(n, 60, (i) => (i === fault ? 0.5 : i > fault ? 1e-2 : 1e-7 * ((i % 7) + 1)));
  const all = view(data, call, '');
  assert.ok(all.aggregated && all.x.length <= 1300 && all.x.length >= 60, `${all.x.length} points`);
  assert.ok(all.x.includes(fault), 'the divergence is the worst of its stretch, so it is drawn');
  for (const [start, end] of buckets(call, 0, n)) {
    const layer = call.modules.layer[start];
    assert.equal(call.modules.layer[end - 1], layer, `stretch ${start}..${end} crosses a layer`);
  }
  // each point is its stretch's worst output error
  const errors = rawErrors(data, call, '').output;
  for (const [start, end] of buckets(call, 0, n)) {
    const worst = Math.max(...(errors.slice(start, end) as number[]));
    const at = all.x.find((x) => x >= start && x < end);
    assert.ok(at !== undefined && errors[at] === worst);
  }
  assert.deepEqual(all.floor.slice(0, 2), [1.2e-7, 1.2e-7]);
  assert.deepEqual(all.tolerance.slice(0, 2), [9.5e-7, 9.5e-7]);
});

test('zoomed in to a few thousand modules, every module is drawn', () => {
  const { data, call } = chart(100_000, 60, () => 1e-7);
  const window = view(data, call, '', 50_000, 50_000 + DETAIL_LIMIT);
  assert.equal(window.aggregated, false);
  assert.equal(window.x.length, 100_000);
  assert.deepEqual(window.x.slice(50_000, 50_003), [50_000, 50_001, 50_002]);
});

test('axis ticks: one per module when they fit, else layer starts thinned to the room', () => {
  const { call } = chart(600, 60, () => 0);
  const labels = Array.from({ length: 600 }, (_, i) => `m${i}`);
  assert.deepEqual(ticks(call, labels, 10, 14, 20), { at: [10, 11, 12, 13, 14], labels: ['m10', 'm11', 'm12', 'm13', 'm14'] });
  const zoomedOut = ticks(call, labels, 0, 599, 12);
  assert.ok(zoomedOut.at.length <= 12 && zoomedOut.labels[0] === 'layer 0');
  assert.ok(zoomedOut.at.every((at) => at % 10 === 0), 'ticks at layer starts');
});
