import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { CRASH_RESTARTS, crashedMessage, libraryNotification, restartFailureMessage, ServerFailures } from '../serverFailures';

const extension = path.resolve(__dirname, '..', '..', '..', '..', '..');
const libraryClient = fs.readFileSync(path.join(extension, 'node_modules', 'vscode-languageclient', 'lib', 'common', 'client.js'), 'utf8');

/** A ServerFailures whose messages are collected, with vscode-languageclient's default verdict for a close faked. */
function failures() {
  const said: string[] = [];
  const server = new ServerFailures('/venv/bin/python', (m) => said.push(m));
  let asked = 0;
  const byDefault = (restart: boolean) => async () => {
    asked++;
    return restart;
  };
  return { said, server, byDefault, asked: () => asked };
}

test("vscode-languageclient's forced notifications are shown only while the server runs", () => {
  assert.equal(libraryNotification('force', false), false);
  assert.equal(libraryNotification('force', true), 'force');
  for (const running of [false, true]) {
    assert.equal(libraryNotification(true, running), true, 'left to revealOutputChannelOn');
    assert.equal(libraryNotification(false, running), false);
  }
});

test('a server that never ran is not restarted and its failure is not said here (its starter says it)', async () => {
  const { said, server, byDefault, asked } = failures();
  server.starting();
  server.append('Traceback (most recent call last):\nModuleNotFoundError: No module named pygls\n');
  assert.equal(await server.closed(byDefault(true)), false);
  server.startFailed('spawn /venv/bin/python ENOENT');
  assert.equal(asked(), 0, 'the default handling counted a crash');
  assert.deepEqual(said, []);
  assert.equal(server.failure, undefined);
  assert.match(server.stderr, /ModuleNotFoundError: No module named pygls\n$/);
});

test("a crash of a server that ran: the default handling's restarts, then one message with the last line it printed", async () => {
  const { said, server, byDefault, asked } = failures();
  server.starting();
  server.answered();
  for (let i = 0; i < CRASH_RESTARTS; i++) {
    server.starting();
    server.append(`crash ${i}\n`);
    assert.equal(await server.closed(byDefault(true)), true);
  }
  assert.deepEqual(said, []);
  assert.equal(await server.closed(byDefault(false)), false);
  assert.deepEqual(said, [crashedMessage('/venv/bin/python', `crash ${CRASH_RESTARTS - 1}\n`)]);
  assert.match(said[0], /crashed 5 times in the last 3 minutes and is not started again\. The last line it printed: crash 3\./);
  assert.equal(server.failure, said[0]);
  assert.equal(asked(), CRASH_RESTARTS + 1);
});

test('a server that ran, restarted after a crash and dying before it is ready, is counted as a crash', async () => {
  const { said, server, byDefault, asked } = failures();
  server.answered();
  server.starting(); // the restart
  server.append("mock: cannot start (ModuleNotFoundError: No module named 'pygls_broken')\n");
  assert.equal(await server.closed(byDefault(false)), false);
  assert.equal(asked(), 1);
  assert.equal(said.length, 1);
  assert.match(said[0], /The last line it printed: mock: cannot start \(ModuleNotFoundError: No module named 'pygls_broken'\)\./);
});

test('a server given up on is said once: its close neither restarts it nor says more, even after it ran', async () => {
  const { said, server, byDefault, asked } = failures();
  server.answered();
  server.starting();
  server.giveUp('rca-lsp: the server did not answer initialize within 8 s');
  assert.equal(await server.closed(byDefault(true)), false);
  assert.equal(asked(), 0);
  assert.deepEqual(said, ['rca-lsp: the server did not answer initialize within 8 s']);
  assert.equal(server.failure, said[0]);
  server.starting(); // a new process of the same client: its own story
  assert.equal(server.failure, undefined);
  assert.equal(server.stderr, '');
});

test('a restart after a crash whose process cannot start is said once, naming the error', () => {
  const { said, server } = failures();
  server.answered();
  server.starting();
  server.startFailed('spawn /venv/bin/python ENOENT');
  assert.deepEqual(said, [restartFailureMessage('/venv/bin/python', 'spawn /venv/bin/python ENOENT')]);
  assert.equal(said[0], 'rca-lsp: the server (/venv/bin/python -m rca_lsp serve) crashed and could not be started again: spawn /venv/bin/python ENOENT.');
  assert.equal(server.failure, said[0]);
});

test('a client being stopped restarts nothing and says nothing', async () => {
  const { said, server, byDefault, asked } = failures();
  server.answered();
  server.retire();
  assert.ok(server.retired);
  assert.equal(await server.closed(byDefault(true)), false);
  server.startFailed('spawn /venv/bin/python ENOENT');
  assert.equal(asked(), 0);
  assert.deepEqual(said, []);
});

test('only the end of what the server printed is kept', () => {
  const { server } = failures();
  server.append('x'.repeat(5000));
  server.append('the end\n');
  assert.equal(server.stderr.length, 4096);
  assert.match(server.stderr, /xthe end\n$/);
  assert.match(crashedMessage('python3', ' \n'), /not started again\. It printed nothing\. /);
});

test("the crash message's numbers are those of vscode-languageclient's default handling", () => {
  // it restarts while it has restarted at most maxRestartCount (CRASH_RESTARTS) times, else unless the first of
  // those restarts is more than 3 minutes old
  assert.match(libraryClient, /if \(this\.restarts\.length <= this\.maxRestartCount\) \{/);
  assert.match(libraryClient, /if \(diff <= 3 \* 60 \* 1000\) \{/);
});

test("vscode-languageclient forces a notification where serverFailures.ts says, and nowhere else", () => {
  // each call that shows a notification whatever the options say; a new one is a failure to look at
  const forced = (libraryClient.match(/this\.error\([\s\S]*?\);/g) ?? []).filter((call) => call.includes("'force'"));
  const expected = [
    /couldn't create connection to server\.`, error, 'force'\)/, // start()'s catch: the state is startFailed
    /'Connection to server got closed\. Server will not be restarted\.', undefined, handlerResult\.handled === true \? false : 'force'\)/,
    /`Restarting server failed`, error, 'force'\)/, // the start of its restart after a crash failed
    /Shutting down server\.`, undefined, handlerResult\.handled === true \? false : 'force'\)/,
    /connection to server is erroring\.\\n\$\{error\.message\}`, undefined, handlerResult\.handled === true \? false : 'force'\)/,
  ];
  assert.equal(forced.length, expected.length, forced.join('\n'));
  expected.forEach((re, i) => assert.match(forced[i], re));
  // a failed initialize shows its error unless initializationFailedHandler is set (client.ts sets it)
  assert.match(libraryClient, /if \(this\._clientOptions\.initializationFailedHandler\) \{/);
});
