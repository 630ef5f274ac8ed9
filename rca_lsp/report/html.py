"""output_5_root_cause_report.html: the divergence chart as one self-contained page (the chart bundle and the data
inlined: it opens offline, from any folder, without a server or a CDN)."""

from __future__ import annotations

import base64
import gzip
import html
from functools import lru_cache
from importlib import resources
from typing import Any

import msgspec
import orjson

from rca_lsp.report.chart_schema import ChartData

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


# What only hovering and clicking need: the page carries it in a second block, unpacked after the first draw.
_DETAIL_FIELDS = ("train_key", "rollout_key", "bucket", "suspect", "output_train", "output_rollout", "details")
_SERIES_DETAIL_FIELDS = ("consistency", "target")
_KINDS = ("output", "input", "parameters")
_BLOCKS = ("rca-chart-data", "rca-chart-details")


def _split(chart: ChartData) -> tuple[dict[str, Any], dict[str, Any]]:
    """The chart as two documents: what the first draw needs, and the rest (keys, verdicts, statistics). Shallow
    copies of the Structs: their lists are shared, not converted (msgspec encodes them as they are)."""
    document = msgspec.structs.asdict(chart)
    details: dict[str, Any] = {"stats": document.pop("stats"), "calls": []}
    document["stats"] = []
    calls = []
    for chart_call in chart.calls:
        call = msgspec.structs.asdict(chart_call)
        modules = call["modules"] = msgspec.structs.asdict(chart_call.modules)
        part = {field: modules.pop(field) for field in _DETAIL_FIELDS}
        for kind in _KINDS:
            series = modules[kind] = msgspec.structs.asdict(getattr(chart_call.modules, kind))
            part[kind] = {field: series.pop(field) for field in _SERIES_DETAIL_FIELDS}
        details["calls"].append(part)
        calls.append(call)
    document["calls"] = calls
    return document, details


def _packed(document: dict[str, Any]) -> str:
    """JSON, gzip, base64: a quarter of the bytes to read (the page unpacks it with DecompressionStream). Level 1:
    on 10^5 modules 6x faster than level 6 (0.11 against 0.69 s) for a fifth more bytes (3.0 against 2.5 MiB)."""
    return base64.b64encode(gzip.compress(msgspec.json.encode(document), compresslevel=1, mtime=0)).decode()


def chart_from_page(page: str) -> dict[str, Any]:
    """The chart data (as chart.encode_chart writes it) from a report page's two blocks: what tests and scripts
    reading a report use."""
    first, details = (
        orjson.loads(
            gzip.decompress(base64.b64decode(page.split(f'<script id="{block}" ')[1].split(">")[1].split("<")[0]))
        )
        for block in _BLOCKS
    )
    first["stats"] = details["stats"]
    for call, part in zip(first["calls"], details["calls"]):
        modules = call["modules"]
        for kind in _KINDS:
            modules[kind].update(part.pop(kind))
        modules.update(part)
    return first


def render_html(chart: ChartData) -> str:
    """The report page: the chart of `chart`, with the paths and the top hypothesis as text."""
    plot, details = _split(chart)
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
<script id="rca-chart-data" type="application/gzip;base64">{_packed(plot)}</script>
<script id="rca-chart-details" type="application/gzip;base64">{_packed(details)}</script>
<script>{_script_text(chart_bundle())}</script>
<script>RcaChart.mountFromPage();</script>
</body>
</html>
"""
