"""output_3, the value table: one row per compared target (each record's output, inputs and parameters), read off
the analysis's columnar target table (compare/targettable.py) chunk by chunk, so that two processes can share it."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence, TypeVar

from rca_lsp.base.cancel import ShouldStop, never, stop_if
from rca_lsp.compare.records import ModuleRecord
from rca_lsp.compare.statistics import STAT_NAMES, priority_for
from rca_lsp.compare.targettable import TargetTable
from rca_lsp.diagnose.analysis import Compared
from rca_lsp.model.stats import TensorStats
from rca_lsp.report.tables.cells import marked_non_finite
from rca_lsp.report.tables.columns import MSPROBE_LIST_COLUMNS, VERDICT_COLUMNS, msprobe_rows
from rca_lsp.report.tables.tensorcolumns import TENSOR_COLUMNS, evidence_by_target, has_tensor_evidence, tensor_cells
from rca_lsp.report.tables.writer import CHUNK, Meta, write_table

T = TypeVar("T")

COMPARE_STEM = "output_3_value_compare"
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
_TARGET_LIST_COLUMNS = (7, 8)
_MSPROBE_COLUMNS, _to_msprobe = msprobe_rows(TARGET_COLUMNS)
_FOCUS = {
    "P1": "investigate",
    "P2": "investigate",
    "P3": "check_shape",
    "P4": "none",
    "P5": "deprioritized",
    "-": "premise",
}
_MISSING_ERRORS = (None, "missing") * len(STAT_NAMES)


def _finite(numbers: Iterable[float | None]) -> bool:
    """Whether no number is NaN or infinite, in C: a NaN or an infinity makes the sum non-finite (so does an
    overflowing sum of finite numbers, only a false alarm)."""
    return math.isfinite(sum(filter(None, numbers)))


def _stat_values(train: TensorStats, rollout: TensorStats) -> tuple[float | None, ...]:
    return (train.max, rollout.max, train.min, rollout.min, train.mean, rollout.mean, train.norm, rollout.norm)


def _one_side_values(train: TensorStats | None, rollout: TensorStats | None) -> tuple[float | None, ...]:
    return tuple(getattr(side, stat.lower(), None) for stat in STAT_NAMES for side in (train, rollout))


def target_rows(
    table: TargetTable, records: Sequence[ModuleRecord], start: int, stop: int, tensors: bool
) -> list[tuple[Any, ...]]:
    """Rows start..stop-1 of output_3 (`tensors`: with the element-wise columns)."""
    owners = table.record[start:stop].tolist()
    rows = []
    evidence_of: tuple[int, dict[Any, Any]] = (-1, {})
    for owner, spec, assessment in zip(owners, table.specs[start:stop], table.assessments(start, stop)):
        comparison = records[owner].comparison
        target, train_key, rollout_key, train, rollout, aggregated = spec
        errors, tol, dtype_match, relation, consistency, status, reason = assessment
        priority, bucket = priority_for(consistency, relation)
        if consistency == "mismatch" and comparison.output_consistency == "aligned" and target[0] == "p":
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
        if tensors:
            if evidence_of[0] != owner:
                evidence_of = (owner, evidence_by_target(comparison.tensor_evidence))
            row += tensor_cells(evidence_of[1].get((target, train_key, rollout_key)))
        rows.append(row)
    return rows


class TargetChunks:
    """output_3 by chunk of CHUNK rows, each computed on its own: two processes share the table's work."""

    def __init__(self, analysis: Compared) -> None:
        self._table = analysis.targets
        self._records = analysis.records
        self.tensors = has_tensor_evidence(analysis.records)
        self.count = -(-len(self._table.specs) // CHUNK)

    def rows(self, index: int) -> list[tuple[Any, ...]]:
        start = index * CHUNK
        stop = min(start + CHUNK, len(self._table.specs))
        return target_rows(self._table, self._records, start, stop, self.tensors)


def compare_columns(style: str, tensors: bool) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """output_3's columns (with the element-wise ones when the dumps had tensors or hashes) and its list columns."""
    extra = TENSOR_COLUMNS if tensors else ()
    if style == "msprobe":
        return _MSPROBE_COLUMNS + extra, MSPROBE_LIST_COLUMNS
    return TARGET_COLUMNS + extra, _TARGET_LIST_COLUMNS


def styled(rows: Iterable[tuple[Any, ...]], style: str) -> Iterable[tuple[Any, ...]]:
    """Rows under `style`'s column names (see compare_columns)."""
    if style != "msprobe":
        return rows
    width = len(TARGET_COLUMNS)
    return (_to_msprobe(row) + row[width:] if len(row) > width else _to_msprobe(row) for row in rows)


def _chunks(chunks: TargetChunks, should_stop: ShouldStop) -> Iterator[tuple[Any, ...]]:
    for index in range(chunks.count):
        stop_if(should_stop)
        yield from chunks.rows(index)


def write_compare(
    analysis: Compared, out_dir: Path, meta: Meta, should_stop: ShouldStop = never, style: str = "rca"
) -> list[Path]:
    """output_3 in one process."""
    chunks = TargetChunks(analysis)
    columns, list_columns = compare_columns(style, chunks.tensors)
    rows = styled(_chunks(chunks, should_stop), style)
    return write_table(out_dir, COMPARE_STEM, meta, "rows", columns, rows, list_columns)
