/**
 * The divergence chart bundle (global `RcaChart`): one renderer for the HTML report and the VS Code webview.
 *   RcaChart.mount(element, data, options) -> { update(data), destroy() }
 *   RcaChart.mountFromPage()  : the HTML report: unpacks <script id="rca-chart-data"> (gzip'd JSON in base64) into
 *                               #rca-chart
 * The stylesheet (uPlot's and the chart's) is added to the page once, with the nonce of the script that loaded the
 * bundle, so a strict Content-Security-Policy (style-src 'nonce-...') holds.
 */
import uplotCss from 'uplot/dist/uPlot.min.css';
import chartCss from './chart.css';
import { ChartHandle, mount as mountChart, MountOptions } from './render';
import { ChartData } from './types';

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

/** The chart data a page carries: its JSON, gzip-compressed, in base64. */
export async function unpack(text: string): Promise<ChartData> {
  const chars = atob(text.trim());
  const bytes = new Uint8Array(chars.length);
  for (let i = 0; i < chars.length; i++) {
    bytes[i] = chars.charCodeAt(i);
  }
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream('gzip'));
  return JSON.parse(await new Response(stream).text()) as ChartData;
}

export async function mountFromPage(): Promise<ChartHandle | undefined> {
  const source = document.getElementById('rca-chart-data');
  const root = document.getElementById('rca-chart');
  if (!source || !root) {
    return undefined;
  }
  const data = await unpack(source.textContent || '');
  const details = document.getElementById('rca-selected');
  return mount(root, data, {
    onSelect: (key) => {
      if (details) {
        details.textContent = `selected mapping entry: ${key}`;
      }
    },
  });
}
