"""Every committed real fixture variant is diagnosed as its expected.json says (module and classification)."""

from __future__ import annotations

import pytest
from conftest import FIXTURES, expected, rollout_options, variants

from rca_lsp.diagnose.run import analyze_paths
from rca_lsp.report.root_cause import root_cause_report


def analyse(variant: str):
    folder = FIXTURES / variant
    return analyze_paths(
        folder / "train", folder / "rollout", folder / "mapping_key.json", rollout_options=rollout_options(variant)
    )


def test_fixture_set_covers_every_kind_of_cause() -> None:
    kinds = {expected(v)["root_cause"]["classification"] for v in variants() if not expected(v)["clean"]}
    assert {
        "missing_or_extra_op_between_aligned_boundary",
        "parameter_or_checkpoint_issue",
        "in_module_impl_difference",
        "upstream_propagation",
    } <= kinds
    assert any(expected(v)["clean"] for v in variants())


@pytest.mark.parametrize("variant", variants())
def test_variant_is_diagnosed(variant: str) -> None:
    truth = expected(variant)
    analysis = analyse(variant)
    assert analysis.issues == []
    if truth["clean"]:
        assert analysis.suspects == [] and root_cause_report(analysis)["top_hypothesis"] == ""
        return
    first = analysis.suspects[0]
    cause = truth["root_cause"]
    assert (first.train_key, first.classification) == (cause["train_key"], cause["classification"])
    assert first.credible_origin
    assert [s for s in analysis.suspects if s.credible_origin] == [first], "only one credible origin expected"
    evidence = set(root_cause_report(analysis)["top_evidence"]) | {first.train_key}
    named = set(cause.get("evidence_keys", [])) - {first.train_key}
    if cause["classification"] != "parameter_or_checkpoint_issue":
        assert named & evidence or not named, f"none of {named} named in {evidence}"
    assert cause.get("hypothesis_mentions", "") in root_cause_report(analysis)["top_hypothesis"]


@pytest.mark.parametrize("variant", sorted(p.parent.name for p in FIXTURES.glob("*/mapping_key_explicit.json")))
def test_explicit_call_lists_mean_the_same_as_forward_star(variant: str) -> None:
    folder = FIXTURES / variant
    compact = analyse(variant)
    explicit = analyze_paths(
        folder / "train",
        folder / "rollout",
        folder / "mapping_key_explicit.json",
        rollout_options=rollout_options(variant),
    )
    assert "forward.*" in (folder / "mapping_key.json").read_text()
    assert explicit.issues == [] and len(explicit.records) == len(compact.records) > 0
    assert [(s.train_key, s.classification, s.credible_origin) for s in explicit.suspects] == [
        (s.train_key, s.classification, s.credible_origin) for s in compact.suspects
    ]


def test_the_tables_report_the_calibrated_threshold() -> None:
    analysis = analyse("healthy_fp32")
    threshold = analysis.calibration.by_dtype["float32"].threshold
    assert threshold < 1e-4  # tightened below the fixed float32 tolerance
    assert {r.comparison.output.tolerance for r in analysis.records if r.comparison.output.train is not None} == {
        threshold
    }
