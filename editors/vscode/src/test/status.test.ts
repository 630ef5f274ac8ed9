import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { describeServer, escapeLabel, isStatusParams, StatusBook, truncate, viewForClientState, viewForServerStatus, withServer } from '../status';
import { documentSelector, isMappingFileName } from '../files';

test('loading shows a spinner and opens the output on click', () => {
  const v = viewForServerStatus({ state: 'loading', message: 'loading train dump 3/8' });
  assert.match(v.text, /^\$\(sync~spin\) rca-lsp: loading train dump 3\/8$/);
  assert.equal(v.command?.id, 'rcaLsp.showOutput');
});

test('analysed shows the top hypothesis and writes the report on click', () => {
  const v = viewForServerStatus({
    state: 'analysed',
    uri: 'file:///ws/mapping_key.json',
    message: '3 suspects',
    topHypothesis: 'missing act_fn in layer 0 mlp',
    suspects: 3,
  });
  assert.equal(v.text, '$(search) rca-lsp: missing act_fn in layer 0 mlp');
  assert.deepEqual(v.command, { id: 'rcaLsp.writeReport', args: ['file:///ws/mapping_key.json'] });
  assert.match(v.tooltip, /Top hypothesis: missing act_fn/);
  assert.match(v.tooltip, /Suspects: 3/);
  assert.equal(v.background, 'warning');
  const clean = viewForServerStatus({ state: 'analysed', message: '', suspects: 0 });
  assert.equal(clean.text, '$(check) rca-lsp: 0 suspects');
  assert.equal(clean.background, undefined);
});

test('error state is red and opens the output', () => {
  const v = viewForServerStatus({ state: 'error', message: 'cannot read dump.json' });
  assert.equal(v.background, 'error');
  assert.match(v.tooltip, /cannot read dump.json/);
  assert.equal(v.command?.id, 'rcaLsp.showOutput');
});

test('client states', () => {
  for (const state of ['notInstalled', 'tooOld'] as const) {
    // A click checks again, which offers the install again.
    assert.equal(viewForClientState(state).command?.id, 'rcaLsp.restartServer');
    assert.equal(viewForClientState(state).background, 'error');
    assert.match(viewForClientState(state, 'the reason').tooltip, /^the reason\nClick to check again\.$/);
  }
  assert.match(viewForClientState('tooOld').text, /server too old/);
  assert.equal(viewForClientState('stopped').command?.id, 'rcaLsp.restartServer');
  assert.match(viewForClientState('starting').text, /starting/);
});

test('long hypotheses are truncated, icons escaped', () => {
  assert.equal(truncate('a'.repeat(100), 10), `${'a'.repeat(9)}…`);
  assert.equal(truncate('  a \n b  '), 'a b');
  assert.ok(!escapeLabel('x $(bug) y').includes('$('));
});

test('isStatusParams validates the notification', () => {
  assert.equal(isStatusParams({ state: 'idle', message: '' }), true);
  assert.equal(isStatusParams({ state: 'weird', message: '' }), false);
  assert.equal(isStatusParams(null), false);
  assert.equal(isStatusParams({ state: 'error', message: 3 }), false);
});

test('StatusBook prefers the active document, else the latest', () => {
  const b = new StatusBook();
  b.update({ state: 'analysed', uri: 'file:///a', message: 'A' });
  b.update({ state: 'loading', uri: 'file:///b', message: 'B' });
  assert.equal(b.current('file:///a')?.message, 'A');
  assert.equal(b.current('file:///c')?.message, 'B');
  assert.equal(b.current(undefined)?.message, 'B');
  b.forget('file:///b');
  assert.equal(b.current(undefined), undefined);
  assert.equal(b.current('file:///a')?.message, 'A');
  b.clear();
  assert.equal(b.current('file:///a'), undefined);
});

test('mapping file names', () => {
  assert.equal(isMappingFileName('/x/mapping_key.json'), true);
  assert.equal(isMappingFileName('/x/my_mapping_key_v2.json'), true);
  assert.equal(isMappingFileName('C:\\x\\output_0_key_mapping.json'), true);
  assert.equal(isMappingFileName('/x/output_1_key_mapping.json'), false);
  assert.equal(isMappingFileName('/mapping_key/dump.json'), false);
  assert.equal(isMappingFileName('/x/mapping_key.jsonl'), false);
  assert.equal(isMappingFileName('/x/package.json'), false);
  assert.equal(isMappingFileName('/x/data_mapping.yaml'), true);
  assert.equal(isMappingFileName('/x/cell_mapping_v2.yml'), true);
  assert.equal(isMappingFileName('/x/config.yaml'), false);
  assert.equal(isMappingFileName('/x/my_data_mapping.yaml'), false);
  assert.equal(documentSelector().length, 2 * 2 + 4);
  assert.ok(documentSelector().filter((s) => s.pattern.endsWith('.yml')).every((s) => s.language === 'yaml'));
  assert.ok(documentSelector().every((s) => s.scheme === 'file'));
});

test('the running server is named in the tooltip with its version and interpreter', () => {
  const view = withServer(viewForServerStatus({ state: 'idle', message: '' }), { name: 'rca-lsp', version: '0.1.0', python: '/v/bin/python' });
  assert.match(view.tooltip, /\nServer: rca-lsp 0\.1\.0 \(\/v\/bin\/python\)$/);
  assert.equal(view.text, '$(pulse) rca-lsp');
  assert.equal(describeServer({ python: '/p' }), 'Server: rca-lsp (no version given) (/p)');
});
