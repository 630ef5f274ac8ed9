"""The `rcaLsp.server.chartData` command: the divergence chart's data (report/chart.py) of a mapping file's latest
analysis, for any client to render (the VS Code extension's webview does; see the README for the shape).

Building it is seconds of Python on 10^5 modules: in a worker thread it would hold the interpreter lock the event loop
needs (hovers and saves would wait), and turning it into JSON on the loop, as pygls does with a result, blocks it
outright. So a forked child builds and encodes it (base.forkpart.ForkedBytes) and the bytes are sent as they come."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from concurrent.futures import Executor

import msgspec

from rca_lsp.base.errors import InputError
from rca_lsp.base.forkpart import ForkedBytes
from rca_lsp.diagnose.analysis import Analysis
from rca_lsp.report.chart import chart_data
from rca_lsp.server.documents import MappingDocument
from rca_lsp.server.protocol import CommandError, RawJson

log = logging.getLogger(__name__)
CHART_DATA = "rcaLsp.server.chartData"
_KEPT = 4  # charts of the latest analyses (a client asks again after every save; most asks repeat the last)
_charts: OrderedDict[int, tuple[Analysis, bytes]] = OrderedDict()


def encoded_chart(analysis: Analysis) -> bytes:
    """The chart's data as the command's result, in JSON."""
    return msgspec.json.encode(chart_data(analysis))


def _built(analysis: Analysis) -> bytes:
    kept = _charts.get(id(analysis))
    if kept is not None and kept[0] is analysis:
        _charts.move_to_end(id(analysis))
        return kept[1]
    started = time.perf_counter()
    with ForkedBytes(lambda: encoded_chart(analysis)) as child:
        forked = time.perf_counter()
        result = child.result()
    if result is None:  # the child failed or got stuck: here, which raises what went wrong (or builds it after all)
        result = encoded_chart(analysis)
    # the fork itself (page tables of a ~1.5 GB process) is the one moment the loop cannot run
    log.info(
        "chart built in %.0f ms, %d bytes (fork %.0f ms)",
        (time.perf_counter() - started) * 1000,
        len(result),
        (forked - started) * 1000,
    )
    _charts[id(analysis)] = (analysis, result)
    while len(_charts) > _KEPT:
        _charts.popitem(last=False)
    return result


async def chart_data_result(executor: Executor, doc: MappingDocument) -> RawJson:
    """The chart of the document's newest analysis (the last good one while the file does not parse)."""
    analysis = doc.commanded_analysis()
    try:
        return RawJson(await asyncio.get_running_loop().run_in_executor(executor, _built, analysis))
    except InputError as error:  # a rank file read for the per-rank series went away or broke meanwhile
        raise CommandError(f"cannot build the chart of {doc.path}: {error}") from None
