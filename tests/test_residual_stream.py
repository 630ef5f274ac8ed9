"""Pairs whose rollout side carries the residual stream separately (vLLM): fused-residual norms and decoder layers."""

from __future__ import annotations

import math

from builders import tensor

from rca_lsp.compare.module import compare_module
from rca_lsp.dumps.dump import build_dump
from rca_lsp.model.tolerance import Tolerances

HIDDEN = [0.5, -1.0, 2.0, 0.25]  # the full hidden state entering the norm (train input)
BRANCH = [0.25, -0.5, 1.0, 0.5]  # what vLLM passes as x (an attention / MLP output)
RESIDUAL = [h - b for h, b in zip(HIDDEN, BRANCH)]


def _rms_norm(values: list[float], eps: float = 1e-6) -> list[float]:
    scale = math.sqrt(sum(v * v for v in values) / len(values) + eps)
    return [v / scale for v in values]


def _pair(train_node: dict, rollout_node: dict):
    train = build_dump("t.json", {"data": {"Module.a.RMSNorm.forward.0": train_node}})
    rollout = build_dump("r.json", {"data": {"Module.b.RMSNorm.forward.0": rollout_node}})
    return compare_module(
        [train.entries["Module.a.RMSNorm.forward.0"]], [rollout.entries["Module.b.RMSNorm.forward.0"]], Tolerances()
    )


def _node(inputs: list[list[float]], outputs: list[list[float]]) -> dict:
    return {
        "input_args": [tensor(v) for v in inputs],
        "input_kwargs": {},
        "output": [tensor(v) for v in outputs],
        "parameters": {},
    }


def test_fused_residual_norm_input_is_compared_through_its_sum_output() -> None:
    train = _node([HIDDEN], [_rms_norm(HIDDEN)])
    rollout = _node([BRANCH, RESIDUAL], [_rms_norm(HIDDEN), HIDDEN])
    comparison = _pair(train, rollout)
    assert (comparison.input_args_consistency, comparison.output_consistency) == ("aligned", "aligned")
    assert comparison.module_bucket == "normal_aligned"
    assert "[output.1 = input + residual]" in comparison.inputs[0].rollout_key


def test_a_fused_residual_norm_that_computes_differently_is_an_in_module_difference() -> None:
    train = _node([HIDDEN], [_rms_norm(HIDDEN)])
    rollout = _node([BRANCH, RESIDUAL], [_rms_norm(HIDDEN, eps=0.5), HIDDEN])
    comparison = _pair(train, rollout)
    assert (comparison.input_args_consistency, comparison.output_consistency) == ("aligned", "mismatch")
    assert comparison.module_bucket == "module_impl_mismatch"


def test_layer_returning_branch_and_residual_is_compared_as_their_sum_which_can_only_show_a_difference() -> None:
    mlp_out = [0.1, 0.2, -0.3, 0.4]
    mid = [1.0, 1.5, -2.0, 0.5]  # residual after attention
    layer_out = [m + r for m, r in zip(mlp_out, mid)]
    train = _node([HIDDEN], [layer_out])
    rollout = _node([BRANCH, RESIDUAL], [mlp_out, mid])
    healthy = _pair(train, rollout)
    assert (healthy.input_args_consistency, healthy.output_consistency) == ("missing", "missing")
    assert healthy.module_priority_rank not in (1, 2)  # never a suspect
    assert "Mean only" in healthy.output.rollout_key and healthy.output.rollout.max is None
    assert "only the Mean" in healthy.output.reason
    broken = _pair(_node([HIDDEN], [[v + 0.5 for v in layer_out]]), rollout)
    assert broken.output_consistency == "mismatch" and broken.module_bucket == "module_impl_mismatch"


def test_plain_pairs_are_unaffected() -> None:
    comparison = _pair(_node([HIDDEN], [BRANCH]), _node([HIDDEN], [BRANCH]))
    assert (
        comparison.module_bucket == "normal_aligned" and comparison.output.rollout_key == "Module.b.RMSNorm.forward.0"
    )


# SGLang: the decoder layer returns its MLP's output (one tensor) and the residual is added by the next fused-residual
# norm, so neither the layer's output nor the next layer's input carries the residual stream.
MLP_OUT = [0.125, 0.25, -0.75, 0.5]


def _branch_dumps(tmp_path, rollout_norm_inside: bool, mlp_out: list[float] = MLP_OUT):
    from builders import entry, write_dump, write_mapping

    from rca_lsp.diagnose.run import analyze_paths

    normed = _rms_norm(HIDDEN)
    layer_out = [h + m for h, m in zip(HIDDEN, mlp_out)]
    t, r = "Module.module.module.decoder.layers.0.", "Module.model.layers.0."
    train = {
        t + "pre_mlp_layernorm.RMSNorm.forward.0": entry(HIDDEN, normed),
        t + "mlp.MLP.forward.0": entry(normed, MLP_OUT),
        t + "TransformerLayer.forward.0": entry(BRANCH, layer_out),
        "Module.module.module.decoder.layers.1.input_layernorm.RMSNorm.forward.0": entry(
            layer_out, _rms_norm(layer_out)
        ),
    }
    rollout = {
        r + "mlp.Qwen2MLP.forward.0": entry(normed, mlp_out),
        r + "Qwen2DecoderLayer.forward.0": entry(BRANCH, mlp_out),
        "Module.model.layers.1.input_layernorm.RMSNorm.forward.0": {
            "input_args": [tensor(mlp_out), tensor(HIDDEN)],
            "input_kwargs": {},
            "output": [tensor(_rms_norm(layer_out)), tensor(layer_out)],
            "parameters": {},
        },
    }
    mapping = {
        t + "mlp.MLP.forward.0": r + "mlp.Qwen2MLP.forward.0",
        t + "TransformerLayer.forward.0": r + "Qwen2DecoderLayer.forward.0",
        "Module.module.module.decoder.layers.1.input_layernorm.RMSNorm.forward.0": (
            "Module.model.layers.1.input_layernorm.RMSNorm.forward.0"
        ),
    }
    if rollout_norm_inside:  # SGLang: the fused-residual post_attention_layernorm is inside the layer
        rollout = {
            r + "post_attention_layernorm.RMSNorm.forward.0": {
                "input_args": [tensor(BRANCH), tensor(RESIDUAL)],
                "input_kwargs": {},
                "output": [tensor(normed), tensor(HIDDEN)],
                "parameters": {},
            },
            **rollout,
        }
        mapping[t + "pre_mlp_layernorm.RMSNorm.forward.0"] = r + "post_attention_layernorm.RMSNorm.forward.0"
    write_dump(tmp_path / "train.json", train)
    write_dump(tmp_path / "rollout.json", rollout)
    write_mapping(tmp_path / "mapping.json", mapping)
    return analyze_paths(tmp_path / "train.json", tmp_path / "rollout.json", tmp_path / "mapping.json")


def _layer_record(analysis):
    (record,) = [r for r in analysis.records if r.train_key.endswith("TransformerLayer.forward.0")]
    return record.comparison


def test_a_layer_returning_its_mlp_output_next_to_a_fused_residual_norm_is_not_compared_as_a_layer(tmp_path) -> None:
    analysis = _branch_dumps(tmp_path, rollout_norm_inside=True)
    layer = _layer_record(analysis)
    assert layer.output_consistency == "missing"
    assert "returns the output of Module.model.layers.0.mlp.Qwen2MLP.forward.0 unchanged" in layer.reasoning
    assert analysis.suspects == []
    assert layer.output.rollout_key.endswith("[branch output, not comparable]")


def test_a_difference_inside_such_a_layer_is_still_found_where_it_is(tmp_path) -> None:
    analysis = _branch_dumps(tmp_path, rollout_norm_inside=True, mlp_out=[0.125, 0.25, -0.75, 0.6])
    assert analysis.suspects[0].train_key.endswith("mlp.MLP.forward.0")
    assert _layer_record(analysis).output_consistency == "missing"


def test_a_plain_container_returning_its_child_output_is_compared_as_usual(tmp_path) -> None:
    # no fused-residual module inside the rollout layer: nothing says its residual is added elsewhere, so a layer
    # that drops the residual add is a real difference
    analysis = _branch_dumps(tmp_path, rollout_norm_inside=False)
    assert _layer_record(analysis).output_consistency == "mismatch"
    assert any(s.train_key.endswith("TransformerLayer.forward.0") for s in analysis.suspects)
