import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { serverGone } from '../serverGone';

test('a write to a server whose input is closed is a server gone; other errors are not', async () => {
  // A server still running that no longer reads: its stdin's read end closed, as in the moment a server died and
  // Node has not yet seen it exit
  const child = spawn(process.execPath, ['-e', "require('fs').closeSync(0); process.stdout.write('closed\\n'); setInterval(() => {}, 1000);"], {
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  try {
    await once(child.stdout, 'data');
    const event = once(child.stdin, 'error') as Promise<[Error]>;
    const write = (text: string) => new Promise<Error | null | undefined>((resolve) => child.stdin.write(text, resolve));
    const first = await write('Content-Length: 2\r\n\r\n{}');
    const [error] = await event;
    assert.equal((error as NodeJS.ErrnoException).code, 'EPIPE');
    assert.ok(serverGone(error), 'the EPIPE of the stream');
    assert.ok(serverGone(first), `the write's own error: ${String(first)}`);
    const later = await write('{}'); // the stream destroyed by the error
    assert.equal((later as NodeJS.ErrnoException | undefined)?.code, 'ERR_STREAM_DESTROYED');
    assert.ok(serverGone(later));
  } finally {
    child.kill();
  }
  assert.ok(!serverGone(new Error('Header must provide a Content-Length property.')));
  assert.ok(!serverGone(Object.assign(new Error('spawn /p/python ENOENT'), { code: 'ENOENT' })));
  assert.ok(!serverGone(undefined));
  assert.ok(!serverGone('EPIPE'));
});
