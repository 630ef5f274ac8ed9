import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import {
  buildServerSettings,
  buildWorkspaceSettings,
  classifyConfigChange,
  DEFAULT_OUT_DIR,
  DIAGNOSTIC_CODES,
  expandVariables,
  readServerSettings,
  SEVERITIES,
} from '../settings';
import RULES from '../../../../rca_lsp/data/settings_rules.json';

const vars = { workspaceFolder: '/ws', userHome: '/home/u' };
// out/editors/vscode/src/test -> the repository (tsc keeps the layout from the repository root, see tsconfig.json)
const repo = path.resolve(__dirname, '..', '..', '..', '..', '..', '..', '..');
const manifest = JSON.parse(fs.readFileSync(path.join(repo, 'editors', 'vscode', 'package.json'), 'utf8'));
const properties = manifest.contributes.configuration.properties;

interface Case {
  name: string;
  raw: unknown;
  settings: unknown;
  problems: string[];
}
const cases: Case[] = JSON.parse(fs.readFileSync(path.join(repo, 'tests', 'settings_cases.json'), 'utf8'));

for (const c of cases) {
  test(`shared with the server (tests/settings_cases.json): ${c.name}`, () => {
    const { settings, problems } = buildServerSettings(c.raw, vars);
    assert.deepEqual(problems, c.problems);
    assert.deepEqual(settings, c.settings);
  });
}

test('the settings schema in package.json offers what the rules accept', () => {
  const severity = properties['rcaLsp.severity'];
  assert.deepEqual(severity.additionalProperties.enum, RULES.severities);
  assert.deepEqual([...severity.propertyNames.enum].sort(), [...DIAGNOSTIC_CODES].sort());
  const tolerances = Object.keys(properties).filter((k) => k.startsWith('rcaLsp.tolerances.')).map((k) => k.split('.')[2]);
  assert.ok(tolerances.length > 0 && tolerances.every((d) => RULES.dtypes.includes(d)), tolerances.join(', '));
  const pair = properties['rcaLsp.pairs'].items;
  assert.deepEqual(pair.required, RULES.pairRequired);
  for (const k of RULES.pairOptionalText) {
    assert.equal(pair.properties[k].type, 'string', k);
  }
  assert.equal(properties['rcaLsp.outDir'].default, RULES.defaultOutDir);
  assert.equal(DEFAULT_OUT_DIR, RULES.defaultOutDir);
  assert.deepEqual(SEVERITIES, RULES.severities);
  assert.deepEqual(properties['rcaLsp.columns'].enum, RULES.columnStyles);
  assert.equal(properties['rcaLsp.columns'].default, RULES.columnStyles[0]);
});

test('variables are expanded in the pairs and the output folder', () => {
  const { settings, problems } = buildServerSettings(
    {
      pairs: [{ mappingKey: '${workspaceFolder}/a/mapping_key.json', train: '${workspaceFolder}/a/train/**/dump.json', rollout: '~/r' }],
      outDir: '${workspaceFolder}/out',
    },
    vars,
  );
  assert.deepEqual(problems, []);
  assert.deepEqual(settings.pairs, [{ mappingKey: '/ws/a/mapping_key.json', train: '/ws/a/train/**/dump.json', rollout: '/home/u/r' }]);
  assert.equal(settings.outDir, '/ws/out');
});

test('not an object: the defaults', () => {
  assert.deepEqual(buildServerSettings(undefined, vars), { settings: { pairs: [], tolerances: {}, severity: {}, outDir: 'rca_out' }, problems: [] });
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
  assert.equal(classifyConfigChange(affects(['rcaLsp.initializeTimeout'])), 'none'); // read at the next start
  assert.equal(classifyConfigChange(affects(['editor.fontSize'])), 'none');
});

/** The settings of package.json the server receives: all but the interpreter (a new process), the trace level and how
 * long the client waits for the server's initialize answer. */
const CLIENT_KEYS = ['interpreter', 'trace', 'initializeTimeout'];
const serverKeys = [...new Set(Object.keys(properties).map((k) => k.split('.')[1]))].filter((k) => !CLIENT_KEYS.includes(k));

test('every server setting of package.json is read and reaches the server, and a change of it is sent', () => {
  assert.ok(serverKeys.includes('columns'), serverKeys.join(', '));
  const values: Record<string, unknown> = { pairs: [], tolerances: { float32: 0.5 }, severity: { 'nan-inf': 'off' }, outDir: 'out', columns: 'msprobe' };
  const read = readServerSettings((key) => values[key]);
  assert.deepEqual(Object.keys(read).sort(), [...serverKeys].sort());
  const { settings, problems } = buildServerSettings(read, vars);
  assert.deepEqual(problems, []);
  assert.equal(settings.columns, 'msprobe');
  for (const key of serverKeys) {
    assert.equal(classifyConfigChange((s) => s === 'rcaLsp' || s === `rcaLsp.${key}`), 'notify', key);
  }
});

test('several folders: the pairs of every folder, each expanded in its own folder, once', () => {
  const userPair = { mappingKey: '${workspaceFolder}/mapping_key.json', train: '${workspaceFolder}/train', rollout: '${workspaceFolder}/rollout' };
  const bPair = { mappingKey: '${workspaceFolder}/b_mapping_key.json', train: '/data/t', rollout: '/data/r' };
  const a = { raw: { pairs: [userPair], tolerances: { float32: 0.5 } }, vars: { workspaceFolder: '/a', userHome: '/home/u' } };
  const b = { raw: { pairs: [bPair, { mappingKey: 'x' }] }, vars: { workspaceFolder: '/b', userHome: '/home/u' } };
  const { settings, problems } = buildWorkspaceSettings(a, [a, b]);
  assert.deepEqual(settings.pairs, [
    { mappingKey: '/a/mapping_key.json', train: '/a/train', rollout: '/a/rollout' },
    { mappingKey: '/b/b_mapping_key.json', train: '/data/t', rollout: '/data/r' },
  ]);
  assert.deepEqual(settings.tolerances, { float32: 0.5 }, "the scope's other settings");
  assert.deepEqual(problems, ['rcaLsp.pairs[1] needs string fields mappingKey, train and rollout']);
  // the same with folder b active: b's settings, the same pairs
  const fromB = buildWorkspaceSettings(b, [a, b]).settings.pairs;
  assert.deepEqual(new Set(fromB.map((x) => x.mappingKey)), new Set(['/a/mapping_key.json', '/b/b_mapping_key.json']));
});
