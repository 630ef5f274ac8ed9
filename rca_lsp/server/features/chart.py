"""The `rcaLsp.server.chartData` command: the divergence chart's data (report/chart.py) of a mapping file's latest
analysis, for any client to render (the VS Code extension's webview does; see the README for the shape)."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from concurrent.futures import Executor
from typing import Any

import msgspec

from rca_lsp.base.errors import InputError
from rca_lsp.diagnose.analysis import Analysis
from rca_lsp.report.chart import chart_data
from rca_lsp.server.documents import MappingDocument
from rca_lsp.server.protocol import CommandError

CHART_DATA = "rcaLsp.server.chartData"
_KEPT = 4  # charts of the latest analyses (a client asks again after every save; most asks repeat the last)
_charts: OrderedDict[int, tuple[Analysis, dict[str, Any]]] = OrderedDict()


def _built(analysis: Analysis) -> dict[str, Any]:
    kept = _charts.get(id(analysis))
    if kept is not None and kept[0] is analysis:
        _charts.move_to_end(id(analysis))
        return kept[1]
    result: dict[str, Any] = msgspec.to_builtins(chart_data(analysis))
    _charts[id(analysis)] = (analysis, result)
    while len(_charts) > _KEPT:
        _charts.popitem(last=False)
    return result


async def chart_data_result(executor: Executor, doc: MappingDocument) -> dict[str, Any]:
    """The chart of the document's newest analysis (the last good one while the file does not parse)."""
    analysis = doc.last_good or doc.analysis
    if analysis is None:
        raise CommandError(f"{doc.path} has not been analysed yet (is it paired with dumps?)")
    try:
        return await asyncio.get_running_loop().run_in_executor(executor, _built, analysis)
    except InputError as error:  # a rank file read for the per-rank series went away or broke meanwhile
        raise CommandError(f"cannot build the chart of {doc.path}: {error}") from None
