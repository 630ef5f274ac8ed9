"""output_5, the answer: the root-cause report as JSON and Markdown, written before anything else (the CLI prints
its summary as soon as they are on disk), then the divergence chart it links to (interactive HTML; a PNG when
matplotlib is installed), which takes seconds on 10^5 modules."""

from __future__ import annotations

import functools
import importlib.util
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import orjson

from rca_lsp.base.atomicfile import write_atomically
from rca_lsp.base.forkpart import BackgroundWork
from rca_lsp.diagnose.analysis import Analysis
from rca_lsp.report.chart import chart_data
from rca_lsp.report.chart_schema import ChartData
from rca_lsp.report.html import render_html
from rca_lsp.report.markdown import CHART_HTML, CHART_PNG, render_markdown
from rca_lsp.report.png import image_caption, render_png

REPORT_JSON = "output_5_root_cause_report.json"
REPORT_MD = "output_5_root_cause_report.md"
ANSWER_NAMES = (REPORT_JSON, CHART_HTML, CHART_PNG, REPORT_MD)


def write_answer(analysis: Analysis, out_dir: Path, report: dict[str, Any], chart: bool) -> list[Path]:
    """The report (`report`: root_cause_report with the run id) as JSON and Markdown. The Markdown links the PNG
    that write_chart is expected to draw; write_chart rewrites it once the image is drawn (naming the calls its
    panels show) or if the image does not come."""
    write_atomically(out_dir / REPORT_JSON, orjson.dumps(report, option=orjson.OPT_INDENT_2) + b"\n")
    _write_markdown(analysis, out_dir, report, _image_expected(analysis, chart), chart)
    return [out_dir / REPORT_JSON, out_dir / REPORT_MD]


def write_chart(
    analysis: Analysis, out_dir: Path, report: dict[str, Any], chart: bool, fork: bool = False
) -> list[Path]:
    """The chart files, or (without `chart`) the removal of an earlier run's, which would not show this one. With
    `fork` (single-threaded callers only) the image is drawn by a forked child while the page is written."""
    if not chart:
        (out_dir / CHART_HTML).unlink(missing_ok=True)
        (out_dir / CHART_PNG).unlink(missing_ok=True)
        return []
    data = chart_data(analysis, report["run_id"])
    draw = functools.partial(_write_image, out_dir, data)
    with BackgroundWork(draw) if fork else nullcontext() as drawing:
        write_atomically(out_dir / CHART_HTML, render_html(data).encode())
        image = drawing.result() if drawing is not None else draw()
    # the Markdown again: it says which calls the image's panels show, or it linked an image that did not come
    if image or _image_expected(analysis, chart):
        _write_markdown(analysis, out_dir, report, bool(image), chart, image_caption(data) if image else "")
    return [out_dir / CHART_HTML, *image]


def _image_expected(analysis: Analysis, chart: bool) -> bool:
    """A guess, checked by write_chart: looking matplotlib up is cheap, importing it takes a second."""
    return chart and bool(analysis.records) and importlib.util.find_spec("matplotlib") is not None


def _write_markdown(
    analysis: Analysis, out_dir: Path, report: dict[str, Any], image: bool, chart: bool, caption: str = ""
) -> None:
    markdown = render_markdown(analysis, report["run_id"], CHART_PNG if image else None, chart, report, caption)
    write_atomically(out_dir / REPORT_MD, markdown.encode())


def _write_image(out_dir: Path, data: ChartData) -> list[Path]:
    """The chart's PNG, or none (without matplotlib: an earlier run's is removed)."""
    image = render_png(data)
    if image is None:
        (out_dir / CHART_PNG).unlink(missing_ok=True)
        return []
    write_atomically(out_dir / CHART_PNG, image)
    return [out_dir / CHART_PNG]
