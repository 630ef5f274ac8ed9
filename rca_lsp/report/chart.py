"""The divergence chart's data built from an analysis: per call, the mapped modules' errors in execution order, their
layers, markers and one-sided ops, and each rank's own copies (the schema and its encoding: chart_schema)."""

from __future__ import annotations

import bisect
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from rca_lsp.base.gcpause import paused_gc
from rca_lsp.compare.records import ModuleRecord
from rca_lsp.diagnose.rootcause import Suspect
from rca_lsp.model.keys import is_activation_like
from rca_lsp.model.stats import TensorStats, relative_error
from rca_lsp.report.chart_modules import (
    CallModules,
    StatsTable,
    StringTable,
    Targets,
    Thresholds,
    error_cell,
    module_columns,
)
from rca_lsp.report.chart_ranks import rank_views
from rca_lsp.report.chart_schema import (
    CHART_VERSION,
    CalibrationLine,
    ChartCall,
    ChartData,
    ChartModules,
    LayerSpan,
    Marker,
    OneSidedOp,
)

if TYPE_CHECKING:
    from rca_lsp.diagnose.analysis import Analysis


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


def _layers(modules: ChartModules, strings: list[str]) -> list[LayerSpan]:
    spans: list[LayerSpan] = []
    for index, layer in enumerate(modules.layer):
        if spans and spans[-1].layer == layer and layer is not None:
            spans[-1].end = index + 1
            continue
        label = f"layer {layer}" if layer is not None else strings[modules.label[index]]
        spans.append(LayerSpan(label, layer, index, index + 1))
    return spans


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
    call_positions = analysis.comparator.train_calls.get(call, [])
    entries = train.ordered_entries
    # the unmatched keys only (a few among each call's 10^4), in dump order
    for position in _within(analysis.unmatched[0].positions, call_positions[:1] + call_positions[-1:]):
        key = train.keys[position]
        if entries[position].call_index == call and is_activation_like(key):
            after = bisect.bisect_left(train_positions, position) - 1
            found.append(OneSidedOp("train", key, after, key in named))
    if records:
        # rollout modules between the call's first and last mapped rollout module; each module once (a decoding
        # rollout runs it once per step)
        order = sorted(range(len(records)), key=lambda i: records[i].rollout_first_position)
        firsts = [records[i].rollout_first_position for i in order]
        low, high = firsts[0], max(r.rollout_position for r in records)
        seen: set[str] = set()
        for position in _within(analysis.unmatched[1].positions, [low, high]):
            key = rollout.keys[position]
            if not is_activation_like(key):
                continue
            path = rollout.entries[key].path
            if path in seen:
                continue
            seen.add(path)
            slot = bisect.bisect_left(firsts, position) - 1
            found.append(OneSidedOp("rollout", key, order[slot] if slot >= 0 else -1, key in named))
    found.sort(key=lambda op: op.after)
    return found


def _within(positions: list[int], span: list[int]) -> list[int]:
    """The ascending `positions` from span[0] to span[-1], both included (none for an empty span)."""
    if not span:
        return []
    return positions[bisect.bisect_left(positions, span[0]) : bisect.bisect_right(positions, span[-1])]


def chart_data(analysis: Analysis, run_id: str | None = None) -> ChartData:
    """The chart of an analysis: every call's mapped modules, markers and one-sided ops (see the module doc)."""
    with paused_gc():  # 10^5 modules' columns: lists and tuples, no cycle among them
        return _chart_data(analysis, run_id)


def _chart_data(analysis: Analysis, run_id: str | None) -> ChartData:
    first = analysis.suspects[0] if analysis.suspects and analysis.suspects[0].credible_origin else None
    strings = StringTable()
    stats = StatsTable()
    thresholds = Thresholds()
    errors = _Errors()
    shown: list[CallModules] = []
    markers: list[tuple[Suspect | None, Marker | None]] = []
    for evidence in analysis.calls.values():
        records = evidence.records
        origins = evidence.ranked[0]
        origin = origins[0] if origins else None
        position = {id(r): i for i, r in enumerate(records)}
        marked = {position[id(s.record)] for s in origins if id(s.record) in position}
        boundary = _marker(records, origin.boundary if origin else None, None)
        if boundary is not None:
            marked.add(boundary.index)
        classifications = {
            position[id(s.record)]: s.classification for s in evidence.suspects if id(s.record) in position
        }
        shown.append(CallModules(records, classifications, marked))
        markers.append((origin, boundary))
    columns = module_columns(shown, analysis, strings, stats, thresholds, Targets(analysis))
    texts = strings.table()
    calls = []
    for (call, evidence), modules, (origin, boundary) in zip(analysis.calls.items(), columns, markers):
        records = evidence.records
        note = next((r.comparison.calls_note for r in records if r.comparison.joins_calls), "")
        calls.append(
            ChartCall(
                call,
                f"forward.{call}",
                note,
                modules,
                _layers(modules, texts),
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
        error_cell,
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
        texts,
        stats.table(),
        thresholds.values,
    )
