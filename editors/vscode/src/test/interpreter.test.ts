import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import {
  ignoredUntrustedSetting,
  insideFolders,
  OnceGate,
  pickInterpreterSetting,
  resolveInterpreter,
  ResolveInputs,
  shellQuote,
  whichOnPath,
} from '../interpreter';
import { checkImport } from '../importCheck';

const vars = { workspaceFolder: '/ws', userHome: '/home/u' };

function inputs(over: Partial<ResolveInputs>): ResolveInputs {
  return {
    setting: undefined,
    trusted: true,
    vars,
    pythonExtension: async () => undefined,
    which: () => undefined,
    ...over,
  };
}

test('setting wins over the Python extension and PATH', async () => {
  let extCalled = false;
  const r = await resolveInterpreter(
    inputs({
      setting: { globalValue: '/usr/bin/python3.11' },
      pythonExtension: async () => {
        extCalled = true;
        return '/venv/bin/python';
      },
      which: () => '/usr/bin/python3',
    }),
  );
  assert.deepEqual(r, { python: '/usr/bin/python3.11', source: 'setting', detail: 'setting rcaLsp.interpreter (user value)' });
  assert.equal(extCalled, false, 'the Python extension is not even asked when the setting is present');
});

test('workspace folder value beats workspace value beats user value when trusted', () => {
  const inspect = { globalValue: '/u', workspaceValue: '/w', workspaceFolderValue: '/f' };
  assert.deepEqual(pickInterpreterSetting(inspect, true), { value: '/f', level: 'workspaceFolder' });
  assert.deepEqual(pickInterpreterSetting({ globalValue: '/u', workspaceValue: '/w' }, true), { value: '/w', level: 'workspace' });
  assert.deepEqual(pickInterpreterSetting({ globalValue: '/u' }, true), { value: '/u', level: 'user' });
});

test('untrusted workspace: workspace-level interpreter values are ignored', async () => {
  const inspect = { globalValue: '/u/python', workspaceValue: './evil', workspaceFolderValue: './evil2' };
  assert.deepEqual(pickInterpreterSetting(inspect, false), { value: '/u/python', level: 'user' });
  assert.equal(ignoredUntrustedSetting(inspect, false), true);
  assert.equal(ignoredUntrustedSetting(inspect, true), false);
  // Only a workspace value, untrusted: fall through to the Python extension.
  const r = await resolveInterpreter(
    inputs({ setting: { workspaceValue: './evil' }, trusted: false, pythonExtension: async () => '/venv/bin/python' }),
  );
  assert.equal(r?.source, 'python-extension');
  assert.equal(r?.python, '/venv/bin/python');
});

test('untrusted workspace: no interpreter inside the workspace runs, whichever source names it', async () => {
  const skipped: string[] = [];
  const untrusted = (over: Partial<ResolveInputs>) =>
    inputs({ trusted: false, workspaceFolders: ['/ws'], onUntrusted: (p, source) => skipped.push(`${source}:${p}`), ...over });
  // The user's own setting pointing into the workspace (a common `${workspaceFolder}/.venv/bin/python`).
  const a = await resolveInterpreter(
    untrusted({ setting: { globalValue: '${workspaceFolder}/.venv/bin/python' }, which: (n) => (n === 'python3' ? '/usr/bin/python3' : undefined) }),
  );
  assert.deepEqual(a, { python: '/usr/bin/python3', source: 'path', detail: 'python3 on PATH' });
  // The Python extension's environment in the workspace.
  const b = await resolveInterpreter(untrusted({ pythonExtension: async () => '/ws/venv/bin/python' }));
  assert.equal(b, undefined);
  assert.deepEqual(skipped, ['setting:/ws/.venv/bin/python', 'python-extension:/ws/venv/bin/python']);
  // Trusted: the same values are used; outside the workspace: used untrusted too.
  const c = await resolveInterpreter(inputs({ setting: { globalValue: '${workspaceFolder}/.venv/bin/python' }, workspaceFolders: ['/ws'] }));
  assert.equal(c?.python, '/ws/.venv/bin/python');
  const d = await resolveInterpreter(untrusted({ setting: { globalValue: '/wsx/bin/python' } }));
  assert.equal(d?.python, '/wsx/bin/python');
});

test('insideFolders: as written and with links resolved, never a bare command', () => {
  const real = (p: string) => (p === '/home/u/py' ? '/ws/evil' : p);
  assert.equal(insideFolders('/ws/a/python', ['/ws'], real), true);
  assert.equal(insideFolders('/ws', ['/ws/'], real), true);
  assert.equal(insideFolders('/wsx/python', ['/ws'], real), false);
  assert.equal(insideFolders('/home/u/py', ['/ws'], real), true);
  assert.equal(insideFolders('python3', ['/ws'], real), false);
});

test('empty or blank setting falls through', async () => {
  const r = await resolveInterpreter(inputs({ setting: { globalValue: '  ', workspaceValue: '' }, which: (n) => (n === 'python3' ? '/bin/python3' : undefined) }));
  assert.deepEqual(r, { python: '/bin/python3', source: 'path', detail: 'python3 on PATH' });
});

test('Python extension before PATH; a throwing extension API falls through to PATH', async () => {
  const a = await resolveInterpreter(inputs({ pythonExtension: async () => '/venv/bin/python', which: () => '/bin/python3' }));
  assert.equal(a?.source, 'python-extension');
  const b = await resolveInterpreter(
    inputs({
      pythonExtension: async () => {
        throw new Error('not active');
      },
      which: (n) => (n === 'python3' ? '/bin/python3' : undefined),
    }),
  );
  assert.equal(b?.source, 'path');
  const c = await resolveInterpreter(inputs({ pythonExtension: undefined, which: (n) => (n === 'python' ? '/bin/python' : undefined) }));
  assert.deepEqual(c, { python: '/bin/python', source: 'path', detail: 'python on PATH' });
});

test('nothing found: undefined', async () => {
  assert.equal(await resolveInterpreter(inputs({})), undefined);
});

test('variables in the setting are expanded', async () => {
  const r = await resolveInterpreter(inputs({ setting: { workspaceValue: '${workspaceFolder}/.venv/bin/python' } }));
  assert.equal(r?.python, '/ws/.venv/bin/python');
  const h = await resolveInterpreter(inputs({ setting: { globalValue: '~/venvs/x/bin/python' } }));
  assert.equal(h?.python, path.join('/home/u', 'venvs/x/bin/python'));
});

test('whichOnPath finds the first executable and skips non-executables', () => {
  const d1 = fs.mkdtempSync(path.join(os.tmpdir(), 'rca-which-'));
  const d2 = fs.mkdtempSync(path.join(os.tmpdir(), 'rca-which-'));
  fs.writeFileSync(path.join(d1, 'python3'), '#!/bin/sh\n', { mode: 0o644 });
  fs.writeFileSync(path.join(d2, 'python3'), '#!/bin/sh\n', { mode: 0o755 });
  try {
    if (process.platform !== 'win32') {
      assert.equal(whichOnPath('python3', `${d1}:${d2}`), path.join(d2, 'python3'));
    }
    assert.equal(whichOnPath('python3', ''), undefined);
    assert.equal(whichOnPath('py', 'C:\\a;C:\\b', (p) => p === path.join('C:\\b', 'py.exe'), 'win32'), path.join('C:\\b', 'py.exe'));
  } finally {
    fs.rmSync(d1, { recursive: true });
    fs.rmSync(d2, { recursive: true });
  }
});

test('shellQuote quotes what a shell would split or expand', () => {
  assert.equal(shellQuote('/usr/bin/python3'), '/usr/bin/python3');
  assert.equal(shellQuote('/opt/my env/bin/python'), "'/opt/my env/bin/python'");
  assert.equal(shellQuote("it's"), `'it'\\''s'`);
});

test('the not-importable message is shown once per interpreter until reset', () => {
  const gate = new OnceGate();
  assert.equal(gate.shouldShow('import:/a'), true);
  assert.equal(gate.shouldShow('import:/a'), false);
  assert.equal(gate.shouldShow('import:/a'), false);
  assert.equal(gate.shouldShow('import:/b'), true);
  gate.reset();
  assert.equal(gate.shouldShow('import:/a'), true);
});

const python = whichOnPath('python3');

test('checkImport: importable module, missing module, missing interpreter', { skip: !python && 'no python3 on PATH' }, async () => {
  const ok = await checkImport(python as string, 'json');
  assert.equal(ok.ok, true);
  const missing = await checkImport(python as string, 'rca_lsp_definitely_not_a_module');
  assert.equal(missing.ok, false);
  assert.match(missing.reason ?? '', /ModuleNotFoundError/);
  const none = await checkImport('/nonexistent/bin/python', 'json');
  assert.deepEqual({ ok: none.ok, reason: none.reason }, { ok: false, reason: 'interpreter not found' });
});
