import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { bundledWheel, commandLine, installArgs, runCommand, serverProblem, startFailureMessage } from '../install';
import { whichOnPath } from '../interpreter';
import { MIN_SERVER_VERSION } from '../serverVersion';

const WHEEL = '/ext/server/rca_lsp-0.1.0-py3-none-any.whl';

test('the install command is exact and shell-quoted', () => {
  assert.deepEqual(installArgs(WHEEL), ['-m', 'pip', 'install', '--no-input', WHEEL]);
  assert.equal(commandLine('/opt/my env/bin/python', installArgs(WHEEL)), `'/opt/my env/bin/python' -m pip install --no-input ${WHEEL}`);
});

test('an importable server of a version this client supports: no problem', () => {
  assert.equal(serverProblem('/p/python', { ok: true, version: MIN_SERVER_VERSION }, WHEEL), undefined);
});

test('not importable: the reason and the exact command that installs the bundled wheel', () => {
  const p = serverProblem('/p/python', { ok: false, reason: "ModuleNotFoundError: No module named 'rca_lsp'" }, WHEEL);
  assert.equal(p?.kind, 'notInstalled');
  assert.deepEqual(p?.install, installArgs(WHEEL));
  assert.match(p?.message ?? '', /"rca_lsp" is not importable with \/p\/python \(ModuleNotFoundError: No module named 'rca_lsp'\)/);
  assert.ok(p?.message.includes(`Install this extension's rca_lsp there with: /p/python -m pip install --no-input ${WHEEL}`), p?.message);
  assert.match(p?.message ?? '', /rcaLsp\.interpreter/);
});

test('without a bundled wheel (a development build) the source checkout is named and nothing is offered to run', () => {
  const p = serverProblem('/p/python', { ok: false, reason: 'ModuleNotFoundError' }, undefined);
  assert.equal(p?.install, undefined);
  assert.match(p?.message ?? '', /\/p\/python -m pip install -e <path to the rca-lsp checkout>/);
});

test('too old, or no version: refused with the versions, the bundled wheel offered', () => {
  const old = serverProblem('/p/python', { ok: true, version: '0.0.1' }, WHEEL);
  assert.equal(old?.kind, 'tooOld');
  assert.match(old?.message ?? '', new RegExp(`cannot be used: it is version 0\\.0\\.1, older than the ${MIN_SERVER_VERSION.replace(/\./g, '\\.')} this extension needs`));
  assert.deepEqual(old?.install, installArgs(WHEEL));
  assert.match(serverProblem('/p/python', { ok: true }, WHEEL)?.message ?? '', /reports no version/);
});

test('a missing interpreter is not offered an install', () => {
  const p = serverProblem('/nope/python', { ok: false, reason: 'interpreter not found' }, WHEEL);
  assert.deepEqual([p?.kind, p?.install], ['noInterpreter', undefined]);
  assert.match(p?.message ?? '', /interpreter \/nope\/python was not found/);
});

test('bundledWheel finds the one rca_lsp wheel of the extension folder', () => {
  const ext = fs.mkdtempSync(path.join(os.tmpdir(), 'rca-ext-'));
  try {
    assert.equal(bundledWheel(ext), undefined);
    fs.mkdirSync(path.join(ext, 'server'));
    fs.writeFileSync(path.join(ext, 'server', 'other-1.0-py3-none-any.whl'), '');
    assert.equal(bundledWheel(ext), undefined);
    fs.writeFileSync(path.join(ext, 'server', 'rca_lsp-0.2.0-py3-none-any.whl'), '');
    assert.equal(bundledWheel(ext), path.join(ext, 'server', 'rca_lsp-0.2.0-py3-none-any.whl'));
  } finally {
    fs.rmSync(ext, { recursive: true });
  }
});

const python = whichOnPath('python3');

test('runCommand passes the output on and resolves with the exit code', { skip: !python && 'no python3 on PATH' }, async () => {
  let out = '';
  const ok = await runCommand(python as string, ['-c', 'import sys; print("to stdout"); sys.stderr.write("to stderr")'], os.tmpdir(), (t) => {
    out += t;
  });
  assert.equal(ok.code, 0);
  assert.match(out, /to stdout/);
  assert.match(out, /to stderr/);
  assert.equal((await runCommand(python as string, ['-c', 'raise SystemExit(3)'], os.tmpdir(), () => {})).code, 3);
  const missing = await runCommand('/nonexistent/python', [], os.tmpdir(), () => {});
  assert.equal(missing.code, null);
  assert.match(missing.error ?? '', /ENOENT/);
});

test('a server that stops before it is ready: its last printed line, else the client error', () => {
  const traceback = "Traceback (most recent call last):\n  File \"x.py\", line 1\nModuleNotFoundError: No module named 'pygls'\n\n";
  const m = startFailureMessage('/p/python', traceback, 'Pending response rejected since connection got disposed');
  assert.equal(
    m,
    "rca-lsp: the server (/p/python -m rca_lsp serve) stopped before it was ready: ModuleNotFoundError: No module named 'pygls'. " +
      'The output channel has all it printed.',
  );
  assert.match(startFailureMessage('/p/python', '  \n', 'spawn /p/python ENOENT'), /stopped before it was ready: spawn \/p\/python ENOENT\./);
});
