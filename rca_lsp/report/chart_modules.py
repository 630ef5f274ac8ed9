"""The chart's module columns (chart_schema.ChartModules) of every call, built column by column over all records.

A chart numbers its texts (keys, labels, buckets, target names, verdicts, dtypes, shapes) and its statistics entries
in the order they first appear, module after module, call after call. Made module by module, ~20 numbers each in
Python calls, that was most of a chart's time on 10^5 modules. Here each column is read off all records in one pass
and its texts given local ids (any order); each block of them (the keys' parts, the fixed texts, a marked module's
targets) gives its distinct ids and the place where the module-by-module build met each first (`_Layout`), and they
are numbered in that order (`StringTable.number`): the same numbers, so the same chart data, to the byte
(tests/test_outputs_unchanged.py)."""

from __future__ import annotations

import math
import operator
from functools import lru_cache
from itertools import chain
from operator import attrgetter
from typing import TYPE_CHECKING, Callable, Mapping, NamedTuple, Sequence, TypeVar

import numpy as np

from rca_lsp.compare.groupform import SpecTuple
from rca_lsp.compare.module import ModuleComparison
from rca_lsp.compare.records import ModuleRecord
from rca_lsp.model.keys import layer_index, split_module_key
from rca_lsp.model.stats import TensorStats
from rca_lsp.model.tolerance import Tolerances, normalise_dtype
from rca_lsp.report.chart_schema import ChartModules, Number, Stats, TargetSeries, TargetStats
from rca_lsp.report.significant import significant

if TYPE_CHECKING:
    from rca_lsp.diagnose.analysis import Analysis


_Text = TypeVar("_Text", str, str | None)


class _Numbering(dict[_Text, int]):
    """Each text's number, a new text getting the next one: looked up in C."""

    def __missing__(self, text: _Text) -> int:
        number = self[text] = len(self)
        return number


NO_TEXT = 0  # the local id of None: no text


class StringTable:
    """The chart's texts, numbered in order of first appearance; `local` gives every text met a local id first (any
    order; None, no text, is local id NO_TEXT)."""

    def __init__(self) -> None:
        self.index = _Numbering[str]({"": 0})
        self.local = _Numbering[str | None]({None: NO_TEXT})

    def number(self, met: Sequence[tuple[np.ndarray, np.ndarray]]) -> list[int]:
        """Numbers texts as if met one by one in the order of their places: `met` holds blocks of local ids and each
        one's place (distinct places; an id may be in several blocks); returns the number of each local id (-1: not
        numbered; NO_TEXT's: 0, what a missing part of a key reads as)."""
        ids = np.concatenate([block for block, _ in met])
        places = np.concatenate([block_places for _, block_places in met])
        in_order = ids[np.argsort(places, kind="stable")]
        in_order = in_order[in_order != NO_TEXT]
        distinct, first = np.unique(in_order, return_index=True)
        texts = [text or "" for text in self.local]  # NO_TEXT's None: "", number 0, never met
        number_of = self.index.__getitem__
        for local in distinct[np.argsort(first)].tolist():
            number_of(texts[local])
        known = self.index.get
        return [known(text, -1) for text in texts]

    def table(self) -> list[str]:
        return list(self.index)


def rounded(value: float | None, digits: int) -> Number | None:
    """`value` to `digits` significant digits, non-finite ones spelt as JSON cannot."""
    if not value:  # None, or 0.0 (aligned statistics: the common case)
        return value
    if not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return float(f"{value:.{digits}g}")


def error_cell(value: float | None) -> Number | None:
    """A relative error as the chart shows it."""
    return rounded(value, 4)


def error_cells(errors: np.ndarray) -> list[Number | None]:
    """`error_cell` of each relative error (NaN: none), by arrays where the rounding is sure."""
    cells_rounded, exact = significant(errors, 4)
    cells: list[Number | None] = cells_rounded.tolist()
    for at in np.flatnonzero(~exact).tolist():
        value = float(errors[at])
        cells[at] = None if value != value else error_cell(value)
    return cells


class Thresholds:
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
            shown = float(f"{value:.4g}")
            found = self.rounded.get(shown)
            if found is None:
                found = self.rounded[shown] = len(self.values)
                self.values.append(shown)
            self.index[value] = found
        return found


def _shape(shape: tuple[int, ...] | None) -> str:
    try:
        return _shape_text(shape)
    except TypeError:  # not hashable: a malformed dump's shape holding lists
        return "x".join(map(str, shape or ()))


@lru_cache(maxsize=1 << 12)
def _shape_text(shape: tuple[int, ...] | None) -> str:
    return "x".join(map(str, shape)) if shape is not None else ""


class StatsTable:
    """The statistics table: each tensor's statistics to 5 significant digits (what a reader compares; the tables
    have them whole), equal ones once, numbered in order of first appearance."""

    def __init__(self) -> None:
        self.index: dict[Stats, int] = {}

    def numbered(self, entries: Sequence[Stats | None]) -> list[int | None]:
        """The number of each entry (None: none), numbering new ones in order."""
        index = self.index
        return [None if entry is None else index.setdefault(entry, len(index)) for entry in entries]

    def table(self) -> list[Stats]:
        return list(self.index)


def _entry(stats: TensorStats, dtype: int, shape: int, row: list[float] | None) -> Stats:
    """The statistics entry of `stats` whose dtype and shape texts are numbered `dtype` and `shape`; `row`: its four
    statistics rounded already (by arrays), None when that was not sure."""
    numbers: Sequence[Number | None] = row or [rounded(v, 5) for v in (stats.max, stats.min, stats.mean, stats.norm)]
    return (dtype, shape, *numbers)  # type: ignore[return-value]


def _rounded_rows(values: np.ndarray) -> list[list[float] | None]:
    """Rows of four statistics rounded as `_entry` rounds them, by arrays; None where that is not sure (a missing or
    non-finite statistic, a rare near-half): rounded from the object."""
    rows_rounded, exact = significant(values, 5)
    rows: list[list[float] | None] = rows_rounded.tolist()
    for row in np.flatnonzero(~exact.all(axis=1)).tolist():
        rows[row] = None
    return rows


class Targets:
    """The analysis's target table as the chart reads it: per record (by identity) its targets, and the worst target
    of each kind (output, input, parameters) by relative error."""

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
        cells = error_cells(self.table.relative_error[rows])
        for at in np.flatnonzero(rows < 0).tolist():
            cells[at] = None
        return cells

    def tolerances(self, rows: np.ndarray, tolerances: Tolerances, thresholds: Thresholds) -> list[int | None]:
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


def _call_free_label(head: str, layer: int | None) -> str:
    """The short label of a module key head (the path below its layer `layer`); '' for what is not a module key."""
    parsed = split_module_key(head + ".0")  # split once per head already (its keys were), no cache of its own
    if parsed is None:
        return ""
    path = parsed.path
    if layer is not None:
        marker = f"layers.{layer}."
        at = path.find(marker)
        below = path[at + len(marker) :] if at >= 0 else path
        return below or parsed.class_name
    return path.rsplit(".", 1)[-1] or parsed.class_name


class _KeyParts:
    """Dump keys as the chart numbers them, [head, label, tail] (the key whole when its label is not in it), with
    each module's label and layer, worked out once per key head: a module's keys differ in the call index only."""

    def __init__(self, strings: StringTable) -> None:
        self._local = strings.local
        self._heads: dict[str, int] = {}  # head -> its row in _parts
        # per head: local ids of its keys' prefix (NO_TEXT: keys numbered whole) and label, where their tails start,
        # their layer
        self._parts: list[tuple[int, int, int, int | None]] = []

    def _head(self, head: str, key: str) -> tuple[int, int, int, int | None]:
        """A head's parts, read off the first key met with it (whose label it keeps when not a module key)."""
        layer = layer_index(key)  # a call index ends the key: the head's layer
        label = _call_free_label(head, layer) or key
        at = key.rfind("." + label + ".")
        local = self._local
        if at < 0:
            return NO_TEXT, local[label], 0, layer
        return local[key[: at + 1]], local[label], at + 1 + len(label), layer

    def of(self, keys: list[str]) -> tuple[np.ndarray, np.ndarray, list[int | None]]:
        """(keys, 3) each key's parts as local ids (NO_TEXT: none), each key's label id and layer."""
        heads = [key.rpartition(".")[0] for key in keys]
        known = self._heads
        new = [head for head in dict.fromkeys(heads) if head not in known]
        if new:
            first_key = dict(zip(reversed(heads), reversed(keys)))  # each head's first key
            for head in new:
                known[head] = len(self._parts)
                self._parts.append(self._head(head, first_key[head]))
        which = np.fromiter(map(known.__getitem__, heads), dtype=np.int64, count=len(keys))
        prefix, label, tail = np.array([part[:3] for part in self._parts], dtype=np.int32).reshape(-1, 3)[which].T
        tails = [key[start:] for key, start in zip(keys, tail.tolist())]  # a whole key's tail: itself (start 0)
        tail_ids = np.fromiter(map(self._local.__getitem__, tails), dtype=np.int32, count=len(keys))
        whole = prefix == NO_TEXT  # keys whose label is not in them: numbered whole
        parts = np.stack(
            [np.where(whole, tail_ids, prefix), np.where(whole, NO_TEXT, label), np.where(whole, NO_TEXT, tail_ids)],
            axis=1,
        )
        layers = [self._parts[head][3] for head in which.tolist()]
        return parts, label, layers


class CallModules(NamedTuple):
    """One call's records in train completion order, the classification of each suspect's (by record index) and the
    indexes of the records whose every target is shown (marked)."""

    records: Sequence[ModuleRecord]
    classifications: Mapping[int, str]
    marked: set[int]


_COMPARISON = attrgetter("comparison")
_TRAIN_KEY, _ROLLOUT_KEYS = attrgetter("train_key"), attrgetter("rollout_keys")
_MODULE_BUCKET, _OUTPUT_DTYPE = attrgetter("module_bucket"), attrgetter("output_dtype")
_VERDICTS = (
    attrgetter("output_consistency"),
    attrgetter("input_args_consistency"),
    attrgetter("parameter_consistency"),
)
# each record's texts after its keys, in the order met: label, bucket, suspect's classification, then (target,
# verdict) of each kind, then the output's train dtype and shape, and its rollout ones
_LABEL, _BUCKET, _CLASS = range(3)
_TARGET = 3  # 3 + 2 * kind: the kind's target, + 1: its verdict
_OUTPUT_STATS = 9  # dtype, shape of the train side, then of the rollout side
_FIXED = 13
_DETAIL = 5  # a marked record's target: its name, each side's dtype and shape


class _Layout:
    """Where each text of each record lies in the order the module-by-module build met them: per record its keys'
    parts (3 each), its fixed texts (_FIXED), its details (_DETAIL per target of a marked record)."""

    def __init__(self, key_counts: np.ndarray, detail_counts: np.ndarray) -> None:
        lengths = 3 * key_counts + _FIXED + _DETAIL * detail_counts
        self.starts = np.zeros(len(lengths), dtype=np.int64)
        np.cumsum(lengths[:-1], out=self.starts[1:])
        self.fixed = self.starts + 3 * key_counts
        self.key_starts = np.zeros(len(key_counts) + 1, dtype=np.int64)
        np.cumsum(key_counts, out=self.key_starts[1:])

    def key_places(self, flat: np.ndarray) -> np.ndarray:
        """The places of the keys' parts at these indexes of the keys' parts, all records' keys in order, 3 each."""
        key, part = np.divmod(flat, 3)
        owner = np.searchsorted(self.key_starts, key, "right") - 1
        return self.starts[owner] + 3 * (key - self.key_starts[owner]) + part

    def fixed_places(self, flat: np.ndarray) -> np.ndarray:
        """The places of the fixed texts at these indexes of the records' fixed texts, _FIXED each."""
        record, column = np.divmod(flat, _FIXED)
        return self.fixed[record] + column


def _firsts(ids: np.ndarray, places: Callable[[np.ndarray], np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Each distinct local id of a block laid out in order and the place of its first occurrence there (`places` of
    its index in the block): what numbering needs of a block, without a place for each of its 10^6 texts."""
    distinct, first = np.unique(ids, return_index=True)
    return distinct, places(first)


def _local_ids(texts: Sequence[str | None], local: _Numbering[str | None]) -> np.ndarray:
    """Local ids of texts (None: NO_TEXT)."""
    return np.fromiter(map(local.__getitem__, texts), dtype=np.int32, count=len(texts))


def _slot_ids(objects: Sequence[TensorStats | None], local: _Numbering[str | None]) -> tuple[np.ndarray, np.ndarray]:
    """Local ids of each statistics object's dtype and shape texts (NO_TEXT: no object)."""
    dtypes = [None if s is None else (s.dtype or "") for s in objects]
    shapes = [None if s is None else _shape(s.shape) for s in objects]
    return _local_ids(dtypes, local), _local_ids(shapes, local)


def module_columns(
    calls: Sequence[CallModules],
    analysis: Analysis,
    strings: StringTable,
    stats: StatsTable,
    thresholds: Thresholds,
    targets: Targets,
) -> list[ChartModules]:
    """The module columns of each call, texts and statistics numbered as the calls' modules meet them in order."""
    records: list[ModuleRecord] = list(chain.from_iterable(call.records for call in calls))
    count = len(records)
    comparisons = list(map(_COMPARISON, records))
    local = strings.local
    call_starts = np.zeros(len(calls) + 1, dtype=np.int64)
    np.cumsum([len(call.records) for call in calls], out=call_starts[1:])
    marked = [int(start) + index for call, start in zip(calls, call_starts) for index in sorted(call.marked)]

    # each record's keys: its train key, then its rollout keys
    grouped = list(map(operator.add, zip(map(_TRAIN_KEY, comparisons)), map(_ROLLOUT_KEYS, comparisons)))
    key_counts = np.fromiter(map(len, grouped), dtype=np.int64, count=count)
    key_ids, key_labels, key_layers = _KeyParts(strings).of(list(chain.from_iterable(grouped)))
    train_at = np.zeros(count, dtype=np.int64)
    np.cumsum(key_counts[:-1], out=train_at[1:])

    worst = targets.worst_of(records)
    outputs = _output_objects(worst[:, 0], targets.specs)
    fixed = _fixed_texts(calls, call_starts, comparisons, worst, targets.specs, outputs, local)
    fixed[:, _LABEL] = key_labels[train_at]
    details = {at: targets.own(records[at]) for at in marked}
    detail_counts = np.zeros(count, dtype=np.int64)
    detail_counts[marked] = [len(details[at]) for at in marked]
    layout = _Layout(key_counts, detail_counts)
    detail_ids = [_detail_texts(details[at], local) for at in marked]
    numbers = strings.number(
        [
            _firsts(key_ids.ravel(), layout.key_places),
            _firsts(fixed.ravel(), layout.fixed_places),
            *((ids, layout.fixed[at] + _FIXED + np.arange(len(ids))) for at, ids in zip(marked, detail_ids)),
        ]
    )
    output_stats, shown_targets = _statistics(outputs, fixed, targets, marked, details, numbers, local, stats)

    # thresholds: the noise floors, then each target's tolerance, in order
    floors = {d: (None if c.fallback else thresholds(c.floor)) for d, c in analysis.calibration.by_dtype.items()}
    output_dtypes = list(map(_OUTPUT_DTYPE, comparisons))
    floor_of = {d: floors.get(normalise_dtype(d) or "") for d in dict.fromkeys(output_dtypes)}
    tolerance = targets.tolerances(worst.reshape(-1), analysis.judge.tolerances, thresholds)

    rollout_parts = _numbered(numbers, np.delete(key_ids, train_at, axis=0).ravel())
    rollout_ends = (3 * np.cumsum(key_counts - 1)).tolist()
    output, inputs, parameters = (
        TargetSeries(
            targets.errors(worst[:, kind]),
            tolerance[kind :: len(_VERDICTS)],
            _numbered(numbers, fixed[:, _TARGET + 2 * kind + 1]),
            _numbered_or_none(numbers, fixed[:, _TARGET + 2 * kind]),
        )
        for kind in range(len(_VERDICTS))
    )
    every = ChartModules(
        [[numbers[head], numbers[label], numbers[tail]] for head, label, tail in key_ids[train_at].tolist()],
        [rollout_parts[a:b] for a, b in zip([0, *rollout_ends[:-1]], rollout_ends)],
        _numbered(numbers, fixed[:, _LABEL]),
        [key_layers[at] for at in train_at.tolist()],
        _numbered(numbers, fixed[:, _BUCKET]),
        _numbered_or_none(numbers, fixed[:, _CLASS]),
        list(map(floor_of.__getitem__, output_dtypes)),
        output,
        inputs,
        parameters,
        output_stats[0::2],
        output_stats[1::2],
        shown_targets,
    )
    return [_sliced(every, a, b) for a, b in zip(call_starts[:-1].tolist(), call_starts[1:].tolist())]


class _OutputObjects(NamedTuple):
    """Each record's output target row (its worst, -1: none) and that target's statistics objects on each side."""

    rows: np.ndarray
    train: list[TensorStats | None]
    rollout: list[TensorStats | None]


def _output_objects(rows: np.ndarray, specs: Sequence[SpecTuple]) -> _OutputObjects:
    train: list[TensorStats | None] = [None] * len(rows)
    rollout: list[TensorStats | None] = [None] * len(rows)
    shown = np.flatnonzero(rows >= 0)
    for at, row in zip(shown.tolist(), rows[shown].tolist()):
        train[at], rollout[at] = specs[row][3], specs[row][4]
    return _OutputObjects(rows, train, rollout)


def _fixed_texts(
    calls: Sequence[CallModules],
    call_starts: np.ndarray,
    comparisons: list[ModuleComparison],
    worst: np.ndarray,
    specs: Sequence[SpecTuple],
    outputs: _OutputObjects,
    local: _Numbering[str | None],
) -> np.ndarray:
    """(records, _FIXED) the local ids of each record's fixed texts, but its label."""
    fixed = np.full((len(comparisons), _FIXED), NO_TEXT, dtype=np.int32)
    fixed[:, _BUCKET] = _local_ids(list(map(_MODULE_BUCKET, comparisons)), local)
    for call, start in zip(calls, call_starts.tolist()):
        for index, classification in call.classifications.items():
            fixed[start + index, _CLASS] = local[classification]
    for kind, verdict in enumerate(_VERDICTS):
        rows = worst[:, kind]
        shown = np.flatnonzero(rows >= 0)
        fixed[shown, _TARGET + 2 * kind] = _local_ids([specs[at][0] for at in rows[shown].tolist()], local)
        fixed[:, _TARGET + 2 * kind + 1] = _local_ids(list(map(verdict, comparisons)), local)
    for column, objects in ((_OUTPUT_STATS, outputs.train), (_OUTPUT_STATS + 2, outputs.rollout)):
        fixed[:, column], fixed[:, column + 1] = _slot_ids(objects, local)
    return fixed


def _detail_texts(own: Sequence[SpecTuple], local: _Numbering[str | None]) -> np.ndarray:
    """The local ids of a marked record's targets' texts in the order met (_DETAIL each)."""
    slots = (
        _local_ids([s[0] for s in own], local),
        *_slot_ids([s[3] for s in own], local),
        *_slot_ids([s[4] for s in own], local),
    )
    return np.stack(slots, axis=1).ravel()


def _statistics(
    outputs: _OutputObjects,
    fixed: np.ndarray,
    targets: Targets,
    marked: list[int],
    details: dict[int, list[SpecTuple]],
    numbers: list[int],
    local: _Numbering[str | None],
    stats: StatsTable,
) -> tuple[list[int | None], dict[int, list[TargetStats]]]:
    """The statistics entries' numbers, in the order met: each record's output (train, rollout, interleaved), a
    marked one's targets after it (by record)."""
    sides = []
    for side, (objects, values) in enumerate(
        ((outputs.train, targets.table.train_values), (outputs.rollout, targets.table.rollout_values))
    ):
        dtypes = _numbered(numbers, fixed[:, _OUTPUT_STATS + 2 * side])
        shapes = _numbered(numbers, fixed[:, _OUTPUT_STATS + 2 * side + 1])
        rows = _rounded_rows(values[outputs.rows])
        sides.append(
            [
                None if s is None else _entry(s, dtype, shape, row)
                for s, dtype, shape, row in zip(objects, dtypes, shapes, rows)
            ]
        )
    met: list[Stats | None] = list(chain.from_iterable(zip(*sides)))
    output_stats: list[int | None] = []
    shown: dict[int, list[TargetStats]] = {}
    done = 0
    for at in marked:
        output_stats += stats.numbered(met[2 * done : 2 * at + 2])
        done = at + 1
        own = details[at]
        own_stats = stats.numbered([_entry_of(s, numbers, local) for spec in own for s in (spec[3], spec[4])])
        shown[at] = [
            TargetStats(numbers[local[spec[0]]], own_stats[2 * i], own_stats[2 * i + 1]) for i, spec in enumerate(own)
        ]
    output_stats += stats.numbered(met[2 * done :])
    return output_stats, shown


def _sliced(every: ChartModules, start: int, end: int) -> ChartModules:
    """The modules start..end of `every` (one call's), renumbered from 0."""
    output, inputs, parameters = (
        TargetSeries(
            kind.error[start:end], kind.tolerance[start:end], kind.consistency[start:end], kind.target[start:end]
        )
        for kind in (every.output, every.input, every.parameters)
    )
    return ChartModules(
        every.train_key[start:end],
        every.rollout_key[start:end],
        every.label[start:end],
        every.layer[start:end],
        every.bucket[start:end],
        every.suspect[start:end],
        every.noise_floor[start:end],
        output,
        inputs,
        parameters,
        every.output_train[start:end],
        every.output_rollout[start:end],
        {at - start: shown for at, shown in every.details.items() if start <= at < end},
    )


def _entry_of(stats: TensorStats | None, numbers: list[int], local: _Numbering[str | None]) -> Stats | None:
    """The statistics entry of an object whose texts are numbered already, rounded from the object."""
    if stats is None:
        return None
    return _entry(stats, numbers[local[stats.dtype or ""]], numbers[local[_shape(stats.shape)]], None)


def _numbered(numbers: list[int], ids: np.ndarray) -> list[int]:
    """The numbers of the texts of local `ids` (the one int object of each: 10^6 cells share a few thousand)."""
    return list(map(numbers.__getitem__, ids.tolist()))


def _numbered_or_none(numbers: list[int], ids: np.ndarray) -> list[int | None]:
    """`_numbered`, None where there is no text."""
    found: list[int | None] = list(_numbered(numbers, ids))
    for at in np.flatnonzero(ids == NO_TEXT).tolist():
        found[at] = None
    return found
