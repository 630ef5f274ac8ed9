/**
 * The divergence chart bundle (global `RcaChart`): one renderer for the HTML report and the VS Code webview.
 *   RcaChart.mount(element, data, options) -> { update(data), destroy() }
 *   RcaChart.mountFromPage()  : the HTML report: unpacks <script id="rca-chart-data"> (gzip'd JSON in base64) into
 *                               #rca-chart, then the hover details of <script id="rca-chart-details">
 * The stylesheet (uPlot's and the chart's) is added to the page once, with the nonce of the script that loaded the
 * bundle, so a strict Content-Security-Policy (style-src 'nonce-...') holds.
 */
import uplotCss from 'uplot/dist/uPlot.min.css';
import chartCss from './chart.css';
import { ChartHandle, ChartState, mount as mountChart, MountOptions } from './render';
import { ChartData, ChartModules, Kind, KINDS, TargetSeries } from './types';

const nonce = (document.currentScript as HTMLScriptElement | null)?.nonce ?? '';

function addStyles(): void {
  if (document.getElementById('rca-chart-style')) {
    return;
  }
  const style = document.createElement('style');
  style.id = 'rca-chart-style';
  if (nonce) {
    style.nonce = nonce;
  }
  style.textContent = `${uplotCss}\n${chartCss}`;
  document.head.appendChild(style);
}

export function mount(root: HTMLElement, data: ChartData | null, options: MountOptions = {}): ChartHandle {
  addStyles();
  return mountChart(root, data, options);
}

/** A data block of a page: JSON, gzip-compressed, in base64. */
export async function unpack<T>(text: string): Promise<T> {
  const chars = atob(text.trim());
  const bytes = new Uint8Array(chars.length);
  for (let i = 0; i < chars.length; i++) {
    bytes[i] = chars.charCodeAt(i);
  }
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream('gzip'));
  return JSON.parse(await new Response(stream).text()) as T;
}

/** What the report page carries in its second block: what hovering and clicking need (see report_html.py). */
interface Details {
  stats: ChartData['stats'];
  calls: (Partial<ChartModules> & Record<Kind, Pick<TargetSeries, 'consistency' | 'target'>>)[];
}

function merge(data: ChartData, details: Details): void {
  data.stats = details.stats;
  details.calls.forEach((part, i) => {
    const modules = data.calls[i].modules;
    for (const [field, value] of Object.entries(part)) {
      if ((KINDS as readonly string[]).includes(field)) {
        Object.assign(modules[field as Kind], value);
      } else {
        (modules as unknown as Record<string, unknown>)[field] = value;
      }
    }
  });
}

export function stateFromHash(hash: string): ChartState {
  const found = new URLSearchParams(hash.replace(/^#/, ''));
  const call = found.get('call');
  return {
    call: call !== null && /^\d+$/.test(call) ? Number(call) : undefined,
    rank: found.get('rank') ?? undefined,
  };
}

export function hashOf(state: ChartState): string {
  const found = new URLSearchParams();
  if (state.call !== undefined) {
    found.set('call', String(state.call));
  }
  if (state.rank) {
    found.set('rank', state.rank);
  }
  return `#${found.toString()}`;
}

/** The HTML report: draws the chart from the first data block, then reads the second (keys, verdicts, statistics). */
export async function mountFromPage(): Promise<ChartHandle | undefined> {
  const source = document.getElementById('rca-chart-data');
  const more = document.getElementById('rca-chart-details');
  const root = document.getElementById('rca-chart');
  if (!source || !more || !root) {
    return undefined;
  }
  const data = await unpack<ChartData>(source.textContent || '');
  const selected = document.getElementById('rca-selected');
  const chart = mount(root, data, {
    onSelect: (key) => {
      if (selected) {
        selected.textContent = `selected mapping entry: ${key}`;
      }
    },
    // the call and rank view chosen survive a reload of the page: kept in its address (#call=1&rank=train:3)
    state: stateFromHash(location.hash),
    onState: (state) => history.replaceState(null, '', hashOf(state)),
  });
  merge(data, await unpack<Details>(more.textContent || ''));
  chart.detailsLoaded();
  return chart;
}
