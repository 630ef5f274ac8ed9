"""One analysis of a mapping-key file against its train and rollout dumps: the core's entry point."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from rca_lsp.core.dump import Dump
from rca_lsp.core.gcpause import paused_gc
from rca_lsp.core.keys import block_of, layer_index
from rca_lsp.core.mapping import MappingIssue, ParsedMapping
from rca_lsp.core.records import Comparator, ModuleRecord, build_groups
from rca_lsp.core.rootcause import RootCauseAnalysis, Suspect, hypothesis, next_checks, record_summary, suspect_json
from rca_lsp.core.validate import validate_against_dumps


MAX_REPORTED_SUSPECTS = 1000  # the report lists the first ones (origins first); output_4 has every record


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
class Analysis:
    train: Dump
    rollout: Dump
    mapping: ParsedMapping
    issues: list[MappingIssue]
    usable: dict[str, tuple[str, ...]]  # train key -> rollout keys present in the rollout dump
    records: list[ModuleRecord]  # output_4, in train order
    suspects: list[Suspect]
    structural: list[ModuleRecord]
    unmapped_between: dict[str, list[str]]  # mapped train key -> unmapped train keys nearest to it
    report: dict[str, Any] = field(default_factory=dict)  # output_5
    by_train_key: dict[str, ModuleRecord] = field(default_factory=dict)
    suspect_by_train_key: dict[str, Suspect] = field(default_factory=dict)

    @cached_property
    def rows(self) -> list[MappingRow]:
        """output_1, built only when the output files are written."""
        return _rows(self.train, self.mapping, self.usable)

    def __post_init__(self) -> None:
        self.by_train_key = {k: r for r in self.records for k in r.comparison.train_keys}
        self.suspect_by_train_key = {k: s for s in reversed(self.suspects) for k in s.record.comparison.train_keys}


def _usable_mapping(mapping: ParsedMapping, train: Dump, rollout: Dump) -> dict[str, tuple[str, ...]]:
    usable: dict[str, tuple[str, ...]] = {}
    for train_key, entry in mapping.effective().items():
        if train_key not in train.entries:
            continue
        rollout_keys = tuple(dict.fromkeys(k for k in entry.rollout_keys if k in rollout.entries))
        if rollout_keys:
            usable[train_key] = rollout_keys
    return usable


def _rows(train: Dump, mapping: ParsedMapping, usable: dict[str, tuple[str, ...]]) -> list[MappingRow]:
    requested = mapping.effective()
    rows = []
    for key in train.keys:
        rollout_keys = usable.get(key, ())
        layer = layer_index(key)
        notes = "no matched rollout key" if not rollout_keys else ""
        entry = requested.get(key)
        confident = bool(rollout_keys) and entry is not None and len(rollout_keys) == len(entry.rollout_keys) and all(
            layer_index(r) == layer for r in rollout_keys)
        if entry is not None and len(rollout_keys) < len(entry.rollout_keys):
            notes = "some mapped rollout keys are not in the rollout dump"
        cardinality = "1:0" if not rollout_keys else ("1:1" if len(rollout_keys) == 1 else "1:N")
        rows.append(MappingRow(key, rollout_keys, layer, block_of(key), cardinality, "high" if confident else "low", notes))
    return rows


def _unmapped_between(train: Dump, matched: set[str]) -> dict[str, list[str]]:
    """Unmapped train modules with mapped modules of the same call on both sides, attached to the nearest one."""
    attached: dict[str, list[str]] = {}
    last_mapped: dict[int, int] = {}
    pending: dict[int, list[int]] = {}
    for position, key in enumerate(train.keys):
        call = train.entries[key].call_index
        if key in matched:
            for waiting in pending.pop(call, []):
                before = last_mapped[call]
                nearest = before if waiting - before <= position - waiting else position
                attached.setdefault(train.keys[nearest], []).append(train.keys[waiting])
            last_mapped[call] = position
        elif call in last_mapped:
            pending.setdefault(call, []).append(position)
    return attached


def analyze(mapping: ParsedMapping, comparator: Comparator) -> Analysis:
    """Validate the mapping against the dumps, compare every mapped group, and derive the root-cause evidence."""
    with paused_gc():
        return _analyze(mapping, comparator)


def _analyze(mapping: ParsedMapping, comparator: Comparator) -> Analysis:
    train, rollout = comparator.train, comparator.rollout
    issues = sorted(mapping.issues + validate_against_dumps(mapping, train, rollout), key=lambda i: i.span.start)
    usable = _usable_mapping(mapping, train, rollout)
    records = comparator.records(build_groups(usable, train, rollout))
    matched_train = {k for r in records for k in r.comparison.train_keys}
    matched_rollout = {k for r in records for k in r.comparison.rollout_keys}
    suspects, structural = RootCauseAnalysis(records, train, rollout, matched_train, matched_rollout).suspects()
    analysis = Analysis(train, rollout, mapping, issues, usable, records, suspects, structural,
                        _unmapped_between(train, matched_train))
    analysis.report = root_cause_report(analysis)
    return analysis


def root_cause_report(analysis: Analysis) -> dict[str, Any]:
    """output_5_root_cause_report.json: the seed's schema and field names, with richer evidence per suspect."""
    first = analysis.suspects[0] if analysis.suspects else None
    top_hypothesis, top_evidence = hypothesis(first)
    nonfinite = [r.train_key for r in analysis.records if r.comparison.output_nonfinite_both]
    return {
        "train_path": analysis.train.path,
        "rollout_path": analysis.rollout.path,
        "mapping_key_path": analysis.mapping.path,
        "structural_false_positives": [
            {**{k: v for k, v in record_summary(r).items() if k in ("train_key", "rollout_key", "module_bucket")},
             "skip_reason": r.comparison.reasoning} for r in analysis.structural],
        "root_cause_suspects": [suspect_json(s) for s in analysis.suspects[:MAX_REPORTED_SUSPECTS]],
        "root_cause_suspects_total": len(analysis.suspects),
        "top_hypothesis": top_hypothesis,
        "top_evidence": top_evidence,
        "first_divergence": suspect_json(first) if first and first.credible_origin else None,
        "nonfinite_on_both_sides": nonfinite,
        "mapping_issues": [{"code": i.code, "line": analysis.mapping.line_of(i.span), "message": i.message, "key": i.key}
                           for i in analysis.issues],
        "counts": {
            "train_forward_keys": len(analysis.train.keys),
            "rollout_forward_keys": len(analysis.rollout.keys),
            "mapped_groups": len(analysis.records),
            "suspects": len(analysis.suspects),
        },
        "next_checks": next_checks(analysis.suspects),
    }

