"""Any mapping group, of any form the dumps can give, is compared without an exception and judged into one of the
seed's buckets: parts on either side (1:N, N:1, N:M), a module's several calls, per-expert modules against fused
experts, routers of other classes, a residual stream carried apart, activations of other batches, disagreeing
copies; statistics equal, close, far, missing or non-finite, dtypes mixed. Each of these once raised: a router
whose output dtype differs from the other side's (while its reasoning was written), fused experts dumped without
weights (their parameters aggregated from none), calls whose Means overflow to both infinities (their exact sum)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import msgspec
from builders import entry, write_dump, write_mapping
from hypothesis import given, settings
from hypothesis import strategies as st
from test_target_table import pair, stats, tolerances

from rca_lsp.compare.module import compare_module
from rca_lsp.diagnose.run import analyze_paths
from rca_lsp.dumps.dump import Disagreement, ModuleEntry

BUCKETS = {
    "rank_replica_disagreement",
    "call_parameter_disagreement",
    "insufficient_output_evidence",
    "normal_aligned",
    "comparison_premise_abnormal_but_output_aligned",
    "internal_difference_but_output_aligned",
    "fused_qkv_structural_mismatch",
    "structural_shape_mismatch",
    "systemic_misalignment",
    "upstream_propagation_or_amplification",
    "parameter_sync_mismatch",
    "module_impl_mismatch",
}
CLASSES = ["MLP", "TopKRouter", "MixtralExperts", "FusedMoE", "Softmax", "RMSNorm", "Linear"]
PATHS = [
    "layers.0.mlp",
    "layers.0.mlp.experts.0",
    "layers.0.mlp.experts.1",
    "layers.0.self_attn.q_proj",
    "layers.0.mlp.gate",
]
NAMES = ["weight", "bias"]


@st.composite
def part(draw: st.DrawFn, position: int) -> ModuleEntry:
    path = draw(st.sampled_from(PATHS))
    class_name = draw(st.sampled_from(CLASSES))
    call = draw(st.integers(0, 2))
    parameters = {n: s for n in draw(st.lists(st.sampled_from(NAMES), unique=True)) if (s := draw(stats()))}
    kwargs = {"hidden_states": s} if draw(st.booleans()) and (s := draw(stats())) is not None else {}
    disagreements: tuple[Disagreement, ...] = ()
    if draw(st.integers(0, 9)) == 0:
        slot = draw(st.sampled_from(["output", "input", "parameters.weight", "input_kwargs.hidden_states"]))
        disagreements = (Disagreement(slot, draw(st.sampled_from(["ranks", "calls"])), 0, (1,), 0.5),)
    return ModuleEntry(
        key=f"Module.{path}.{class_name}.forward.{call}",
        position=position,
        path=path,
        class_name=class_name,
        call_index=call,
        input=draw(stats()),
        input_source=draw(st.sampled_from(["input_args.0", "input_kwargs.hidden_states"]))
        if kwargs
        else "input_args.0",
        kwargs=kwargs,
        output=draw(stats()),
        parameters=parameters,
        stream_input=draw(stats()) if draw(st.integers(0, 4)) == 0 else None,
        stream_output=draw(stats()) if draw(st.integers(0, 4)) == 0 else None,
        disagreements=disagreements,
        other_batches=draw(st.integers(0, 9)) == 0,
    )


@st.composite
def group(draw: st.DrawFn) -> tuple[list[ModuleEntry], list[ModuleEntry]]:
    sides = []
    for _ in (0, 1):
        parts = [draw(part(i)) for i in range(draw(st.integers(1, 3)))]
        keys = set()
        unique = []
        for p in parts:  # a group names each key once
            if p.key not in keys:
                keys.add(p.key)
                unique.append(p)
        sides.append(unique)
    if draw(st.booleans()):  # alike on both sides, as mapped pairs mostly are
        output, primary = draw(pair()), draw(pair())
        sides[0][0] = _with(sides[0][0], output=output[0], input=primary[0])
        sides[1][0] = _with(sides[1][0], output=output[1], input=primary[1])
    return sides[0], sides[1]


def _with(entry: ModuleEntry, **changes: Any) -> ModuleEntry:
    return msgspec.structs.replace(entry, **changes)


@settings(max_examples=400, deadline=None)
@given(group(), tolerances)
def test_any_group_is_compared_and_bucketed(sides: tuple[list[ModuleEntry], list[ModuleEntry]], tol: Any) -> None:
    train, rollout = sides
    comparison = compare_module(train, rollout, tol)
    assert comparison.module_bucket in BUCKETS
    assert isinstance(comparison.reasoning, str) and comparison.reasoning
    assert comparison.output_error is None or (math.isfinite(comparison.output_error) and comparison.output_error >= 0)
    # what the tables, the hover and the report read of it
    assert len(comparison.compare_targets()) == len(comparison.spec_tuples())
    comparison.kwargs
    comparison.calls_note
    comparison.order_findings
    comparison.dtype_mismatch
    comparison.output_dtype


def test_decode_calls_overflowing_to_both_infinities_are_joined(tmp_path: Path) -> None:
    """A rollout's calls whose output Means are +inf and -inf (an overflowing run): their joined Mean is NaN, as
    IEEE addition gives; the exact sum raised and the whole analysis stopped."""
    train = {"Module.model.layers.0.mlp.MLP.forward.0": entry([1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 4.0])}
    first, second = entry([1.0, 2.0], [1.0, 2.0]), entry([3.0, 4.0], [3.0, 4.0])
    first["output"][0].update({"Max": math.inf, "Mean": math.inf, "Norm": math.inf})
    second["output"][0].update({"Min": -math.inf, "Mean": -math.inf, "Norm": math.inf})
    rollout = {"Module.model.layers.0.mlp.MLP.forward.0": first, "Module.model.layers.0.mlp.MLP.forward.1": second}
    write_dump(tmp_path / "train/step0/rank0/dump.json", train)
    write_dump(tmp_path / "rollout/step0/rank0/dump.json", rollout)
    mapping = {"Module.model.layers.0.mlp.MLP.forward.0": "Module.model.layers.0.mlp.MLP.forward.*"}
    write_mapping(tmp_path / "mapping_key.json", mapping)
    analysis = analyze_paths(tmp_path / "train", tmp_path / "rollout", tmp_path / "mapping_key.json")
    (record,) = analysis.records
    assert record.comparison.output_consistency == "mismatch"
    assert math.isnan(record.comparison.output.rollout.mean)  # type: ignore[union-attr]
