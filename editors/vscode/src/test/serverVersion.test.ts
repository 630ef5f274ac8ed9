import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { compareVersions, MIN_SERVER_VERSION, parseVersion, versionProblem } from '../serverVersion';

test('versions compare by their release numbers, a pre-release before its release', () => {
  assert.ok(compareVersions('0.1.0', '0.1.0') === 0);
  assert.ok(compareVersions('0.1', '0.1.0') === 0);
  assert.ok(compareVersions('0.0.9', '0.1.0') < 0);
  assert.ok(compareVersions('0.10.0', '0.9.0') > 0, 'numeric, not text order');
  assert.ok(compareVersions('1.0.0', '0.99.99') > 0);
  assert.ok(compareVersions('0.2.0rc1', '0.2.0') < 0);
  assert.ok(compareVersions('0.2.0.dev3+g1234', '0.2.0') < 0);
  assert.ok(compareVersions('0.2.0rc1', '0.1.9') > 0);
  assert.ok(compareVersions('0.1.0+local', '0.1.0') === 0, 'a local label is not a pre-release');
  assert.equal(parseVersion('0.0.0-mock')?.pre, false);
  assert.equal(parseVersion('mock'), undefined);
});

test('a server older than the minimum, or without a version, is refused with the reason', () => {
  assert.equal(versionProblem(MIN_SERVER_VERSION), undefined);
  assert.equal(versionProblem('9.0'), undefined);
  assert.equal(versionProblem('0.0.1', '0.1.0'), 'it is version 0.0.1, older than the 0.1.0 this extension needs');
  assert.equal(versionProblem('0.1.0rc2', '0.1.0'), 'it is version 0.1.0rc2, older than the 0.1.0 this extension needs');
  assert.match(versionProblem(undefined) ?? '', /reports no version/);
  assert.match(versionProblem('') ?? '', /reports no version/);
});
