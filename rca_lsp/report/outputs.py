"""The seed's output files (output_1..output_5) as JSON and CSV, each written atomically."""

from __future__ import annotations

import functools
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Protocol, Sequence, TypeVar

import orjson

from rca_lsp import __version__
from rca_lsp.base.atomicfile import remove_stale_temporaries, same_file, write_atomically
from rca_lsp.base.cancel import ShouldStop, never, stop_if
from rca_lsp.base.errors import InputError
from rca_lsp.base.forkpart import BackgroundWork, can_fork
from rca_lsp.base.gcpause import paused_gc
from rca_lsp.compare.records import ModuleRecord
from rca_lsp.diagnose.analysis import Analysis, Compared
from rca_lsp.report.answer import ANSWER_NAMES, write_answer, write_chart
from rca_lsp.report.manifest import MANIFEST_NAME, forget_manifest, new_run_id, write_manifest
from rca_lsp.report.root_cause import root_cause_report
from rca_lsp.report.tables.cells import csv_table
from rca_lsp.report.tables.splittable import write_split
from rca_lsp.report.tables.values import COMPARE_STEM, TargetChunks, compare_columns, styled, write_compare
from rca_lsp.report.tables.writer import CHUNK, JSON_TAIL, Meta, encode_chunk, table_heads, write_table

T = TypeVar("T")


def _json(document: Any, indent: bool = False) -> bytes:
    """Large tables are written compact (indentation doubled output_3 and its write time); the report indented."""
    return orjson.dumps(document, option=orjson.OPT_INDENT_2 if indent else 0) + b"\n"


MAPPING_COLUMNS = ("train_key", "rollout_keys", "layer_index", "block", "cardinality", "confidence", "notes")
MODULE_COLUMNS = (
    "train_key",
    "rollout_key",
    "train_keys",
    "rollout_keys",
    "cardinality",
    "call_index",
    "layer_index",
    "block",
    "output_consistency",
    "input_args_consistency",
    "parameter_consistency",
    "input_kwargs_consistency",
    "module_bucket",
    "module_priority_rank",
    "reasoning",
    "dtype_mismatch",
    "weight_comparable",
    "kwargs_comparable",
)


def _mapping_rows(analysis: Compared) -> list[tuple[Any, ...]]:
    return [
        (
            r.train_key,
            r.rollout_keys,
            r.layer_index if r.layer_index is not None else "-",
            r.block,
            r.cardinality,
            r.confidence,
            r.notes,
        )
        for r in analysis.rows
    ]


def _module_row(record: ModuleRecord) -> tuple[Any, ...]:
    c = record.comparison
    layer = record.layer_index
    return (
        c.train_key,
        c.rollout_key,
        c.train_keys,
        c.rollout_keys,
        c.cardinality,
        record.call_index,
        layer if layer is not None else "-",
        record.block,
        c.output_consistency,
        c.input_args_consistency,
        c.parameter_consistency,
        c.kwargs_consistency,
        c.module_bucket,
        c.module_priority_rank,
        c.reasoning,
        c.dtype_mismatch,
        c.parameter_consistency in ("aligned", "mismatch"),
        c.kwargs_consistency not in ("missing", "partial"),
    )


def _meta(analysis: Compared, run_id: str) -> Meta:
    return {
        "tool": "rca-lsp",
        "version": __version__,
        "run_id": run_id,
        "train_path": analysis.train.path,
        "rollout_path": analysis.rollout.path,
        "mapping_key_path": analysis.mapping.path,
    }


def _write_mapping(analysis: Compared, out_dir: Path, meta: Meta, should_stop: ShouldStop = never) -> list[Path]:
    written = write_table(out_dir, "output_1_key_mapping", meta, "rows", MAPPING_COLUMNS, _mapping_rows(analysis), (1,))
    matched = [(r.train_key, r.rollout_keys) for r in analysis.rows if r.rollout_keys]
    write_atomically(out_dir / "output_2_mapping.json", _json(dict(matched)))
    write_atomically(out_dir / "output_2_mapping.csv", csv_table(("train_key", "rollout_keys"), matched, (1,)))
    return written + [out_dir / "output_2_mapping.json", out_dir / "output_2_mapping.csv"]


def _until_stopped(items: Iterable[T], should_stop: ShouldStop) -> Iterator[T]:
    """The items, looking at `should_stop` every CHUNK of them (Cancelled drops the file being written)."""
    for index, item in enumerate(items):
        if index % CHUNK == 0:
            stop_if(should_stop)
        yield item


def _write_modules(analysis: Compared, out_dir: Path, meta: Meta, should_stop: ShouldStop = never) -> list[Path]:
    rows = (_module_row(r) for r in _until_stopped(analysis.records, should_stop))
    return write_table(out_dir, "output_4_module_analysis", meta, "records", MODULE_COLUMNS, rows, (2, 3))


OUTPUT_NAMES = (
    tuple(
        f"{stem}.{ext}"
        for stem in ("output_1_key_mapping", "output_2_mapping", COMPARE_STEM, "output_4_module_analysis")
        for ext in ("json", "csv")
    )
    + ANSWER_NAMES
)


Part = Callable[[Compared, Path, Meta, ShouldStop], list[Path]]


class TablesProgress(Protocol):
    """What write_outputs tells of the files after the answer (the CLI shows it on a terminal): seconds of
    silence on a 10^5-module pair otherwise."""

    def wrote_part(self, paths: Sequence[Path]) -> None: ...

    def say(self, text: str) -> None: ...


class _Quiet:
    def wrote_part(self, paths: Sequence[Path]) -> None:
        pass

    def say(self, text: str) -> None:
        pass


def _write_part(
    part: Part,
    analysis: Compared,
    out_dir: Path,
    meta: Meta,
    should_stop: ShouldStop = never,
    progress: TablesProgress = _Quiet(),
) -> list[Path]:
    stop_if(should_stop)
    with paused_gc():
        written = part(analysis, out_dir, meta, should_stop)
    progress.wrote_part(written)
    return written


def _chunk_progress(progress: TablesProgress, name: str) -> Callable[[int, int], None]:
    """on_chunk for write_split: the share of `name`'s chunks taken, each tenth once."""
    said = [0]

    def on_chunk(done: int, chunks: int) -> None:
        tenth = 10 * done // max(chunks, 1)
        if tenth > said[0]:
            said[0] = tenth
            progress.say(f"{name}: {10 * tenth}% of {chunks} chunks of rows")

    return on_chunk


class BackgroundTables:
    """output_1, output_2 and output_4 (their rows come straight off the compared groups) written by a forked child
    from the moment the groups are compared (see analysis.Compared), while this process derives the root-cause
    evidence and writes the answer: the second core, idle during the analysis, takes that part of the output early.
    Give `start` as the analysis's `on_compared`, then this to write_outputs. Single-threaded callers only: the
    child is forked."""

    def __init__(self, out_dir: Path, progress: TablesProgress) -> None:
        self._out_dir, self._progress = out_dir, progress
        self._work: BackgroundWork | None = None
        self.meta: Meta | None = None  # the run's, once started

    def start(self, compared: Compared) -> None:
        self.meta = _begin(compared, self._out_dir)
        parts: list[Part] = [_write_mapping, _write_modules]
        self._work = BackgroundWork(
            functools.partial(_write_parts, parts, compared, self._out_dir, self.meta, self._progress), background=True
        )

    def result(self) -> list[Path]:
        """The paths the child wrote (or, if it failed, this process wrote: its error reads as usual)."""
        assert self._work is not None
        return self._work.result()

    def close(self) -> None:
        """Ends the child if it still runs (an error or a Ctrl-C before its result was taken)."""
        if self._work is not None:
            self._work.close()

    def __enter__(self) -> BackgroundTables:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def check_inputs_spared(out_dir: Path, inputs: Iterable[str | Path]) -> None:
    """InputError when an input of the run is one of the files it writes into `out_dir`: a mapping-key file kept
    as a previous run's output_2_mapping.json (it is a valid mapping) would be replaced by what this run keeps of
    it, its entries naming keys missing from the dumps lost."""
    for given in inputs:
        for name in (*OUTPUT_NAMES, MANIFEST_NAME):
            if same_file(given, out_dir / name):
                raise InputError(
                    str(given),
                    f"is {name} in the output folder {out_dir}, which this run replaces: copy it elsewhere to read "
                    "it, or write the outputs to another folder",
                )


def _begin(compared: Compared, out_dir: Path) -> Meta:
    """The output folder made ready for a run (checked not to hold the run's mapping-key file among the files it
    replaces; created, killed runs' temporaries and the manifest removed): the run's meta."""
    check_inputs_spared(out_dir, [compared.mapping.path])
    out_dir.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(out_dir, OUTPUT_NAMES)
    forget_manifest(out_dir)
    return _meta(compared, new_run_id())


def _write_parts(
    parts: list[Part],
    compared: Compared,
    out_dir: Path,
    meta: Meta,
    progress: TablesProgress,
    should_stop: ShouldStop = never,
) -> list[Path]:
    return [path for part in parts for path in _write_part(part, compared, out_dir, meta, should_stop, progress)]


def write_outputs(
    analysis: Analysis,
    out_dir: Path,
    fork: bool = False,
    should_stop: ShouldStop = never,
    columns: str = "rca",
    chart: bool = True,
    on_answer: Callable[[dict[str, Any]], None] | None = None,
    progress: TablesProgress = _Quiet(),
    tables: BackgroundTables | None = None,
) -> list[Path]:
    """Write every output file, then the manifest listing them (see manifest); the paths written, the manifest
    last; `columns`: output_3's column names, one of COLUMN_STYLES; `chart`: whether to draw the divergence chart
    (seconds on 10^5 modules). The answer comes first: output_5's JSON and Markdown are written, then
    `on_answer` is called with the report they hold (the CLI prints its summary), then the chart and the tables,
    each file told to `progress` as it is written (and output_3's share done, by tenths).
    With `fork` (single-threaded callers only: forking a threaded process can deadlock), the work is shared with
    forked children: output_1, 2 and 4 by `tables` (started early on this analysis, else here), output_3 by a
    child and this process once the chart is drawn (see write_split), the chart's image by another.
    Without `fork`, raises Cancelled once `should_stop` says so: files written by then stay, the one being written
    is dropped, no manifest is written. Temporary files that killed runs left in `out_dir` are removed first."""
    fork = fork and can_fork()
    early = (tables or BackgroundTables(out_dir, progress)) if fork else None
    with early if early is not None else nullcontext():
        if early is not None and early.meta is None:  # started here: the analysis is every stage
            early.start(analysis)
        meta = early.meta if early is not None and early.meta is not None else _begin(analysis, out_dir)
        report = {"run_id": meta["run_id"], **root_cause_report(analysis)}
        written = write_answer(analysis, out_dir, report, chart)
        if on_answer is not None:
            on_answer(report)

        def chart_files(_: Compared, out_dir: Path, meta: Meta, should_stop: ShouldStop) -> list[Path]:
            return write_chart(analysis, out_dir, report, chart, fork)  # the whole analysis: the suspects too

        if early is None:
            compare: Part = functools.partial(write_compare, style=columns)
            parts: list[Part] = [_write_mapping, compare, _write_modules, chart_files]
            written += _write_parts(parts, analysis, out_dir, meta, progress, should_stop)
        else:
            with paused_gc():
                analysis.targets  # built before the value table's child forks: both read it
            written += _write_forked(analysis, out_dir, meta, columns, [chart_files], progress)
            written += early.result()
    return written + [write_manifest(out_dir, meta, written)]


def _write_forked(
    analysis: Compared, out_dir: Path, meta: Meta, style: str, others: list[Part], progress: TablesProgress
) -> list[Path]:
    """The value-compare tables split with a child (see write_split) while this process writes the `others`."""
    chunks = TargetChunks(analysis)
    columns, list_columns = compare_columns(style, chunks.tensors)

    def encode(index: int) -> tuple[bytes, bytes]:
        return encode_chunk(index, list(styled(chunks.rows(index), style)), columns, list_columns)

    def other_parts() -> list[Path]:
        return _write_parts(others, analysis, out_dir, meta, progress)

    paths = (out_dir / f"{COMPARE_STEM}.json", out_dir / f"{COMPARE_STEM}.csv")
    heads = table_heads(meta, "rows", columns)
    on_chunk = _chunk_progress(progress, COMPARE_STEM)
    written = write_split(paths, heads, JSON_TAIL, chunks.count, encode, other_parts, on_chunk)
    progress.wrote_part(paths)
    return written + list(paths)
