"""The divergence chart's data built from an analysis: per call, the mapped modules' errors in execution order, their
layers, markers and one-sided ops, and each rank's own copies (the schema and its encoding: chart_schema)."""

from __future__ import annotations

import bisect
import math
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np

from rca_lsp.compare.groupform import SpecTuple
from rca_lsp.compare.module import ModuleComparison
from rca_lsp.compare.records import ModuleRecord
from rca_lsp.diagnose.rootcause import Suspect
from rca_lsp.model.keys import is_activation_like, layer_index, parse_module_key
from rca_lsp.model.stats import TensorStats, relative_error
from rca_lsp.model.tolerance import Tolerances, normalise_dtype
from rca_lsp.report.chart_ranks import rank_views
from rca_lsp.report.chart_schema import (
    CHART_VERSION,
    TARGET_KINDS,
    CalibrationLine,
    ChartCall,
    ChartData,
    ChartModules,
    Key,
    LayerSpan,
    Marker,
    Number,
    OneSidedOp,
    Stats,
    TargetSeries,
    TargetStats,
)
from rca_lsp.report.significant import significant

if TYPE_CHECKING:
    from rca_lsp.diagnose.analysis import Analysis

# [dtype, shape ("4096x1x2048")] as string indexes, then Max, Min, Mean, Norm of one side's tensor; a statistics
# column holds indexes into ChartData.stats (sides that agree to the digits shown share one entry)


# tolerance from the rollout's while another rank's copy does not


class _Numbering(dict[str, int]):
    """Each text's number, a new text getting the next one: looked up in C (a chart numbers ~20 texts a module)."""

    def __missing__(self, text: str) -> int:
        number = self[text] = len(self)
        return number


class _Strings:
    """The string table being built; `strings(text)` is the text's index in it."""

    def __init__(self) -> None:
        self.index = _Numbering({"": 0})

    def __call__(self, text: str) -> int:
        return self.index[text]

    def key(self, key: str, label: str) -> Key:
        """head, label, tail of a dump key (the key whole when the label is not in it)."""
        number = self.index.__getitem__
        at = key.rfind("." + label + ".")
        if not label or at < 0:
            return [number(key), 0, 0]
        return [number(key[: at + 1]), number(label), number(key[at + 1 + len(label) :])]

    def table(self) -> list[str]:
        return list(self.index)


def _rounded(value: float | None, digits: int) -> Number | None:
    if not value:  # None, or 0.0 (aligned statistics: the common case)
        return value
    if not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return float(f"{value:.{digits}g}")


def _error(value: float | None) -> Number | None:
    return _rounded(value, 4)


class _Thresholds:
    """The table of tolerances and noise floors (finite, to 4 significant digits), each value once."""

    def __init__(self) -> None:
        self.index: dict[float, int] = {}  # by the value before rounding (the few distinct ones)
        self.rounded: dict[float, int] = {}
        self.values: list[float] = []

    def __call__(self, value: float | None) -> int | None:
        if value is None:
            return None
        found = self.index.get(value)
        if found is None:
            rounded = float(f"{value:.4g}")
            found = self.rounded.get(rounded)
            if found is None:
                found = self.rounded[rounded] = len(self.values)
                self.values.append(rounded)
            self.index[value] = found
        return found


class _Errors:
    """relative_error of two statistics, each pair of objects once (the rank views' copies repeat: a weight in every
    call). The objects are held, so their ids are not reused meanwhile."""

    def __init__(self) -> None:
        self.known: dict[tuple[int, int], tuple[TensorStats | None, TensorStats | None, float | None]] = {}

    def __call__(self, train: TensorStats | None, rollout: TensorStats | None) -> float | None:
        found = self.known.get((id(train), id(rollout)))
        if found is None:
            found = self.known[(id(train), id(rollout))] = (train, rollout, relative_error(train, rollout))
        return found[2]


def _shape(shape: tuple[int, ...] | None) -> str:
    try:
        return _shape_text(shape)
    except TypeError:  # not hashable: a malformed dump's shape holding lists
        return "x".join(map(str, shape or ()))


@lru_cache(maxsize=1 << 12)
def _shape_text(shape: tuple[int, ...] | None) -> str:
    return "x".join(map(str, shape)) if shape is not None else ""


class _Stats:
    """The statistics table being built: each tensor's statistics to 5 significant digits (what a reader compares;
    the tables have them whole), equal ones once."""

    def __init__(self, strings: _Strings) -> None:
        self.strings = strings
        self.index: dict[Stats, int] = {}
        # by object: one tensor's statistics are often the same object in several places (a weight in every call,
        # a module's output as its parent's); each object is held here, so its id is not reused meanwhile
        self.known: dict[int, tuple[TensorStats, int]] = {}

    def __call__(self, stats: TensorStats | None, rounded: list[float] | None = None) -> int | None:
        """The entry of `stats`; `rounded`: its four statistics rounded already (`rounded_rows`), when known."""
        if stats is None:
            return None
        found = self.known.get(id(stats))
        if found is None:
            numbers: Sequence[Number | None] = rounded or [
                _rounded(v, 5) for v in (stats.max, stats.min, stats.mean, stats.norm)
            ]
            text = self.strings.index.__getitem__
            entry = (text(stats.dtype or ""), text(_shape(stats.shape)), *numbers)
            index = self.index
            found = self.known[id(stats)] = (stats, index.setdefault(entry, len(index)))  # type: ignore[arg-type]
        return found[1]

    @staticmethod
    def rounded_rows(values: np.ndarray) -> list[list[float] | None]:
        """Rows of four statistics (a target table's values) rounded as `__call__` rounds them, by arrays; None
        where that is not sure (a missing or non-finite statistic, a rare near-half): rounded from the object."""
        rounded, exact = significant(values, 5)
        rows: list[list[float] | None] = rounded.tolist()
        for row in np.flatnonzero(~exact.all(axis=1)).tolist():
            rows[row] = None
        return rows

    def table(self) -> list[Stats]:
        return list(self.index)


def _series() -> TargetSeries:
    return TargetSeries([], [], [], [])


class _Keys:
    """Each dump key's numbers for the chart (`_Strings.key` of it with its label), and each module's short label
    (the path below its layer) and layer: worked out once per module (key head), the same in every call, whose keys
    differ in the call index only (10^5 modules; a bounded cache thrashed: their heads cycle, call after call)."""

    def __init__(self, strings: _Strings) -> None:
        self._strings = strings
        self._number = strings.index.__getitem__
        # head -> its label, its layer, and (prefix number, label number, where the tail starts) or None when the
        # label is not in the key (then the key is numbered whole)
        self._heads: dict[str, tuple[str, int | None, tuple[int, int, int] | None]] = {}

    def _head(self, key: str) -> tuple[str, int | None, tuple[int, int, int] | None]:
        head = key.rpartition(".")[0]
        found = self._heads.get(head)
        if found is None:
            label = _call_free_label(head) or key
            numbers = self._strings.key(key, label)  # its texts numbered as they come, as any key's are
            split = (numbers[0], numbers[1], key.rfind("." + label + ".") + 1 + len(label)) if numbers[1] else None
            found = self._heads[head] = (label, layer_index(key), split)
        return found

    def key(self, key: str) -> Key:
        """[head, label, tail] numbers of a key (the key whole, 0, 0 when its label is not in it)."""
        return self._numbers(key, self._head(key)[2])

    def module(self, key: str) -> tuple[Key, str, int | None]:
        """A module key's numbers, its label and its layer (record.layer_index, parsed once per module)."""
        label, layer, split = self._head(key)
        return self._numbers(key, split), label, layer

    def _numbers(self, key: str, split: tuple[int, int, int] | None) -> Key:
        if split is None:
            return [self._number(key), 0, 0]
        return [split[0], split[1], self._number(key[split[2] :])]


def _call_free_label(head: str) -> str:
    """'' for what is not a module key."""
    key = head + ".0"
    parsed = parse_module_key(key)
    if parsed is None:
        return ""
    path = parsed.path
    layer = layer_index(key)
    if layer is not None:
        marker = f"layers.{layer}."
        at = path.find(marker)
        below = path[at + len(marker) :] if at >= 0 else path
        return below or parsed.class_name
    return path.rsplit(".", 1)[-1] or parsed.class_name


def _layers(modules: ChartModules, strings: list[str]) -> list[LayerSpan]:
    spans: list[LayerSpan] = []
    for index, layer in enumerate(modules.layer):
        if spans and spans[-1].layer == layer and layer is not None:
            spans[-1].end = index + 1
            continue
        label = f"layer {layer}" if layer is not None else strings[modules.label[index]]
        spans.append(LayerSpan(label, layer, index, index + 1))
    return spans


def _error_cells(errors: np.ndarray) -> list[Number | None]:
    """`_error` of each relative error (NaN: none), by arrays where the rounding is sure."""
    rounded, exact = significant(errors, 4)
    cells: list[Number | None] = rounded.tolist()
    for at in np.flatnonzero(~exact).tolist():
        value = float(errors[at])
        cells[at] = None if value != value else _error(value)
    return cells


class _Targets:
    """The analysis's target table as the chart reads it: per record (by identity) its targets, and the worst
    target of each kind (output, input, parameters) by relative error, with what the chart shows of them."""

    def __init__(self, analysis: Analysis) -> None:
        self.table = table = analysis.targets
        self.specs = table.specs
        self.starts = table.starts.tolist()
        self.worst = table.worst_by_kind()
        self.position = {id(record): index for index, record in enumerate(analysis.records)}

    def own(self, record: ModuleRecord) -> list[SpecTuple]:
        """The record's targets."""
        at = self.position[id(record)]
        return self.specs[self.starts[at] : self.starts[at + 1]]

    def worst_of(self, records: Sequence[ModuleRecord]) -> np.ndarray:
        """(records, 3) each record's worst target of each kind (-1: none of that kind)."""
        position = self.position
        return self.worst[np.array([position[id(r)] for r in records], dtype=np.intp).reshape(-1)]

    def errors(self, rows: np.ndarray) -> list[Number | None]:
        """The chart's error cell of each target row (-1: None)."""
        cells = _error_cells(self.table.relative_error[rows])
        for at in np.flatnonzero(rows < 0).tolist():
            cells[at] = None
        return cells

    def tolerances(self, rows: np.ndarray, tolerances: Tolerances, thresholds: _Thresholds) -> list[int | None]:
        """The threshold (its index) each target row (-1: None) is judged by under `tolerances`; thresholds new to
        the table numbered in the order of the rows, each distinct pair of dtypes looked up once."""
        table = self.table
        width = len(table.dtypes)
        pairs = np.where(rows >= 0, table.train_dtype[rows] * width + table.rollout_dtype[rows], -1)
        distinct, first, which = np.unique(pairs, return_index=True, return_inverse=True)
        index: list[int | None] = [None] * len(distinct)
        for at in np.argsort(first).tolist():
            code = int(distinct[at])
            if code >= 0:
                index[at] = thresholds(tolerances.for_dtypes(table.dtypes[code // width], table.dtypes[code % width]))
        return [index[at] for at in which.tolist()]

    def statistics(self, rows: np.ndarray) -> tuple[list[list[float] | None], list[list[float] | None]]:
        """Both sides' statistics of each target row rounded for the statistics table (`_Stats.rounded_rows`)."""
        return _Stats.rounded_rows(self.table.train_values[rows]), _Stats.rounded_rows(self.table.rollout_values[rows])


def _modules(
    records: Sequence[ModuleRecord],
    analysis: Analysis,
    suspects: dict[int, Suspect],
    marked: set[int],
    strings: _Strings,
    stats: _Stats,
    thresholds: _Thresholds,
    targets: _Targets,
    keys: _Keys,
) -> ChartModules:
    floors = {d: (None if c.fallback else thresholds(c.floor)) for d, c in analysis.calibration.by_dtype.items()}
    series = {kind: _series() for kind in TARGET_KINDS}
    modules = ChartModules(
        [], [], [], [], [], [], [], series["output"], series["input"], series["parameters"], [], [], {}
    )
    kinds = (series["output"], series["input"], series["parameters"])
    # the numbers by arrays; the strings (numbered in order of appearance) record by record below
    worst = targets.worst_of(records)
    tolerance = targets.tolerances(worst.reshape(-1), analysis.judge.tolerances, thresholds)  # record by record
    for kind, column in enumerate(kinds):
        column.error.extend(targets.errors(worst[:, kind]))
        column.tolerance.extend(tolerance[kind :: len(kinds)])
    output_train, output_rollout = targets.statistics(worst[:, 0])
    columns = [(column.target.append, column.consistency.append) for column in kinds]
    specs = targets.specs
    key_of, module_of, text = keys.key, keys.module, strings.index.__getitem__  # text: strings(), without a call
    add_train_key, add_rollout_key = modules.train_key.append, modules.rollout_key.append
    add_label, add_layer, add_bucket = modules.label.append, modules.layer.append, modules.bucket.append
    add_suspect, add_floor = modules.suspect.append, modules.noise_floor.append
    add_output_train, add_output_rollout = modules.output_train.append, modules.output_rollout.append
    for index, (record, rows) in enumerate(zip(records, worst.tolist())):
        comparison = record.comparison
        train_key, label, layer = module_of(comparison.train_key)
        add_train_key(train_key)
        add_rollout_key([i for k in comparison.rollout_keys for i in key_of(k)])
        add_label(text(label))
        add_layer(layer)
        add_bucket(text(comparison.module_bucket))
        suspect = suspects.get(id(record))
        add_suspect(text(suspect.classification) if suspect is not None else None)
        add_floor(floors.get(normalise_dtype(comparison.output_dtype) or ""))
        for at, (add_target, add_consistency), consistency in zip(rows, columns, _consistencies(comparison)):
            add_target(text(specs[at][0]) if at >= 0 else None)
            add_consistency(text(consistency))
        if rows[0] >= 0:
            output = specs[rows[0]]
            add_output_train(stats(output[3], output_train[index]))
            add_output_rollout(stats(output[4], output_rollout[index]))
        else:
            add_output_train(None)
            add_output_rollout(None)
        if index in marked:
            modules.details[index] = [TargetStats(text(s[0]), stats(s[3]), stats(s[4])) for s in targets.own(record)]
    return modules


def _consistencies(comparison: ModuleComparison) -> tuple[str, str, str]:
    """The module's verdicts on its output, inputs and parameters."""
    return comparison.output_consistency, comparison.input_args_consistency, comparison.parameter_consistency


def _marker(records: Sequence[ModuleRecord], record: ModuleRecord | None, classification: str | None) -> Marker | None:
    if record is None:
        return None
    index = next((i for i, r in enumerate(records) if r is record), None)
    if index is None:
        return None
    return Marker(index, record.train_key, " + ".join(record.comparison.rollout_keys), classification)


def _one_sided(
    analysis: Analysis, call: int, records: Sequence[ModuleRecord], origin: Suspect | None
) -> list[OneSidedOp]:
    """Unmatched activation-like modules of this call on either side, placed after the module they followed."""
    named = set(origin.between.train + origin.between.rollout) if origin is not None else set()
    found: list[OneSidedOp] = []
    train, rollout = analysis.train, analysis.rollout
    train_positions = [r.train_position for r in records]
    for position in analysis.comparator.train_calls.get(call, []):
        key = train.keys[position]
        if key not in analysis.matched_train and is_activation_like(key):
            after = bisect.bisect_left(train_positions, position) - 1
            found.append(OneSidedOp("train", key, after, key in named))
    if records:
        # rollout modules between the call's first and last mapped rollout module; each module once (a decoding
        # rollout runs it once per step)
        order = sorted(range(len(records)), key=lambda i: records[i].rollout_first_position)
        firsts = [records[i].rollout_first_position for i in order]
        low, high = firsts[0], max(r.rollout_position for r in records)
        seen: set[str] = set()
        for position in range(low, high + 1):
            key = rollout.keys[position]
            if key in analysis.matched_rollout or not is_activation_like(key):
                continue
            path = rollout.entries[key].path
            if path in seen:
                continue
            seen.add(path)
            slot = bisect.bisect_left(firsts, position) - 1
            found.append(OneSidedOp("rollout", key, order[slot] if slot >= 0 else -1, key in named))
    found.sort(key=lambda op: op.after)
    return found


def chart_data(analysis: Analysis, run_id: str | None = None) -> ChartData:
    """The chart of an analysis: every call's mapped modules, markers and one-sided ops (see the module doc)."""
    first = analysis.suspects[0] if analysis.suspects and analysis.suspects[0].credible_origin else None
    strings = _Strings()
    stats = _Stats(strings)
    thresholds = _Thresholds()
    errors = _Errors()
    targets = _Targets(analysis)
    keys = _Keys(strings)
    calls = []
    for call, evidence in analysis.calls.items():
        records = evidence.records
        origins = evidence.ranked[0]
        origin = origins[0] if origins else None
        suspects = {id(s.record): s for s in evidence.suspects}
        position = {id(r): i for i, r in enumerate(records)}
        marked = {position[id(s.record)] for s in origins if id(s.record) in position}
        boundary = _marker(records, origin.boundary if origin else None, None)
        if boundary is not None:
            marked.add(boundary.index)
        modules = _modules(records, analysis, suspects, marked, strings, stats, thresholds, targets, keys)
        note = next((r.comparison.calls_note for r in records if r.comparison.joins_calls), "")
        calls.append(
            ChartCall(
                call,
                f"forward.{call}",
                note,
                modules,
                _layers(modules, strings.table()),
                _marker(records, origin.record if origin else None, origin.classification if origin else None),
                boundary,
                _one_sided(analysis, call, records, origin),
                [],
                [],
            )
        )
    calls.sort(key=lambda c: c.call_index)
    views = rank_views(
        analysis,
        [analysis.calls[c.call_index].records for c in calls],
        [list(zip(c.modules.output.error, c.modules.input.error, c.modules.parameters.error)) for c in calls],
        errors,
        _error,
    )
    for chart_call, copies, shared in zip(calls, views.copies, views.shared):
        chart_call.ranks, chart_call.shared = copies, shared
    default = next((i for i, c in enumerate(calls) if first is not None and c.call_index == first.record.call_index), 0)
    return ChartData(
        CHART_VERSION,
        Path(analysis.mapping.path).name,
        analysis.train.path,
        analysis.rollout.path,
        analysis.mapping.path,
        run_id,
        analysis.top_hypothesis,
        {
            dtype: CalibrationLine(c.floor, c.threshold, c.ceiling, c.fallback)
            for dtype, c in analysis.calibration.by_dtype.items()
        },
        calls,
        default,
        views.ranks,
        strings.table(),
        stats.table(),
        thresholds.values,
    )
