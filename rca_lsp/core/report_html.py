"""output_5_root_cause_report.html: the divergence chart as one self-contained page (the chart bundle and the data
inlined: it opens offline, from any folder, without a server or a CDN)."""

from __future__ import annotations

import base64
import gzip
import html
from functools import lru_cache
from importlib import resources

from rca_lsp.core.chart import ChartData, encode_chart

BUNDLE = "chart.bundle.js"  # built from editors/vscode/chart by its build.mjs, committed as package data


@lru_cache(maxsize=1)
def chart_bundle() -> str:
    """The chart renderer (uPlot and the chart code, one IIFE defining the global RcaChart)."""
    return (resources.files("rca_lsp") / "data" / BUNDLE).read_text(encoding="utf-8")


def _script_text(text: str) -> str:
    """Text safe inside a <script> element: no "</script" or "<!--" can end or change it."""
    return text.replace("</", "<\\/").replace("<!--", "<\\!--")


_STYLE = """
:root { --rca-fg: #1f2328; --rca-bg: #ffffff; --rca-muted: #6e7781; --rca-grid: rgba(128,128,128,0.22); }
@media (prefers-color-scheme: dark) {
  :root { --rca-fg: #e6edf3; --rca-bg: #0d1117; --rca-muted: #8b949e; --rca-grid: rgba(200,200,200,0.18);
          --rca-output: #58a6ff; --rca-input: #f0883e; --rca-parameters: #bc8cff; --rca-link: #58a6ff; }
}
html, body { background: var(--rca-bg); color: var(--rca-fg); }
body { margin: 16px 24px; font: 14px/1.45 system-ui, sans-serif; }
h1 { font-size: 20px; margin: 0 0 4px; }
.meta { color: var(--rca-muted); font-size: 12px; margin-bottom: 10px; word-break: break-all; }
.hypothesis { margin: 6px 0 12px; }
#rca-selected { color: var(--rca-muted); font-size: 12px; margin-top: 8px; word-break: break-all; }
"""


def packed_chart(chart: ChartData) -> str:
    """The chart's JSON as the page carries it: gzip, in base64 (a quarter of the bytes to read: 10^5 modules load
    in a fraction of the time; the page unpacks it with the browser's DecompressionStream)."""
    return base64.b64encode(gzip.compress(encode_chart(chart), compresslevel=6, mtime=0)).decode("ascii")


def unpacked_chart(text: str) -> bytes:
    """The chart's JSON from the page's data element (what tests and scripts reading a report use)."""
    return gzip.decompress(base64.b64decode(text))


def render_html(chart: ChartData) -> str:
    """The report page: the chart of `chart`, with the paths and the top hypothesis as text."""
    meta = [
        f"train: {chart.train_path}",
        f"rollout: {chart.rollout_path}",
        f"mapping: {chart.mapping_path}",
        *([f"run: {chart.run_id}"] if chart.run_id else []),
    ]
    hypothesis = chart.top_hypothesis or "no credible divergence: every mapped module is within the noise"
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:">
<title>Divergence chart: {html.escape(chart.title)}</title>
<style>{_STYLE}</style>
</head>
<body>
<h1>Where the runs part: {html.escape(chart.title)}</h1>
<div class="meta">{"<br>".join(html.escape(line) for line in meta)}</div>
<div class="hypothesis"><strong>Top hypothesis:</strong> {html.escape(hypothesis)}</div>
<div id="rca-chart"></div>
<div id="rca-selected"></div>
<script id="rca-chart-data" type="application/gzip;base64">{packed_chart(chart)}</script>
<script>{_script_text(chart_bundle())}</script>
<script>RcaChart.mountFromPage();</script>
</body>
</html>
"""
