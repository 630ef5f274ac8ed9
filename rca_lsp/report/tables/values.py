"""output_3, the value table: one row per compared target (each record's output, inputs and parameters), read off
the analysis's columnar target table (compare/targettable.py) chunk by chunk, so that two processes can share it."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence, cast

import numpy as np

from rca_lsp.base.cancel import ShouldStop, never, stop_if
from rca_lsp.compare.groupform import SpecTuple
from rca_lsp.compare.statistics import STAT_NAMES, assess, differs, dtype_note, priority_for, shape_relation, within
from rca_lsp.compare.targettable import STATUSES, TargetTable
from rca_lsp.diagnose.analysis import Compared
from rca_lsp.model.stats import TensorStats
from rca_lsp.model.tolerance import Tolerances
from rca_lsp.report.tables.cells import marked_non_finite
from rca_lsp.report.tables.columns import MSPROBE_LIST_COLUMNS, VERDICT_COLUMNS, msprobe_rows
from rca_lsp.report.tables.tensorcolumns import TENSOR_COLUMNS, evidence_by_target, has_tensor_evidence, tensor_cells
from rca_lsp.report.tables.writer import CHUNK, Meta, write_table

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


def _one_side_values(train: TensorStats | None, rollout: TensorStats | None) -> tuple[float | None, ...]:
    return tuple(getattr(side, stat.lower(), None) for stat in STAT_NAMES for side in (train, rollout))


def _priority(consistency: str, relation: str, target: str, output_consistency: str) -> tuple[str, str]:
    """A target's priority and bucket: a parameter beyond its tolerance under an aligned output is demoted."""
    if consistency == "mismatch" and output_consistency == "aligned" and target[0] == "p":
        return "P5", "parameter_mismatch_output_aligned"
    return priority_for(consistency, relation)


def target_row(spec: SpecTuple, tolerances: Tolerances, output_consistency: str) -> tuple[Any, ...]:
    """One target's row of output_3 judged by `statistics.assess`: the rows the target table does not judge by its
    arrays (a side missing, a statistic missing or non-finite, ...); `output_consistency`: its record's output's."""
    target, train_key, rollout_key, train, rollout, aggregated = spec
    errors, tol, dtype_match, relation, consistency, status, reason = assess(target, train, rollout, tolerances)
    priority, bucket = _priority(consistency, relation, target, output_consistency)
    values = _one_side_values(train, rollout)
    errors = errors or _MISSING_ERRORS
    if not _finite((*values, *errors[::2])):  # the statistics and their relative errors
        values, errors = tuple(map(marked_non_finite, values)), tuple(map(marked_non_finite, errors))
    return (
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


def target_rows(table: TargetTable, start: int, stop: int, output_consistency: Sequence[str]) -> list[tuple[Any, ...]]:
    """Rows start..stop-1 of output_3 (without the element-wise columns); `output_consistency[i]`: record i's
    output's. The rows the table judged by its arrays, with finite errors, are built column by column from them;
    the others one by one by target_row, which gives the same rows (tests/test_target_table.py)."""
    specs = table.specs[start:stop]
    owners = table.record[start:stop]
    fast = table.simple[start:stop] & np.isfinite(table.errors[start:stop]).all(axis=1)
    at = np.flatnonzero(fast)
    rows: list[tuple[Any, ...]] = _array_rows(
        table, [specs[i] for i in at.tolist()], start + at, owners[at], output_consistency
    )
    if len(at) == len(specs):
        return rows
    found: list[tuple[Any, ...]] = [()] * len(specs)
    for offset, row in zip(at.tolist(), rows):
        found[offset] = row
    for offset in np.flatnonzero(~fast).tolist():
        owner = int(owners[offset])
        found[offset] = target_row(specs[offset], table.tolerances_of(start + offset), output_consistency[owner])
    return found


def _array_rows(
    table: TargetTable, specs: list[SpecTuple], rows: np.ndarray, owners: np.ndarray, output_consistency: Sequence[str]
) -> list[tuple[Any, ...]]:
    """The rows of targets `rows` (simple ones with finite errors; `specs` theirs, `owners` their records) from the
    table's arrays, a column at a time: what statistics.assess gives them, through target_row's cells."""
    targets = [spec[0] for spec in specs]
    # simple rows have both sides
    trains, rollouts = cast(list[TensorStats], [s[3] for s in specs]), cast(list[TensorStats], [s[4] for s in specs])
    relations = list(map(shape_relation, trains, rollouts))
    values = np.empty((len(specs), 8))
    values[:, 0::2], values[:, 1::2] = table.train_values[rows], table.rollout_values[rows]
    errors = table.errors[rows]
    statuses = np.array(STATUSES, dtype=object)[table.status_codes[rows]]
    cells = np.empty((len(specs), 8), dtype=object)
    cells[:, 0::2], cells[:, 1::2] = errors, statuses
    tolerances = table.tolerance[rows].tolist()
    train_dtypes = table.dtype_names(table.train_dtype[rows])
    rollout_dtypes = table.dtype_names(table.rollout_dtype[rows])
    dtype_matches = table.dtype_match_names(rows)
    bad = table.bad[rows]
    mismatch = bad.any(axis=1)
    consistency = np.where(mismatch, "mismatch", "aligned").astype(object).tolist()
    statuses_of_value = np.where(mismatch, "mismatch", "match").astype(object).tolist()
    reasons = _reasons(targets, tolerances, dtype_matches, train_dtypes, rollout_dtypes)
    priorities = list(map(priority_for, consistency, relations))
    mismatched = np.flatnonzero(mismatch)
    # the first of the largest errors beyond tolerance
    worst = np.where(bad[mismatched], errors[mismatched], -np.inf).argmax(axis=1)
    worst_errors = errors[mismatched, worst].tolist()
    for offset, stat, error in zip(mismatched.tolist(), worst.tolist(), worst_errors):
        target, tol = targets[offset], tolerances[offset]
        note = dtype_note(dtype_matches[offset], train_dtypes[offset], rollout_dtypes[offset])
        row = rows[offset]
        parameter_tol = float(table.stat_tolerance[row, 3]) if table.exact[row] else None
        reasons[offset] = differs(target, STAT_NAMES[stat], error, tol, parameter_tol) + note
        priorities[offset] = _priority("mismatch", relations[offset], target, output_consistency[owners[offset]])
    return list(
        zip(
            [spec[1] for spec in specs],
            [spec[2] for spec in specs],
            targets,
            [spec[5] for spec in specs],
            train_dtypes,
            rollout_dtypes,
            dtype_matches,
            [train.shape or () for train in trains],
            [rollout.shape or () for rollout in rollouts],
            relations,
            *values.T.tolist(),
            *cells.T.tolist(),
            tolerances,
            consistency,
            statuses_of_value,
            *zip(*priorities),
            [_FOCUS[priority] for priority, _ in priorities],
            reasons,
        )
    )


def _reasons(
    targets: list[str],
    tolerances: list[float],
    matches: list[str],
    train_dtypes: list[str | None],
    rollout_dtypes: list[str | None],
) -> list[str]:
    """Each target's reason when it is within its tolerance (statistics.within and the dtype note), each distinct
    one spelled once."""
    spelled: dict[tuple[str, float, str], str] = {}
    reasons = []
    for target, tol, match, train, rollout in zip(targets, tolerances, matches, train_dtypes, rollout_dtypes):
        note = dtype_note(match, train, rollout)
        reason = spelled.get((target, tol, note))
        if reason is None:
            reason = spelled[(target, tol, note)] = within(target, tol) + note
        reasons.append(reason)
    return reasons


class TargetChunks:
    """output_3 by chunk of CHUNK rows, each computed on its own: two processes share the table's work."""

    def __init__(self, analysis: Compared) -> None:
        self._table = analysis.targets
        self._records = analysis.records
        self.tensors = has_tensor_evidence(analysis.records)
        self._output_consistency = [record.comparison.output_consistency for record in analysis.records]
        self.count = -(-len(self._table.specs) // CHUNK)

    def rows(self, index: int) -> list[tuple[Any, ...]]:
        start = index * CHUNK
        stop = min(start + CHUNK, len(self._table.specs))
        rows = target_rows(self._table, start, stop, self._output_consistency)
        if not self.tensors:
            return rows
        owners = self._table.record[start:stop].tolist()
        evidence_of: tuple[int, dict[Any, Any]] = (-1, {})
        for offset, (owner, spec) in enumerate(zip(owners, self._table.specs[start:stop])):
            if evidence_of[0] != owner:
                evidence_of = (owner, evidence_by_target(self._records[owner].comparison.tensor_evidence))
            rows[offset] += tensor_cells(evidence_of[1].get((spec[0], spec[1], spec[2])))
        return rows


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
