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

from functools import cached_property
from itertools import chain
from operator import attrgetter
from typing import NamedTuple, Sequence

import numpy as np

from rca_lsp.compare.groupform import SpecTuple
from rca_lsp.compare.module import ModuleComparison
from rca_lsp.compare.statistics import STAT_NAMES, Consistency, JudgedRows, quick_verdict
from rca_lsp.model.stats import TensorStats, dtype_pair, four_statistics, relative_error
from rca_lsp.model.tolerance import WARN_FACTOR, Tolerances

_KIND_OF = {"o": 0, "i": 1, "p": 2}  # output, input, parameters: by the first letter of a target's name
_ABSENT = TensorStats()  # a missing side: every statistic, the numel and the dtype None
_NUMEL = attrgetter("numel")
_DTYPE = attrgetter("dtype")
_NAN = float("nan")
_NORM = STAT_NAMES.index("Norm")
_DTYPE_MATCH = ("match", "mismatch", "unknown")  # statistics.dtype_pair's verdicts
_MISMATCH = _DTYPE_MATCH.index("mismatch")
STATUSES = ("ok", "warn", "alert")  # a statistic's status, as statistics._stat_cells names it


class _Side(NamedTuple):
    """One side's statistics of every target, read in one pass over the objects (each pass over 10^6 objects
    scattered in memory costs more than the reading)."""

    values: np.ndarray  # (n, 4) Max, Min, Mean, Norm; NaN where the side or a statistic is missing, or NaN
    numels: np.ndarray  # NaN where the shape is unknown (or the side missing)
    dtypes: list[str | None]


def _side(stats: list[TensorStats | None]) -> _Side:
    present = [s if s is not None else _ABSENT for s in stats]
    if not present:
        return _Side(np.zeros((0, 4)), np.zeros(0), [])
    try:  # in C, four numbers at a time (np.array of the tuples takes twice as long)
        values = np.fromiter(chain.from_iterable(map(four_statistics, present)), np.float64, 4 * len(present))
    except TypeError:  # a statistic msprobe wrote as null: NaN, as np.array makes None
        values = np.array(list(map(four_statistics, present)), dtype=np.float64)
    values = values.reshape(-1, 4)
    # float() first: numpy converts Python ints one by one, several times slower
    numels = np.array([_NAN if n is None else float(n) for n in map(_NUMEL, present)], dtype=np.float64)
    return _Side(values, numels, list(map(_DTYPE, present)))


class PairTable:
    """Pairs of statistics (train, rollout) in rows, judged by arrays where they can be (`simple`), in groups of rows
    each under its own tolerances: what TargetTable lists for the outputs and quick_verdicts judges for records."""

    def __init__(
        self,
        train: list[TensorStats | None],
        rollout: list[TensorStats | None],
        starts: Sequence[int],
        tolerances: Sequence[Tolerances],
    ) -> None:
        """`starts[i]`: group i's first row, and the row count last; `tolerances[i]`: group i's."""
        self.train_stats, self.rollout_stats = train, rollout
        self.starts = np.array(starts, dtype=np.int64)  # group i's rows: starts[i]:starts[i + 1]
        self.record = np.repeat(np.arange(len(starts) - 1, dtype=np.int64), np.diff(self.starts))
        train_side, rollout_side = _side(train), _side(rollout)
        self.train_values, self.rollout_values = train_side.values, rollout_side.values
        shared = len({id(t) for t in tolerances}) <= 1
        self._tolerances = tolerances[0] if shared and tolerances else None
        self._per_record_tolerances = None if shared else list(tolerances)
        self.simple = self._simple_rows(train_side, rollout_side)  # the rows judged by the arrays (_simple_rows)

    def tolerances_of(self, index: int) -> Tolerances:
        """The tolerances target `index` is judged under."""
        if self._tolerances is not None:
            return self._tolerances
        assert self._per_record_tolerances is not None
        return self._per_record_tolerances[int(self.record[index])]

    def _simple_rows(self, train: _Side, rollout: _Side) -> np.ndarray:
        """Targets judged by the arrays: both sides observable, of the same form (both integer or both floating),
        every statistic known and finite, a tolerance >= 0."""
        count = len(self.train_stats)
        # every statistic finite: both sides present (a missing one is NaN) and observable unless empty (numel 0;
        # an unknown numel counts as not empty)
        finite = np.isfinite(train.values).all(axis=1) & np.isfinite(rollout.values).all(axis=1)
        rows = np.flatnonzero(finite & (train.numels != 0) & (rollout.numels != 0))
        # each row's pair of dtypes as one code, judged once per distinct pair (a few) instead of once per row
        listed = list(dict.fromkeys(train.dtypes + rollout.dtypes))
        code_of = {name: code for code, name in enumerate(listed)}.__getitem__
        train_codes = np.fromiter(map(code_of, train.dtypes), dtype=np.int64, count=count)
        rollout_codes = np.fromiter(map(code_of, rollout.dtypes), dtype=np.int64, count=count)
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
        self._numels = np.nan_to_num(train.numels), np.nan_to_num(rollout.numels)  # unknown: 0, as tensor_scale
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
    def bad(self) -> np.ndarray:
        """(n, 4) statistics beyond their tolerance (warn or alert) on simple rows."""
        return (self.errors > self.tolerance[:, None]) & self.simple[:, None]

    @cached_property
    def relative_error(self) -> np.ndarray:
        """model.stats.relative_error of each target (NaN for None): the largest error of its statistics; the
        rows not judged here measure it one by one."""
        result = np.where(self.simple, self.errors.max(axis=1), np.nan)
        for index in np.flatnonzero(~self.simple).tolist():
            error = relative_error(self.train_stats[index], self.rollout_stats[index])
            result[index] = np.nan if error is None else error
        return result

    @cached_property
    def status_codes(self) -> np.ndarray:
        """(n, 4) each statistic's status on simple rows as an index into STATUSES: ok within the tolerance, warn
        within WARN_FACTOR times it, else alert (statistics._stat_cells' rule)."""
        errors, tolerance = self.errors, self.tolerance[:, None]
        return np.where(errors <= tolerance, 0, np.where(errors <= tolerance * WARN_FACTOR, 1, 2)).astype(np.int8)

    def dtype_names(self, codes: np.ndarray) -> list[str | None]:
        """The dtypes of `codes` (train_dtype or rollout_dtype entries)."""
        return np.array(self.dtypes, dtype=object)[codes].tolist()  # type: ignore[no-any-return]

    def dtype_match_names(self, rows: np.ndarray) -> list[str]:
        """statistics.dtype_pair's verdict of each of the simple `rows`."""
        return np.array(_DTYPE_MATCH, dtype=object)[self._dtype_match[rows]].tolist()  # type: ignore[no-any-return]


class TargetTable(PairTable):
    """Targets in output order, record by record, each record's under its own tolerances (see target_table)."""

    def __init__(self, specs: list[SpecTuple], starts: Sequence[int], tolerances: Sequence[Tolerances]) -> None:
        """`starts[i]`: record i's first target, and len(specs) last; `tolerances[i]`: record i's."""
        super().__init__([s[3] for s in specs], [s[4] for s in specs], starts, tolerances)
        self.specs = specs
        self.kind = np.array([_KIND_OF[s[0][0]] for s in specs], dtype=np.int8)

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


def target_table(comparisons: Sequence[ModuleComparison]) -> TargetTable:
    """The targets of `comparisons` (one record's each) as `ModuleComparison.spec_tuples` lists them, under each
    comparison's tolerances."""
    specs: list[SpecTuple] = []
    starts = [0]
    for comparison in comparisons:
        specs += comparison.spec_tuples()
        starts.append(len(specs))
    return TargetTable(specs, starts, [comparison.tolerances for comparison in comparisons])


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


# a simple row's quick_verdict: within its tolerance or not
_JUDGED: tuple[Consistency, Consistency] = ("aligned", "mismatch")


def quick_verdicts(
    train: list[TensorStats | None], rollout: list[TensorStats | None], tolerances: Tolerances
) -> JudgedRows:
    """statistics.quick_verdict of each pair (train[i], rollout[i]) under `tolerances`, and model.stats.relative_error
    of each: the simple rows by the table's arrays (the same errors, so the same verdicts and the same largest
    error, which is also the relative error), the others one by one. What records judge every plain pair of an
    analysis with, at once."""
    table = PairTable(train, rollout, [0, len(train)], [tolerances])
    beyond: list[bool] = table.bad.any(axis=1).tolist()  # type: ignore[assignment]
    states: list[Consistency] = list(map(_JUDGED.__getitem__, beyond))
    worst: list[float] = table.errors.max(axis=1).tolist()
    flags = [0] * len(train)
    errors: list[float | None] = list(worst)
    for index in np.flatnonzero(~table.simple).tolist():
        states[index], flags[index], worst[index] = quick_verdict(train[index], rollout[index], tolerances)
        errors[index] = relative_error(train[index], rollout[index])
    return JudgedRows(states, flags, worst, errors)
