import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { buildServerSettings, classifyConfigChange, expandVariables } from '../settings';

const vars = { workspaceFolder: '/ws', userHome: '/home/u' };

test('defaults: empty pairs, tolerances, severity; outDir rca_out', () => {
  const { settings, problems } = buildServerSettings(undefined, vars);
  assert.deepEqual(settings, { pairs: [], tolerances: {}, severity: {}, outDir: 'rca_out' });
  assert.deepEqual(problems, []);
});

test('a full configuration is translated and variables expanded', () => {
  const { settings, problems } = buildServerSettings(
    {
      pairs: [{ mappingKey: '${workspaceFolder}/a/mapping_key.json', train: '${workspaceFolder}/a/train/**/dump.json', rollout: '~/r' }],
      tolerances: { float32: 1e-4, bfloat16: 0.02, float16: null },
      severity: { 'missing-op': 'error', 'nan-inf': 'off', 'in-module-diff': 'Info' },
      outDir: '${workspaceFolder}/out',
      interpreter: '/ignored/here',
    },
    vars,
  );
  assert.deepEqual(problems, []);
  assert.deepEqual(settings, {
    pairs: [{ mappingKey: '/ws/a/mapping_key.json', train: '/ws/a/train/**/dump.json', rollout: '/home/u/r' }],
    tolerances: { float32: 1e-4, bfloat16: 0.02 },
    severity: { 'missing-op': 'error', 'nan-inf': 'off', 'in-module-diff': 'information' },
    outDir: '/ws/out',
  });
});

test('invalid entries are dropped with a problem each', () => {
  const { settings, problems } = buildServerSettings(
    {
      pairs: [{ mappingKey: 'm.json', train: 't' }, 'x', { mappingKey: 'm', train: 't', rollout: 'r' }],
      tolerances: { float32: -1, int8: 0.1, float16: 'big', bfloat16: 0 },
      severity: { 'missing-op': 'fatal', 'future-code': 'hint' },
      outDir: '   ',
    },
    vars,
  );
  assert.deepEqual(settings.pairs, [{ mappingKey: 'm', train: 't', rollout: 'r' }]);
  assert.deepEqual(settings.tolerances, {});
  assert.deepEqual(settings.severity, { 'future-code': 'hint' });
  assert.equal(settings.outDir, 'rca_out');
  assert.equal(problems.length, 8, problems.join('\n'));
});

test('non-array pairs is reported', () => {
  const { settings, problems } = buildServerSettings({ pairs: { a: 1 } }, vars);
  assert.deepEqual(settings.pairs, []);
  assert.equal(problems.length, 1);
});

test('expandVariables', () => {
  assert.equal(expandVariables('${workspaceFolder}/x', vars), '/ws/x');
  assert.equal(expandVariables('${workspaceRoot}/x', vars), '/ws/x');
  assert.equal(expandVariables('${userHome}/x', vars), '/home/u/x');
  assert.equal(expandVariables('${env:FOO}/x', vars, { FOO: 'bar' }), 'bar/x');
  assert.equal(expandVariables('${workspaceFolder}/x', {}), '${workspaceFolder}/x', 'no folder: left as is');
  assert.equal(expandVariables('a~b', vars), 'a~b');
  assert.equal(expandVariables('${unknown}', vars), '${unknown}');
});

test('config changes: interpreter restarts, data settings notify, trace and others do nothing', () => {
  const affects = (changed: string[]) => (s: string) => changed.some((c) => c === s || c.startsWith(`${s}.`));
  assert.equal(classifyConfigChange(affects(['rcaLsp.interpreter'])), 'restart');
  assert.equal(classifyConfigChange(affects(['rcaLsp.interpreter', 'rcaLsp.pairs'])), 'restart');
  assert.equal(classifyConfigChange(affects(['rcaLsp.pairs'])), 'notify');
  assert.equal(classifyConfigChange(affects(['rcaLsp.tolerances.float32'])), 'notify');
  assert.equal(classifyConfigChange(affects(['rcaLsp.severity'])), 'notify');
  assert.equal(classifyConfigChange(affects(['rcaLsp.outDir'])), 'notify');
  assert.equal(classifyConfigChange(affects(['rcaLsp.trace.server'])), 'none');
  assert.equal(classifyConfigChange(affects(['editor.fontSize'])), 'none');
});

test('a pair passes its step and rank layouts through to the server, which validates them', () => {
  const { settings, problems } = buildServerSettings(
    { pairs: [{ mappingKey: 'm.json', train: 't', rollout: 'r', step: 2, parallel: ' tp=2,pp=2 ', rolloutParallel: 'tp=4' }] },
    vars,
  );
  assert.deepEqual(problems, []);
  assert.deepEqual(settings.pairs, [
    { mappingKey: 'm.json', train: 't', rollout: 'r', step: 2, parallel: 'tp=2,pp=2', rolloutParallel: 'tp=4' },
  ]);
});
