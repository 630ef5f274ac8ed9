"""Every compared target of an analysis (each record's output, inputs and parameters, as `ModuleComparison`
lists them) as columns: the statistics of both sides as float64 arrays, and their assessment computed over all
targets at once.

The outputs (output_3, the chart's series) read 10^6 targets of 10^5 records; assessed one by one in Python that
was most of their time. Here the common targets, whose four statistics are known and finite on both sides, are
judged by array expressions: the same formulas as `statistics.assess` (scale, relative error, status against the
tolerance and WARN_FACTOR), in the same IEEE operations, so every number is the same to the last bit. The others
(a side missing or unobservable, integer against floating, a missing or non-finite statistic) keep `assess`
itself: they are few, and their wording is its own. tests/test_target_table.py checks both ways agree."""

from __future__ import annotations

import math
from typing import NamedTuple, Sequence

import numpy as np

from rca_lsp.base.cached import cached_property
from rca_lsp.compare.groupform import SpecTuple, plain_rows
from rca_lsp.compare.module import ModuleComparison
from rca_lsp.compare.statistics import (
    NONFINITE_BOTH,
    STAT_NAMES,
    Consistency,
    GroupConsistency,
    PlainVerdict,
    quick_verdict,
)
from rca_lsp.dumps.columns import StatColumns, joined, stat_columns
from rca_lsp.dumps.dump import Dump
from rca_lsp.model.stats import TensorStats, dtype_pair, parameter_sum_tolerance, relative_error
from rca_lsp.model.tolerance import WARN_FACTOR, Tolerances, normalise_dtype

_KIND_OF = {"o": 0, "i": 1, "p": 2}  # output, input, parameters: by the first letter of a target's name
_NORM = STAT_NAMES.index("Norm")
_DTYPE_MATCH = ("match", "mismatch", "unknown")  # statistics.dtype_pair's verdicts
_MATCH, _MISMATCH = _DTYPE_MATCH.index("match"), _DTYPE_MATCH.index("mismatch")
STATUSES = ("ok", "warn", "alert")  # a statistic's status, as statistics._stat_cells names it


class TableSide(NamedTuple):
    """One side's statistics of every row: rows `rows` of `columns` (its own rows when None)."""

    columns: StatColumns
    rows: np.ndarray | None = None

    def stats(self, index: int) -> TensorStats | None:
        """Row `index`'s statistics object."""
        return self.columns.objects[index if self.rows is None else int(self.rows[index])]

    def taken(self, column: np.ndarray) -> np.ndarray:
        """A column of `columns` at this side's rows."""
        return column if self.rows is None else column[self.rows]


def listed_side(stats: list[TensorStats | None]) -> TableSide:
    """A side whose rows are `stats` (read in one pass over the objects per column)."""
    return TableSide(stat_columns(stats))


class PairTable:
    """Pairs of statistics (train, rollout) in rows, judged by arrays where they can be (`simple`), in groups of rows
    each under its own tolerances: what TargetTable lists for the outputs and quick_verdicts judges for records."""

    def __init__(
        self,
        train: TableSide,
        rollout: TableSide,
        starts: Sequence[int] | np.ndarray,
        tolerances: Sequence[Tolerances],
        parameters: np.ndarray,
    ) -> None:
        """`starts[i]`: group i's first row, and the row count last; `tolerances[i]`: group i's; `parameters`: which
        rows are parameters (their Max and Min may have to be equal: model.stats.exact_extremes)."""
        self.train_side, self.rollout_side = train, rollout
        self.starts = np.asarray(starts, dtype=np.int64)  # group i's rows: starts[i]:starts[i + 1]
        self.record = np.repeat(np.arange(len(self.starts) - 1, dtype=np.int64), np.diff(self.starts))
        self.count = int(self.starts[-1])
        self.train_values = train.taken(train.columns.values)
        self.rollout_values = rollout.taken(rollout.columns.values)
        shared = len({id(t) for t in tolerances}) <= 1
        self._tolerances = tolerances[0] if shared and tolerances else None
        self._per_record_tolerances = None if shared else list(tolerances)
        self.simple = self._simple_rows()  # the rows judged by the arrays (_simple_rows)
        # simple parameter rows of one dtype and size on both sides: Max and Min judged for equality
        numels = train.taken(train.columns.numels), rollout.taken(rollout.columns.numels)
        self.exact = parameters & self.simple & (self._dtype_match == _MATCH) & (numels[0] == numels[1])

    def tolerances_of(self, index: int) -> Tolerances:
        """The tolerances target `index` is judged under."""
        if self._tolerances is not None:
            return self._tolerances
        assert self._per_record_tolerances is not None
        return self._per_record_tolerances[int(self.record[index])]

    def _simple_rows(self) -> np.ndarray:
        """Targets judged by the arrays: both sides observable, of the same form (both integer or both floating),
        every statistic known and finite, a tolerance >= 0."""
        count, train, rollout = self.count, self.train_side, self.rollout_side
        train_numels, rollout_numels = train.taken(train.columns.numels), rollout.taken(rollout.columns.numels)
        # every statistic finite: both sides present (a missing one is NaN) and observable unless empty (numel 0;
        # an unknown numel counts as not empty)
        finite = np.isfinite(self.train_values).all(axis=1) & np.isfinite(self.rollout_values).all(axis=1)
        rows = np.flatnonzero(finite & (train_numels != 0) & (rollout_numels != 0))
        # each row's pair of dtypes as one code, judged once per distinct pair (a few) instead of once per row
        listed = list(dict.fromkeys(train.columns.dtypes + rollout.columns.dtypes))
        code_of = {name: code for code, name in enumerate(listed)}
        train_codes = np.array([code_of[d] for d in train.columns.dtypes], dtype=np.int64)[
            train.taken(train.columns.dtype_codes)
        ]
        rollout_codes = np.array([code_of[d] for d in rollout.columns.dtypes], dtype=np.int64)[
            rollout.taken(rollout.columns.dtype_codes)
        ]
        self.dtypes = listed  # the dtypes met (None: a side missing); each target's two as indexes into it:
        self.train_dtype, self.rollout_dtype = train_codes, rollout_codes
        distinct, which = np.unique(train_codes[rows] * len(listed) + rollout_codes[rows], return_inverse=True)
        pairs = [(listed[code // len(listed)], listed[code % len(listed)]) for code in distinct.tolist()]
        verdicts = [dtype_pair(*pair) for pair in pairs]
        self._dtype_match = np.zeros(count, dtype=np.int8)  # index into _DTYPE_MATCH
        self._dtype_match[rows] = np.array([_DTYPE_MATCH.index(v[0]) for v in verdicts], dtype=np.int8)[which]
        same_form = np.array([v[1] for v in verdicts], dtype=np.bool_)[which]
        tolerance = np.full(count, np.nan)
        if self._tolerances is not None:
            tolerance[rows] = np.array([self._tolerances.for_dtypes(*pair) for pair in pairs])[which]
        else:
            pair_of = which.tolist()
            tolerance[rows] = [self.tolerances_of(i).for_dtypes(*pairs[p]) for i, p in zip(rows.tolist(), pair_of)]
        simple = np.zeros(count, dtype=np.bool_)
        simple[rows] = same_form & (tolerance[rows] >= 0.0)
        self._numels = np.nan_to_num(train_numels), np.nan_to_num(rollout_numels)  # unknown: 0, as tensor_scale
        self.tolerance = np.where(simple, tolerance, 0.0)
        return simple

    @cached_property
    def errors(self) -> np.ndarray:
        """(n, 4) relative error of Max, Min, Mean, Norm, as statistics.stat_error measures them (simple rows)."""
        t, r = self.train_values, self.rollout_values
        with np.errstate(all="ignore"):  # the other rows hold NaN; their results are not read
            scale = _comparison_scale(t, r, *self._numels, self._dtype_match == _MISMATCH)
            floor = np.maximum(scale, 1e-12)[:, None].repeat(4, axis=1)
            floor[:, _NORM] = 1e-12
            errors = np.abs(t - r) / np.maximum(np.abs(r), floor)
        errors[t == r] = 0.0  # what stat_error gives equal statistics too; said outright as assess does
        return errors

    @cached_property
    def stat_tolerance(self) -> np.ndarray:
        """(n, 4) the tolerance of each statistic: the row's, but for `exact` rows 0 for Max and Min and
        model.stats.parameter_sum_tolerance for Mean and Norm."""
        tolerance = np.repeat(self.tolerance[:, None], 4, axis=1)
        rows = np.flatnonzero(self.exact)
        tolerance[rows, :2] = 0.0
        # judged once per distinct (dtype, tolerance) of those rows: a few
        pairs, which = np.unique(
            np.column_stack([self.train_dtype[rows], self.tolerance[rows]]), axis=0, return_inverse=True
        )
        sums = [parameter_sum_tolerance(self.dtypes[int(code)], tol) for code, tol in pairs.tolist()]
        tolerance[rows, 2:] = np.array(sums, dtype=np.float64)[which.reshape(-1)][:, None]
        return tolerance

    @cached_property
    def bad(self) -> np.ndarray:
        """(n, 4) statistics beyond their tolerance (warn or alert) on simple rows."""
        return (self.errors > self.stat_tolerance) & self.simple[:, None]

    @cached_property
    def relative_error(self) -> np.ndarray:
        """model.stats.relative_error of each target (NaN for None): the largest error of its statistics; the
        rows not judged here measure it one by one."""
        result = np.where(self.simple, self.errors.max(axis=1), np.nan)
        for index in np.flatnonzero(~self.simple).tolist():
            error = relative_error(self.train_side.stats(index), self.rollout_side.stats(index))
            result[index] = np.nan if error is None else error
        return result

    @cached_property
    def status_codes(self) -> np.ndarray:
        """(n, 4) each statistic's status on simple rows as an index into STATUSES: ok within the tolerance, warn
        within WARN_FACTOR times it, else alert (statistics._stat_cells' rule)."""
        errors, tolerance = self.errors, self.stat_tolerance
        return np.where(errors <= tolerance, 0, np.where(errors <= tolerance * WARN_FACTOR, 1, 2)).astype(np.int8)

    def dtype_names(self, codes: np.ndarray) -> list[str | None]:
        """The dtypes of `codes` (train_dtype or rollout_dtype entries)."""
        return np.array(self.dtypes, dtype=object)[codes].tolist()  # type: ignore[no-any-return]

    def dtype_match_names(self, rows: np.ndarray) -> list[str]:
        """statistics.dtype_pair's verdict of each of the simple `rows`."""
        return np.array(_DTYPE_MATCH, dtype=object)[self._dtype_match[rows]].tolist()  # type: ignore[no-any-return]


class TargetTable(PairTable):
    """Targets in output order, record by record, each record's under its own tolerances (see target_table)."""

    def __init__(
        self,
        specs: list[SpecTuple],
        train: TableSide,
        rollout: TableSide,
        starts: Sequence[int],
        tolerances: Sequence[Tolerances],
    ) -> None:
        """`train` and `rollout`: the statistics of each spec's sides; `starts[i]`: record i's first target, and
        len(specs) last; `tolerances[i]`: record i's."""
        self.kind = np.array([_KIND_OF[s[0][0]] for s in specs], dtype=np.int8)
        super().__init__(train, rollout, starts, tolerances, self.kind == _KIND_OF["p"])
        self.specs = specs

    def worst_by_kind(self) -> np.ndarray:
        """(records, 3) the index of each record's target of each kind with the largest relative error (the first
        on ties, and the first of its kind when none has an error), -1 when the record has none of that kind."""
        records = len(self.starts) - 1
        worst = np.full((records, 3), -1, dtype=np.int64)
        error = self.relative_error
        order_error = np.where(np.isnan(error), -np.inf, error)
        for kind in range(3):
            members = np.flatnonzero(self.kind == kind)
            if not len(members):
                continue
            # by record, then largest error first (NaN last), then dump order: the first of each record wins
            order = np.lexsort((members, -order_error[members], self.record[members]))
            chosen = members[order]
            owners = self.record[chosen]
            first = np.ones(len(chosen), dtype=bool)
            first[1:] = owners[1:] != owners[:-1]
            worst[owners[first], kind] = chosen[first]
        return worst


def target_table(comparisons: Sequence[ModuleComparison], train: Dump, rollout: Dump) -> TargetTable:
    """The targets of `comparisons` (one record's each, of `train` and `rollout`) as
    `ModuleComparison.spec_tuples` lists them, under each comparison's tolerances. The statistics of plain pairs'
    targets are rows of the dumps' columns (`groupform.plain_rows` finds them again); the others' are gathered from
    their objects."""
    specs: list[SpecTuple] = []
    starts = [0]
    plain: list[int] = []
    positions: list[tuple[int, int]] = []
    for index, comparison in enumerate(comparisons):
        specs += comparison.spec_tuples()
        starts.append(len(specs))
        if comparison.plain_positions is not None:
            plain.append(index)
            positions.append(comparison.plain_positions)
    tolerances = [comparison.tolerances for comparison in comparisons]
    if not plain:  # nothing to read from the columns (every group joined, or tensor- or md5-mode dumps)
        return TargetTable(
            specs, listed_side([s[3] for s in specs]), listed_side([s[4] for s in specs]), starts, tolerances
        )
    train_rows = np.full(len(specs), -1, dtype=np.int64)
    rollout_rows = train_rows.copy()
    pairs = np.array(positions, dtype=np.int64)
    found = plain_rows(train.columns, rollout.columns, pairs[:, 0], pairs[:, 1])
    first = np.array(starts, dtype=np.int64)[np.array(plain, dtype=np.int64)[found.by_rows]]
    at = np.arange(len(found.train_rows)) + np.repeat(first - found.starts[:-1], np.diff(found.starts))
    train_rows[at], rollout_rows[at] = found.train_rows, found.rollout_rows
    rest = np.flatnonzero(train_rows < 0)
    sides = []
    for side, rows, slot in ((train, train_rows, 3), (rollout, rollout_rows, 4)):
        stats = side.columns.stats
        if len(rest):  # the others' statistics appended to the dump's
            rows[rest] = len(stats.objects) + np.arange(len(rest))
            stats = joined(stats, stat_columns([specs[i][slot] for i in rest.tolist()]))  # type: ignore[misc]
        sides.append(TableSide(stats, rows))
    return TargetTable(specs, sides[0], sides[1], starts, tolerances)


def _tensor_scale(values: np.ndarray, numel: np.ndarray) -> np.ndarray:
    """model.stats.tensor_scale on finite statistics: RMS from the Norm, else the largest absolute extreme."""
    rms = values[:, _NORM] / np.sqrt(numel)
    extremes = np.maximum(np.abs(values[:, 0]), np.abs(values[:, 1]))
    return np.where(numel != 0, rms, extremes)


def _comparison_scale(
    t: np.ndarray, r: np.ndarray, numel_t: np.ndarray, numel_r: np.ndarray, mismatch: np.ndarray
) -> np.ndarray:
    """model.stats.comparison_scale: the rollout's scale (the train one's when it is 0); both's larger when the
    dtypes differ."""
    scale_t, scale_r = _tensor_scale(t, numel_t), _tensor_scale(r, numel_r)
    return np.where(mismatch, np.maximum(scale_r, scale_t), np.where(scale_r != 0.0, scale_r, scale_t))


_STATES: tuple[Consistency, ...] = ("aligned", "mismatch", "missing")  # a row's verdict, as an index into these
_CODE_OF_STATE = {state: code for code, state in enumerate(_STATES)}
_ALIGNED, _MISMATCHED, _MISSING = range(3)
# a group of targets' verdict (module._summarise and _summarise_parameters), as an index into these
_GROUP_STATES: tuple[GroupConsistency, ...] = ("aligned", "mismatch", "missing", "partial", "not_applicable")
_PARTIAL, _NOT_APPLICABLE = 3, 4


class PlainForms(NamedTuple):
    """What plain pairs compare besides their output and primary input, as the rows after those two (see
    plain_verdicts): each pair's common parameters, then its paired tensor kwargs."""

    parameters: np.ndarray  # the pair's common parameters; -1 when neither side has any (not applicable)
    kwargs: np.ndarray  # its paired tensor kwargs; -1 when neither side passes any (not applicable)
    kwarg_names_differ: np.ndarray  # bool: the sides pass kwargs of other names


def plain_verdicts(
    train: TableSide, rollout: TableSide, starts: np.ndarray, forms: PlainForms, tolerances: Tolerances
) -> list[PlainVerdict]:
    """What each plain pair's targets say of it (`PlainVerdict`), pair i's targets being rows starts[i]:starts[i + 1]
    (output, primary input, parameters, kwargs): each row judged as statistics.quick_verdict judges it (the simple
    rows by the table's arrays: the same errors, so the same verdicts; the others one by one), and the rows' verdicts
    summarised pair by pair as segment reductions, as ModuleComparison summarises a group's."""
    count = int(starts[-1])
    pairs = len(starts) - 1
    first, widths = starts[:-1], np.diff(starts)
    owner = np.repeat(np.arange(pairs), widths)
    offset = np.arange(count) - first[owner]
    last_parameter = 2 + np.maximum(forms.parameters, 0)[owner]
    parameter_rows, kwarg_rows = (offset >= 2) & (offset < last_parameter), offset >= last_parameter
    table = PairTable(train, rollout, [0, count], [tolerances], parameter_rows)
    states = np.where(table.bad.any(axis=1), _MISMATCHED, _ALIGNED).astype(np.int8)
    flags = np.zeros(count, dtype=np.int8)
    worst = table.errors.max(axis=1)  # the largest error, which is also the relative error, on simple rows
    relative = worst.copy()
    for index in np.flatnonzero(~table.simple).tolist():
        both = train.stats(index), rollout.stats(index)
        state, flags[index], worst[index] = quick_verdict(*both, tolerances, bool(parameter_rows[index]))
        states[index] = _CODE_OF_STATE[state]
        error = relative_error(*both)
        relative[index] = np.nan if error is None else error

    def found(rows: np.ndarray, state: int) -> np.ndarray:
        """Whether each pair has a row among `rows` of verdict `state`."""
        return np.bincount(owner[rows & (states == state)], minlength=pairs) > 0

    mismatched, missing = found(parameter_rows, _MISMATCHED), found(parameter_rows, _MISSING)
    parameters = np.where(
        mismatched,
        _MISMATCHED,
        np.where(missing, np.where(found(parameter_rows, _ALIGNED), _PARTIAL, _MISSING), _ALIGNED),
    )
    parameters[forms.parameters == 0] = _MISSING
    parameters[forms.parameters < 0] = _NOT_APPLICABLE
    kwargs = np.where(
        found(kwarg_rows, _MISMATCHED), _MISMATCHED, np.where(found(kwarg_rows, _ALIGNED), _ALIGNED, _MISSING)
    )
    kwargs[(kwargs == _ALIGNED) & forms.kwarg_names_differ] = _PARTIAL
    kwargs[forms.kwargs == 0] = _MISSING
    kwargs[forms.kwargs < 0] = _NOT_APPLICABLE
    errors: list[list[float] | None] = [None] * pairs
    kept = np.flatnonzero((worst > 0.0) & (states != _MISMATCHED))
    for pair, error in zip(owner[kept].tolist(), worst[kept].tolist()):
        kept_errors = errors[pair]
        if kept_errors is None:
            kept_errors = errors[pair] = []
        kept_errors.append(error)
    output_error = relative[first]
    output_error[np.isinf(output_error)] = np.nan
    dtype_path = _dtype_paths(table, first)
    outputs = states[first]
    outputs[(outputs == _ALIGNED) & (dtype_path >= 0)] = _MISMATCHED
    dtype_names = np.array(table.dtypes, dtype=object)
    paths: list[tuple[str, str] | None] = [None] * pairs
    for pair in np.flatnonzero(dtype_path >= 0).tolist():
        row = first[pair]
        paths[pair] = (dtype_names[table.train_dtype[row]], dtype_names[table.rollout_dtype[row]])
    group_states = np.array(_GROUP_STATES, dtype=object)
    return list(
        map(
            PlainVerdict._make,
            zip(
                group_states[outputs].tolist(),
                group_states[states[first + 1]].tolist(),
                group_states[parameters].tolist(),
                group_states[kwargs].tolist(),
                errors,
                ((flags[first] & NONFINITE_BOTH) != 0).tolist(),
                [None if math.isnan(e) else e for e in output_error.tolist()],
                paths,
            ),
        )
    )


def _dtype_paths(table: PairTable, first: np.ndarray) -> np.ndarray:
    """Per pair (output at row first[i], primary input right after), >= 0 where the output dtype differs while the
    inputs' agree (ModuleComparison._dtype_path_differs: every dtype known, compared normalised), else -1."""
    normalised = [normalise_dtype(d) for d in table.dtypes]  # None only for a dtype unknown (or a side missing)
    code_of = {name: code for code, name in enumerate(dict.fromkeys(normalised))}
    codes = np.array([code_of[n] if n is not None else -1 for n in normalised], dtype=np.int64)
    out_t, out_r = codes[table.train_dtype[first]], codes[table.rollout_dtype[first]]
    in_t, in_r = codes[table.train_dtype[first + 1]], codes[table.rollout_dtype[first + 1]]
    differs = (out_t >= 0) & (out_r >= 0) & (out_t != out_r) & (in_t >= 0) & (in_r >= 0) & (in_t == in_r)
    return np.where(differs, out_t, -1)
