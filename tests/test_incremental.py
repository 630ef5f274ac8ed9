"""An analysis updated from the previous one says exactly what a fresh analysis of the same files says."""

from __future__ import annotations

import gc
import json
import random
import weakref
from typing import Any

import pytest
from conftest import FIXTURES

from rca_lsp.compare.records import Comparator
from rca_lsp.diagnose.analysis import Analysis, analyze
from rca_lsp.dumps.load import DumpCache
from rca_lsp.mapping.parse import parse_mapping
from rca_lsp.model.tolerance import Tolerances
from rca_lsp.report.root_cause import root_cause_report

DUMPS = DumpCache()


def _comparator(variant: str) -> Comparator:
    train = DUMPS.get(FIXTURES / variant / "train")
    rollout = DUMPS.get(FIXTURES / variant / "rollout")
    return Comparator(train, rollout, Tolerances())


def _summary(analysis: Analysis) -> dict[str, Any]:
    return {
        "issues": [(i.code, i.span, i.message, i.suggestions) for i in analysis.issues],
        "usable": analysis.usable,
        "records": [(r.comparison.train_keys, r.comparison.rollout_keys) for r in analysis.records],
        "by_train_key": {k: r.comparison.train_keys for k, r in analysis.by_train_key.items()},
        "matched": (analysis.matched_train, analysis.matched_rollout),
        "unmapped_between": analysis.unmapped_between,
        "report": root_cause_report(analysis),
        "suspects": [
            (
                s.train_key,
                s.classification,
                s.rationale,
                s.credible_origin,
                s.explained_by,
                s.boundary.train_key if s.boundary else None,
                s.between,
            )
            for s in analysis.suspects
        ],
    }


def _edit(
    mapping: dict[str, Any], removed: dict[str, Any], rng: random.Random, train_keys: list[str], rollout_keys: list[str]
) -> None:
    """One random edit of the kinds an engineer makes by hand, including wrong ones."""
    key = rng.choice(list(mapping))
    kind = rng.choice(["delete", "restore", "retarget", "share", "unknown-value", "unknown-key", "split", "add"])
    if kind == "delete":
        removed[key] = mapping.pop(key)
    elif kind == "restore" and removed:
        restored = rng.choice(list(removed))
        mapping[restored] = removed.pop(restored)
    elif kind == "retarget":
        mapping[key] = rng.choice(rollout_keys)
    elif kind == "share":  # N:1: two train keys name the same rollout key
        other = rng.choice(list(mapping))
        mapping[key] = mapping[other]
    elif kind == "unknown-value":
        mapping[key] = "Module.not.in.the.dump.forward.0"
    elif kind == "unknown-key":
        mapping["Module.typo." + key] = mapping.pop(key)
    elif kind == "split":
        mapping[key] = rng.sample(rollout_keys, 2)
    elif kind == "add":
        mapping[rng.choice(train_keys)] = rng.choice(rollout_keys)


@pytest.mark.parametrize(
    "variant, edits",
    [
        ("missing_activation", 40),
        ("repeated_calls", 40),
        ("param_desync", 40),
        ("upstream_unmapped", 40),
        # a record joining decode calls scans each call from its own start when the boundary is not in that call:
        # edit 116 of this sequence flips a key there, which the suspect's lists must see
        ("decode_missing_activation", 120),
    ],
)
def test_updated_analysis_equals_a_fresh_one(variant: str, edits: int) -> None:
    comparator = _comparator(variant)
    rng = random.Random(variant)
    mapping = json.loads((FIXTURES / variant / "mapping_key.json").read_text())
    removed: dict[str, Any] = {}
    text = json.dumps(mapping, indent=2)
    parsed = parse_mapping("m.json", text)
    previous = analyze(parsed, comparator)
    for _ in range(edits):
        _edit(mapping, removed, rng, comparator.train.keys, comparator.rollout.keys)
        parsed = parse_mapping("m.json", json.dumps(mapping, indent=2), parsed)
        updated = analyze(parsed, comparator, previous)
        assert _summary(updated) == _summary(
            analyze(parsed, Comparator(comparator.train, comparator.rollout, Tolerances()))
        )
        previous = updated


def test_unchanged_calls_keep_their_evidence() -> None:
    comparator = _comparator("repeated_calls")
    mapping = json.loads((FIXTURES / "repeated_calls" / "mapping_key.json").read_text())
    before = analyze(parse_mapping("m.json", json.dumps(mapping)), comparator)
    key = next(k for k in mapping if k.endswith(".forward.1"))
    del mapping[key]
    after = analyze(parse_mapping("m.json", json.dumps(mapping)), comparator, before)
    reused = {call for call, evidence in after.calls.items() if evidence is before.calls.get(call)}
    assert reused and comparator.train.entries[key].call_index not in reused


def test_a_comparator_replaced_is_freed_with_those_derived_from_it_without_the_cycle_collector() -> None:
    """A comparator and the one calibration derives from it formed a cycle: the language server freezes what is
    alive after each parse and analysis (base.gcpause), out of the cycle collector's reach, so every comparator
    replaced (dumps rewritten, tolerances changed) stayed in memory for good, with its dumps."""
    base = _comparator("missing_activation")
    tight = Tolerances({**Tolerances().by_dtype, "float32": 1e-6})
    derived = base.with_tolerances(tight)
    assert base.with_tolerances(tight) is derived  # reused while in use
    freed = [weakref.ref(base), weakref.ref(derived)]
    gc.disable()
    try:
        del base, derived
        assert [ref() for ref in freed] == [None, None]
    finally:
        gc.enable()
