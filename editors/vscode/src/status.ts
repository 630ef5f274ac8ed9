/**
 * The status bar model: turns `rcaLsp/status` notifications (and the client's own states) into what the
 * status bar item shows. Pure: no `vscode` import.
 */

export type ServerState = 'loading' | 'analysed' | 'error' | 'idle';

/** Params of the server -> client notification `rcaLsp/status`. */
export interface StatusParams {
  state: ServerState;
  uri?: string;
  message: string;
  topHypothesis?: string;
  suspects?: number;
}

export type ClientState = 'starting' | 'stopped' | 'notInstalled' | 'tooOld' | 'noInterpreter';

export interface StatusView {
  text: string;
  tooltip: string;
  /** Command id run on click, with its arguments. */
  command?: { id: string; args: unknown[] };
  /** 'error' | 'warning' background, or none. */
  background?: 'error' | 'warning';
}

export const MAX_HYPOTHESIS_CHARS = 60;

export function truncate(s: string, max = MAX_HYPOTHESIS_CHARS): string {
  const oneLine = s.replace(/\s+/g, ' ').trim();
  return oneLine.length <= max ? oneLine : `${oneLine.slice(0, max - 1)}…`;
}

/** Escape text for a status bar label (`$(name)` would be read as an icon). */
export function escapeLabel(s: string): string {
  return s.replace(/\$\(/g, '$\u200b(');
}

export function isStatusParams(v: unknown): v is StatusParams {
  if (typeof v !== 'object' || v === null) {
    return false;
  }
  const o = v as Record<string, unknown>;
  return (
    (o.state === 'loading' || o.state === 'analysed' || o.state === 'error' || o.state === 'idle') &&
    (o.message === undefined || typeof o.message === 'string')
  );
}

export function viewForServerStatus(p: StatusParams): StatusView {
  const message = p.message ?? '';
  switch (p.state) {
    case 'loading':
      return {
        text: `$(sync~spin) rca-lsp: ${escapeLabel(truncate(message || 'loading dumps', 40))}`,
        tooltip: message || 'Loading the train and rollout dumps…',
        command: { id: 'rcaLsp.showOutput', args: [] },
      };
    case 'analysed': {
      const suspects = typeof p.suspects === 'number' ? p.suspects : undefined;
      const label = p.topHypothesis
        ? truncate(p.topHypothesis)
        : suspects !== undefined
          ? `${suspects} suspect${suspects === 1 ? '' : 's'}`
          : 'analysed';
      const lines = [
        p.topHypothesis ? `Top hypothesis: ${p.topHypothesis}` : undefined,
        suspects !== undefined ? `Suspects: ${suspects}` : undefined,
        message || undefined,
        'Click to write the analysis outputs and open the report.',
      ].filter((x): x is string => !!x);
      return {
        text: `${suspects === 0 ? '$(check)' : '$(search)'} rca-lsp: ${escapeLabel(label)}`,
        tooltip: lines.join('\n'),
        command: { id: 'rcaLsp.writeReport', args: p.uri ? [p.uri] : [] },
        background: suspects !== undefined && suspects > 0 ? 'warning' : undefined,
      };
    }
    case 'error':
      return {
        text: '$(error) rca-lsp: error',
        tooltip: `${message || 'The analysis failed.'}\nClick to show the output.`,
        command: { id: 'rcaLsp.showOutput', args: [] },
        background: 'error',
      };
    case 'idle':
    default:
      return {
        text: '$(pulse) rca-lsp',
        tooltip: message || 'rca-lsp is running. Open a mapping-key file to analyse it.',
        command: { id: 'rcaLsp.showOutput', args: [] },
      };
  }
}

export function viewForClientState(state: ClientState, detail = ''): StatusView {
  switch (state) {
    case 'starting':
      return {
        text: '$(sync~spin) rca-lsp: starting',
        tooltip: detail || 'Starting the rca-lsp server…',
        command: { id: 'rcaLsp.showOutput', args: [] },
      };
    case 'notInstalled':
      return {
        text: '$(error) rca-lsp: not installed',
        tooltip: `${detail || 'The Python package rca_lsp is not importable with the selected interpreter.'}\nClick to check again.`,
        command: { id: 'rcaLsp.restartServer', args: [] },
        background: 'error',
      };
    case 'tooOld':
      return {
        text: '$(error) rca-lsp: server too old',
        tooltip: `${detail || 'The rca_lsp of the selected interpreter is older than this extension needs.'}\nClick to check again.`,
        command: { id: 'rcaLsp.restartServer', args: [] },
        background: 'error',
      };
    case 'noInterpreter':
      return {
        text: '$(error) rca-lsp: no Python',
        tooltip: detail || 'No Python interpreter found: set rcaLsp.interpreter.',
        command: { id: 'workbench.action.openSettings', args: ['rcaLsp.interpreter'] },
        background: 'error',
      };
    case 'stopped':
    default:
      return {
        text: '$(debug-stop) rca-lsp: stopped',
        tooltip: detail || 'The rca-lsp server is not running. Click to restart it.',
        command: { id: 'rcaLsp.restartServer', args: [] },
        background: 'warning',
      };
  }
}

/** Which server the client talks to, from its initialize result and the interpreter running it. */
export interface ServerDescription {
  name?: string;
  version?: string;
  python: string;
}

/** One line naming the server: `Server: rca-lsp 0.1.0 (/venv/bin/python)`. */
export function describeServer(server: ServerDescription): string {
  const name = [server.name ?? 'rca-lsp', server.version ?? '(no version given)'].join(' ');
  return `Server: ${name} (${server.python})`;
}

/** A view of the running server with the server's name and version added to its tooltip. */
export function withServer(view: StatusView, server: ServerDescription): StatusView {
  return { ...view, tooltip: `${view.tooltip}\n${describeServer(server)}` };
}

/**
 * Keeps the last status per document and picks the one to show: the active document's status when there is
 * one, else the most recent.
 */
export class StatusBook {
  private readonly byUri = new Map<string, StatusParams>();
  private latest: StatusParams | undefined;

  update(p: StatusParams): void {
    this.latest = p;
    if (p.uri) {
      this.byUri.set(p.uri, p);
    }
  }

  forget(uri: string): void {
    this.byUri.delete(uri);
    if (this.latest?.uri === uri) {
      this.latest = undefined;
    }
  }

  clear(): void {
    this.byUri.clear();
    this.latest = undefined;
  }

  current(activeUri: string | undefined): StatusParams | undefined {
    if (activeUri) {
      const hit = this.byUri.get(activeUri);
      if (hit) {
        return hit;
      }
    }
    return this.latest;
  }
}
