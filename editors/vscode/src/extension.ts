/**
 * VS Code glue: when to start `python -m rca_lsp serve` and with what, the status bar, and the commands. How the
 * interpreter is found (python.ts, interpreter.ts), what may be wrong with its server (install.ts), the client
 * (client.ts), the server's commands (serverCommands.ts) and the settings (settings.ts) live in their own modules.
 */
import * as vscode from 'vscode';
import { DidChangeConfigurationNotification, LanguageClient, State } from 'vscode-languageclient/node';
import { registerChart } from './chart';
import { createClient, RcaClient } from './client';
import { isMappingDocument, suggestMapping, targetMappingUri, writeReport } from './commands';
import { MAPPING_FIND_GLOB } from './files';
import { checkImport } from './importCheck';
import { bundledWheel, commandLine, ServerProblem, serverProblem, startFailureMessage } from './install';
import { installWithConsentGiven } from './installer';
import { OnceGate, ResolvedInterpreter } from './interpreter';
import { resolvePython, serverCwd, variablesFor, watchPythonEnvironment } from './python';
import { SERVER_COMMAND_SUGGEST_MAPPING, SERVER_COMMAND_WRITE_OUTPUTS, serverOffers } from './serverCommands';
import { buildWorkspaceSettings, classifyConfigChange, readServerSettings, SECTION, ScopedSettings, ServerSettings } from './settings';
import { initializeTimeout } from './startWatchdog';
import { describeServer, ServerDescription, StatusBook, StatusView, viewForClientState, viewForServerStatus, withServer } from './status';
import { StatusBar } from './statusBar';

export { SERVER_COMMAND_SUGGEST_MAPPING, SERVER_COMMAND_WRITE_OUTPUTS };
const INSTALL = 'Install';
const OPEN_SETTINGS = 'Open Settings';
const SHOW_OUTPUT = 'Show Output';
const STARTING_WAIT = 30000; // ms a restart waits for a start under way before it kills the server being started

/** What `activate` returns; used by tests and by other extensions. */
export interface RcaLspApi {
  readonly client: LanguageClient | undefined;
  readonly interpreter: ResolvedInterpreter | undefined;
  restart(): Promise<void>;
}

class Controller implements vscode.Disposable, RcaLspApi {
  private readonly output: vscode.LogOutputChannel;
  private readonly statusBar = new StatusBar();
  private readonly disposables: vscode.Disposable[] = [];
  private readonly gate = new OnceGate();
  private readonly book = new StatusBook();
  private clientState: StatusView | undefined;
  private queue: Promise<void> = Promise.resolve();
  private pythonWatch: vscode.Disposable | undefined;
  private server: ServerDescription | undefined;
  private rc: RcaClient | undefined; // the client and its server's process
  interpreter: ResolvedInterpreter | undefined;
  /** True once a mapping file was seen (or the user asked for the server): from then on the server is wanted. */
  private wanted = false;

  get client(): LanguageClient | undefined {
    return this.rc?.client;
  }

  constructor(private readonly context: vscode.ExtensionContext) {
    this.output = vscode.window.createOutputChannel('rca-lsp', { log: true });
    this.disposables.push(this.output, this.statusBar);
  }

  register(): void {
    const reg = (id: string, fn: (...args: unknown[]) => unknown): void => {
      this.disposables.push(vscode.commands.registerCommand(id, fn));
    };
    reg('rcaLsp.restartServer', () => this.restart());
    reg('rcaLsp.writeReport', (arg) => this.writeReport(arg));
    reg('rcaLsp.suggestMapping', (arg) => this.suggestMapping(arg));
    reg('rcaLsp.showOutput', () => this.output.show(true));

    this.disposables.push(
      vscode.workspace.onDidOpenTextDocument((doc) => {
        if (!this.wanted && isMappingDocument(doc)) {
          this.want();
        }
      }),
      vscode.workspace.onDidChangeConfiguration((e) => this.onConfigChange(e)),
      vscode.workspace.onDidGrantWorkspaceTrust(() => {
        if (this.wanted) {
          // the interpreter may change (workspace values, one inside the workspace), and the working directory does
          this.output.info('Workspace trusted: restarting with the interpreter and working directory a trusted workspace gets.');
          void this.restart();
        }
      }),
      vscode.window.onDidChangeActiveTextEditor(() => this.render()),
      vscode.workspace.onDidCloseTextDocument((doc) => {
        this.book.forget(doc.uri.toString());
        this.render();
      }),
    );
  }

  /** Starts the server when a mapping file is open or present in the workspace. */
  async maybeStart(): Promise<void> {
    if (vscode.workspace.textDocuments.some(isMappingDocument)) {
      this.want();
      return;
    }
    try {
      const found = await vscode.workspace.findFiles(MAPPING_FIND_GLOB, '**/{node_modules,.git,.venv}/**', 1);
      if (found.length > 0) {
        this.want();
      }
    } catch (e) {
      this.output.warn(`Looking for mapping-key files failed: ${String(e)}`);
    }
  }

  private want(): void {
    if (this.wanted) {
      return;
    }
    this.wanted = true;
    this.enqueue(() => this.doStart());
  }

  private enqueue(job: () => Promise<void>): Promise<void> {
    this.queue = this.queue.then(job).catch((e: unknown) => {
      this.output.error(`Unexpected error: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}`);
    });
    return this.queue;
  }

  async restart(): Promise<void> {
    this.wanted = true;
    this.gate.reset();
    await this.enqueue(async () => {
      await this.doStop();
      await this.doStart();
    });
  }

  async stop(): Promise<void> {
    await this.enqueue(() => this.doStop());
  }

  private scope(): vscode.Uri | undefined {
    const active = vscode.window.activeTextEditor?.document;
    if (active && isMappingDocument(active)) {
      return active.uri;
    }
    return vscode.workspace.workspaceFolders?.[0]?.uri;
  }

  /** The translated settings for the server (section rcaLsp). */
  serverSettings(resource?: vscode.Uri): ServerSettings {
    const read = (uri: vscode.Uri | undefined): ScopedSettings => {
      const raw = vscode.workspace.getConfiguration(SECTION, uri);
      return { raw: readServerSettings((key) => raw.get(key)), vars: variablesFor(uri) };
    };
    const folders = (vscode.workspace.workspaceFolders ?? []).map((f) => read(f.uri));
    const { settings, problems } = buildWorkspaceSettings(read(resource ?? this.scope()), folders);
    for (const p of problems) {
      this.output.warn(`Settings: ${p}`);
      if (this.gate.shouldShow(`settings:${p}`)) {
        void vscode.window.showWarningMessage(`rca-lsp: ${p}`); // dropped before the server sees it: said here
      }
    }
    return settings;
  }

  private setClientState(view: StatusView | undefined): void {
    this.clientState = view;
    this.render();
  }

  private render(): void {
    if (this.clientState || !this.client) {
      this.statusBar.show(this.clientState);
      return;
    }
    const current = this.book.current(vscode.window.activeTextEditor?.document.uri.toString());
    const view = viewForServerStatus(current ?? { state: 'idle', message: '' });
    this.statusBar.show(this.server ? withServer(view, this.server) : view);
  }

  /** Finds the interpreter, checks its server, then starts the client. */
  private async doStart(): Promise<void> {
    if (this.client) {
      return;
    }
    this.setClientState(viewForClientState('starting'));
    const interpreter = await resolvePython(this.scope(), this.output);
    this.interpreter = interpreter;
    if (!interpreter) {
      const msg = 'rca-lsp: no Python interpreter found (no rcaLsp.interpreter setting, no Python extension environment, no python3 on PATH).';
      this.refuse({ kind: 'noInterpreter', message: msg }, '<none>');
      return;
    }
    await this.watchPythonExtension(interpreter);
    const cwd = serverCwd(this.context.extensionUri.fsPath);
    const check = await checkImport(interpreter.python, 'rca_lsp', 30000, cwd);
    const problem = serverProblem(interpreter.python, check, bundledWheel(this.context.extensionUri.fsPath));
    if (problem) {
      if (check.output) {
        this.output.error(check.output);
      }
      this.refuse(problem, interpreter.python);
      return;
    }
    this.output.info(`rca_lsp ${check.version ?? ''} is importable; starting "${interpreter.python} -m rca_lsp serve"`);
    await this.startClient(interpreter.python, cwd);
  }

  private async startClient(python: string, cwd: string): Promise<void> {
    const timeout = initializeTimeout(vscode.workspace.getConfiguration(SECTION).get('initializeTimeout'));
    if (timeout.problem) {
      this.output.warn(`Settings: ${timeout.problem}`);
    }
    const rc = createClient({
      python,
      cwd,
      output: this.output,
      settings: (resource) => this.serverSettings(resource),
      onStatus: (params) => {
        this.book.update(params);
        this.render();
      },
      initializeTimeout: timeout.seconds,
      onFailure: (msg) => {
        if (this.client === client) {
          this.sayStopped(msg, python);
        }
      },
    });
    const { client, stderr } = rc;
    client.onDidChangeState((e) => {
      const running = e.newState === State.Running;
      void vscode.commands.executeCommand('setContext', 'rcaLsp.serverRunning', running);
      if (this.client === client) {
        // Starting again: the client restarting a crashed server
        this.setClientState(running ? undefined : viewForClientState(e.newState === State.Starting ? 'starting' : 'stopped', rc.failure()));
      }
    });
    this.rc = rc;
    let error: string | undefined;
    try {
      await client.start();
    } catch (e) {
      error = e instanceof Error ? e.message : String(e);
    }
    if (error !== undefined || client.state !== State.Running) {
      const said = rc.failure(); // when the client gave its server up
      const msg = said ?? startFailureMessage(python, stderr(), error ?? 'it closed the connection');
      if (!said) {
        this.sayStopped(msg, python);
      }
      this.setClientState(viewForClientState('stopped', msg));
      return;
    }
    const info = client.initializeResult?.serverInfo;
    this.server = { name: info?.name, version: info?.version, python };
    this.output.info(describeServer(this.server));
    void vscode.commands.executeCommand('setContext', 'rcaLsp.canSuggestMapping', serverOffers(client, SERVER_COMMAND_SUGGEST_MAPPING));
    this.setClientState(undefined);
  }

  /**
   * Says why the server stopped for good: in the output always, as a message once per interpreter (until Restart
   * Server). The only message about it: vscode-languageclient's own are kept out (serverFailures.ts).
   */
  private sayStopped(msg: string, python: string): void {
    this.output.error(msg);
    if (this.gate.shouldShow(`stopped:${python}`)) {
      void this.showError(msg);
    }
  }

  /** Says why the server cannot start: in the output and the status bar always, as a message once per interpreter. */
  private refuse(problem: ServerProblem, key: string): void {
    this.output.error(problem.message);
    this.setClientState(viewForClientState(problem.kind, problem.message));
    if (this.gate.shouldShow(`${problem.kind}:${key}`)) {
      void this.showError(problem.message, problem.install && this.interpreter ? { python: this.interpreter.python, args: problem.install } : undefined);
    }
  }

  private async doStop(): Promise<void> {
    const rc = this.rc;
    this.rc = undefined;
    this.server = undefined;
    this.book.clear();
    void vscode.commands.executeCommand('setContext', 'rcaLsp.canSuggestMapping', false);
    if (!rc) {
      return;
    }
    const client = rc.client;
    if (client.state === State.Starting) {
      // A start under way (the client restarting a crashed server) cannot be stopped: let it end first, else it
      // lives on beside the next client and holds the server's commands. A server that keeps it waiting is killed.
      const started = client.start().catch(() => undefined);
      if (!(await within(started, STARTING_WAIT))) {
        this.output.warn(`The server being started has not answered initialize after ${STARTING_WAIT / 1000} s of waiting to stop it: killing it.`);
        rc.retire();
        await within(started, 5000);
      }
    }
    rc.retire();
    try {
      await client.stop(5000);
    } catch (e) {
      this.output.warn(`Stopping the server: ${String(e)}`);
    }
    try {
      await client.dispose(2000);
    } catch {
      // already stopped
    }
    await rc.ensureExit(2000);
  }

  private async watchPythonExtension(interpreter: ResolvedInterpreter): Promise<void> {
    if (interpreter.source !== 'python-extension' || this.pythonWatch) {
      return;
    }
    this.pythonWatch = await watchPythonEnvironment(() => {
      if (this.interpreter?.source === 'python-extension') {
        this.output.info("The Python extension's active environment changed: restarting.");
        void this.restart();
      }
    }, this.output);
    if (this.pythonWatch) {
      this.disposables.push(this.pythonWatch);
    }
  }

  /**
   * An error message; with `install` it offers to run that exact command (shown in the message): only a click on
   * Install runs it, and the server starts once it succeeded.
   */
  private async showError(msg: string, install?: { python: string; args: string[] }): Promise<void> {
    const choice = await vscode.window.showErrorMessage(msg, ...(install ? [INSTALL, OPEN_SETTINGS] : [OPEN_SETTINGS, SHOW_OUTPUT]));
    if (choice === INSTALL && install) {
      this.output.info(`Install accepted: ${commandLine(install.python, install.args)}`);
      if (await installWithConsentGiven(install.python, install.args, this.context.extensionUri.fsPath, this.output)) {
        await this.restart();
      }
    } else if (choice === OPEN_SETTINGS) {
      await vscode.commands.executeCommand('workbench.action.openSettings', 'rcaLsp.interpreter');
    } else if (choice === SHOW_OUTPUT) {
      this.output.show(true);
    }
  }

  private onConfigChange(e: vscode.ConfigurationChangeEvent): void {
    const action = classifyConfigChange((s) => e.affectsConfiguration(s));
    if (action === 'none' || !this.wanted) {
      return;
    }
    if (action === 'restart') {
      this.output.info('rcaLsp.interpreter changed: restarting the server.');
      void this.enqueue(async () => {
        await this.doStop();
        await this.doStart();
      });
      return;
    }
    const client = this.client;
    if (client && client.state === State.Running) {
      const settings = this.serverSettings();
      this.output.info('Settings changed: sending workspace/didChangeConfiguration.');
      void client
        .sendNotification(DidChangeConfigurationNotification.type, { settings: { [SECTION]: settings } })
        .catch((err: unknown) => this.output.warn(`didChangeConfiguration failed: ${String(err)}`));
    }
  }

  private async readyClient(): Promise<LanguageClient | undefined> {
    this.wanted = true;
    if (!this.client) {
      await this.enqueue(() => this.doStart());
    } else {
      await this.queue;
    }
    const client = this.client;
    if (!client || client.state !== State.Running) {
      const choice = await vscode.window.showErrorMessage('rca-lsp: the server is not running.', SHOW_OUTPUT);
      if (choice === SHOW_OUTPUT) {
        this.output.show(true);
      }
      return undefined;
    }
    return client;
  }

  async writeReport(arg: unknown): Promise<void> {
    const uri = await targetMappingUri(arg);
    if (!uri) {
      void vscode.window.showWarningMessage('rca-lsp: open a mapping-key file first.');
      return;
    }
    const client = await this.readyClient();
    if (client) {
      await writeReport(client, this.output, uri);
    }
  }

  async suggestMapping(arg: unknown): Promise<void> {
    const client = await this.readyClient();
    if (!client) {
      return;
    }
    if (!serverOffers(client, SERVER_COMMAND_SUGGEST_MAPPING)) {
      void vscode.window.showInformationMessage('rca-lsp: this server version does not offer mapping suggestions.');
      return;
    }
    const uri = await targetMappingUri(arg);
    if (!uri) {
      void vscode.window.showWarningMessage('rca-lsp: open a mapping-key file first.');
      return;
    }
    await suggestMapping(client, this.output, uri);
  }

  dispose(): void {
    for (const d of this.disposables) {
      d.dispose();
    }
  }
}

/** Whether `promise` (one that does not reject) resolves within `ms`. */
async function within(promise: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), ms);
  });
  try {
    return await Promise.race([promise.then(() => true as const), late]);
  } finally {
    clearTimeout(timer);
  }
}

let controller: Controller | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<RcaLspApi> {
  controller = new Controller(context);
  context.subscriptions.push(controller);
  controller.register();
  context.subscriptions.push(registerChart(context, controller));
  await controller.maybeStart();
  return controller;
}

export async function deactivate(): Promise<void> {
  await controller?.stop();
  controller = undefined;
}
