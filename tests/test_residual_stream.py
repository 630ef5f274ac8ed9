"""Pairs whose rollout side carries the residual stream separately (vLLM): fused-residual norms and decoder layers."""

from __future__ import annotations

import math

from builders import tensor

from rca_lsp.core.dump import build_dump
from rca_lsp.core.module import compare_module
from rca_lsp.core.tolerance import Tolerances

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
