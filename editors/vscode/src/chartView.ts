/**
 * The divergence chart webview's pure parts (no `vscode` import): its HTML with a strict Content-Security-Policy,
 * and where a train key's entry is in the mapping file's text.
 */

/** The page of the webview: the chart bundle and a bootstrap script, both nonce'd; nothing else may load. */
export function chartHtml(options: { cspSource: string; bundleUri: string; nonce: string; title: string }): string {
  const { cspSource, bundleUri, nonce } = options;
  const csp = [
    "default-src 'none'",
    `script-src 'nonce-${nonce}'`,
    `style-src 'nonce-${nonce}'`,
    `img-src ${cspSource} data:`,
    `font-src ${cspSource}`,
  ].join('; ');
  return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="${csp}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escapeHtml(options.title)}</title>
<style nonce="${nonce}">
:root {
  --rca-fg: var(--vscode-editor-foreground); --rca-bg: var(--vscode-editor-background);
  --rca-muted: var(--vscode-descriptionForeground); --rca-grid: var(--vscode-editorWidget-border, rgba(128,128,128,0.3));
  --rca-output: var(--vscode-charts-blue); --rca-input: var(--vscode-charts-orange);
  --rca-parameters: var(--vscode-charts-purple); --rca-divergence: var(--vscode-charts-red);
  --rca-boundary: var(--vscode-charts-green); --rca-tolerance: var(--vscode-charts-yellow);
  --rca-link: var(--vscode-textLink-foreground); --rca-card-bg: var(--vscode-editorHoverWidget-background);
  --rca-input-bg: var(--vscode-dropdown-background); --rca-font: var(--vscode-font-family);
  --rca-mono: var(--vscode-editor-font-family);
}
body { background: var(--vscode-editor-background); color: var(--vscode-editor-foreground); padding: 8px 16px; }
#rca-status { color: var(--vscode-descriptionForeground); margin: 4px 0 8px; }
#rca-status.error { color: var(--vscode-errorForeground); }
</style>
</head>
<body>
<div id="rca-status">waiting for the analysis…</div>
<div id="rca-chart"></div>
<script nonce="${nonce}" src="${bundleUri}"></script>
<script nonce="${nonce}">
(function () {
  const vscode = acquireVsCodeApi();
  const status = document.getElementById('rca-status');
  // the call and rank view chosen survive the page being rebuilt (the panel hidden and shown again): webview state
  const chart = RcaChart.mount(document.getElementById('rca-chart'), null, {
    onSelect: (trainKey) => vscode.postMessage({ type: 'reveal', trainKey }),
    state: vscode.getState() || {},
    onState: (state) => vscode.setState(state),
  });
  window.addEventListener('message', (event) => {
    const message = event.data;
    if (message.type === 'data') {
      status.textContent = message.text || '';
      status.className = '';
      chart.update(message.data);
    } else if (message.type === 'status') {
      status.textContent = message.text;
      status.className = message.error ? 'error' : '';
    }
  });
  vscode.postMessage({ type: 'ready' });
})();
</script>
</body>
</html>
`;
}

function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

/** A random nonce for one page (a new one per page load). */
export function makeNonce(random: (size: number) => Uint8Array): string {
  return Buffer.from(random(18)).toString('base64').replace(/[^A-Za-z0-9]/g, '');
}

/**
 * Where the entry of `trainKey` starts in a mapping file's text: the offset and length of the key string as written
 * (a JSON string followed by a colon), the last definition when the key is duplicated (the one the analysis used);
 * undefined when the text does not hold it (edited away since the analysis).
 */
export function entryRange(text: string, trainKey: string): { offset: number; length: number } | undefined {
  const quoted = JSON.stringify(trainKey);
  let found: { offset: number; length: number } | undefined;
  for (let at = text.indexOf(quoted); at >= 0; at = text.indexOf(quoted, at + 1)) {
    if (/^\s*:/.test(text.slice(at + quoted.length, at + quoted.length + 64))) {
      found = { offset: at, length: quoted.length };
    }
  }
  return found;
}
