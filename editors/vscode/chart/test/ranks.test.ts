import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { available, errorsFor, firstParting, MERGED, WORST } from '../src/ranks';
import { chart } from './chart';

/** A call of 6 modules over two pipeline stages: train rank 0 holds 0-2, rank 2 holds 3-5. */
function staged() {
  const { data, call } = chart(6, 2, (i) => [1e-7, 2e-7, 3e-7, 4e-1, 5e-1, 6e-1][i]);
  data.ranks = [
    { side: 'train', rank: 0, coordinates: 'pp=0', against: 'rollout merged' },
    { side: 'train', rank: 2, coordinates: 'pp=1', against: 'rollout merged' },
  ];
  // module 1's output is sharded: the ranks show no output there; rank 2's own copy of module 4 differs more
  call.shared = [{ side: 'train', changed: [1], output: [null], input: [null], parameters: [null] }];
  call.ranks = [
    { rank: 0, held: [0, 3], changed: [], output: [], input: [], parameters: [], mismatch: [] },
    { rank: 1, held: [3, 6], changed: [4], output: ['Infinity'], input: [0.5], parameters: [null], mismatch: [4] },
  ];
  return { data, call };
}

test("a rank shows its side's shared errors where it holds a copy, its own where they differ, nothing elsewhere", () => {
  const { data, call } = staged();
  assert.deepEqual(errorsFor(data, call, 'train:0').errors.output, [1e-7, null, 3e-7, null, null, null]);
  assert.deepEqual(errorsFor(data, call, 'train:2').errors.output, [null, null, null, 4e-1, Infinity, 6e-1]);
  assert.deepEqual(errorsFor(data, call, 'train:2').errors.input.slice(3), [null, 0.5, null]);
  assert.deepEqual(errorsFor(data, call, MERGED).errors.output, [1e-7, 2e-7, 3e-7, 4e-1, 5e-1, 6e-1]);
});

test('the worst view takes each module from the rank whose copy differs most, and says whose', () => {
  const { data, call } = staged();
  const worst = errorsFor(data, call, WORST);
  assert.deepEqual(worst.errors.output, [1e-7, null, 3e-7, 4e-1, Infinity, 6e-1]);
  assert.deepEqual(Array.from(worst.of?.output ?? []), [0, -1, 0, 1, 1, 1]);
  assert.deepEqual(firstParting(data, call, WORST), { index: 4, rank: data.ranks[1] });
  assert.equal(firstParting(data, call, 'train:0'), undefined);
});

test('a view is available only where the data has the rank', () => {
  const { data, call } = staged();
  assert.ok(available(data, call, 'train:2') && available(data, call, WORST) && available(data, call, MERGED));
  assert.ok(!available(data, call, 'train:1') && !available(data, call, 'rollout:0'));
});
