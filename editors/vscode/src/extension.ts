/**
 * VS Code glue: starts `python -m rca_lsp serve`, forwards settings, drives the status bar and wraps the
 * server's commands. The decisions live in pure modules (interpreter.ts, settings.ts, status.ts, files.ts).
 */
import * as os from 'node:os';
import * as vscode from 'vscode';
import {
  DidChangeConfigurationNotification,
  ExecuteCommandRequest,
  LanguageClient,
  LanguageClientOptions,
  RevealOutputChannelOn,
  ServerOptions,
  State,
  TransportKind,
} from 'vscode-languageclient/node';
import { registerChart } from './chart';
import { documentSelector, isMappingFileName, MAPPING_FIND_GLOB } from './files';
import { checkImport } from './importCheck';
import {
  ignoredUntrustedSetting,
  installCommand,
  installFromSourceCommand,
  notImportableMessage,
  OnceGate,
  ResolvedInterpreter,
  resolveInterpreter,
  whichOnPath,
} from './interpreter';
import { onPythonInterpreterChange, pythonExtensionInterpreter } from './pythonExtension';
import { buildServerSettings, classifyConfigChange, SECTION, ServerSettings, VariableContext } from './settings';
import { isStatusParams, StatusBook, StatusView, viewForClientState, viewForServerStatus } from './status';

export const SERVER_COMMAND_WRITE_OUTPUTS = 'rcaLsp.server.writeOutputs';
export const SERVER_COMMAND_SUGGEST_MAPPING = 'rcaLsp.server.suggestMapping';
const OPEN_SETTINGS = 'Open Settings';
const SHOW_OUTPUT = 'Show Output';

interface WriteOutputsResult {
  outDir?: string;
  reportMarkdown?: string;
}

interface SuggestMappingResult {
  content?: string;
  coverage?: string;
}

/** What `activate` returns; used by tests and by other extensions. */
export interface RcaLspApi {
  readonly client: LanguageClient | undefined;
  readonly interpreter: ResolvedInterpreter | undefined;
  restart(): Promise<void>;
}

class Controller implements vscode.Disposable, RcaLspApi {
  private readonly output: vscode.LogOutputChannel;
  private readonly statusItem: vscode.StatusBarItem;
  private readonly disposables: vscode.Disposable[] = [];
  private readonly gate = new OnceGate();
  private readonly book = new StatusBook();
  private clientState: StatusView | undefined;
  private queue: Promise<void> = Promise.resolve();
  private pythonWatch: vscode.Disposable | undefined;
  client: LanguageClient | undefined;
  interpreter: ResolvedInterpreter | undefined;
  /** True once a mapping file was seen (or the user asked for the server): from then on the server is wanted. */
  private wanted = false;

  constructor(private readonly context: vscode.ExtensionContext) {
    this.output = vscode.window.createOutputChannel('rca-lsp', { log: true });
    this.statusItem = vscode.window.createStatusBarItem('rcaLsp.status', vscode.StatusBarAlignment.Left, 10);
    this.statusItem.name = 'rca-lsp';
    this.disposables.push(this.output, this.statusItem);
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
        const inspect = vscode.workspace.getConfiguration(SECTION, this.scope()).inspect<string>('interpreter');
        if (this.wanted && ignoredUntrustedSetting(inspect, false)) {
          this.output.info('Workspace trusted: restarting to use the workspace value of rcaLsp.interpreter.');
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

  private varsFor(resource?: vscode.Uri): VariableContext {
    const folder =
      (resource && vscode.workspace.getWorkspaceFolder(resource)) ?? vscode.workspace.workspaceFolders?.[0];
    return { workspaceFolder: folder?.uri.fsPath, userHome: os.homedir() };
  }

  /** The translated settings for the server (section rcaLsp). */
  serverSettings(resource?: vscode.Uri): ServerSettings {
    const raw = vscode.workspace.getConfiguration(SECTION, resource ?? this.scope());
    const { settings, problems } = buildServerSettings(
      {
        pairs: raw.get('pairs'),
        tolerances: raw.get('tolerances'),
        severity: raw.get('severity'),
        outDir: raw.get('outDir'),
      },
      this.varsFor(resource),
    );
    for (const p of problems) {
      this.output.warn(`Settings: ${p}`);
    }
    return settings;
  }

  private setClientState(view: StatusView | undefined): void {
    this.clientState = view;
    this.render();
  }

  private render(): void {
    let view = this.clientState;
    if (!view && this.client) {
      const active = vscode.window.activeTextEditor?.document.uri.toString();
      const current = this.book.current(active);
      view = current ? viewForServerStatus(current) : viewForServerStatus({ state: 'idle', message: '' });
    }
    if (!view) {
      this.statusItem.hide();
      return;
    }
    this.statusItem.text = view.text;
    this.statusItem.tooltip = view.tooltip;
    this.statusItem.command = view.command
      ? { title: 'rca-lsp', command: view.command.id, arguments: view.command.args }
      : undefined;
    this.statusItem.backgroundColor =
      view.background === 'error'
        ? new vscode.ThemeColor('statusBarItem.errorBackground')
        : view.background === 'warning'
          ? new vscode.ThemeColor('statusBarItem.warningBackground')
          : undefined;
    this.statusItem.show();
  }

  private async doStart(): Promise<void> {
    if (this.client) {
      return;
    }
    this.setClientState(viewForClientState('starting'));
    const resource = this.scope();
    const config = vscode.workspace.getConfiguration(SECTION, resource);
    const inspect = config.inspect<string>('interpreter');
    const trusted = vscode.workspace.isTrusted;
    if (ignoredUntrustedSetting(inspect, trusted)) {
      this.output.warn(
        'The workspace sets rcaLsp.interpreter, which is ignored because the workspace is not trusted. ' +
          'Trust the workspace or set the interpreter in your user settings.',
      );
    }
    const interpreter = await resolveInterpreter({
      setting: inspect,
      trusted,
      vars: this.varsFor(resource),
      pythonExtension: () => pythonExtensionInterpreter(resource),
      which: (name) => whichOnPath(name),
    });
    this.interpreter = interpreter;
    if (!interpreter) {
      const msg = 'rca-lsp: no Python interpreter found (no rcaLsp.interpreter setting, no Python extension environment, no python3 on PATH).';
      this.output.error(msg);
      this.setClientState(viewForClientState('noInterpreter', msg));
      if (this.gate.shouldShow('<none>')) {
        void this.showError(msg);
      }
      return;
    }
    this.output.info(`Interpreter: ${interpreter.python} (from ${interpreter.detail})`);
    await this.watchPythonExtension(interpreter);

    const cwd = this.serverCwd(trusted);
    const check = await checkImport(interpreter.python, 'rca_lsp', 30000, cwd);
    if (!check.ok) {
      const reason = check.reason ?? 'unknown error';
      const msg = notImportableMessage(interpreter.python, reason);
      this.output.error(msg);
      this.output.error(`From a source checkout instead: ${installFromSourceCommand(interpreter.python)}`);
      if (check.output) {
        this.output.error(check.output);
      }
      this.setClientState(viewForClientState('notInstalled', `${msg}`));
      if (this.gate.shouldShow(`import:${interpreter.python}`)) {
        void this.showError(msg);
      }
      return;
    }
    this.output.info(`rca_lsp ${check.version ?? ''} is importable; starting "${interpreter.python} -m rca_lsp serve"`);

    const serverOptions: ServerOptions = {
      command: interpreter.python,
      args: ['-m', 'rca_lsp', 'serve'],
      transport: TransportKind.stdio,
      options: { cwd, env: { ...process.env, PYTHONUNBUFFERED: '1', PYTHONIOENCODING: 'utf-8' } },
    };
    const clientOptions: LanguageClientOptions = {
      documentSelector: documentSelector(),
      diagnosticCollectionName: 'rca-lsp',
      outputChannel: this.output,
      traceOutputChannel: this.output,
      revealOutputChannelOn: RevealOutputChannelOn.Never,
      initializationOptions: () => this.serverSettings(),
      middleware: {
        workspace: {
          configuration: async (params, token, next) => {
            const answer = await next(params, token);
            if (!Array.isArray(answer)) {
              return answer;
            }
            return params.items.map((item, i) => {
              if (item.section === SECTION) {
                return this.serverSettings(item.scopeUri ? vscode.Uri.parse(item.scopeUri) : undefined);
              }
              return answer[i];
            });
          },
        },
      },
    };
    const client = new LanguageClient('rcaLsp', 'rca-lsp', serverOptions, clientOptions);
    client.onNotification('rcaLsp/status', (params: unknown) => {
      if (!isStatusParams(params)) {
        this.output.warn(`Ignoring malformed rcaLsp/status: ${JSON.stringify(params)}`);
        return;
      }
      const uri = params.uri ? normaliseUri(params.uri) : undefined;
      this.book.update({ ...params, uri });
      this.render();
    });
    client.onDidChangeState((e) => {
      const running = e.newState === State.Running;
      void vscode.commands.executeCommand('setContext', 'rcaLsp.serverRunning', running);
      if (e.newState === State.Stopped && this.client === client) {
        this.setClientState(viewForClientState('stopped'));
      } else if (running && this.client === client) {
        this.setClientState(undefined);
      }
    });
    this.client = client;
    try {
      await client.start();
    } catch (e) {
      const msg = `rca-lsp: the server failed to start: ${e instanceof Error ? e.message : String(e)}`;
      this.output.error(msg);
      this.setClientState(viewForClientState('stopped', msg));
      if (this.gate.shouldShow(`start:${interpreter.python}`)) {
        void this.showError(msg);
      }
      return;
    }
    const canSuggest = this.serverOffers(SERVER_COMMAND_SUGGEST_MAPPING);
    void vscode.commands.executeCommand('setContext', 'rcaLsp.canSuggestMapping', canSuggest);
    this.setClientState(undefined);
  }

  private async doStop(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    this.book.clear();
    void vscode.commands.executeCommand('setContext', 'rcaLsp.canSuggestMapping', false);
    if (!client) {
      return;
    }
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
  }

  private serverCwd(trusted: boolean): string {
    // In an untrusted workspace never run Python with the workspace as working directory: `python -m` puts the
    // working directory first on sys.path, so a workspace could shadow rca_lsp with its own code.
    const folder = vscode.workspace.workspaceFolders?.[0]?.uri;
    if (trusted && folder?.scheme === 'file') {
      return folder.fsPath;
    }
    return this.context.extensionUri.fsPath;
  }

  private async watchPythonExtension(interpreter: ResolvedInterpreter): Promise<void> {
    if (interpreter.source !== 'python-extension' || this.pythonWatch) {
      return;
    }
    try {
      this.pythonWatch = await onPythonInterpreterChange(() => {
        if (this.interpreter?.source === 'python-extension') {
          this.output.info("The Python extension's active environment changed: restarting.");
          void this.restart();
        }
      });
      if (this.pythonWatch) {
        this.disposables.push(this.pythonWatch);
      }
    } catch (e) {
      this.output.warn(`Cannot watch the Python extension's environment: ${String(e)}`);
    }
  }

  private async showError(msg: string): Promise<void> {
    const choice = await vscode.window.showErrorMessage(msg, OPEN_SETTINGS, SHOW_OUTPUT);
    if (choice === OPEN_SETTINGS) {
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

  private serverOffers(command: string): boolean {
    const cmds = this.client?.initializeResult?.capabilities.executeCommandProvider?.commands ?? [];
    return cmds.includes(command);
  }

  /** The mapping file a command applies to: the argument, the active editor, a visible one, or a pick. */
  private async targetMappingUri(arg: unknown): Promise<vscode.Uri | undefined> {
    if (arg instanceof vscode.Uri) {
      return arg;
    }
    if (typeof arg === 'string' && arg) {
      return vscode.Uri.parse(arg);
    }
    const active = vscode.window.activeTextEditor?.document;
    if (active && isMappingDocument(active)) {
      return active.uri;
    }
    const visible = vscode.window.visibleTextEditors.map((e) => e.document).filter(isMappingDocument);
    if (visible.length === 1) {
      return visible[0].uri;
    }
    const candidates = new Map<string, vscode.Uri>();
    for (const d of vscode.workspace.textDocuments.filter(isMappingDocument)) {
      candidates.set(d.uri.toString(), d.uri);
    }
    for (const u of await vscode.workspace.findFiles(MAPPING_FIND_GLOB, '**/{node_modules,.git,.venv}/**', 50)) {
      candidates.set(u.toString(), u);
    }
    const all = [...candidates.values()];
    if (all.length <= 1) {
      return all[0];
    }
    const pick = await vscode.window.showQuickPick(
      all.map((u) => ({ label: vscode.workspace.asRelativePath(u), uri: u })),
      { placeHolder: 'Mapping-key file to analyse' },
    );
    return pick?.uri;
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
    const uri = await this.targetMappingUri(arg);
    if (!uri) {
      void vscode.window.showWarningMessage('rca-lsp: open a mapping-key file first.');
      return;
    }
    const client = await this.readyClient();
    if (!client) {
      return;
    }
    await vscode.workspace.openTextDocument(uri); // make sure the server has the document
    let result: WriteOutputsResult | undefined;
    try {
      result = await vscode.window.withProgress(
        { location: vscode.ProgressLocation.Notification, title: 'rca-lsp: writing the analysis outputs…' },
        () =>
          client.sendRequest(ExecuteCommandRequest.type, {
            command: SERVER_COMMAND_WRITE_OUTPUTS,
            arguments: [uri.toString()],
          }) as Promise<WriteOutputsResult | undefined>,
      );
    } catch (e) {
      const msg = `rca-lsp: writing the outputs failed: ${e instanceof Error ? e.message : String(e)}`;
      this.output.error(msg);
      void vscode.window.showErrorMessage(msg);
      return;
    }
    if (!result || typeof result.reportMarkdown !== 'string') {
      this.output.error(`writeOutputs returned no report: ${JSON.stringify(result)}`);
      void vscode.window.showErrorMessage('rca-lsp: the server wrote no report.');
      return;
    }
    this.output.info(`Wrote the analysis outputs to ${result.outDir ?? '?'}; report ${result.reportMarkdown}`);
    const report = vscode.Uri.file(result.reportMarkdown);
    await vscode.commands.executeCommand('markdown.showPreview', report);
    void vscode.window.showInformationMessage(`rca-lsp: wrote the analysis outputs to ${result.outDir ?? result.reportMarkdown}`);
  }

  async suggestMapping(arg: unknown): Promise<void> {
    const client = await this.readyClient();
    if (!client) {
      return;
    }
    if (!this.serverOffers(SERVER_COMMAND_SUGGEST_MAPPING)) {
      void vscode.window.showInformationMessage('rca-lsp: this server version does not offer mapping suggestions.');
      return;
    }
    const uri = await this.targetMappingUri(arg);
    if (!uri) {
      void vscode.window.showWarningMessage('rca-lsp: open a mapping-key file first.');
      return;
    }
    let result: SuggestMappingResult | undefined;
    try {
      result = await vscode.window.withProgress(
        { location: vscode.ProgressLocation.Notification, title: 'rca-lsp: suggesting a mapping…' },
        () =>
          client.sendRequest(ExecuteCommandRequest.type, {
            command: SERVER_COMMAND_SUGGEST_MAPPING,
            arguments: [uri.toString()],
          }) as Promise<SuggestMappingResult | undefined>,
      );
    } catch (e) {
      const msg = `rca-lsp: suggesting a mapping failed: ${e instanceof Error ? e.message : String(e)}`;
      this.output.error(msg);
      void vscode.window.showErrorMessage(msg);
      return;
    }
    if (!result || typeof result.content !== 'string') {
      void vscode.window.showErrorMessage('rca-lsp: the server returned no suggestion.');
      return;
    }
    const doc = await vscode.workspace.openTextDocument({ language: 'json', content: result.content });
    await vscode.window.showTextDocument(doc, { preview: false });
    if (result.coverage) {
      void vscode.window.showInformationMessage(`rca-lsp: suggested mapping (coverage: ${result.coverage})`);
    }
  }

  dispose(): void {
    for (const d of this.disposables) {
      d.dispose();
    }
  }
}

function isMappingDocument(doc: vscode.TextDocument): boolean {
  return doc.uri.scheme === 'file' && (doc.languageId === 'json' || doc.languageId === 'jsonc') && isMappingFileName(doc.uri.path);
}

function normaliseUri(uri: string): string {
  try {
    return vscode.Uri.parse(uri).toString();
  } catch {
    return uri;
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

// Re-exported for the README's "exact install command" and for tests.
export { installCommand };
