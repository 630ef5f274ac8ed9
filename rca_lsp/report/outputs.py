"""The seed's output files (output_1..output_5) as JSON and CSV, each written atomically."""

from __future__ import annotations

import bisect
import functools
import itertools
import math
import multiprocessing
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence, TypeVar

import msgspec
import orjson

from rca_lsp import __version__
from rca_lsp.base.atomicfile import atomic_stream, remove_stale_temporaries, write_atomically
from rca_lsp.base.cancel import ShouldStop, never, stop_if
from rca_lsp.base.forkpart import BackgroundWork
from rca_lsp.base.gcpause import paused_gc
from rca_lsp.compare.records import ModuleRecord
from rca_lsp.compare.statistics import STAT_NAMES, priority_for
from rca_lsp.diagnose.analysis import Analysis
from rca_lsp.model.stats import TensorStats
from rca_lsp.report.answer import ANSWER_NAMES, write_answer, write_chart
from rca_lsp.report.cells import csv_body, csv_table, json_spelling, marked_non_finite
from rca_lsp.report.columns import MSPROBE_LIST_COLUMNS, VERDICT_COLUMNS, msprobe_rows
from rca_lsp.report.manifest import forget_manifest, new_run_id, write_manifest
from rca_lsp.report.root_cause import root_cause_report
from rca_lsp.report.splittable import write_split
from rca_lsp.report.tensorcolumns import TENSOR_COLUMNS, evidence_by_target, has_tensor_evidence, tensor_cells

T = TypeVar("T")

_FOCUS = {
    "P1": "investigate",
    "P2": "investigate",
    "P3": "check_shape",
    "P4": "none",
    "P5": "deprioritized",
    "-": "premise",
}


def _json(document: Any, indent: bool = False) -> bytes:
    """Large tables are written compact (indentation doubled output_3 and its write time); the report indented."""
    return orjson.dumps(document, option=orjson.OPT_INDENT_2 if indent else 0) + b"\n"


MAPPING_COLUMNS = ("train_key", "rollout_keys", "layer_index", "block", "cardinality", "confidence", "notes")
TARGET_COLUMNS = (
    "train_key",
    "rollout_key",
    "target",
    "aggregated",
    "train_dtype",
    "rollout_dtype",
    "dtype_match",
    "train_shape",
    "rollout_shape",
    "shape_relation",
    *(f"{side}_{stat}" for stat in STAT_NAMES for side in ("train", "rollout")),
    *VERDICT_COLUMNS,
    "reason",
)
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


def _mapping_rows(analysis: Analysis) -> list[tuple[Any, ...]]:
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


_MISSING_ERRORS = (None, "missing") * len(STAT_NAMES)


def _finite(numbers: Iterable[float | None]) -> bool:
    """Whether no number is NaN or infinite, in C: a NaN or an infinity makes the sum non-finite (so does an
    overflowing sum of finite numbers, only a false alarm)."""
    return math.isfinite(sum(filter(None, numbers)))


def _stat_values(train: TensorStats, rollout: TensorStats) -> tuple[float | None, ...]:
    return (train.max, rollout.max, train.min, rollout.min, train.mean, rollout.mean, train.norm, rollout.norm)


def _one_side_values(train: TensorStats | None, rollout: TensorStats | None) -> tuple[float | None, ...]:
    return tuple(getattr(side, stat.lower(), None) for stat in STAT_NAMES for side in (train, rollout))


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


Meta = dict[str, Any]  # the "meta" of the JSON tables: tool, version, run id, inputs


def _meta(analysis: Analysis, run_id: str) -> Meta:
    return {
        "tool": "rca-lsp",
        "version": __version__,
        "run_id": run_id,
        "train_path": analysis.train.path,
        "rollout_path": analysis.rollout.path,
        "mapping_key_path": analysis.mapping.path,
    }


CHUNK = 5000  # rows serialised at a time: tables stream to disk instead of living in memory whole


def write_table(
    out_dir: Path,
    stem: str,
    meta: dict[str, Any],
    container: str,
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
    list_columns: Sequence[int],
) -> list[Path]:
    """`<stem>.json` ({"meta", container: [row objects]}) and `<stem>.csv`, streamed chunk by chunk."""
    json_path, csv_path = out_dir / f"{stem}.json", out_dir / f"{stem}.csv"
    json_head, csv_head = table_heads(meta, container, columns)
    iterator = iter(rows)
    with atomic_stream(json_path) as json_out, atomic_stream(csv_path) as csv_out:
        json_out.write(json_head)
        csv_out.write(csv_head)
        for index in itertools.count():
            chunk = list(itertools.islice(iterator, CHUNK))
            if not chunk:
                break
            json_text, csv_text = encode_chunk(index, chunk, columns, list_columns)
            json_out.write(json_text)
            csv_out.write(csv_text)
        json_out.write(JSON_TAIL)
    return [json_path, csv_path]


JSON_TAIL = b"]}\n"  # closes what table_heads opened


def table_heads(meta: dict[str, Any], container: str, columns: Sequence[str]) -> tuple[bytes, bytes]:
    """The JSON table's opening (its meta and the container key) and the CSV header line."""
    return b'{"meta":' + orjson.dumps(meta) + b',"' + container.encode() + b'":[', ",".join(columns).encode() + b"\n"


def encode_chunk(
    index: int, rows: Sequence[Sequence[Any]], columns: Sequence[str], list_columns: Sequence[int]
) -> tuple[bytes, bytes]:
    """The JSON (row objects, comma-led after the first chunk) and CSV text of one chunk of a table."""
    row_type = _row_type(tuple(columns))
    json_text = _ROW_ENCODER.encode([row_type(*row) for row in rows])[1:-1]
    return (b"," + json_text if index else json_text), csv_body(rows, list_columns, json_text.count(b'":null'))


_ROW_ENCODER = msgspec.json.Encoder(enc_hook=json_spelling)


@lru_cache(maxsize=None)
def _row_type(columns: tuple[str, ...]) -> type[msgspec.Struct]:
    """A row as a Struct whose fields are the columns: msgspec writes it as a JSON object in C, 2.5x faster than
    building a dict per row for orjson."""
    fields = [f"column_{index}" for index in range(len(columns))]  # identifiers; written under the column names
    return msgspec.defstruct("Row", [(f, Any) for f in fields], rename=dict(zip(fields, columns)), gc=False)


class _TargetChunks:
    """output_3 by chunk of CHUNK rows, each computed on its own: two processes share the table's work."""

    def __init__(self, records: Sequence[ModuleRecord]) -> None:
        self._records = records
        self.tensors = has_tensor_evidence(records)
        self._starts = list(itertools.accumulate((r.comparison.target_count() for r in records), initial=0))
        self.count = -(-self._starts[-1] // CHUNK)

    def rows(self, index: int) -> list[tuple[Any, ...]]:
        first = index * CHUNK
        record = bisect.bisect_right(self._starts, first) - 1
        skip = first - self._starts[record]
        return list(itertools.islice(_target_rows(self._records, record, self.tensors), skip, skip + CHUNK))


def _target_rows(records: Sequence[ModuleRecord], start: int = 0, tensors: bool = False) -> Iterator[tuple[Any, ...]]:
    for index in range(start, len(records)):
        comparison = records[index].comparison
        output_aligned = comparison.output_consistency == "aligned"
        elementwise = evidence_by_target(comparison.tensor_evidence) if tensors else {}
        for spec, assessment in comparison.assessed_targets():
            target, train_key, rollout_key, train, rollout, aggregated = spec
            errors, tol, dtype_match, relation, consistency, status, reason = assessment
            priority, bucket = priority_for(consistency, relation)
            if output_aligned and consistency == "mismatch" and target.startswith("parameters."):
                priority, bucket = "P5", "parameter_mismatch_output_aligned"
            values = _stat_values(train, rollout) if train and rollout else _one_side_values(train, rollout)
            errors = errors or _MISSING_ERRORS
            if not _finite((*values, *errors[::2])):  # the statistics and their relative errors
                values, errors = tuple(map(marked_non_finite, values)), tuple(map(marked_non_finite, errors))
            row = (
                train_key,
                rollout_key,
                target,
                aggregated,
                train.dtype if train else None,
                rollout.dtype if rollout else None,
                dtype_match,
                (train.shape or ()) if train else None,
                (rollout.shape or ()) if rollout else None,
                relation,
                *values,
                *errors,
                tol,
                consistency,
                status,
                priority,
                bucket,
                _FOCUS[priority],
                reason,
            )
            yield row + tensor_cells(elementwise.get((target, train_key, rollout_key))) if tensors else row


def _write_mapping(analysis: Analysis, out_dir: Path, meta: Meta, should_stop: ShouldStop = never) -> list[Path]:
    written = write_table(out_dir, "output_1_key_mapping", meta, "rows", MAPPING_COLUMNS, _mapping_rows(analysis), (1,))
    matched = [(r.train_key, r.rollout_keys) for r in analysis.rows if r.rollout_keys]
    write_atomically(out_dir / "output_2_mapping.json", _json(dict(matched)))
    write_atomically(out_dir / "output_2_mapping.csv", csv_table(("train_key", "rollout_keys"), matched, (1,)))
    return written + [out_dir / "output_2_mapping.json", out_dir / "output_2_mapping.csv"]


_COMPARE_STEM = "output_3_value_compare"
_TARGET_LIST_COLUMNS = (7, 8)
_MSPROBE_COLUMNS, _to_msprobe = msprobe_rows(TARGET_COLUMNS)


def _compare_columns(style: str, tensors: bool) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """output_3's columns (with the element-wise ones when the dumps had tensors or hashes) and its list columns."""
    extra = TENSOR_COLUMNS if tensors else ()
    if style == "msprobe":
        return _MSPROBE_COLUMNS + extra, MSPROBE_LIST_COLUMNS
    return TARGET_COLUMNS + extra, _TARGET_LIST_COLUMNS


def _styled(rows: Iterable[tuple[Any, ...]], style: str) -> Iterable[tuple[Any, ...]]:
    if style != "msprobe":
        return rows
    width = len(TARGET_COLUMNS)
    return (_to_msprobe(row) + row[width:] if len(row) > width else _to_msprobe(row) for row in rows)


def _write_compare(
    analysis: Analysis, out_dir: Path, meta: Meta, should_stop: ShouldStop = never, style: str = "rca"
) -> list[Path]:
    tensors = has_tensor_evidence(analysis.records)
    columns, list_columns = _compare_columns(style, tensors)
    rows = _styled(_until_stopped(_target_rows(analysis.records, 0, tensors), should_stop), style)
    return write_table(out_dir, _COMPARE_STEM, meta, "rows", columns, rows, list_columns)


def _until_stopped(items: Iterable[T], should_stop: ShouldStop) -> Iterator[T]:
    """The items, looking at `should_stop` every CHUNK of them (Cancelled drops the file being written)."""
    for index, item in enumerate(items):
        if index % CHUNK == 0:
            stop_if(should_stop)
        yield item


def _write_modules(analysis: Analysis, out_dir: Path, meta: Meta, should_stop: ShouldStop = never) -> list[Path]:
    rows = (_module_row(r) for r in _until_stopped(analysis.records, should_stop))
    return write_table(out_dir, "output_4_module_analysis", meta, "records", MODULE_COLUMNS, rows, (2, 3))


OUTPUT_NAMES = (
    tuple(
        f"{stem}.{ext}"
        for stem in ("output_1_key_mapping", "output_2_mapping", _COMPARE_STEM, "output_4_module_analysis")
        for ext in ("json", "csv")
    )
    + ANSWER_NAMES
)


Part = Callable[[Analysis, Path, Meta, ShouldStop], list[Path]]


def _write_part(
    part: Part, analysis: Analysis, out_dir: Path, meta: Meta, should_stop: ShouldStop = never
) -> list[Path]:
    stop_if(should_stop)
    with paused_gc():
        return part(analysis, out_dir, meta, should_stop)


def write_outputs(
    analysis: Analysis,
    out_dir: Path,
    fork: bool = False,
    should_stop: ShouldStop = never,
    columns: str = "rca",
    chart: bool = True,
    on_answer: Callable[[dict[str, Any]], None] | None = None,
) -> list[Path]:
    """Write every output file, then the manifest listing them (see manifest); the paths written, the manifest
    last; `columns`: output_3's column names, one of COLUMN_STYLES; `chart`: whether to draw the divergence chart
    (seconds on 10^5 modules). The answer comes first: output_5's JSON and Markdown are written, then
    `on_answer` is called with the report they hold (the CLI prints its summary), then the chart and the tables.
    With `fork` (single-threaded callers only: forking a threaded process can deadlock), the value-compare
    tables, most of the work, are shared with a child process: it starts on them while this process writes the
    other files, which then takes value-compare chunks from the end; a second child draws the chart meanwhile.
    Without `fork`, raises Cancelled once `should_stop` says so: files written by then stay, the one being written
    is dropped, no manifest is written. Temporary files that killed runs left in `out_dir` are removed first."""
    out_dir.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(out_dir, OUTPUT_NAMES)
    forget_manifest(out_dir)
    meta = _meta(analysis, new_run_id())
    fork = fork and "fork" in multiprocessing.get_all_start_methods()
    report = {"run_id": meta["run_id"], **root_cause_report(analysis)}
    written = write_answer(analysis, out_dir, report, chart)
    if on_answer is not None:
        on_answer(report)

    def chart_files(analysis: Analysis, out_dir: Path, meta: Meta, should_stop: ShouldStop) -> list[Path]:
        return write_chart(analysis, out_dir, report, chart, fork)

    compare: Part = functools.partial(_write_compare, style=columns)
    if not fork:
        parts: list[Part] = [_write_mapping, compare, _write_modules, chart_files]
        written += [path for part in parts for path in _write_part(part, analysis, out_dir, meta, should_stop)]
    elif chart:
        # the chart is seconds of work for one process (10^5 modules): a second child draws it meanwhile
        with BackgroundWork(functools.partial(_write_part, chart_files, analysis, out_dir, meta)) as background:
            written += _write_forked(analysis, out_dir, meta, columns, [_write_mapping, _write_modules])
            written += background.result()
    else:
        written += _write_forked(analysis, out_dir, meta, columns, [_write_mapping, _write_modules, chart_files])
    return written + [write_manifest(out_dir, meta, written)]


def _write_forked(analysis: Analysis, out_dir: Path, meta: Meta, style: str, others: list[Part]) -> list[Path]:
    """The value-compare tables split with a child (see write_split) while this process writes the `others`."""
    chunks = _TargetChunks(analysis.records)
    columns, list_columns = _compare_columns(style, chunks.tensors)

    def encode(index: int) -> tuple[bytes, bytes]:
        return encode_chunk(index, list(_styled(chunks.rows(index), style)), columns, list_columns)

    def other_parts() -> list[Path]:
        return [path for part in others for path in _write_part(part, analysis, out_dir, meta)]

    paths = (out_dir / f"{_COMPARE_STEM}.json", out_dir / f"{_COMPARE_STEM}.csv")
    written = write_split(paths, table_heads(meta, "rows", columns), JSON_TAIL, chunks.count, encode, other_parts)
    return written + list(paths)
