import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { once } from 'node:events';
import { exited, isRunning, killProcess, startProcess } from '../serverProcess';

test('a wedged server is ended: one that ignores SIGTERM and its closed input is killed, its output closed', async () => {
  // Stays until killed, like a server stuck before it answers initialize: it says when it ignores its input's end
  // and SIGTERM
  const script =
    "process.stdin.on('end', () => process.stdout.write('input closed\\n')); process.stdin.resume();" +
    "process.on('SIGTERM', () => process.stdout.write('SIGTERM ignored\\n'));" +
    "process.stdout.write('up\\n'); setInterval(() => {}, 1000);";
  const child = await startProcess(process.execPath, ['-e', script], process.cwd(), process.env);
  try {
    let printed = '';
    const waiting: (() => void)[] = [];
    child.stdout.on('data', (d: Buffer) => {
      printed += d.toString();
      waiting.splice(0).forEach((wake) => wake());
    });
    const said = async (what: string): Promise<void> => {
      while (!printed.includes(what)) {
        await new Promise<void>((wake) => waiting.push(wake));
      }
    };
    await said('up');
    child.stdin.end();
    await said('input closed');
    child.kill('SIGTERM');
    await said('SIGTERM ignored');
    assert.ok(isRunning(child));
    const closed = once(child.stdout, 'close');
    const exit = once(child, 'exit');
    killProcess(child);
    await closed;
    const [code, signal] = await exit;
    assert.equal(code, null);
    assert.equal(signal, 'SIGKILL');
    assert.equal(isRunning(child), false);
    assert.equal(await exited(child, 0), true);
    killProcess(child); // again: nothing to do, no error
  } finally {
    child.kill('SIGKILL');
  }
});

test('a program that cannot be started is an error, not a process', async () => {
  await assert.rejects(startProcess('/nonexistent/python3', ['-m', 'rca_lsp'], process.cwd(), process.env), /ENOENT/);
});
