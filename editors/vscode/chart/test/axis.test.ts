import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { axisSize, elide, labelExtent, rightPadding, spaced } from '../src/axis';

const measure = (text: string): number => text.length * 7; // a monospace stand-in for the canvas's measureText

test('the right padding keeps every label inside the canvas, whatever the width', () => {
  const labels = ['word_embeddings', 'layer 0', 'layer 1', 'final_layernorm', 'output_layer'];
  const n = labels.length;
  for (const width of [800, 1000, 1400, 2560]) {
    for (const [min, max] of [[-0.5, n - 0.5], [1.5, n - 0.5]]) {
      const left = 90;
      const placed = labels.map((text, i) => ({ fraction: (i - min) / (max - min), text })).filter((t) => t.fraction >= 0 && t.fraction <= 1);
      const right = rightPadding(placed, width, left, 16, measure);
      const plot = width - left - right;
      for (const { fraction, text } of placed) {
        const end = left + fraction * plot + labelExtent(text, measure).right;
        assert.ok(end <= width + 1e-9, `${text} ends at ${end} > ${width}`);
      }
      assert.ok(right >= 16);
    }
  }
});

test('long labels are elided at the front to the limit; short ones are kept', () => {
  assert.equal(elide('output_layer', 170, measure), 'output_layer');
  const long = 'mlp.experts.local_experts.127.linear_fc1.weight_quantizer';
  const cut = elide(long, 170, measure);
  assert.ok(cut.startsWith('…') && long.endsWith(cut.slice(1)) && measure(cut) <= 170);
  assert.ok(measure(`…${long.slice(long.length - cut.length)}`) > 170, 'not one character more than fits');
});

test('the axis is as tall as its lowest reaching label', () => {
  const short = axisSize(['layer 0'], measure);
  const long = axisSize(['layer 0', 'self_attention.linear_qkv'], measure);
  assert.ok(long > short);
  assert.ok(long >= labelExtent('self_attention.linear_qkv', measure).down + 15);
});

test('labels too close to the previous one are not drawn', () => {
  assert.deepEqual(spaced([0, 1, 10, 11, 40], -0.5, 40.5, 410), [0, 2, 4]);
});
