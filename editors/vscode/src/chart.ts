/**
 * "Show Divergence Chart": a webview beside a mapping-key file drawing the server's chart data
 * (rcaLsp.server.chartData) with the chart bundle the HTML report uses. Clicking a point reveals its mapping entry;
 * the chart is asked for again whenever the server publishes the file's diagnostics (after every analysis, so
 * after every save).
 */
import { randomBytes } from 'node:crypto';
import * as vscode from 'vscode';
import { ExecuteCommandRequest, LanguageClient, State } from 'vscode-languageclient/node';
import { chartHtml, entryRange, makeNonce } from './chartView';
import { targetMappingUri } from './commands';
import { isMappingFileName } from './files';
import { SERVER_COMMAND_CHART_DATA } from './serverCommands';

export const SHOW_CHART = 'rcaLsp.showChart';
const REFRESH_DELAY = 150; // ms after a publish: several publishes of one analysis collapse into one request

interface ClientSource {
  readonly client: LanguageClient | undefined;
}

class ChartPanel implements vscode.Disposable {
  private readonly disposables: vscode.Disposable[] = [];
  private timer: NodeJS.Timeout | undefined;
  private ready = false;
  private generation = 0;

  constructor(
    readonly panel: vscode.WebviewPanel,
    private readonly mapping: vscode.Uri,
    private readonly source: ClientSource,
    extensionUri: vscode.Uri,
    onDispose: () => void,
  ) {
    const webview = panel.webview;
    webview.html = chartHtml({
      cspSource: webview.cspSource,
      bundleUri: webview.asWebviewUri(vscode.Uri.joinPath(extensionUri, 'dist', 'chart.bundle.js')).toString(),
      nonce: makeNonce((n) => randomBytes(n)),
      title: panel.title,
    });
    this.disposables.push(
      webview.onDidReceiveMessage((message: unknown) => this.onMessage(message)),
      vscode.languages.onDidChangeDiagnostics((e) => {
        if (e.uris.some((u) => u.toString() === mapping.toString())) {
          this.schedule();
        }
      }),
      panel.onDidDispose(() => {
        this.dispose();
        onDispose();
      }),
    );
  }

  schedule(): void {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => void this.refresh(), REFRESH_DELAY);
  }

  private post(message: Record<string, unknown>): void {
    void this.panel.webview.postMessage(message);
  }

  async refresh(): Promise<void> {
    if (!this.ready) {
      return; // the page asks once it is loaded
    }
    const client = this.source.client;
    if (!client || client.state !== State.Running) {
      this.post({ type: 'status', text: 'the rca-lsp server is not running: the chart shows once it has analysed the file' });
      return;
    }
    const generation = ++this.generation;
    try {
      const data = await client.sendRequest(ExecuteCommandRequest.type, {
        command: SERVER_COMMAND_CHART_DATA,
        arguments: [this.mapping.toString()],
      });
      if (generation === this.generation) {
        this.post({ type: 'data', data });
      }
    } catch (e) {
      if (generation === this.generation) {
        const text = e instanceof Error ? e.message : String(e);
        const waiting = /not been analysed yet|not a mapping-key file known/.test(text);
        this.post({ type: 'status', text: waiting ? `waiting for the analysis: ${text}` : `no chart: ${text}`, error: !waiting });
      }
    }
  }

  private onMessage(message: unknown): void {
    if (!message || typeof message !== 'object') {
      return;
    }
    const { type, trainKey } = message as { type?: unknown; trainKey?: unknown };
    if (type === 'ready') {
      this.ready = true;
      void this.refresh();
    } else if (type === 'reveal' && typeof trainKey === 'string') {
      void this.reveal(trainKey);
    }
  }

  /** Shows the entry of `trainKey` in the mapping file's editor (the one already open, else beside the chart). */
  private async reveal(trainKey: string): Promise<void> {
    const document = await vscode.workspace.openTextDocument(this.mapping);
    const found = entryRange(document.getText(), trainKey);
    if (!found) {
      void vscode.window.showWarningMessage(`rca-lsp: ${trainKey} is no longer in ${vscode.workspace.asRelativePath(this.mapping)}`);
      return;
    }
    const start = document.positionAt(found.offset);
    const range = new vscode.Range(start, document.positionAt(found.offset + found.length));
    const open = vscode.window.visibleTextEditors.find((e) => e.document.uri.toString() === this.mapping.toString());
    const editor = await vscode.window.showTextDocument(document, {
      viewColumn: open?.viewColumn ?? vscode.ViewColumn.One,
      selection: new vscode.Selection(range.start, range.end),
      preserveFocus: false,
    });
    editor.revealRange(range, vscode.TextEditorRevealType.InCenterIfOutsideViewport);
  }

  dispose(): void {
    clearTimeout(this.timer);
    for (const d of this.disposables) {
      d.dispose();
    }
    this.disposables.length = 0;
  }
}

/** Registers the command (and so the editor-title button) that opens a mapping file's chart. */
export function registerChart(context: vscode.ExtensionContext, source: ClientSource): vscode.Disposable {
  const panels = new Map<string, ChartPanel>();
  const command = vscode.commands.registerCommand(SHOW_CHART, async (arg: unknown) => {
    const uri = await targetMappingUri(arg);
    if (!uri || uri.scheme !== 'file' || !isMappingFileName(uri.path)) {
      void vscode.window.showWarningMessage('rca-lsp: open a mapping-key file to chart it.');
      return;
    }
    const existing = panels.get(uri.toString());
    if (existing) {
      existing.panel.reveal(vscode.ViewColumn.Beside, true);
      existing.schedule();
      return;
    }
    const panel = vscode.window.createWebviewPanel(
      'rcaLsp.chart',
      `Divergence: ${uri.path.split('/').pop() ?? uri.path}`,
      { viewColumn: vscode.ViewColumn.Beside, preserveFocus: true },
      {
        enableScripts: true,
        localResourceRoots: [vscode.Uri.joinPath(context.extensionUri, 'dist')],
      },
    );
    panels.set(uri.toString(), new ChartPanel(panel, uri, source, context.extensionUri, () => panels.delete(uri.toString())));
  });
  return vscode.Disposable.from(command, {
    dispose: () => {
      for (const p of panels.values()) {
        p.panel.dispose();
      }
    },
  });
}
