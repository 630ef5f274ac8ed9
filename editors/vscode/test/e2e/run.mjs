#!/usr/bin/env node
// End-to-end test in a real VS Code (code-server) driven by playwright-core + Debian's chromium.
//
//   npm run test:e2e            (packages the .vsix first)
//
// Scenarios:
//   untrusted-not-importable  always runs: workspace trust on, the folder untrusted, a workspace-level
//                             rcaLsp.interpreter that must be ignored, a user-level interpreter (a fresh venv)
//                             without rca_lsp. Asserts the one-time error with the exact install command of the
//                             wheel bundled in the .vsix, "Install" and "Open Settings", the status bar, that the
//                             workspace interpreter never ran, the JSON schema validation of a malformed mapping
//                             file (no server needed), then accepts "Install": the command and pip's output in the
//                             output channel, and the installed server starts and publishes.
//   activation                runs when RCA_LSP_PYTHON exists: a plain JSON file starts nothing; a mapping-key file
//                             opened later does, and the server found (the mock claiming version 0.0.1) is refused
//                             as too old, with the versions, never started; "Open Settings" opens the setting.
//   mock-server               runs when pygls is importable with RCA_LSP_PYTHON: test/e2e/mock-server speaks the
//                             client contract with canned answers (diagnostics, hover, quick fix, status, report,
//                             settings forwarding and changes, restart, suggest mapping).
//   crash                     runs when pygls is importable with RCA_LSP_PYTHON: the mock server exiting at start
//                             is said once with what it printed and not restarted; once it can start, Restart
//                             Server starts it; a server gone while the client writes to it (EPIPE before the
//                             close) is restarted, not shut down; Restart Server also works while the client is
//                             restarting it after a crash (one server runs after, the unsaved edit kept); crashing
//                             mid-session it is restarted, then given up on with a message quoting its last line
//                             and a stopped status bar; the same when its restarts exit at start, and when its
//                             interpreter is gone by then; Restart Server brings it back each time. Each failure
//                             shows exactly one notification, the extension's.
//   hang                      runs when pygls is importable with RCA_LSP_PYTHON: the mock server, while a file
//                             exists, never answers initialize; with rcaLsp.initializeTimeout at 8 s it is killed
//                             and said in one notification (the timeout, its last line), the status bar stopped,
//                             its process gone, not started again; Restart Server without the file starts a working
//                             one. The same for a server the client restarts after a crash.
//   server                    runs when `python -m rca_lsp serve --help` works and fixtures/missing_activation
//                             exists (skipped otherwise; RCA_LSP_E2E_REQUIRE_SERVER=1 turns the skip into a
//                             failure). Asserts the missing-op warning in the Problems panel, the hover on that
//                             entry, a quick fix for a misspelt train key, the status bar, the report preview and
//                             the suggested mapping; the divergence chart (marker, reveal, refresh after a save) and,
//                             on a copy of fixtures/vllm_tp2_decode_steps_rank_desync in ranks/ (Megatron TP=2
//                             against vLLM TP=2 dumped one step per engine step), the rank view the report names,
//                             kept across a save and the panel hidden and shown, and no text cut at the chart's edge.
//
// Environment: RCA_LSP_PYTHON (default <repo>/.venv/bin/python), CODE_SERVER (binary; default: installed by
// scripts/install-e2e.sh into CS_DIR), CHROMIUM (default /usr/bin/chromium), RCA_LSP_E2E_FIXTURE
// (default missing_activation), RCA_LSP_E2E_KEEP=1 keeps the temp dirs.
// Screenshots and logs: editors/vscode/test-artifacts/.

import { execFileSync, spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { clippedTexts, recordCanvasTexts } from '../chartText.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const extRoot = path.resolve(here, '..', '..');
const repoRoot = path.resolve(extRoot, '..', '..');
const artifacts = path.join(extRoot, 'test-artifacts');
const fixtureName = process.env.RCA_LSP_E2E_FIXTURE || 'missing_activation';
const serverPython = process.env.RCA_LSP_PYTHON || path.join(repoRoot, '.venv', 'bin', 'python');
const requireServer = process.env.RCA_LSP_E2E_REQUIRE_SERVER === '1';
const keep = process.env.RCA_LSP_E2E_KEEP === '1';
const chromiumPath = process.env.CHROMIUM || '/usr/bin/chromium';
const suspectCode = process.env.RCA_LSP_E2E_SUSPECT_CODE || 'missing-op';
const escapeRe = (x) => x.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
const t0 = Date.now();

function log(msg) {
  const s = ((Date.now() - t0) / 1000).toFixed(1).padStart(6);
  process.stdout.write(`[e2e ${s}s] ${msg}\n`);
}

// ---------------------------------------------------------------- tiny test runner
const results = [];
function record(name, status, detail = '') {
  results.push({ name, status, detail });
  const prefix = status === 'pass' ? 'ok' : status === 'skip' ? 'ok # SKIP' : 'not ok';
  process.stdout.write(`${prefix} - ${name}${detail ? `: ${detail}` : ''}\n`);
}

class Scenario {
  constructor(name) {
    this.name = name;
    this.broken = undefined;
  }
  /** A step; when a `critical` one fails (setup), the later steps are reported failed without running. */
  async step(name, fn, { critical = false } = {}) {
    const full = `${this.name} › ${name}`;
    if (this.broken) {
      record(full, 'fail', `not run: "${this.broken}" failed`);
      return undefined;
    }
    const started = Date.now();
    try {
      const v = await fn();
      record(full, 'pass', `${((Date.now() - started) / 1000).toFixed(1)} s`);
      return v;
    } catch (e) {
      if (critical) {
        this.broken = name;
      }
      record(full, 'fail', e instanceof Error ? e.message.split('\n').slice(0, 6).join(' | ') : String(e));
      if (this.page) {
        await shot(this.page, `${this.name}-FAILED-${slug(name)}`).catch(() => {});
      }
      this.onFailure?.();
      return undefined;
    }
  }
}

function slug(s) {
  return s.replace(/[^A-Za-z0-9]+/g, '-').replace(/^-|-$/g, '').toLowerCase();
}

async function shot(page, name) {
  const file = path.join(artifacts, `${name}.png`);
  await page.screenshot({ path: file });
  log(`screenshot ${path.relative(extRoot, file)}`);
}

function assert(cond, msg) {
  if (!cond) {
    throw new Error(msg);
  }
}

class FailFast extends Error {}

/** Polls `fn` until it returns a truthy value; an error thrown by `fn` ends the wait at once. */
async function poll(what, fn, timeoutMs, intervalMs = 250) {
  const end = Date.now() + timeoutMs;
  let last;
  while (Date.now() < end) {
    try {
      last = await fn();
      if (last) {
        return last;
      }
    } catch (e) {
      if (e instanceof FailFast) {
        throw e;
      }
      last = e;
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
  throw new Error(`timed out after ${timeoutMs / 1000} s waiting for ${what}${last instanceof Error ? ` (${last.message})` : ''}`);
}

// ---------------------------------------------------------------- code-server
function findVsix() {
  const files = fs.readdirSync(extRoot).filter((f) => f.endsWith('.vsix'));
  assert(files.length === 1, `expected exactly one .vsix in ${extRoot} (run npm run package), found ${files.length}`);
  return path.join(extRoot, files[0]);
}

function codeServerBin() {
  if (process.env.CODE_SERVER) {
    return process.env.CODE_SERVER;
  }
  const started = Date.now();
  const out = execFileSync('bash', [path.join(extRoot, 'scripts', 'install-e2e.sh')], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const bin = out.trim().split('\n').pop();
  log(`code-server: ${bin} (install check ${((Date.now() - started) / 1000).toFixed(1)} s)`);
  return bin;
}

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

class CodeServer {
  constructor(bin, base, name) {
    this.bin = bin;
    this.dir = path.join(base, name);
    this.userData = path.join(this.dir, 'user-data');
    this.extensions = path.join(base, 'extensions');
    this.env = {
      ...process.env,
      XDG_CONFIG_HOME: path.join(this.dir, 'xdg-config'),
      XDG_DATA_HOME: path.join(this.dir, 'xdg-data'),
      XDG_CACHE_HOME: path.join(this.dir, 'xdg-cache'),
    };
    for (const k of Object.keys(this.env)) {
      if (k.startsWith('VSCODE_')) {
        delete this.env[k];
      }
    }
    fs.mkdirSync(path.join(this.userData, 'User'), { recursive: true });
    fs.mkdirSync(this.extensions, { recursive: true });
  }

  writeUserSettings(extra) {
    const settings = {
      'workbench.startupEditor': 'none',
      'telemetry.telemetryLevel': 'off',
      'extensions.autoUpdate': false,
      'extensions.autoCheckUpdates': false,
      'update.mode': 'none',
      'editor.hover.delay': 100,
      'workbench.tips.enabled': false,
      'workbench.enableExperiments': false,
      'chat.disableAIFeatures': true,
      'git.enabled': false,
      'files.autoSave': 'off',
      'security.workspace.trust.enabled': false,
      'remote.autoForwardPorts': false,
      ...extra,
    };
    fs.writeFileSync(path.join(this.userData, 'User', 'settings.json'), JSON.stringify(settings, null, 2));
  }

  commonArgs() {
    return ['--user-data-dir', this.userData, '--extensions-dir', this.extensions];
  }

  installExtension(vsix) {
    const started = Date.now();
    execFileSync(this.bin, [...this.commonArgs(), '--install-extension', vsix, '--force'], {
      env: this.env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    log(`installed ${path.basename(vsix)} in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  }

  async start(folder) {
    this.port = await freePort();
    const config = path.join(this.dir, 'config.yaml');
    fs.writeFileSync(config, `bind-addr: 127.0.0.1:${this.port}\nauth: none\ncert: false\n`);
    this.logFile = path.join(this.dir, 'code-server.log');
    const out = fs.openSync(this.logFile, 'a');
    this.proc = spawn(
      this.bin,
      ['--config', config, ...this.commonArgs(), '--disable-telemetry', '--disable-update-check', folder],
      { env: this.env, stdio: ['ignore', out, out], detached: true },
    );
    this.exited = false;
    this.proc.on('exit', () => {
      this.exited = true;
    });
    await poll(
      'code-server /healthz',
      async () => {
        assert(!this.exited, `code-server exited early; see ${this.logFile}`);
        const r = await fetch(`http://127.0.0.1:${this.port}/healthz`);
        return r.ok;
      },
      60000,
    );
    log(`code-server listening on ${this.port}`);
    return `http://127.0.0.1:${this.port}/?folder=${encodeURIComponent(folder)}`;
  }

  async stop() {
    if (!this.proc || this.exited) {
      return;
    }
    try {
      process.kill(-this.proc.pid, 'SIGTERM');
    } catch {
      // gone
    }
    const end = Date.now() + 5000;
    while (!this.exited && Date.now() < end) {
      await new Promise((r) => setTimeout(r, 100));
    }
    if (!this.exited) {
      try {
        process.kill(-this.proc.pid, 'SIGKILL');
      } catch {
        // gone
      }
    }
  }

  /** Copies code-server's and VS Code's logs (incl. the rca-lsp output channel) into the artifacts. */
  collectLogs(name) {
    const dest = path.join(artifacts, `${name}-logs`);
    fs.mkdirSync(dest, { recursive: true });
    if (this.logFile && fs.existsSync(this.logFile)) {
      fs.copyFileSync(this.logFile, path.join(dest, 'code-server.log'));
    }
    const logsRoot = path.join(this.userData, 'logs');
    const walk = (d) => {
      for (const e of fs.existsSync(d) ? fs.readdirSync(d, { withFileTypes: true }) : []) {
        const p = path.join(d, e.name);
        if (e.isDirectory()) {
          walk(p);
        } else if (e.name.endsWith('.log') && (/rca-lsp|exthost|remoteexthost|window/i.test(p))) {
          const rel = path.relative(logsRoot, p).replace(/[\\/]/g, '__');
          fs.copyFileSync(p, path.join(dest, rel));
        }
      }
    };
    walk(logsRoot);
  }

  /** After a failed step, the end of what the server logged (its own lines, then the last messages), so that a CI
   * log shows what the server was doing. */
  printServerLog(lines = 40) {
    const text = this.outputChannelText().split('\n');
    const own = text.filter((l) => l.trim() && !/\[Trace - /.test(l));
    const traced = text.filter((l) => /\[Trace - /.test(l));
    process.stdout.write(`# the server's last ${lines} log lines:\n${own.slice(-lines).map((l) => `#   ${l}`).join('\n')}\n`);
    process.stdout.write(`# its last ${lines / 2} messages:\n${traced.slice(-lines / 2).map((l) => `#   ${l}`).join('\n')}\n`);
  }

  /** The text of the extension's output channel ("rca-lsp"), from the log files VS Code writes. */
  outputChannelText() {
    const found = [];
    const walk = (d) => {
      for (const e of fs.existsSync(d) ? fs.readdirSync(d, { withFileTypes: true }) : []) {
        const p = path.join(d, e.name);
        if (e.isDirectory()) {
          walk(p);
        } else if (/rca-lsp\.log$/.test(e.name) || (/rca-lsp/.test(path.basename(d)) && e.name.endsWith('.log'))) {
          found.push(fs.readFileSync(p, 'utf8'));
        }
      }
    };
    walk(path.join(this.userData, 'logs'));
    return found.join('\n');
  }
}

// ---------------------------------------------------------------- workbench helpers
async function launchBrowser() {
  return chromium.launch({
    executablePath: chromiumPath,
    headless: true,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--disable-dev-shm-usage',
    ],
  });
}

async function openWorkbench(browser, url) {
  const context = await browser.newContext({ viewport: { width: 1600, height: 1000 } });
  const page = await context.newPage();
  page.setDefaultTimeout(30000);
  await page.goto(url);
  await page.locator('.monaco-workbench').waitFor({ state: 'visible', timeout: 60000 });
  await page.locator('.explorer-folders-view .monaco-list-row').first().waitFor({ state: 'visible', timeout: 60000 });
  return page;
}

async function openFromExplorer(page, fileName) {
  const row = page.locator('.explorer-folders-view .monaco-list-row').filter({
    has: page.locator('.label-name', { hasText: new RegExp(`^${fileName.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}$`) }),
  });
  await row.first().click();
  await page
    .locator('.tabs-container .tab.active', { hasText: fileName })
    .first()
    .waitFor({ state: 'visible', timeout: 20000 });
  await page.locator('.monaco-editor .view-lines').first().waitFor({ state: 'visible' });
}

async function openProblems(page) {
  const panel = page.locator('.markers-panel');
  if (!(await panel.isVisible().catch(() => false))) {
    await page.keyboard.press('Control+Shift+M');
  }
  await panel.waitFor({ state: 'visible', timeout: 15000 });
  return panel;
}

/** Types `text` into the Problems panel's filter box (the list is virtualised: only visible rows exist). */
async function filterProblems(page, text) {
  const panel = await openProblems(page);
  const input = page.locator('.panel .viewpane-filter input, .markers-panel-container .viewpane-filter input').first();
  if ((await input.count()) === 0) {
    return panel;
  }
  if ((await input.inputValue()) !== text) {
    await input.fill(text);
    await page.waitForTimeout(400);
  }
  return panel;
}

/** The rows of the Problems panel whose text matches `re` (after filtering the panel by `filter`). */
async function problemRows(page, re, filter = '') {
  const panel = await filterProblems(page, filter);
  const rows = panel.locator('.monaco-list-row');
  const n = await rows.count();
  const out = [];
  for (let i = 0; i < n; i++) {
    const row = rows.nth(i);
    // a row recycled by the list meanwhile reads as empty at once (a poll asks again), not after 30 s
    const text = (await row.innerText({ timeout: 1000 }).catch(() => '')).replace(/\s+/g, ' ').trim();
    const aria = (await row.getAttribute('aria-label', { timeout: 1000 }).catch(() => '')) || '';
    if (re.test(text) || re.test(aria)) {
      out.push({ row, text, aria });
    }
  }
  return out;
}

async function waitProblem(page, re, timeoutMs, filter = '') {
  return poll(`a Problems-panel entry matching ${re}`, async () => {
    const rows = await problemRows(page, re, filter);
    return rows.length > 0 ? rows : undefined;
  }, timeoutMs, 500);
}

async function statusBarText(page) {
  // one snapshot, as notificationTexts: an item re-rendered between counting and reading is not waited for
  const texts = await page.locator('.statusbar-item', { hasText: 'rca-lsp' }).allInnerTexts();
  return texts.map((text) => text.replace(/\s+/g, ' ').trim()).join(' | ');
}

async function notificationTexts(page) {
  // one snapshot of the toasts showing: counting them and then reading each by index waited 30 s for a toast that
  // had faded out in between (a CI flake of the suggest-mapping step)
  const texts = await page.locator('.notifications-toasts .notification-toast').allInnerTexts();
  return texts.map((text) => text.replace(/\s+/g, ' ').trim());
}

async function runCommand(page, title) {
  await page.keyboard.press('F1');
  const input = page.locator('.quick-input-widget input');
  await input.waitFor({ state: 'visible' });
  await input.fill(`>${title}`);
  const item = page.locator('.quick-input-list .monaco-list-row', { hasText: title }).first();
  await item.waitFor({ state: 'visible' });
  await item.click();
}

/** Moves the editor cursor to a Problems-panel entry and focuses the editor. */
async function gotoProblem(page, rowInfo) {
  await rowInfo.row.click();
  await page.keyboard.press('Enter');
  await page.waitForTimeout(300);
  await page.keyboard.press('Control+1'); // focus the first editor group; the cursor stays on the problem
  await page.waitForTimeout(300);
}

/** Moves the cursor of the active editor to a 1-based line and column (Go to Line). */
async function gotoLine(page, line, column) {
  await page.keyboard.press('Control+G');
  const input = page.locator('.quick-input-widget input');
  await input.waitFor({ state: 'visible' });
  await input.fill(`:${line}:${column}`);
  await page.waitForTimeout(200);
  await page.keyboard.press('Enter');
  await page.waitForTimeout(300);
}

async function showHoverAtCursor(page) {
  await page.keyboard.press('Control+K');
  await page.keyboard.press('Control+I');
  const hover = page.locator('.monaco-hover:not(.hidden)').first();
  await hover.waitFor({ state: 'visible', timeout: 10000 });
  return hover;
}

function lineOf(text, needle) {
  const idx = text.indexOf(needle);
  return idx < 0 ? -1 : text.slice(0, idx).split('\n').length;
}

// ---------------------------------------------------------------- scenario 1: untrusted + not importable
async function scenarioNotImportable(browser, bin, base, vsix) {
  const sc = new Scenario('untrusted-not-importable');
  const cs = new CodeServer(bin, base, 'noimport');
  const ws = path.join(base, 'ws-noimport');
  fs.mkdirSync(path.join(ws, '.vscode'), { recursive: true });
  // A fresh virtual environment: rca_lsp is not importable with it, and pip can install into it.
  const venv = path.join(base, 'venv-without-rca-lsp');
  execFileSync('python3', ['-m', 'venv', venv], { stdio: 'pipe', timeout: 120000 });
  const bogus = path.join(venv, 'bin', 'python');
  // A workspace-level interpreter that must never run in an untrusted workspace.
  const evil = path.join(ws, 'evil-python');
  const marker = path.join(ws, 'EVIL_PYTHON_RAN');
  fs.writeFileSync(evil, `#!/bin/sh\ntouch '${marker}'\nexec python3 "$@"\n`, { mode: 0o755 });
  fs.writeFileSync(path.join(ws, '.vscode', 'settings.json'), JSON.stringify({ 'rcaLsp.interpreter': '${workspaceFolder}/evil-python' }, null, 2));
  fs.writeFileSync(
    path.join(ws, 'mapping_key.json'),
    JSON.stringify(
      {
        'Module.module.module.decoder.layers.0.mlp.linear_fc1.ColumnParallelLinear.forward.0':
          'Module.model.layers.0.mlp.gate_up_proj.MergedColumnParallelLinear.forward.0',
      },
      null,
      2,
    ),
  );
  fs.writeFileSync(
    path.join(ws, 'bad_mapping_key.json'),
    '{\n  "Module.a.forward.0": 3,\n  "Module.b.forward.0": [],\n  "Module.c.forward.0": "Module.model.c.forward.0"\n}\n',
  );

  cs.writeUserSettings({
    'security.workspace.trust.enabled': true,
    'security.workspace.trust.startupPrompt': 'never',
    'security.workspace.trust.banner': 'always',
    'rcaLsp.interpreter': bogus,
  });
  try {
    await sc.step('install the .vsix into code-server', () => cs.installExtension(vsix), { critical: true });
    const url = await sc.step('start code-server', () => cs.start(ws), { critical: true });
    sc.page = await sc.step('open the workbench (untrusted folder)', () => openWorkbench(browser, url), { critical: true });
    const page = sc.page;

    let wheel;
    await sc.step('one error message with the exact install command, "Install" and "Open Settings"', async () => {
      const installed = fs.readdirSync(cs.extensions).find((d) => /^rca-lsp\.rca-lsp-/.test(d));
      assert(installed, `the extension folder is not in ${cs.extensions}`);
      wheel = fs.readdirSync(path.join(cs.extensions, installed, 'server')).find((f) => /^rca_lsp-.*\.whl$/.test(f));
      assert(wheel, 'no rca_lsp wheel in the installed extension');
      wheel = path.join(cs.extensions, installed, 'server', wheel);
      const expected = `${bogus} -m pip install --no-input ${wheel}`;
      const texts = await poll('the not-importable notification', async () => {
        const t = await notificationTexts(page);
        return t.some((x) => x.includes('not importable')) ? t : undefined;
      }, 60000);
      await page.waitForTimeout(1000); // let the toast finish sliding in
      await shot(page, 'noimport-1-error-message');
      const hits = texts.filter((x) => x.includes('not importable'));
      assert(hits.length === 1, `expected one message, got ${hits.length}: ${JSON.stringify(texts)}`);
      assert(hits[0].includes(expected), `message lacks "${expected}": ${hits[0]}`);
      assert(hits[0].includes(bogus), 'message names the user-level interpreter');
      assert(!hits[0].includes('evil-python'), 'message must not name the workspace interpreter');
      for (const label of ['Install', 'Open Settings']) {
        const button = page.locator('.notifications-toasts .notification-toast .monaco-button', { hasText: new RegExp(`^${label}$`) });
        assert((await button.count()) === 1, `no "${label}" button`);
      }
      assert(!/Installing the server/.test(cs.outputChannelText()), 'something was installed without consent');
    });

    await sc.step('status bar says not installed', async () => {
      const text = await poll('status bar item', async () => {
        const t = await statusBarText(page);
        return /not installed/.test(t) ? t : undefined;
      }, 10000);
      log(`status bar: ${text}`);
    });

    await sc.step('untrusted workspace: the workspace-level interpreter never ran', async () => {
      assert(!fs.existsSync(marker), `${marker} exists: the workspace interpreter was executed`);
      // VS Code itself already hides restricted workspace values from the extension in restricted mode, and the
      // extension only reads the user-level value there: the output channel names the user value.
      const out = await poll('the interpreter line in the output channel', () => {
        const t = cs.outputChannelText();
        return /Interpreter: .*\(user value\)/.test(t) ? t : undefined;
      }, 10000);
      assert(out.includes(bogus), 'output channel does not name the user-level interpreter');
    });

    await sc.step('no retry loop: still exactly one message after 5 s', async () => {
      await page.waitForTimeout(5000);
      const texts = (await notificationTexts(page)).filter((x) => x.includes('not importable'));
      assert(texts.length === 1, `expected one message, got ${texts.length}`);
      assert(!fs.existsSync(marker), 'workspace interpreter ran later');
    });

    await sc.step('JSON schema flags malformed mapping values without the server', async () => {
      await openFromExplorer(page, 'bad_mapping_key.json');
      const rows = await waitProblem(page, /bad_mapping_key|Incorrect type|too few items/i, 30000);
      await poll('both schema problems (a number value, an empty list)', async () => {
        const all = await problemRows(page, /Incorrect type|too few items/i);
        return all.some((r) => /Incorrect type.*\[Ln 2,/.test(r.text)) && all.some((r) => /too few items.*\[Ln 3,/.test(r.text));
      }, 30000);
      log(`schema problems: ${rows.map((r) => r.text).join(' || ')}`);
      await shot(page, 'noimport-3-schema-problems');
    });

    await sc.step('"Install" runs the shown command, its output in the output channel, then the server starts', async () => {
      const command = `Installing the server: ${bogus} -m pip install --no-input ${wheel}`;
      await page.locator('.notifications-toasts .notification-toast .monaco-button', { hasText: /^Install$/ }).first().click();
      const out = await poll('pip to finish', () => {
        const t = cs.outputChannelText();
        if (/Installing the server failed/.test(t)) {
          throw new FailFast(`pip failed: ${t.slice(t.indexOf('Installing the server')).slice(0, 3000)}`);
        }
        return /The server is installed\./.test(t) ? t : undefined;
      }, 180000, 1000);
      assert(out.includes(command), `the output channel lacks "${command}"`);
      assert(/Successfully installed .*rca-lsp-/.test(out), "pip's own output is not in the output channel");
      await poll('the installed server to answer', () => /Server: rca-lsp \d/.test(cs.outputChannelText()), 60000);
      const status = await poll('the status bar of a running server', async () => {
        const t = await statusBarText(page);
        return t && !/not installed|starting/.test(t) ? t : undefined;
      }, 30000);
      log(`status bar after the install: ${status}`);
      const rows = await waitProblem(page, /unpaired-mapping/, 60000, 'unpaired-mapping');
      log(`after the install: ${rows.map((r) => r.text.slice(0, 160)).join(' || ')}`);
      await shot(page, 'noimport-4-installed');
      assert(!fs.existsSync(marker), 'the workspace interpreter ran');
    });
  } finally {
    await sc.page?.context().close().catch(() => {});
    await cs.stop();
    cs.collectLogs('noimport');
  }
}

// ---------------------------------------------------------------- scenario: activation
/** No mapping file in the workspace: nothing starts; once one appears and is opened, the client starts. */
async function scenarioActivation(browser, bin, base, vsix) {
  const sc = new Scenario('activation');
  if (!fs.existsSync(serverPython)) {
    record('activation', 'skip', `no ${serverPython} to run the mock server with`);
    return;
  }
  const cs = new CodeServer(bin, base, 'activation');
  const ws = path.join(base, 'ws-activation');
  fs.mkdirSync(ws, { recursive: true });
  fs.writeFileSync(path.join(ws, 'other.json'), '{ "a": 1 }\n');
  // The server found is the mock claiming a version older than the client's minimum.
  const mockLog = path.join(base, 'activation-server-events.jsonl');
  Object.assign(cs.env, { PYTHONPATH: mockDir, RCA_LSP_MOCK_VERSION: '0.0.1', RCA_LSP_MOCK_LOG: mockLog });
  cs.writeUserSettings({ 'rcaLsp.interpreter': serverPython });
  try {
    await sc.step('install the .vsix into code-server', () => cs.installExtension(vsix), { critical: true });
    const url = await sc.step('start code-server', () => cs.start(ws), { critical: true });
    sc.page = await sc.step('open the workbench', () => openWorkbench(browser, url), { critical: true });
    const page = sc.page;
    await sc.step('a plain JSON file does not start the server', async () => {
      await openFromExplorer(page, 'other.json');
      await page.waitForTimeout(5000);
      const status = await statusBarText(page);
      assert(status === '', `status bar shows "${status}"`);
      const texts = (await notificationTexts(page)).filter((x) => /rca-lsp|rca_lsp/.test(x));
      assert(texts.length === 0, `unexpected notification: ${texts.join(' | ')}`);
      assert(!/Interpreter:/.test(cs.outputChannelText()), 'the client tried to resolve an interpreter');
      await shot(page, 'activation-1-plain-json');
    });
    await sc.step('opening a mapping-key file starts the client', async () => {
      fs.writeFileSync(path.join(ws, 'late_mapping_key.json'), '{\n  "Module.a.forward.0": "Module.b.forward.0"\n}\n');
      const row = page.locator('.explorer-folders-view .monaco-list-row', { hasText: 'late_mapping_key.json' });
      let refreshed = false;
      await poll('the new file in the explorer', async () => {
        if ((await row.count()) > 0) {
          return true;
        }
        if (!refreshed) {
          refreshed = true;
          await page.waitForTimeout(3000);
          await runCommand(page, 'Refresh Explorer');
        }
        return false;
      }, 20000, 1000);
      await openFromExplorer(page, 'late_mapping_key.json');
      const text = await poll('the rca-lsp status bar item', async () => {
        const t = await statusBarText(page);
        return /server too old/.test(t) ? t : undefined;
      }, 30000);
      log(`status bar: ${text}`);
      await shot(page, 'activation-2-mapping-file');
    });
    await sc.step('a server older than the client needs is refused, with the versions, and never started', async () => {
      const texts = await poll('the too-old notification', async () => {
        const t = (await notificationTexts(page)).filter((x) => x.includes('cannot be used'));
        return t.length > 0 ? t : undefined;
      }, 20000);
      await page.waitForTimeout(1000);
      await shot(page, 'activation-3-too-old');
      assert(texts.length === 1, `expected one message: ${JSON.stringify(texts)}`);
      assert(/it is version 0\.0\.1, older than the \d+\.\d+\.\d+ this extension needs/.test(texts[0]), texts[0]);
      assert(texts[0].includes(`${serverPython} -m pip install --no-input `), `no install command: ${texts[0]}`);
      assert(!readMockLog(mockLog).some((e) => e.event === 'initialize'), 'the old server was started');
    });
    await sc.step('"Open Settings" opens the rcaLsp.interpreter setting', async () => {
      await page.locator('.notifications-toasts .notification-toast .monaco-button', { hasText: 'Open Settings' }).first().click();
      const editor = page.locator('.settings-editor');
      await editor.waitFor({ state: 'visible', timeout: 15000 });
      await poll('the interpreter setting in the Settings editor', async () => {
        const t = await editor.innerText();
        return /Interpreter/.test(t) && /rca_lsp serve/.test(t);
      }, 15000);
      await shot(page, 'activation-4-open-settings');
    });
  } finally {
    await sc.page?.context().close().catch(() => {});
    await cs.stop();
    cs.collectLogs('activation');
  }
}

// ---------------------------------------------------------------- scenarios 2 and 3: a server
const mockDir = path.join(here, 'mock-server');

function pythonCan(python, code, env = {}) {
  try {
    execFileSync(python, ['-c', code], { stdio: 'pipe', cwd: os.tmpdir(), timeout: 60000, env: { ...process.env, ...env } });
    return undefined;
  } catch (e) {
    return String(e.stderr || e.message).trim().split('\n').pop();
  }
}

function pythonRuns(python, args) {
  try {
    execFileSync(python, args, { stdio: 'pipe', cwd: os.tmpdir(), timeout: 60000 });
    return undefined;
  } catch (e) {
    return String(e.stderr || e.message).trim().split('\n').pop();
  }
}

/** Misspells one train key of the mapping text. Returns the original and the misspelt key. */
function makeTypo(mappingText) {
  const mapping = JSON.parse(mappingText);
  const keys = Object.keys(mapping);
  assert(keys.length > 0, 'the fixture mapping is empty');
  const key = keys.find((k) => !/linear_fc2/.test(k) && /decoder/.test(k)) ?? keys[0];
  let typo;
  if (key.includes('decoder')) {
    typo = key.replace('decoder', 'decodr');
  } else {
    const i = Math.max(1, Math.floor(key.length / 2));
    typo = key.slice(0, i) + key[i + 1] + key[i] + key.slice(i + 2);
  }
  assert(typo !== key && !keys.includes(typo), 'could not make a typo');
  return { key, typo, text: mappingText.replace(JSON.stringify(key), JSON.stringify(typo)) };
}

function readMockLog(file) {
  if (!fs.existsSync(file)) {
    return [];
  }
  return fs
    .readFileSync(file, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l));
}

const SERVER_STEPS = [
  'missing-op warning in the Problems panel',
  'hover on the suspect entry',
  'quick fix for a misspelt key',
  'the output names the server and version it talks to',
  'status bar shows the analysis',
  'write the report and open the preview',
  'suggest mapping opens an untitled JSON editor',
];
const CHART_STEPS = [
  'the editor-title button opens the divergence chart beside the mapping file',
  'the first-divergence marker sits at the module the report names',
  'clicking the point reveals its mapping entry',
  'the chart updates after a save',
  "the rank view of a TP engine's decode steps parts where the report names the rank",
  'the rank view chosen survives a save and the panel being hidden and shown',
  'no text of the chart is cut at its edge',
];
// A second pair in the real server's workspace: TP ranks on both sides, the rollout's decode steps dumped one
// msprobe step each (its rca-lsp.toml joins them), under its own mapping file name (chart tabs are named by it).
const RANK_FIXTURE = 'vllm_tp2_decode_steps_rank_desync';
const RANK_MAPPING = 'mapping_key_ranks.json';

/** Copies the rank pair into <ws>/ranks with its mapping file renamed (and its rca-lsp.toml saying so). */
function addRankPair(ws) {
  const source = path.join(repoRoot, 'fixtures', RANK_FIXTURE);
  if (!fs.existsSync(source)) {
    return;
  }
  const target = path.join(ws, 'ranks');
  fs.cpSync(source, target, { recursive: true });
  fs.renameSync(path.join(target, 'mapping_key.json'), path.join(target, RANK_MAPPING));
  const config = path.join(target, 'rca-lsp.toml');
  fs.writeFileSync(config, fs.readFileSync(config, 'utf8').replace(/^mapping_key = .*$/m, `mapping_key = "${RANK_MAPPING}"`));
}

/** The rank view output_5_root_cause_report.json names (rank by rank) at the first divergence, from a CLI run. */
function reportedRankView(base) {
  const fixture = path.join(repoRoot, 'fixtures', RANK_FIXTURE);
  const out = path.join(base, 'rank-report');
  execFileSync(serverPython, ['-m', 'rca_lsp', 'analyze', '--train', path.join(fixture, 'train'), '--rollout',
    path.join(fixture, 'rollout'), '--mapping-key', path.join(fixture, 'mapping_key.json'), '--rollout-step', 'all',
    '--out-dir', out], { stdio: ['ignore', 'ignore', 'pipe'] });
  const first = JSON.parse(fs.readFileSync(path.join(out, 'output_5_root_cause_report.json'), 'utf8')).first_divergence;
  const ranks = (first?.rank_by_rank ?? []).map((v) => /^rank (\d+):/.exec(v)?.[1]).filter(Boolean);
  assert(ranks.length === 1, `the report names ${ranks.length} ranks rank by rank: ${JSON.stringify(first?.rank_by_rank)}`);
  return { key: first.train_key, view: `both:${ranks[0]}` };
}

/** The chart webview shown (hidden panels' frames are not), inside code-server's two iframes. */
function visibleChartFrame(page) {
  return page.locator('iframe.webview.ready').filter({ visible: true }).contentFrame().frameLocator('iframe#active-frame');
}

/** The train key output_5_root_cause_report.json names as first divergence, from a CLI run on the fixture. */
function reportedFirstDivergence(fixture, base) {
  const out = path.join(base, 'chart-report');
  execFileSync(serverPython, ['-m', 'rca_lsp', 'analyze', '--train', path.join(fixture, 'train'), '--rollout',
    path.join(fixture, 'rollout'), '--mapping-key', path.join(fixture, 'mapping_key.json'), '--out-dir', out],
  { stdio: ['ignore', 'ignore', 'pipe'] });
  const report = JSON.parse(fs.readFileSync(path.join(out, 'output_5_root_cause_report.json'), 'utf8'));
  return report.first_divergence?.train_key;
}

/** The divergence chart's frame (code-server nests a webview's page in two iframes). */
function chartFrame(page) {
  return page.frameLocator('iframe.webview.ready').frameLocator('iframe#active-frame');
}

async function editorSelection(page) {
  return (await page.locator('[id="status.editor.selection"]').first().innerText()).replace(/\s+/g, ' ').trim();
}

/**
 * kind "real": the project's server (RCA_LSP_PYTHON) on a copy of fixtures/<RCA_LSP_E2E_FIXTURE>.
 * kind "mock": test/e2e/mock-server (a pygls stand-in speaking the same contract) on a synthetic mapping file;
 *              also checks the settings forwarding, restart and suggest-mapping plumbing.
 */
async function scenarioServer(kind, browser, bin, base, vsix) {
  const name = kind === 'mock' ? 'mock-server' : 'server';
  const sc = new Scenario(name);
  const mock = kind === 'mock';
  const fixture = path.join(repoRoot, 'fixtures', fixtureName);
  const reasons = [];
  if (mock) {
    const why = pythonCan(serverPython, 'import pygls.lsp.server, lsprotocol');
    if (why) {
      reasons.push(`pygls not importable with ${serverPython} (${why})`);
    }
  } else {
    if (!fs.existsSync(path.join(fixture, 'mapping_key.json'))) {
      reasons.push(`no fixture ${path.relative(repoRoot, fixture)}/mapping_key.json`);
    }
    const why = pythonRuns(serverPython, ['-m', 'rca_lsp', 'serve', '--help']);
    if (why) {
      reasons.push(`rca_lsp not importable with ${serverPython} (${why})`);
    }
  }
  if (reasons.length > 0) {
    for (const step of mock ? SERVER_STEPS : [...SERVER_STEPS, ...CHART_STEPS]) {
      record(`${name} › ${step}`, requireServer ? 'fail' : 'skip', reasons.join('; '));
    }
    return;
  }

  const cs = new CodeServer(bin, base, name);
  cs.env.RCA_LSP_LOG_LEVEL = 'info'; // what each run and chart cost: printed after a failed step
  sc.onFailure = () => cs.printServerLog();
  const ws = path.join(base, `ws-${name}`);
  const mockLog = path.join(base, `${name}-server-events.jsonl`);
  if (mock) {
    fs.mkdirSync(path.join(ws, 'train'), { recursive: true });
    fs.mkdirSync(path.join(ws, 'rollout'), { recursive: true });
    const mapping = {};
    for (const layer of [0, 1]) {
      mapping[`Module.module.module.decoder.layers.${layer}.mlp.linear_fc1.ColumnParallelLinear.forward.0`] =
        `Module.model.layers.${layer}.mlp.gate_up_proj.MergedColumnParallelLinear.forward.0`;
      mapping[`Module.module.module.decoder.layers.${layer}.mlp.linear_fc2.RowParallelLinear.forward.0`] =
        `Module.model.layers.${layer}.mlp.down_proj.RowParallelLinear.forward.0`;
    }
    fs.writeFileSync(path.join(ws, 'mapping_key.json'), `${JSON.stringify(mapping, null, 2)}\n`);
    cs.env.PYTHONPATH = mockDir;
    cs.env.RCA_LSP_MOCK_LOG = mockLog;
  } else {
    fs.cpSync(fixture, ws, { recursive: true });
    fs.rmSync(path.join(ws, 'rca_out'), { recursive: true, force: true });
    addRankPair(ws);
  }
  const mappingPath = path.join(ws, 'mapping_key.json');
  const mappingText = fs.readFileSync(mappingPath, 'utf8');
  const typo = makeTypo(mappingText);
  const typoPath = path.join(ws, 'typo_mapping_key.json');
  fs.writeFileSync(typoPath, typo.text);
  const fc2Key = Object.keys(JSON.parse(mappingText)).find((k) => /layers\.0\..*linear_fc2/.test(k));
  const fc2Line = fc2Key ? lineOf(mappingText, JSON.stringify(fc2Key)) : -1;
  log(`${name}: layer-0 linear_fc2 key on line ${fc2Line}; typo ${typo.typo}`);

  const userSettings = { 'rcaLsp.interpreter': serverPython, 'rcaLsp.trace.server': 'messages' };
  if (mock) {
    Object.assign(userSettings, {
      'rcaLsp.tolerances.bfloat16': 0.02,
      'rcaLsp.tolerances.float16': -1, // invalid: dropped by the client, which must say so
      'rcaLsp.severity': { 'nan-inf': 'off' },
      'rcaLsp.pairs': [{ mappingKey: '${workspaceFolder}/mapping_key.json', train: '${workspaceFolder}/train', rollout: '${workspaceFolder}/rollout' }],
    });
  }
  cs.writeUserSettings(userSettings);
  const p = (rel) => (mock ? `mock-${rel}` : `server-${rel}`);
  const toastSnapshots = [];
  const invalidSaid = (t) => t.includes('rcaLsp.tolerances.float16') && t.includes('must be a positive number');
  let toastSampler;
  try {
    await sc.step('install the .vsix into code-server', () => cs.installExtension(vsix), { critical: true });
    const url = await sc.step('start code-server', () => cs.start(ws), { critical: true });
    sc.page = await sc.step('open the workbench', () => openWorkbench(browser, url), { critical: true });
    const page = sc.page;
    if (mock) {
      toastSampler = setInterval(() => {
        notificationTexts(page).then((texts) => toastSnapshots.push(texts), () => {});
      }, 500);
    }

    await sc.step('missing-op warning in the Problems panel', async () => {
      await openFromExplorer(page, 'mapping_key.json');
      const rows = await waitProblem(page, new RegExp(escapeRe(suspectCode)), 120000, suspectCode);
      await page.waitForTimeout(500);
      await shot(page, p('1-problems'));
      log(`${suspectCode} rows: ${rows.map((r) => r.text.slice(0, 160)).join(' || ')}`);
      const withActFn = rows.filter((r) => /act_fn/.test(r.text));
      assert(withActFn.length > 0, `no ${suspectCode} entry mentions act_fn: ${rows.map((r) => r.text.slice(0, 200)).join(' || ')}`);
      const fc2Row = withActFn.find((r) => r.text.includes(`[Ln ${fc2Line},`)) ?? withActFn[0];
      if (fc2Line > 0) {
        assert(fc2Row.text.includes(`[Ln ${fc2Line},`), `${suspectCode} entry not on line ${fc2Line} (layer-0 linear_fc2): ${fc2Row.text}`);
      }
      assert(/^Warning:/.test(fc2Row.aria), `the ${suspectCode} entry is not a warning: ${fc2Row.aria}`);
      assert(/rca-lsp/.test(fc2Row.text) || /rca-lsp/.test(fc2Row.aria), 'source rca-lsp not shown');
    });

    await sc.step('hover on the suspect entry', async () => {
      await openFromExplorer(page, 'mapping_key.json');
      assert(fc2Line > 0, 'the mapping has no layer-0 linear_fc2 entry');
      const lineText = mappingText.split('\n')[fc2Line - 1];
      await gotoLine(page, fc2Line, lineText.indexOf('"') + 3); // inside the key string
      const hover = await showHoverAtCursor(page);
      const text = await poll('a hover mentioning act_fn besides the diagnostic', async () => {
        const t = (await hover.innerText()).replace(/\s+/g, ' ');
        // The hover repeats the diagnostic ("<message> rca-lsp(missing-op)") and has a status bar row; require
        // act_fn in another row: the server's own hover.
        const rows = await page
          .locator('.monaco-hover:not(.hidden) .hover-row')
          .evaluateAll((els) => els.map((e) => ({ cls: e.className, text: e.textContent || '' })));
        const serverRows = rows.filter((r) => !/status-bar/.test(r.cls) && !/rca-lsp\([a-z-]+\)/.test(r.text));
        return serverRows.some((r) => /act_fn/.test(r.text)) ? t : undefined;
      }, 15000);
      await shot(page, p('2-hover'));
      log(`hover rows: ${JSON.stringify(await page.locator('.monaco-hover:not(.hidden) .hover-row').evaluateAll((els) => els.map((e) => [e.className, e.textContent.slice(0, 80)])))}`);
      log(`hover: ${text.slice(0, 400)}`);
      await page.keyboard.press('Escape');
    });

    await sc.step('quick fix for a misspelt key', async () => {
      await openFromExplorer(page, 'typo_mapping_key.json');
      const rows = await waitProblem(page, /unknown-train-key/, 60000, 'unknown-train-key');
      log(`unknown-train-key rows: ${rows.map((r) => r.text).join(' || ')}`);
      await gotoProblem(page, rows[0]);
      await page.keyboard.press('Control+.');
      const item = page.locator('.action-widget .monaco-list-row', { hasText: /Replace with/ }).first();
      await item.waitFor({ state: 'attached', timeout: 15000 });
      await page.waitForTimeout(300);
      await shot(page, p('3-quick-fix-menu'));
      // The code-action list is keyboard driven: move the focus to the "Replace with" entry and apply it.
      for (let i = 0; i < 10; i++) {
        const focused = (await page.locator('.action-widget .monaco-list-row.focused').first().getAttribute('aria-label').catch(() => '')) || '';
        if (/Replace with/.test(focused)) {
          break;
        }
        await page.keyboard.press('ArrowDown');
      }
      await page.keyboard.press('Enter');
      await page.waitForTimeout(300);
      await page.keyboard.press('Control+S');
      log('quick fix applied and saved');
      const fixed = await poll('the fixed key on disk', () => {
        const t = fs.readFileSync(typoPath, 'utf8');
        return t.includes(JSON.stringify(typo.key)) && !t.includes(typo.typo) ? t : undefined;
      }, 15000);
      assert(JSON.parse(fixed)[typo.key] !== undefined, 'the fixed file lacks the original key');
      await poll('the unknown-train-key problem to go away', async () => (await problemRows(page, /unknown-train-key/, 'unknown-train-key')).length === 0, 30000);
      await shot(page, p('4-quick-fix-applied'));
    });

    await sc.step('the output names the server and version it talks to', async () => {
      const name = mock ? 'rca-lsp-mock' : 'rca-lsp';
      const want = new RegExp(`Server: ${name} (\\d+\\.\\d+\\.\\d+\\S*) \\(${escapeRe(serverPython)}\\)`);
      const found = await poll('the server line', () => cs.outputChannelText().match(want), 10000);
      const claimed = execFileSync(serverPython, ['-c', 'import rca_lsp; print(rca_lsp.__version__)'], {
        env: mock ? { ...process.env, PYTHONPATH: mockDir } : process.env,
        cwd: os.tmpdir(),
        encoding: 'utf8',
      }).trim();
      assert(found[1] === claimed, `the output says ${found[1]}, the server is ${claimed}`);
    });

    await sc.step('status bar shows the analysis', async () => {
      await openFromExplorer(page, 'mapping_key.json');
      const text = await poll('an analysed status', async () => {
        const t = await statusBarText(page);
        return t && !/starting|loading|error|not installed|stopped|no Python/.test(t) ? t : undefined;
      }, 60000);
      log(`status bar: ${text}`);
      if (mock) {
        assert(/missing act_fn before layer 0 linear_fc2/.test(text), `status bar lacks the top hypothesis: ${text}`);
      }
      await shot(page, p('5-status-bar'));
    });

    await sc.step('write the report and open the preview', async () => {
      if (mock) {
        // The status bar item's click runs rcaLsp.writeReport for the mapping file.
        await page.locator('.statusbar-item', { hasText: 'rca-lsp' }).first().click();
      } else {
        await runCommand(page, 'Write Analysis Outputs and Open Report');
      }
      const report = await poll('output_5_root_cause_report.md on disk', () => {
        const failed = cs.outputChannelText().match(/\[error\] rca-lsp: (writing the outputs failed.*|the server wrote no report.*)/);
        if (failed) {
          throw new FailFast(`the extension reports: ${failed[1]}`);
        }
        const hits = [];
        const walk = (d) => {
          for (const e of fs.readdirSync(d, { withFileTypes: true })) {
            const q = path.join(d, e.name);
            if (e.isDirectory() && !['train', 'rollout'].includes(e.name)) {
              walk(q);
            } else if (e.name === 'output_5_root_cause_report.md') {
              hits.push(q);
            }
          }
        };
        walk(ws);
        return hits[0];
      }, 60000);
      log(`report: ${report}`);
      await page.locator('.tabs-container .tab', { hasText: /Preview output_5_root_cause_report/ }).first().waitFor({ state: 'visible', timeout: 20000 });
      await page.waitForTimeout(1500);
      await shot(page, p('6-report-preview'));
    });

    if (mock) {
      await sc.step('settings reach the server (initializationOptions, workspace/configuration)', async () => {
        const events = readMockLog(mockLog);
        const init = events.find((e) => e.event === 'initialize');
        assert(init, 'no initialize logged');
        const opts = init.payload.initializationOptions;
        assert(opts.tolerances.bfloat16 === 0.02, `tolerances: ${JSON.stringify(opts.tolerances)}`);
        assert(opts.severity['nan-inf'] === 'off', `severity: ${JSON.stringify(opts.severity)}`);
        assert(opts.outDir === 'rca_out', `outDir: ${opts.outDir}`);
        assert(opts.pairs[0].mappingKey === path.join(ws, 'mapping_key.json'), `pairs not expanded: ${JSON.stringify(opts.pairs)}`);
        assert(!('interpreter' in opts), 'interpreter leaked into initializationOptions');
        assert(!('float16' in opts.tolerances), `the invalid float16 tolerance was sent: ${JSON.stringify(opts.tolerances)}`);
      });

      await sc.step('an invalid setting is said in a warning, once', async () => {
        // shown when the server started (toasts fade): the toasts sampled since the workbench opened
        clearInterval(toastSampler);
        const seen = toastSnapshots.filter((texts) => texts.some(invalidSaid));
        assert(seen.length > 0, `no warning about rcaLsp.tolerances.float16 in ${toastSnapshots.length} samples of the toasts`);
        const most = Math.max(...seen.map((texts) => texts.filter(invalidSaid).length));
        assert(most === 1, `the warning was shown ${most} times at once`);
        assert(/Settings: rcaLsp\.tolerances\.float16/.test(cs.outputChannelText()), 'the output channel lacks the problem');
      });

      await sc.step('a settings change is sent without reload (didChangeConfiguration)', async () => {
        const before = readMockLog(mockLog).filter((e) => e.event === 'initialize').length;
        // Change a setting the way a user does: in the Settings editor.
        await runCommand(page, 'Preferences: Open Settings (UI)');
        const editor = page.locator('.settings-editor');
        await editor.waitFor({ state: 'visible', timeout: 15000 });
        await page.keyboard.press('Control+A');
        await page.keyboard.type('rcaLsp.tolerances.float32');
        const input = editor.locator('.setting-item', { hasText: 'Tolerances: Float32' }).locator('input').first();
        await input.waitFor({ state: 'visible', timeout: 15000 });
        await page.waitForTimeout(500);
        await input.click();
        await page.keyboard.type('0.001');
        await page.keyboard.press('Enter');
        const ev = await poll('didChangeConfiguration with the new tolerance', () =>
          readMockLog(mockLog).find((e) => e.event === 'didChangeConfiguration' && e.payload.settings?.rcaLsp?.tolerances?.float32 === 0.001), 20000);
        await shot(page, p('7-settings-change'));
        assert(ev.payload.settings.rcaLsp.tolerances.bfloat16 === 0.02, 'the whole object is sent');
        assert(ev.payload.settings.rcaLsp.severity['nan-inf'] === 'off', 'the whole object is sent');
        const pulled = await poll('workspace/configuration answer', () =>
          readMockLog(mockLog).find((e) => e.event === 'configuration' && e.payload.result?.[0]?.tolerances?.float32 === 0.001), 20000);
        assert(pulled.payload.result[0].pairs[0].train === path.join(ws, 'train'), 'workspace/configuration answer not translated');
        const after = readMockLog(mockLog).filter((e) => e.event === 'initialize').length;
        assert(after === before, 'the server was restarted for a non-interpreter setting');
      });

      await sc.step('restart command restarts the server', async () => {
        const before = readMockLog(mockLog).filter((e) => e.event === 'initialize').length;
        await runCommand(page, 'rca-lsp: Restart Server');
        await poll('a second initialize', () => readMockLog(mockLog).filter((e) => e.event === 'initialize').length > before, 30000);
        await waitProblem(page, /missing-op/, 30000, 'missing-op');
      });

    }

    await sc.step('suggest mapping opens an untitled JSON editor', async () => {
      await openFromExplorer(page, 'mapping_key.json');
      await runCommand(page, 'Suggest a Mapping for the Current Pair');
      await poll('an untitled editor with the suggestion', async () => {
        const failed = cs.outputChannelText().match(/\[error\] rca-lsp: (suggesting a mapping failed.*)/);
        if (failed) {
          throw new FailFast(`the extension reports: ${failed[1]}`);
        }
        return (await page.locator('.tabs-container .tab.active', { hasText: /Untitled/ }).count()) > 0;
      }, 60000, 500);
      const expected = mock ? /Module\.mock\.train\.forward\.0/ : /"Module\.module\.module\.decoder\.layers\.0\./;
      await poll('the suggested mapping in the editor', async () => expected.test(await page.locator('.monaco-editor .view-lines').first().innerText()), 10000);
      await shot(page, p('8-suggest-mapping'));
      await poll('the coverage in the output channel', () => /Suggested mapping for mapping_key\.json: coverage \S/.test(cs.outputChannelText()), 10000);
      const toasts = (await notificationTexts(page)).filter((x) => /coverage/i.test(x));
      assert(toasts.length === 0, `the coverage is a toast: ${toasts.join(' | ')}`);
    });
    if (!mock) {
      await chartSteps(sc, page, base, fixture, ws, mappingPath);
    }
  } finally {
    clearInterval(toastSampler);
    await sc.page?.context().close().catch(() => {});
    await cs.stop();
    cs.collectLogs(name);
    if (mock && fs.existsSync(mockLog)) {
      fs.copyFileSync(mockLog, path.join(artifacts, `${name}-logs`, 'server-events.jsonl'));
    }
  }
}

/** The divergence chart webview on the real server: opened by the editor-title button, marker, reveal, refresh. */
async function chartSteps(sc, page, base, fixture, ws, mappingPath) {
  const expected = reportedFirstDivergence(fixture, base);
  const frame = chartFrame(page);
  await sc.step(CHART_STEPS[0], async () => {
    assert(expected, 'the report of the fixture names no first divergence');
    await runCommand(page, 'View: Close All Editors');
    const discard = page.locator('.monaco-dialog-box .monaco-button', { hasText: "Don't Save" });
    if (await discard.first().waitFor({ state: 'visible', timeout: 3000 }).then(() => true, () => false)) {
      await discard.first().click(); // the untitled suggested mapping
    }
    await openFromExplorer(page, 'mapping_key.json');
    const button = page.locator('.editor-actions a.action-label[aria-label^="Show Divergence Chart"]').first();
    await button.waitFor({ state: 'visible', timeout: 15000 });
    await button.click();
    await page.locator('.tabs-container .tab', { hasText: /Divergence: mapping_key\.json/ }).first().waitFor({ state: 'visible', timeout: 15000 });
    // beside: the mapping file stays open in the first group, the chart is in a second one
    assert((await page.locator('.editor-group-container').count()) >= 2, 'the chart did not open beside the mapping file');
    await frame.locator('#rca-chart[data-rendered]').waitFor({ state: 'attached', timeout: 60000 });
    await page.waitForTimeout(500);
    await shot(page, 'server-9-chart');
  }, { critical: true });

  let marker;
  await sc.step(CHART_STEPS[1], async () => {
    marker = frame.locator('.rca-marker-divergence');
    assert((await marker.count()) === 1, `${await marker.count()} first-divergence markers`);
    const key = await marker.getAttribute('data-train-key');
    assert(key === expected, `the marker is at ${key}; the report names ${expected}`);
    const summary = await frame.locator('.rca-summary-divergence').innerText();
    assert(/first divergence/.test(summary), `summary: ${summary}`);
  }, { critical: true });

  const mappingText = fs.readFileSync(mappingPath, 'utf8');
  const keyLine = lineOf(mappingText, JSON.stringify(expected));
  await sc.step(CHART_STEPS[2], async () => {
    // move the cursor away first, so only the click can bring it to the entry
    await page.locator('.editor-group-container').first().locator('.monaco-editor .view-lines').first().click();
    await gotoLine(page, 1, 1);
    assert(/^Ln 1, Col 1/.test(await editorSelection(page)), `cursor not on line 1: ${await editorSelection(page)}`);
    const over = await frame.locator('.u-over').boundingBox();
    const x = over.x + Number(await marker.getAttribute('data-x')); // the marker's module
    await page.mouse.move(x, over.y + over.height / 2);
    await frame.locator('.rca-card:not([hidden])').waitFor({ state: 'visible', timeout: 5000 });
    await shot(page, 'server-10-chart-hover');
    await page.mouse.click(x, over.y + over.height / 2);
    const selection = await poll('the entry selected in the mapping editor', async () => {
      const text = await editorSelection(page);
      return text.startsWith(`Ln ${keyLine},`) ? text : undefined;
    }, 15000);
    assert(selection.includes(`(${JSON.stringify(expected).length} selected)`), `selection: ${selection}`);
    await shot(page, 'server-11-chart-reveal');
  });

  await sc.step(CHART_STEPS[3], async () => {
    const before = Number(await frame.locator('#rca-chart').getAttribute('data-updates'));
    await gotoLine(page, 1, 2);
    await page.keyboard.type(' ');
    await page.keyboard.press('Control+S');
    await poll('a new chart after the save', async () => Number(await frame.locator('#rca-chart').getAttribute('data-updates')) > before, 60000);
    assert((await frame.locator('.rca-marker-divergence').getAttribute('data-train-key')) === expected, 'the marker moved after a save that changed nothing');
    fs.writeFileSync(mappingPath, mappingText); // leave the workspace as it was
  });

  const ranksMapping = path.join(ws, 'ranks', RANK_MAPPING);
  const ranksText = fs.existsSync(ranksMapping) ? fs.readFileSync(ranksMapping, 'utf8') : '';
  let wanted;
  await sc.step(CHART_STEPS[4], async () => {
    assert(ranksText, `no copy of fixtures/${RANK_FIXTURE} in the workspace`);
    wanted = reportedRankView(base);
    await page.context().addInitScript(recordCanvasTexts); // for the next step's pages: the chart's canvas texts
    await page.locator('.explorer-folders-view .monaco-list-row', { has: page.locator('.label-name', { hasText: /^ranks$/ }) }).first().click();
    await openFromExplorer(page, RANK_MAPPING);
    await page.locator('.editor-actions a.action-label[aria-label^="Show Divergence Chart"]').first().click();
    const tab = page.locator('.tabs-container .tab', { hasText: /Divergence: mapping_key_ranks\.json/ }).first();
    await tab.waitFor({ state: 'visible', timeout: 15000 });
    const frame = visibleChartFrame(page);
    await frame.locator('#rca-chart[data-rendered]').waitFor({ state: 'attached', timeout: 90000 });
    const options = await frame.locator('select.rca-rank option').evaluateAll((os) => os.map((o) => o.value));
    assert(options.includes(wanted.view) && options.includes('worst'), `rank views: ${options.join(', ')}`);
    await frame.locator('select.rca-rank').selectOption(wanted.view);
    await frame.locator(`#rca-chart[data-rank="${wanted.view}"]`).waitFor({ state: 'attached', timeout: 5000 });
    const marker = frame.locator('.rca-marker-rank');
    await marker.waitFor({ state: 'attached', timeout: 5000 });
    assert((await marker.getAttribute('data-train-key')) === wanted.key, `the ${wanted.view} marker is at ${await marker.getAttribute('data-train-key')}; the report names ${wanted.key}`);
    await page.waitForTimeout(300);
    await shot(page, 'server-12-chart-rank');
  }, { critical: true });

  await sc.step(CHART_STEPS[5], async () => {
    const frame = visibleChartFrame(page);
    const before = Number(await frame.locator('#rca-chart').getAttribute('data-updates'));
    await page.locator('.editor-group-container').first().locator('.monaco-editor .view-lines').first().click();
    await gotoLine(page, 1, 2);
    await page.keyboard.type(' ');
    await page.keyboard.press('Control+S');
    await poll('a new chart after the save', async () => Number(await frame.locator('#rca-chart').getAttribute('data-updates')) > before, 90000);
    assert((await frame.locator('select.rca-rank').inputValue()) === wanted.view, `after the save the view is ${await frame.locator('select.rca-rank').inputValue()}`);
    assert((await frame.locator('.rca-marker-rank').getAttribute('data-train-key')) === wanted.key, 'the rank marker moved after a save that changed nothing');
    // hidden (the other chart's tab) and shown again: the page is rebuilt and opens on the view chosen
    await page.locator('.tabs-container .tab', { hasText: /Divergence: mapping_key\.json/ }).first().click();
    await page.waitForTimeout(1000);
    await page.locator('.tabs-container .tab', { hasText: /Divergence: mapping_key_ranks\.json/ }).first().click();
    const shown = visibleChartFrame(page);
    await shown.locator(`#rca-chart[data-rank="${wanted.view}"][data-rendered]`).waitFor({ state: 'attached', timeout: 60000 });
    assert((await shown.locator('select.rca-rank').inputValue()) === wanted.view, `shown again, the view is ${await shown.locator('select.rca-rank').inputValue()}`);
    await shot(page, 'server-13-chart-rank-kept');
    fs.writeFileSync(ranksMapping, ranksText); // leave the workspace as it was
  });

  await sc.step(CHART_STEPS[6], async () => {
    const frame = visibleChartFrame(page);
    const texts = await frame.locator('#rca-chart').evaluate(() => globalThis.rcaTexts ?? []);
    assert(texts.length > 0, 'no canvas text recorded in the chart webview');
    const cut = clippedTexts(texts);
    assert(cut.length === 0, `texts cut at the canvas edge: ${cut.slice(0, 5).join('; ')}`);
    const root = await frame.locator('#rca-chart').boundingBox();
    for (const marker of await frame.locator('.rca-marker').all()) {
      const box = await marker.boundingBox();
      assert(box.x >= root.x - 1 && box.x + box.width <= root.x + root.width + 1, `marker "${await marker.innerText()}" outside the chart`);
    }
  });
}

// ---------------------------------------------------------------- scenario: a server that cannot start, then crashes
/** The text of each notification shown since they were last cleared (the toasts fade): read from the notification
 * center, which is then closed. */
async function allNotifications(page) {
  await runCommand(page, 'Notifications: Show Notifications');
  const center = page.locator('.notifications-center');
  await center.waitFor({ state: 'visible', timeout: 10000 });
  await page.waitForTimeout(500);
  const texts = (await center.locator('.notification-list-item').allInnerTexts()).map((t) => t.replace(/\s+/g, ' ').trim());
  await runCommand(page, 'Notifications: Hide Notifications');
  return texts;
}

/** A failure is said in one notification, the extension's (matching `ours`), and not also by vscode-languageclient:
 * asserted of the notifications shown since they were last cleared, which are then cleared. */
async function assertOneNotification(page, ours) {
  const texts = await allNotifications(page);
  log(`notifications: ${JSON.stringify(texts)}`);
  assert(texts.length === 1, `${texts.length} notifications, not one: ${JSON.stringify(texts)}`);
  assert(ours.test(texts[0]), `the notification is not ours (${ours}): ${texts[0]}`);
  await runCommand(page, 'Notifications: Clear All Notifications');
}

/**
 * A scenario driving the mock server on a workspace `ws-<name>` holding a one-entry mapping_key.json: its Scenario,
 * CodeServer and workspace; undefined (recorded as skipped, or failed when a server is required) without pygls.
 */
function mockScenario(name, bin, base) {
  const sc = new Scenario(name);
  if (pythonCan(serverPython, 'import pygls.lsp.server, lsprotocol')) {
    record(name, requireServer ? 'fail' : 'skip', `pygls not importable with ${serverPython}`);
    return undefined;
  }
  const cs = new CodeServer(bin, base, name);
  const ws = path.join(base, `ws-${name}`);
  fs.mkdirSync(ws, { recursive: true });
  const mapping = { 'Module.module.module.decoder.layers.0.mlp.linear_fc2.RowParallelLinear.forward.0': 'Module.model.layers.0.mlp.down_proj.RowParallelLinear.forward.0' };
  fs.writeFileSync(path.join(ws, 'mapping_key.json'), `${JSON.stringify(mapping, null, 2)}\n`);
  return { sc, cs, ws };
}

/** The mock server's canned failures: it exits at start while a file exists, and when a document holds CRASH_NOW; its
 * interpreter (a script running RCA_LSP_PYTHON) can be taken away. */
async function scenarioCrash(browser, bin, base, vsix) {
  const started = mockScenario('crash', bin, base);
  if (!started) {
    return;
  }
  const { sc, cs, ws } = started;
  fs.writeFileSync(path.join(ws, 'crash_mapping_key.json'), '{\n  "Module.CRASH_NOW.forward.0": "Module.b.forward.0"\n}\n');
  const broken = path.join(base, 'crash-server-broken');
  fs.writeFileSync(broken, '');
  const slow = path.join(base, 'crash-server-slow');
  const crashOnce = path.join(base, 'crash-server-crash-once');
  const stopReading = path.join(base, 'crash-server-stop-reading');
  const mockLog = path.join(base, 'crash-server-events.jsonl');
  const initialized = () => readMockLog(mockLog).filter((e) => e.event === 'initialized').length;
  const python = path.join(base, 'crash-python');
  fs.writeFileSync(python, `#!/bin/sh\nexec '${serverPython}' "$@"\n`, { mode: 0o755 });
  Object.assign(cs.env, {
    PYTHONPATH: mockDir,
    RCA_LSP_MOCK_LOG: mockLog,
    RCA_LSP_MOCK_BROKEN: broken,
    RCA_LSP_MOCK_SLOW: slow,
    RCA_LSP_MOCK_CRASH_ONCE: crashOnce,
    RCA_LSP_MOCK_STOP_READING: stopReading,
  });
  cs.writeUserSettings({ 'rcaLsp.interpreter': python });
  const count = (re) => (cs.outputChannelText().match(re) ?? []).length;
  try {
    await sc.step('install the .vsix into code-server', () => cs.installExtension(vsix), { critical: true });
    const url = await sc.step('start code-server', () => cs.start(ws), { critical: true });
    sc.page = await sc.step('open the workbench', () => openWorkbench(browser, url), { critical: true });
    const page = sc.page;
    /** An edit of mapping_key.json: the server analyses it (and crashes, while crashOnce exists). */
    const edit = async () => {
      await openFromExplorer(page, 'mapping_key.json');
      await gotoLine(page, 1, 2);
      await page.keyboard.type(' ');
    };
    const restartWorks = async () => {
      await runCommand(page, 'rca-lsp: Restart Server');
      await waitProblem(page, /missing-op/, 30000, 'missing-op');
      const status = await poll('a running status bar', async () => {
        const t = await statusBarText(page);
        return t && !/stopped|starting/.test(t) ? t : undefined;
      }, 15000);
      log(`status bar after the restart: ${status}`);
    };

    await sc.step('a server that stops before it is ready: what it printed, said once, not restarted', async () => {
      await openFromExplorer(page, 'mapping_key.json');
      await poll('the stopped status bar', async () => /stopped/.test(await statusBarText(page)), 30000);
      await page.waitForTimeout(3000); // time for restarts, were there any
      await shot(page, 'crash-1-cannot-start');
      await assertOneNotification(page, /stopped before it was ready: mock: cannot start \(ModuleNotFoundError: No module named 'pygls_broken'\)/);
      const starts = count(/\[info\] mock: cannot start/g); // its stderr lines, not the message quoting it
      assert(starts === 1, `the server was started ${starts} times`);
    });

    await sc.step('once it can start, Restart Server starts it', async () => {
      fs.rmSync(broken);
      await runCommand(page, 'rca-lsp: Restart Server');
      await waitProblem(page, /missing-op/, 30000, 'missing-op');
    });

    // A server that dies while the client writes to it: the write fails (EPIPE) before the client sees the close.
    // The mock holds that moment open (it stops reading its input and lives on), so the write surely fails first.
    await sc.step('a server gone while the client writes to it is restarted, not shut down', async () => {
      const servers = initialized();
      const logged = cs.outputChannelText().length;
      const since = () => cs.outputChannelText().slice(logged);
      fs.writeFileSync(stopReading, '');
      await openFromExplorer(page, 'mapping_key.json');
      await gotoLine(page, 1, 2);
      await page.keyboard.type(' '); // an edit: the server analyses it, and stops reading
      await poll('the server no longer reading', () => since().includes('mock: no longer reading its input'), 15000);
      await page.keyboard.type(' '); // an edit sent to it: the write fails
      const outcome = await poll('the client seeing the server gone', () => since().match(/Server will restart\.|Server will not be restarted\.|Shutting down server\./)?.[0], 15000);
      assert(/EPIPE/.test(since()), `no failed write: ${since().slice(-2000)}`);
      assert(outcome === 'Server will restart.', `the client did not restart the server ("${outcome}"): ${since().slice(-2000)}`);
      await poll('a new server', () => initialized() > servers, 30000);
      await waitProblem(page, /missing-op/, 30000, 'missing-op');
      await poll('a running status bar', async () => {
        const t = await statusBarText(page);
        return t && !/stopped|starting/.test(t) ? t : undefined;
      }, 15000);
      assert(!/Shutting down server/.test(since()), `the client shut down: ${since().slice(-2000)}`);
      const texts = (await allNotifications(page)).join(' | ');
      assert(!/connection to server is erroring|will not be restarted/.test(texts), `a message about the failed write: ${texts}`);
      await runCommand(page, 'File: Revert File');
    });

    await sc.step('Restart Server while the client restarts a crashed server: one server, running', async () => {
      const servers = count(/Server: rca-lsp-mock/g);
      const logged = cs.outputChannelText().length;
      fs.writeFileSync(slow, '');
      fs.writeFileSync(crashOnce, '');
      await openFromExplorer(page, 'mapping_key.json');
      await gotoLine(page, 1, 2);
      await page.keyboard.type(' '); // an edit: the server analyses it, and crashes
      await poll('the client restarting the server', () => cs.outputChannelText().slice(logged).includes('Server will restart.'), 15000);
      const during = await poll('the starting status bar', async () => {
        const t = await statusBarText(page);
        return /starting/.test(t) ? t : undefined;
      }, 5000).catch(async () => statusBarText(page));
      await runCommand(page, 'rca-lsp: Restart Server'); // while the restarted server is slow to start
      await page.waitForTimeout(1000);
      fs.rmSync(slow);
      await poll('a new server', () => count(/Server: rca-lsp-mock/g) > servers, 30000);
      await waitProblem(page, /missing-op/, 30000, 'missing-op');
      await poll('a running status bar', async () => {
        const t = await statusBarText(page);
        return t && !/stopped|starting/.test(t) ? t : undefined;
      }, 15000);
      const out = cs.outputChannelText().slice(logged);
      assert(!/already exists|stopped before it was ready/.test(out), `a second client: ${out.slice(-2000)}`);
      assert((await page.locator('.tabs-container .tab.active.dirty').count()) === 1, 'the unsaved edit is gone');
      assert(/starting/.test(during), `while the client restarted the server the status bar said "${during}"`);
      await runCommand(page, 'File: Revert File');
    });

    const crashes = () => count(/\[info\] mock: crashing on purpose/g); // its stderr lines, not a message quoting them
    await sc.step('a server crashing mid-session is restarted, then given up on with one message, quoting it', async () => {
      await runCommand(page, 'Notifications: Clear All Notifications');
      const before = crashes();
      const logged = cs.outputChannelText().length;
      await openFromExplorer(page, 'crash_mapping_key.json');
      await poll('the message of the client giving up', () => /crashed 5 times/.test(cs.outputChannelText().slice(logged)), 60000);
      await poll('the stopped status bar', async () => /stopped/.test(await statusBarText(page)), 10000);
      await page.waitForTimeout(1000);
      await shot(page, 'crash-2-crashed');
      await assertOneNotification(page, /crashed 5 times in the last 3 minutes.*The last line it printed: mock: crashing on purpose/);
      assert(crashes() - before === 5, `crashed ${crashes() - before} times`);
    });

    await sc.step('Restart Server after the crashes', async () => {
      await runCommand(page, 'View: Close Editor');
      await openFromExplorer(page, 'mapping_key.json');
      await restartWorks();
    });

    await sc.step('a server restarted after a crash that stops before it is ready: counted as a crash, one message', async () => {
      await runCommand(page, 'Notifications: Clear All Notifications');
      const before = count(/\[info\] mock: cannot start/g);
      const logged = cs.outputChannelText().length;
      fs.writeFileSync(broken, '');
      fs.writeFileSync(crashOnce, '');
      await edit(); // the server crashes; each server the client starts again exits at once
      await poll('the message of the client giving up', () => /crashed 5 times/.test(cs.outputChannelText().slice(logged)), 60000);
      await poll('the stopped status bar', async () => /stopped/.test(await statusBarText(page)), 10000);
      await page.waitForTimeout(3000); // time for restarts, were there any
      await shot(page, 'crash-3-restarts-cannot-start');
      await assertOneNotification(page, /crashed 5 times in the last 3 minutes.*The last line it printed: mock: cannot start/);
      const restarts = count(/\[info\] mock: cannot start/g) - before;
      assert(restarts === 4, `started again ${restarts} times`);
    });

    await sc.step('once it can start again, Restart Server starts it', async () => {
      fs.rmSync(broken);
      await restartWorks();
    });

    await sc.step('a server restarted after a crash whose interpreter is gone: one message', async () => {
      await runCommand(page, 'Notifications: Clear All Notifications');
      const logged = cs.outputChannelText().length;
      fs.renameSync(python, `${python}.gone`);
      fs.writeFileSync(crashOnce, '');
      await edit(); // the server crashes; the client cannot start it again
      await poll('the client failing to start it again', () => /ENOENT/.test(cs.outputChannelText().slice(logged)), 30000);
      await poll('the stopped status bar', async () => /stopped/.test(await statusBarText(page)), 10000);
      await page.waitForTimeout(3000); // time for restarts, were there any
      await shot(page, 'crash-4-interpreter-gone');
      await assertOneNotification(page, new RegExp(`crashed and could not be started again: spawn ${escapeRe(python)} ENOENT`));
      const tooltip = await statusBarTooltip(page);
      assert(/could not be started again/.test(tooltip), `the status bar's tooltip: ${tooltip}`);
    });

    await sc.step('with its interpreter back, Restart Server starts it', async () => {
      fs.renameSync(`${python}.gone`, python);
      await restartWorks();
      await runCommand(page, 'File: Revert File');
    });
  } finally {
    await sc.page?.context().close().catch(() => {});
    await cs.stop();
    cs.collectLogs('crash');
  }
}

// ---------------------------------------------------------------- scenario: a server that never answers initialize
const HANG_TIMEOUT = 8; // s, rcaLsp.initializeTimeout here: long enough for the mock's own start on a busy machine

/** Whether a process is alive (a zombie is not: its parent reaps it). */
function alive(pid) {
  try {
    process.kill(pid, 0);
  } catch (e) {
    return e.code === 'EPERM';
  }
  const stat = fs.existsSync(`/proc/${pid}/stat`) ? fs.readFileSync(`/proc/${pid}/stat`, 'utf8') : '';
  return !/^\d+ \(.*\) Z/.test(stat);
}

/** The tooltip of the rca-lsp status bar item, read from the hover it shows. */
async function statusBarTooltip(page) {
  await page.locator('.statusbar-item', { hasText: 'rca-lsp' }).first().hover();
  const hover = page.locator('.workbench-hover, .monaco-hover:not(.hidden)').last();
  await hover.waitFor({ state: 'visible', timeout: 10000 });
  const text = (await hover.innerText()).replace(/\s+/g, ' ');
  await page.mouse.move(800, 400);
  return text;
}

/** The mock server, while a file exists, reads the client's initialize and never answers, ignoring SIGTERM. */
async function scenarioHang(browser, bin, base, vsix) {
  const started = mockScenario('hang', bin, base);
  if (!started) {
    return;
  }
  const { sc, cs, ws } = started;
  const hang = path.join(base, 'hang-server-hang');
  fs.writeFileSync(hang, '');
  const crashOnce = path.join(base, 'hang-server-crash-once');
  const mockLog = path.join(base, 'hang-server-events.jsonl');
  const events = (kind) => readMockLog(mockLog).filter((e) => e.event === kind);
  Object.assign(cs.env, { PYTHONPATH: mockDir, RCA_LSP_MOCK_LOG: mockLog, RCA_LSP_MOCK_HANG: hang, RCA_LSP_MOCK_CRASH_ONCE: crashOnce });
  cs.writeUserSettings({ 'rcaLsp.interpreter': serverPython, 'rcaLsp.initializeTimeout': HANG_TIMEOUT });
  const said = new RegExp(`did not answer initialize within ${HANG_TIMEOUT} s.*mock: importing a huge module`);
  const running = async () => {
    const t = await statusBarText(page());
    return t && !/stopped|starting/.test(t) ? t : undefined;
  };
  const page = () => sc.page;

  /** A hung server given up on: its initialize unanswered, the stopped status bar with why, one message (ours), its
   * process gone, no other start. `hangs`: how many hung servers there were before. */
  const givenUp = async (hangs, shotName) => {
    const hung = await poll('a server that hangs', () => events('hang')[hangs], 30000);
    await poll('the initialize it never answers', () => events('initializeIgnored').some((e) => e.payload.pid === hung.payload.pid), 15000);
    assert(/starting/.test(await statusBarText(page())), `the status bar says "${await statusBarText(page())}" while the server hangs`);
    await poll('the stopped status bar', async () => /stopped/.test(await statusBarText(page())), (HANG_TIMEOUT + 30) * 1000);
    await poll(`the hung server's process (${hung.payload.pid}) gone`, () => !alive(hung.payload.pid), 10000);
    const tooltip = await statusBarTooltip(page());
    assert(said.test(tooltip), `the status bar's tooltip: ${tooltip}`);
    await page().waitForTimeout(3000); // time for a restart, were there one
    await shot(page(), shotName);
    assert(said.test(cs.outputChannelText()), 'the output channel does not say why');
    assert(events('hang').length === hangs + 1, `${events('hang').length - hangs} hung servers started`);
    assert(/stopped/.test(await statusBarText(page())), `the status bar says "${await statusBarText(page())}"`);
    await assertOneNotification(page(), said);
  };

  const restartWorks = async () => {
    fs.rmSync(hang, { force: true });
    const servers = events('initialized').length;
    await runCommand(page(), 'rca-lsp: Restart Server');
    await poll('a new server', () => events('initialized').length > servers, 30000);
    await waitProblem(page(), /missing-op/, 30000, 'missing-op');
    log(`status bar after the restart: ${await poll('a running status bar', running, 15000)}`);
  };

  try {
    await sc.step('install the .vsix into code-server', () => cs.installExtension(vsix), { critical: true });
    const url = await sc.step('start code-server', () => cs.start(ws), { critical: true });
    sc.page = await sc.step('open the workbench', () => openWorkbench(browser, url), { critical: true });

    await sc.step(`a server that never answers initialize is stopped after ${HANG_TIMEOUT} s, said with what it printed`, async () => {
      await openFromExplorer(page(), 'mapping_key.json');
      await givenUp(0, 'hang-1-given-up');
    });

    await sc.step('without the hang, Restart Server starts a working server', restartWorks);

    await sc.step('a server restarted after a crash that never answers initialize is given up on, not restarted again', async () => {
      fs.writeFileSync(hang, '');
      fs.writeFileSync(crashOnce, '');
      await openFromExplorer(page(), 'mapping_key.json');
      await gotoLine(page(), 1, 2);
      await page().keyboard.type(' '); // an edit: the server analyses it, and crashes; the client restarts it: it hangs
      await poll('the client restarting the server', () => /Server will restart\./.test(cs.outputChannelText()), 15000);
      await givenUp(1, 'hang-2-given-up-after-crash');
    });

    await sc.step('after that, Restart Server starts a working server again', async () => {
      await restartWorks();
      await runCommand(page(), 'File: Revert File');
    });
  } finally {
    await sc.page?.context().close().catch(() => {});
    await cs.stop();
    cs.collectLogs('hang');
    for (const e of events('hang')) {
      if (alive(e.payload.pid)) {
        process.kill(e.payload.pid, 'SIGKILL'); // never left behind by the test, whatever the extension did
      }
    }
  }
}

// ---------------------------------------------------------------- main
async function main() {
  fs.rmSync(artifacts, { recursive: true, force: true });
  fs.mkdirSync(artifacts, { recursive: true });
  const vsix = findVsix();
  const bin = codeServerBin();
  const base = fs.mkdtempSync(path.join(os.tmpdir(), 'rca-lsp-e2e-'));
  log(`temp dir ${base}`);
  const browser = await launchBrowser();
  const only = process.env.RCA_LSP_E2E_ONLY;
  try {
    if (!only || only === 'noimport') {
      await scenarioNotImportable(browser, bin, base, vsix);
    }
    if (!only || only === 'activation') {
      await scenarioActivation(browser, bin, base, vsix);
    }
    if (!only || only === 'mock') {
      await scenarioServer('mock', browser, bin, base, vsix);
    }
    if (!only || only === 'crash') {
      await scenarioCrash(browser, bin, base, vsix);
    }
    if (!only || only === 'hang') {
      await scenarioHang(browser, bin, base, vsix);
    }
    if (!only || only === 'server') {
      await scenarioServer('real', browser, bin, base, vsix);
    }
  } finally {
    await browser.close().catch(() => {});
    if (!keep) {
      fs.rmSync(base, { recursive: true, force: true });
    }
  }
  const passed = results.filter((r) => r.status === 'pass').length;
  const failed = results.filter((r) => r.status === 'fail').length;
  const skipped = results.filter((r) => r.status === 'skip').length;
  log(`artifacts in ${path.relative(process.cwd(), artifacts) || artifacts}; total ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  process.stdout.write(`e2e: ${passed} passed, ${failed} failed, ${skipped} skipped\n`);
  process.exitCode = failed > 0 ? 1 : 0;
}

main().catch((e) => {
  process.stderr.write(`${e instanceof Error ? e.stack : String(e)}\n`);
  process.stdout.write('e2e: 0 passed, 1 failed\n');
  process.exitCode = 1;
});
