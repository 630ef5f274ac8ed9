"""Root-cause logic on small dumps built from real values: each cause is named, matching runs come out clean."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from builders import ROLLOUT, TRAIN, entry, mlp_layer, write_dump, write_mapping

from rca_lsp.diagnose.analysis import Analysis
from rca_lsp.diagnose.run import analyze_paths
from rca_lsp.report.root_cause import root_cause_report

X = [0.5, -1.0, 2.0, 0.25]
GATE = [1.0, -2.0, 0.5, 3.0]
UP = [0.5, 1.5, -1.0, 2.0]
NAMES_TRAIN = {"fc1": "linear_fc1", "fc2": "linear_fc2"}
NAMES_ROLLOUT = {"fc1": "gate_up_proj", "fc2": "down_proj"}


def silu(v: float) -> float:
    return v / (1 + math.exp(-v))


ACT = [silu(g) * u for g, u in zip(GATE, UP)]
OUT = [a * 0.3 for a in ACT]


def mapping_for(layer: int = 0, call: int = 0, split: bool = True) -> dict:
    fc1 = (
        [
            f"{ROLLOUT}.{layer}.mlp.gate_proj.Linear.forward.{call}",
            f"{ROLLOUT}.{layer}.mlp.up_proj.Linear.forward.{call}",
        ]
        if split
        else f"{ROLLOUT}.{layer}.mlp.gate_up_proj.ColumnParallelLinear.forward.{call}"
    )
    return {
        f"{TRAIN}.{layer}.mlp.linear_fc1.ColumnParallelLinear.forward.{call}": fc1,
        f"{TRAIN}.{layer}.mlp.linear_fc2.Linear.forward.{call}": f"{ROLLOUT}.{layer}.mlp.down_proj.Linear.forward.{call}",
        f"{TRAIN}.{layer}.mlp.MLP.forward.{call}": f"{ROLLOUT}.{layer}.mlp.MLP.forward.{call}",
    }


def run(tmp: Path, train: dict, rollout: dict, mapping: dict) -> Analysis:
    write_dump(tmp / "train" / "dump.json", train)
    write_dump(tmp / "rollout" / "dump.json", rollout)
    write_mapping(tmp / "mapping_key.json", mapping)
    return analyze_paths(tmp / "train", tmp / "rollout", tmp / "mapping_key.json")


def test_matching_runs_report_nothing(tmp_path: Path) -> None:
    train = mlp_layer(TRAIN, 0, NAMES_TRAIN, X, GATE, UP, ACT, OUT)
    rollout = mlp_layer(ROLLOUT, 0, NAMES_ROLLOUT, X, GATE, UP, ACT, OUT, act_module=True, fused_fc1=False)
    analysis = run(tmp_path, train, rollout, mapping_for())
    assert analysis.suspects == [] and root_cause_report(analysis)["top_hypothesis"] == ""
    fc1 = analysis.by_train_key[f"{TRAIN}.0.mlp.linear_fc1.ColumnParallelLinear.forward.0"].comparison
    assert fc1.cardinality == "1:N" and fc1.output.aggregated and fc1.output_consistency == "aligned"
    assert fc1.parameter_consistency == "aligned" and len(fc1.inputs) == 2
    container = analysis.by_train_key[f"{TRAIN}.0.mlp.MLP.forward.0"].comparison
    assert container.parameter_consistency == "not_applicable" and container.module_bucket == "normal_aligned"


def test_missing_activation_is_named_at_the_first_mismatch(tmp_path: Path) -> None:
    act_train = [g * u for g, u in zip(GATE, UP)]
    train = mlp_layer(TRAIN, 0, NAMES_TRAIN, X, GATE, UP, act_train, [a * 0.3 for a in act_train])
    rollout = mlp_layer(ROLLOUT, 0, NAMES_ROLLOUT, X, GATE, UP, ACT, OUT, act_module=True, fused_fc1=False)
    analysis = run(tmp_path, train, rollout, mapping_for())
    first = analysis.suspects[0]
    assert first.train_key == f"{TRAIN}.0.mlp.linear_fc2.Linear.forward.0"
    assert first.classification == "missing_or_extra_op_between_aligned_boundary" and first.credible_origin
    assert root_cause_report(analysis)["top_evidence"] == [f"{ROLLOUT}.0.mlp.act_fn.SiLUActivation.forward.0"]
    container = analysis.suspect_by_train_key[f"{TRAIN}.0.mlp.MLP.forward.0"]
    assert not container.credible_origin and container.explained_by == first.train_key


def test_activation_between_does_not_explain_a_mismatch_whose_input_is_aligned(tmp_path: Path) -> None:
    train = mlp_layer(TRAIN, 0, NAMES_TRAIN, X, GATE, UP, ACT, [a * 0.31 for a in ACT])
    rollout = mlp_layer(ROLLOUT, 0, NAMES_ROLLOUT, X, GATE, UP, ACT, OUT, act_module=True, fused_fc1=False)
    analysis = run(tmp_path, train, rollout, mapping_for())
    assert analysis.suspects[0].classification == "in_module_impl_difference"
    assert analysis.suspects[0].train_key.endswith("linear_fc2.Linear.forward.0")


def test_parameter_desync(tmp_path: Path) -> None:
    train = mlp_layer(TRAIN, 0, NAMES_TRAIN, X, GATE, UP, ACT, [a * 0.31 for a in ACT])
    key = f"{TRAIN}.0.mlp.linear_fc2.Linear.forward.0"
    train[key] = entry(ACT, [a * 0.31 for a in ACT], [0.31, 0.7])
    rollout = mlp_layer(ROLLOUT, 0, NAMES_ROLLOUT, X, GATE, UP, ACT, OUT, act_module=True, fused_fc1=False)
    analysis = run(tmp_path, train, rollout, mapping_for())
    assert analysis.suspects[0].classification == "parameter_or_checkpoint_issue"
    assert root_cause_report(analysis)["top_hypothesis"] == "parameter sync or checkpoint alignment issue"


def test_repeated_calls_are_analysed_per_call(tmp_path: Path) -> None:
    train, rollout, mapping = {}, {}, {}
    for call in range(3):
        out = [a * (0.35 if call == 1 else 0.3) for a in ACT]
        train |= mlp_layer(TRAIN, 0, NAMES_TRAIN, X, GATE, UP, ACT, OUT, call=call)
        rollout |= mlp_layer(
            ROLLOUT, 0, NAMES_ROLLOUT, X, GATE, UP, ACT, out, call=call, act_module=True, fused_fc1=False
        )
        mapping |= mapping_for(call=call)
    analysis = run(tmp_path, train, rollout, mapping)
    origins = [s for s in analysis.suspects if s.credible_origin]
    assert [(s.train_key, s.record.call_index) for s in origins] == [(f"{TRAIN}.0.mlp.linear_fc2.Linear.forward.1", 1)]
    assert origins[0].boundary.call_index == 1


def test_nan_on_rollout_only(tmp_path: Path) -> None:
    train = mlp_layer(TRAIN, 0, NAMES_TRAIN, X, GATE, UP, ACT, OUT)
    rollout = mlp_layer(ROLLOUT, 0, NAMES_ROLLOUT, X, GATE, UP, ACT, OUT, act_module=True, fused_fc1=False)
    rollout[f"{ROLLOUT}.0.mlp.down_proj.Linear.forward.0"]["output"][0]["Max"] = math.nan
    analysis = run(tmp_path, train, rollout, mapping_for())
    first = analysis.suspects[0]
    assert first.train_key.endswith("linear_fc2.Linear.forward.0") and "non-finite on rollout" in first.rationale


def test_unknown_keys_are_reported_with_closest_matches(tmp_path: Path) -> None:
    train = mlp_layer(TRAIN, 0, NAMES_TRAIN, X, GATE, UP, ACT, OUT)
    rollout = mlp_layer(ROLLOUT, 0, NAMES_ROLLOUT, X, GATE, UP, ACT, OUT, act_module=True, fused_fc1=False)
    mapping = mapping_for()
    typo = f"{TRAIN}.0.mlp.linear_fc2.Linaer.forward.0"
    mapping[typo] = mapping.pop(f"{TRAIN}.0.mlp.linear_fc2.Linear.forward.0")
    analysis = run(tmp_path, train, rollout, mapping)
    issue = next(i for i in analysis.issues if i.code == "unknown-train-key")
    assert issue.key == typo and issue.suggestions[0] == f"{TRAIN}.0.mlp.linear_fc2.Linear.forward.0"
    text = analysis.mapping.text
    assert analysis.mapping.line_of(issue.span) == text[: text.index(typo)].count("\n") + 1


FC1 = f"{TRAIN}.0.mlp.linear_fc1.ColumnParallelLinear.forward.0"


@pytest.mark.parametrize(
    "value, wanted",
    [
        ([f"{ROLLOUT}.0.mlp.gate_proj.Linear.forward.0", f"{ROLLOUT}.0.mlp.up_prj.Linear.forward.0"], True),
        (f"{ROLLOUT}.0.mlp.gate_prj.Linear.forward.*", True),
        ([f"{ROLLOUT}.0.mlp.gate_proj.Linear.forward.0", f"{ROLLOUT}.0.mlp.up_proj.Linear.forward.0"], False),
    ],
    ids=["one of several keys unknown", "unknown forward.*", "every key known"],
)
def test_an_entry_naming_an_unknown_key_is_flagged(tmp_path: Path, value: object, wanted: bool) -> None:
    """The entries naming a key no dump has are flagged, whichever form their value takes (the usable mapping
    says when none does, and the search for them is skipped then)."""
    train = mlp_layer(TRAIN, 0, NAMES_TRAIN, X, GATE, UP, ACT, OUT)
    rollout = mlp_layer(ROLLOUT, 0, NAMES_ROLLOUT, X, GATE, UP, ACT, OUT, act_module=True, fused_fc1=False)
    analysis = run(tmp_path, train, rollout, mapping_for() | {FC1: value})
    assert [entry.train_key for entry in analysis.flagged] == ([FC1] if wanted else [])
    assert any(i.code == "unknown-rollout-key" for i in analysis.issues) == wanted


def test_an_earlier_definition_of_a_key_naming_an_unknown_key_is_flagged(tmp_path: Path) -> None:
    """A train key defined twice: the last definition is analysed, and an earlier one naming a key no dump has is
    still flagged where it stands, though every key of the definitions analysed is known."""
    train = mlp_layer(TRAIN, 0, NAMES_TRAIN, X, GATE, UP, ACT, OUT)
    rollout = mlp_layer(ROLLOUT, 0, NAMES_ROLLOUT, X, GATE, UP, ACT, OUT, act_module=True, fused_fc1=False)
    write_dump(tmp_path / "train" / "dump.json", train)
    write_dump(tmp_path / "rollout" / "dump.json", rollout)
    earlier = f'  "{FC1}": "{ROLLOUT}.0.mlp.gate_prj.Linear.forward.0",\n'
    text = json.dumps(mapping_for(), indent=2).replace("{\n", "{\n" + earlier, 1)
    (tmp_path / "mapping_key.json").write_text(text)
    analysis = analyze_paths(tmp_path / "train", tmp_path / "rollout", tmp_path / "mapping_key.json")
    assert len(analysis.flagged) == 1 and analysis.flagged[0].train_key == FC1
    assert "gate_prj" in analysis.flagged[0].rollout_keys[0]
    assert len(analysis.records) == 3  # the last definition of FC1 is compared
