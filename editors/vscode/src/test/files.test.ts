import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { MAPPING_GLOBS, MAPPING_LANGUAGES } from '../files';

// out/editors/vscode/src/test -> the repository (tsc keeps the layout from the repository root, see tsconfig.json)
const repo = path.resolve(__dirname, '..', '..', '..', '..', '..', '..', '..');
const manifest = JSON.parse(fs.readFileSync(path.join(repo, 'editors', 'vscode', 'package.json'), 'utf8'));

test('every mapping file activates the extension: in the workspace, or opened in its language', () => {
  const events: string[] = manifest.activationEvents;
  for (const glob of MAPPING_GLOBS) {
    assert.ok(events.includes(`workspaceContains:${glob}`), `no workspaceContains:${glob}`);
  }
  for (const language of MAPPING_LANGUAGES) {
    assert.ok(events.includes(`onLanguage:${language}`), `no onLanguage:${language}`);
  }
});
