"""One analysis of a mapping-key file against its train and rollout dumps: the core's entry point.

An analysis can start from the previous analysis of the same comparator (the same dumps and tolerances): then only
the groups whose mapping entries changed are rebuilt, and only the calls whose records or evidence windows changed
are examined again, so a one-line edit of a 10^5-entry mapping costs little more than the edit itself.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, replace
from itertools import chain
from operator import attrgetter
from typing import Callable

from rca_lsp.base.cached import cached_property
from rca_lsp.base.gcpause import paused_gc
from rca_lsp.compare.calibrate import Calibration, ErrorSeries
from rca_lsp.compare.records import Comparator, ModuleRecord, Owners, build_groups, owners_of, regroup, updated_owners
from rca_lsp.compare.targettable import TargetTable, target_table
from rca_lsp.diagnose.between import UnmatchedPositions
from rca_lsp.diagnose.evidence import ranked_suspects
from rca_lsp.diagnose.hypothesis import hypothesis
from rca_lsp.diagnose.rootcause import CallEvidence, RootCauseAnalysis, Suspect
from rca_lsp.dumps.dump import Dump
from rca_lsp.mapping.model import MappingEntry, MappingIssue, ParsedMapping
from rca_lsp.mapping.validate import unknown_entries, unknown_key_issues
from rca_lsp.model.keys import block_of, layer_index

Usable = dict[str, tuple[str, ...]]  # train key -> rollout keys present in the rollout dump


@dataclass(frozen=True, slots=True)
class MappingRow:
    """output_1: one row per train forward key, in train dump order."""

    train_key: str
    rollout_keys: tuple[str, ...]
    layer_index: int | None
    block: str
    cardinality: str  # 1:1 | 1:N | 1:0
    confidence: str  # high | low
    notes: str


@dataclass
class Compared:
    """The mapping's groups compared and judged under the calibrated thresholds: all that the tables (output_1..4)
    read, ready before the root-cause evidence is derived (the CLI starts writing them meanwhile)."""

    comparator: Comparator
    mapping: ParsedMapping
    usable: Usable
    records: list[ModuleRecord]  # output_4, in train order

    @property
    def train(self) -> Dump:
        return self.comparator.train

    @property
    def rollout(self) -> Dump:
        return self.comparator.rollout

    @cached_property
    def targets(self) -> TargetTable:
        """Every compared target of the records as columns (output_3 and the chart read them; built once per
        process that writes them)."""
        return target_table([record.comparison for record in self.records], self.train, self.rollout)

    @cached_property
    def rows(self) -> list[MappingRow]:
        """output_1, built only when the output files are written."""
        return _rows(self.train, self.mapping, self.usable)


@dataclass
class Analysis(Compared):
    flagged: list[MappingEntry]  # entries naming keys that are not in the dumps, in file order
    issues: list[MappingIssue]
    by_train_key: dict[str, ModuleRecord]
    matched_train: set[str]
    matched_rollout: set[str]
    calls: dict[int, CallEvidence]  # root-cause evidence per call index, in train order of the calls
    unmatched: tuple[UnmatchedPositions, UnmatchedPositions]  # dump positions no record matched (train, rollout)
    unmapped_by_call: dict[int, dict[str, list[str]]]
    unmapped_between: dict[str, list[str]]  # mapped train key -> unmapped train keys nearest to it (all calls)
    suspects: list[Suspect]
    calibration: Calibration  # the run's noise floor per dtype, and the thresholds the records were judged by
    series: ErrorSeries  # the errors calibrated, kept to calibrate again after an edit
    judge: Comparator  # the comparator under those thresholds (comparator itself when nothing was tightened)

    @cached_property
    def owners(self) -> Owners:
        """Rollout key -> the train keys naming it: what an edit regroups by (an analysis no edit follows never
        needs it; _update carries it along)."""
        return owners_of(self.usable)

    @cached_property
    def structural(self) -> list[ModuleRecord]:
        return [r for evidence in self.calls.values() for r in evidence.structural]

    @cached_property
    def suspect_by_train_key(self) -> dict[str, Suspect]:
        return {k: s for s in reversed(self.suspects) for k in s.record.comparison.train_keys}

    @property
    def top_hypothesis(self) -> str:
        return hypothesis(self.suspects[0] if self.suspects else None)[0]


def _data_note(comparator: Comparator) -> str | None:
    choice = comparator.data_choice
    return choice.describe() if choice is not None else None


def _usable_mapping(effective: dict[str, MappingEntry], train: Dump, rollout: Dump) -> tuple[Usable, bool]:
    """The entries' keys present in the dumps (an entry with none is left out), and whether every key the entries
    name is present (then validate.unknown_entries finds none of them)."""
    usable: Usable = {}
    known = True
    train_entries, rollout_entries = train.entries, rollout.entries
    for train_key, entry in effective.items():
        if train_key not in train_entries:
            known = False
            continue
        keys = entry.rollout_keys
        if len(keys) == 1 and keys[0] in rollout_entries:
            usable[train_key] = keys
            continue
        if len(keys) == 1:  # forward.*: every call (the common case of a decode rollout, hundreds of them)
            present = tuple(rollout.calls_of(keys[0]))
            known = known and bool(present)
        else:
            found = [rollout.calls_of(key) for key in keys]
            known = known and all(found)
            present = tuple(dict.fromkeys(chain.from_iterable(found)))
        if present:
            usable[train_key] = present
    return usable, known


def _rows(train: Dump, mapping: ParsedMapping, usable: Usable) -> list[MappingRow]:
    requested = mapping.effective()
    rows = []
    for key in train.keys:
        rollout_keys = usable.get(key, ())
        layer = layer_index(key)
        notes = "no matched rollout key" if not rollout_keys else ""
        entry = requested.get(key)
        confident = (
            bool(rollout_keys)
            and entry is not None
            and len(rollout_keys) == len(entry.rollout_keys)
            and all(layer_index(r) == layer for r in rollout_keys)
        )
        if entry is not None and len(rollout_keys) < len(entry.rollout_keys):
            notes = "some mapped rollout keys are not in the rollout dump"
        cardinality = "1:0" if not rollout_keys else ("1:1" if len(rollout_keys) == 1 else "1:N")
        rows.append(
            MappingRow(key, rollout_keys, layer, block_of(key), cardinality, "high" if confident else "low", notes)
        )
    return rows


def _all_calls(unmapped_by_call: dict[int, dict[str, list[str]]]) -> dict[str, list[str]]:
    return {k: v for per_call in unmapped_by_call.values() for k, v in per_call.items()}


def _unmapped_between(train: Dump, positions: list[int], matched: set[str]) -> dict[str, list[str]]:
    """Unmapped train modules of one call (the dump positions of its keys) with mapped modules of the call on both
    sides, attached to the nearest one."""
    keys = train.keys
    attached: dict[str, list[str]] = {}
    last_mapped = -1
    pending: list[int] = []
    for position in positions:
        if keys[position] in matched:
            for waiting in pending:
                nearest = last_mapped if waiting - last_mapped <= position - waiting else position
                attached.setdefault(keys[nearest], []).append(keys[waiting])
            pending = []
            last_mapped = position
        elif last_mapped >= 0:
            pending.append(position)
    return attached


OnCompared = Callable[[Compared], None]


def analyze(
    mapping: ParsedMapping,
    comparator: Comparator,
    previous: Analysis | None = None,
    on_compared: OnCompared | None = None,
) -> Analysis:
    """Validate the mapping against the dumps, compare every mapped group, and derive the root-cause evidence.
    `previous` (an analysis of an earlier version of the mapping) lets unchanged parts be reused; without it,
    `on_compared` is called once the groups are compared and judged, before the evidence is derived."""
    mapping = mapping.for_dumps(comparator.train, comparator.rollout)
    with paused_gc():
        if previous is not None and previous.comparator is comparator:
            return _update(mapping, previous)
        return _analyze(mapping, comparator, on_compared)


def _issues(mapping: ParsedMapping, flagged: list[MappingEntry], comparator: Comparator) -> list[MappingIssue]:
    found = unknown_key_issues(mapping, flagged, comparator.train, comparator.rollout, comparator.suggestions)
    return sorted(mapping.issues + found, key=lambda i: i.span.start) if found else list(mapping.issues)


def _flagged_after_edit(mapping: ParsedMapping, previous: Analysis) -> list[MappingEntry]:
    """Entries with unknown keys: those of the previous parse still present, and those new to this parse."""
    kept = [e for e in previous.flagged if mapping.index_of(e) is not None]
    added = (
        mapping.edit.added
        if mapping.edit and mapping.edit.derives(previous.mapping)
        else (mapping.entries_not_in(previous.mapping))
    )
    new = unknown_entries(added, previous.train, previous.rollout)
    return sorted(kept + new, key=mapping.index_of) if new else kept  # type: ignore[arg-type]


def _usable_after_edit(mapping: ParsedMapping, previous: Analysis) -> tuple[Usable, list[str]]:
    """The usable mapping, updated at the train keys whose entry changed; and the keys whose usable value did."""
    effective, old = mapping.effective(), previous.mapping.effective()
    if mapping.edit and mapping.edit.derives(previous.mapping):
        keys = {e.train_key for e in mapping.edit.removed + mapping.edit.added}
        edited = [k for k in keys if old.get(k) is not effective.get(k)]
    else:
        edited = [k for k, e in effective.items() if old.get(k) is not e] + [k for k in old if k not in effective]
    usable = previous.usable.copy()  # .copy(): dict() takes the slow path once a key was deleted
    for key in edited:
        usable.pop(key, None)
    usable.update(
        _usable_mapping({k: effective[k] for k in edited if k in effective}, previous.train, previous.rollout)[0]
    )
    return usable, [k for k in edited if usable.get(k) != previous.usable.get(k)]


def _by_call(records: list[ModuleRecord]) -> dict[int, list[ModuleRecord]]:
    calls: dict[int, list[ModuleRecord]] = {}
    for record in records:
        calls.setdefault(record.call_index, []).append(record)
    return calls


def _calibrated(comparator: Comparator, series: ErrorSeries) -> tuple[Calibration, Comparator]:
    calibration = series.calibrate(comparator.tolerances)
    return calibration, comparator.with_tolerances(calibration.tolerances(comparator.tolerances))


def _analyze(mapping: ParsedMapping, comparator: Comparator, on_compared: OnCompared | None = None) -> Analysis:
    train, rollout = comparator.train, comparator.rollout
    effective = mapping.effective()
    usable, all_known = _usable_mapping(effective, train, rollout)
    groups = build_groups(usable, train, rollout)
    records = comparator.records(groups)
    series = ErrorSeries.of(records)
    calibration, judge = _calibrated(comparator, series)
    if judge is not comparator:
        records = judge.records(groups)
    if on_compared is not None:
        on_compared(Compared(comparator, mapping, usable, records))
    # a record's keys are its group's
    matched_train = set(chain.from_iterable(train_keys for train_keys, _ in groups))
    matched_rollout = set(chain.from_iterable(rollout_keys for _, rollout_keys in groups))
    unmatched = (UnmatchedPositions(train, matched_train), UnmatchedPositions(rollout, matched_rollout))
    root_cause = RootCauseAnalysis(train, rollout, unmatched, _data_note(comparator))
    calls = {call: root_cause.call_evidence(rs) for call, rs in _by_call(records).items()}
    unmapped = {call: _unmapped_between(train, keys, matched_train) for call, keys in comparator.train_calls.items()}
    # every key known and no train key defined twice (an earlier definition's keys are not in `effective`): none
    flagged = (
        [] if all_known and len(effective) == len(mapping.entries) else unknown_entries(mapping.entries, train, rollout)
    )
    return Analysis(
        comparator=comparator,
        mapping=mapping,
        usable=usable,
        records=records,
        flagged=flagged,
        issues=_issues(mapping, flagged, comparator),
        by_train_key={k: r for (train_keys, _), r in zip(groups, records) for k in train_keys},
        matched_train=matched_train,
        matched_rollout=matched_rollout,
        calls=calls,
        unmatched=unmatched,
        unmapped_by_call=unmapped,
        unmapped_between=_all_calls(unmapped),
        suspects=ranked_suspects(calls.values()),
        calibration=calibration,
        series=series,
        judge=judge,
    )


def _update(mapping: ParsedMapping, previous: Analysis) -> Analysis:
    comparator = previous.comparator
    train, rollout = comparator.train, comparator.rollout
    flagged = _flagged_after_edit(mapping, previous)
    issues = _issues(mapping, flagged, comparator)
    usable, changed = _usable_after_edit(mapping, previous)
    if not changed:  # no entry pairs other keys than before: the same comparisons
        unchanged = replace(previous, mapping=mapping, flagged=flagged, issues=issues, usable=usable)
        return _with_owners(unchanged, previous.__dict__.get("owners"))
    owners = updated_owners(previous.owners, previous.usable, usable, changed)
    dirty, groups = regroup(changed, usable, owners, previous.by_train_key, train, rollout)
    old = {id(r): r for k in dirty if (r := previous.by_train_key.get(k)) is not None}
    new = {id(r): r for r in previous.judge.records(groups)}
    removed = [r for i, r in old.items() if i not in new]
    added = [r for i, r in new.items() if i not in old]

    by_train_key = previous.by_train_key.copy()
    matched_train, matched_rollout = previous.matched_train.copy(), previous.matched_rollout.copy()
    for record in removed:
        for key in record.comparison.train_keys:
            del by_train_key[key]
        matched_train.difference_update(record.comparison.train_keys)
        matched_rollout.difference_update(record.comparison.rollout_keys)
    for record in added:
        by_train_key.update(dict.fromkeys(record.comparison.train_keys, record))
        matched_train.update(record.comparison.train_keys)
        matched_rollout.update(record.comparison.rollout_keys)
    # dump keys that became matched or unmatched: the "between" lists that scanned them must be derived again
    flipped_train = {
        k
        for r in removed + added
        for k in r.comparison.train_keys
        if (k in matched_train) != (k in previous.matched_train)
    }
    flipped_rollout = [
        rollout.entries[k].position
        for r in removed + added
        for k in r.comparison.rollout_keys
        if (k in matched_rollout) != (k in previous.matched_rollout)
    ]
    train_positions = [train.entries[k].position for k in flipped_train]
    unmatched = (
        UnmatchedPositions(train, matched_train, previous.unmatched[0], train_positions),
        UnmatchedPositions(rollout, matched_rollout, previous.unmatched[1], flipped_rollout),
    )
    root_cause = RootCauseAnalysis(train, rollout, unmatched, _data_note(comparator))
    calls = _calls_after(previous, removed, added, root_cause, train_positions, flipped_rollout)
    unmapped = previous.unmapped_by_call
    if flipped_train:  # else the same matched train keys: the same unmapped modules between them
        unmapped = dict(unmapped)
        for call in {train.entries[k].call_index for k in flipped_train}:
            unmapped[call] = _unmapped_between(train, comparator.train_calls[call], matched_train)
    records = _replaced(previous.records, removed, added)
    series = previous.series.updated(removed, added)
    calibration, judge = _calibrated(comparator, series)
    if judge is not previous.judge:  # the edit moved the noise floor: every verdict may change
        return _analyze(mapping, comparator)
    updated = replace(
        previous,
        mapping=mapping,
        flagged=flagged,
        issues=issues,
        usable=usable,
        records=records,
        by_train_key=by_train_key,
        matched_train=matched_train,
        matched_rollout=matched_rollout,
        calls=calls,
        unmatched=unmatched,
        unmapped_by_call=unmapped,
        unmapped_between=previous.unmapped_between if unmapped is previous.unmapped_by_call else _all_calls(unmapped),
        suspects=ranked_suspects(calls.values()),
        calibration=calibration,
        series=series,
    )
    return _with_owners(updated, owners)


def _with_owners(analysis: Analysis, owners: Owners | None) -> Analysis:
    """`analysis` with its owners (the cached property), when they were worked out for its usable mapping already."""
    if owners is not None:
        analysis.__dict__["owners"] = owners
    return analysis


def _calls_after(
    previous: Analysis,
    removed: list[ModuleRecord],
    added: list[ModuleRecord],
    root_cause: RootCauseAnalysis,
    train_positions: list[int],
    rollout_positions: list[int],
) -> dict[int, CallEvidence]:
    """The evidence per call after records were removed and added: reused, updated, or new."""
    call_records: dict[int, list[ModuleRecord]] = {}
    changed_positions: dict[int, list[int]] = {}
    for call in {r.call_index for r in removed + added}:
        earlier = previous.calls[call].records if call in previous.calls else []
        call_records[call] = _replaced(
            earlier, [r for r in removed if r.call_index == call], [r for r in added if r.call_index == call]
        )
        changed_positions[call] = [r.train_position for r in removed + added if r.call_index == call]
    calls: dict[int, CallEvidence] = {}
    for call in dict.fromkeys(r.call_index for r in _call_heads(previous, call_records)):
        evidence = previous.calls.get(call)
        if call in call_records:
            span = (min(changed_positions[call]), max(changed_positions[call]))
            calls[call] = root_cause.call_evidence(
                call_records[call], evidence, span, train_positions, rollout_positions
            )
        elif evidence is not None and evidence.saw_any(train_positions, rollout_positions):
            calls[call] = root_cause.call_evidence(evidence.records, evidence, None, train_positions, rollout_positions)
        elif evidence is not None:
            calls[call] = evidence
    return calls


def _replaced(
    records: list[ModuleRecord], removed: list[ModuleRecord], added: list[ModuleRecord]
) -> list[ModuleRecord]:
    """`records` (in train order, each of `removed` among them) without `removed`, with `added` in their place."""
    kept = list(records)
    for record in removed:
        del kept[bisect.bisect_left(kept, record.train_position, key=_TRAIN_POSITION)]
    for record in added:
        bisect.insort(kept, record, key=_TRAIN_POSITION)
    return kept


_TRAIN_POSITION = attrgetter("train_position")


def _call_heads(previous: Analysis, call_records: dict[int, list[ModuleRecord]]) -> list[ModuleRecord]:
    """The first record of every call, old and new, in train order: the order calls are reported in."""
    heads = [e.records[0] for call, e in previous.calls.items() if call not in call_records and e.records]
    heads += [rs[0] for rs in call_records.values() if rs]
    return sorted(heads, key=_TRAIN_POSITION)
