import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { DEFAULT_INITIALIZE_TIMEOUT, InitializeWatchdog, initializeTimeout, initializeTimeoutMessage, Timers } from '../startWatchdog';

const repo = path.resolve(__dirname, '..', '..', '..', '..', '..', '..', '..');
const manifest = JSON.parse(fs.readFileSync(path.join(repo, 'editors', 'vscode', 'package.json'), 'utf8'));

/** Timers run by hand: `elapse(ms)` fires those due. */
class FakeTimers implements Timers {
  now = 0;
  private next = 0;
  private readonly pending = new Map<number, { at: number; fn: () => void }>();
  set(fn: () => void, ms: number): unknown {
    this.pending.set(++this.next, { at: this.now + ms, fn });
    return this.next;
  }
  clear(handle: unknown): void {
    this.pending.delete(handle as number);
  }
  elapse(ms: number): void {
    this.now += ms;
    for (const [id, t] of [...this.pending]) {
      if (t.at <= this.now) {
        this.pending.delete(id);
        t.fn();
      }
    }
  }
  get armed(): number {
    return this.pending.size;
  }
}

function watch(ms = 60000) {
  const timers = new FakeTimers();
  const givenUp: string[] = [];
  const dog = new InitializeWatchdog<string>(ms, (p) => givenUp.push(p), timers);
  return { timers, givenUp, dog };
}

test('a server that neither answers nor ends in time is given up on, once', () => {
  const { timers, givenUp, dog } = watch();
  dog.started('server 1');
  timers.elapse(59999);
  assert.deepEqual(givenUp, []);
  timers.elapse(1);
  assert.deepEqual(givenUp, ['server 1']);
  timers.elapse(600000);
  dog.ended('server 1'); // killed: it ends
  assert.deepEqual(givenUp, ['server 1']);
});

test('a server that answered, or ended (a crash, a stop), is not given up on', () => {
  const { timers, givenUp, dog } = watch();
  dog.started('answers');
  timers.elapse(30000);
  dog.answered();
  timers.elapse(600000);
  dog.started('crashes');
  dog.ended('crashes');
  timers.elapse(600000);
  dog.started('stopped');
  dog.dispose();
  timers.elapse(600000);
  assert.deepEqual(givenUp, []);
  assert.equal(timers.armed, 0);
});

test('each server started has its own time; an older one ending does not spare the new one', () => {
  const { timers, givenUp, dog } = watch();
  dog.started('crashed'); // it ran, crashed, and the client restarts it
  dog.answered();
  timers.elapse(1000);
  dog.started('restarted');
  timers.elapse(59000);
  dog.ended('crashed'); // its exit seen only now
  timers.elapse(1000);
  assert.deepEqual(givenUp, ['restarted']);
  dog.started('again'); // after a restart: a new minute, from its start
  timers.elapse(59999);
  assert.deepEqual(givenUp, ['restarted']);
  timers.elapse(1);
  assert.deepEqual(givenUp, ['restarted', 'again']);
});

test('the timeout setting: seconds, the default when unset or unusable', () => {
  assert.deepEqual(initializeTimeout(undefined), { seconds: DEFAULT_INITIALIZE_TIMEOUT });
  assert.deepEqual(initializeTimeout(null), { seconds: DEFAULT_INITIALIZE_TIMEOUT });
  assert.deepEqual(initializeTimeout(5), { seconds: 5 });
  assert.deepEqual(initializeTimeout(2.5), { seconds: 2.5 });
  for (const bad of [0, -1, '30', Number.NaN, Infinity, true]) {
    const t = initializeTimeout(bad);
    assert.equal(t.seconds, DEFAULT_INITIALIZE_TIMEOUT, String(bad));
    assert.match(t.problem ?? '', /rcaLsp\.initializeTimeout must be a positive number of seconds/);
  }
  const setting = manifest.contributes.configuration.properties['rcaLsp.initializeTimeout'];
  assert.equal(setting.default, DEFAULT_INITIALIZE_TIMEOUT);
  assert.ok(setting.minimum > 0 || setting.exclusiveMinimum === 0, 'the schema admits only positive values');
});

test('the message names the command, the time and the last line the server printed', () => {
  const msg = initializeTimeoutMessage('/venv/bin/python', 60, 'loading torch\r\nTraceback (most recent call last):\n  File "x.py"\n  still importing huge_module  \n\n');
  assert.match(msg, /^rca-lsp: the server \(\/venv\/bin\/python -m rca_lsp serve\) did not answer initialize within 60 s and was stopped\./);
  assert.match(msg, /The last line it printed: still importing huge_module\. /);
  assert.match(msg, /rcaLsp\.initializeTimeout/);
  assert.match(initializeTimeoutMessage('python3', 5, ' \n'), /within 5 s and was stopped\. It printed nothing\. /);
});
