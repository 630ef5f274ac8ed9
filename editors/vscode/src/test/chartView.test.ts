import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { chartHtml, entryRange, makeNonce } from '../chartView';

test('the chart page allows only its own nonce-d scripts and styles', () => {
  const nonce = makeNonce((n) => randomBytes(n));
  assert.match(nonce, /^[A-Za-z0-9]{16,}$/);
  const html = chartHtml({ cspSource: 'vscode-resource:', bundleUri: 'vscode-resource:/ext/dist/chart.bundle.js', nonce, title: 'a<b' });
  const csp = /http-equiv="Content-Security-Policy" content="([^"]*)"/.exec(html)?.[1] ?? '';
  assert.match(csp, /default-src 'none'/);
  assert.match(csp, new RegExp(`script-src 'nonce-${nonce}'(;|$)`));
  assert.match(csp, new RegExp(`style-src 'nonce-${nonce}'(;|$)`));
  assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval|https?:/);
  for (const tag of html.match(/<(script|style)\b[^>]*>/g) ?? []) {
    assert.ok(tag.includes(`nonce="${nonce}"`), `${tag} has no nonce`);
  }
  assert.ok(html.includes('<title>a&#60;b</title>'));
  assert.notEqual(makeNonce((n) => randomBytes(n)), nonce);
});

test('an entry is found by its key followed by a colon, the last definition winning', () => {
  const key = 'Module.a.layers.0.mlp.Linear.forward.0';
  const text = `{\n  "x": "${key}",\n  "${key}": "r1",\n  "${key}" : "r2"\n}`;
  const found = entryRange(text, key);
  assert.ok(found);
  assert.equal(text.slice(found.offset, found.offset + found.length), JSON.stringify(key));
  assert.equal(text.lastIndexOf(JSON.stringify(key)), found.offset);
  assert.equal(entryRange('{"x": "y"}', key), undefined);
  const escaped = 'Module.a"b.forward.0';
  assert.equal(entryRange(`{${JSON.stringify(escaped)}: 1}`, escaped)?.offset, 1);
});
