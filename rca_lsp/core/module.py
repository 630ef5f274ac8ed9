"""Module-level verdict for one mapping group: output, inputs, parameters, kwargs, and the seed's bucket."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from rca_lsp.core.compare import TargetComparison, aggregate, compare_target
from rca_lsp.core.dump import ModuleEntry, TensorStats
from rca_lsp.core.tolerance import Tolerances

_FUSED_QKV_TRAIN = ("linear_q_down_proj", "linear_kv_down_proj")
_FUSED_QKV_ROLLOUT = "fused_qkv_a_proj"


@dataclass(frozen=True, slots=True)
class ModuleComparison:
    train_keys: tuple[str, ...]
    rollout_keys: tuple[str, ...]
    output: TargetComparison
    inputs: tuple[TargetComparison, ...]  # one per part of the split side (each is the fused side's input)
    parameters: tuple[TargetComparison, ...]
    kwargs: tuple[TargetComparison, ...]
    output_consistency: str
    input_args_consistency: str
    parameter_consistency: str  # aligned | mismatch | missing | not_applicable
    kwargs_consistency: str  # aligned | mismatch | partial | missing | not_applicable
    module_bucket: str
    module_priority_rank: int
    reasoning: str

    @property
    def train_key(self) -> str:
        return self.train_keys[0]

    @property
    def rollout_key(self) -> str:
        return self.rollout_keys[0]

    @property
    def cardinality(self) -> str:
        return f"{'1' if len(self.train_keys) == 1 else 'N'}:{'1' if len(self.rollout_keys) == 1 else 'N'}"

    @property
    def dtype_mismatch(self) -> bool:
        return self.output.dtype_match == "mismatch"

    def targets(self) -> tuple[TargetComparison, ...]:
        return (self.output, *self.inputs, *self.parameters)


def _combined(parts: Sequence[ModuleEntry], pick: str) -> TensorStats | None:
    stats = [getattr(p, pick) for p in parts]
    if any(s is None for s in stats):
        return None
    return aggregate(stats)  # type: ignore[arg-type]


def _join(keys: Sequence[str]) -> str:
    return keys[0] if len(keys) == 1 else "+".join(keys)


def _pairwise(train: Sequence[ModuleEntry], rollout: Sequence[ModuleEntry]) -> list[tuple[ModuleEntry, ModuleEntry]]:
    """Which entries see the same input tensor: every part of a split side against the single fused module."""
    if len(train) == 1:
        return [(train[0], r) for r in rollout]
    if len(rollout) == 1:
        return [(t, rollout[0]) for t in train]
    return []


def _input_comparisons(train: Sequence[ModuleEntry], rollout: Sequence[ModuleEntry],
                       tol: Tolerances) -> tuple[TargetComparison, ...]:
    pairs = _pairwise(train, rollout)
    if pairs:
        return tuple(compare_target("input_args.0", t.key, r.key, t.input, r.input, tol) for t, r in pairs)
    return (compare_target("input_args.0", _join([t.key for t in train]), _join([r.key for r in rollout]),
                           _combined(train, "input"), _combined(rollout, "input"), tol, aggregated=True),)


def _parameter_comparisons(train: Sequence[ModuleEntry], rollout: Sequence[ModuleEntry],
                           tol: Tolerances) -> tuple[tuple[TargetComparison, ...], str]:
    train_names = set.intersection(*(set(t.parameters) for t in train))
    rollout_names = set.intersection(*(set(r.parameters) for r in rollout))
    if not any(t.parameters for t in train) and not any(r.parameters for r in rollout):
        return (), "not_applicable"
    common = sorted(train_names & rollout_names, key=lambda n: (n != "weight", n))
    if not common:
        return (), "missing"
    aggregated = len(train) > 1 or len(rollout) > 1
    comparisons = tuple(
        compare_target(f"parameters.{name}", _join([t.key for t in train]), _join([r.key for r in rollout]),
                       aggregate([t.parameters[name] for t in train]), aggregate([r.parameters[name] for r in rollout]),
                       tol, aggregated=aggregated)
        for name in common)
    return comparisons, _summarise(comparisons)


def _kwargs_comparisons(train: Sequence[ModuleEntry], rollout: Sequence[ModuleEntry],
                        tol: Tolerances) -> tuple[tuple[TargetComparison, ...], str]:
    pairs = _pairwise(train, rollout)
    if not any(t.kwargs for t, _ in pairs) and not any(r.kwargs for _, r in pairs):
        return (), "not_applicable"
    comparisons: list[TargetComparison] = []
    names_differ = False
    for t, r in pairs:
        names_differ |= set(t.kwargs) != set(r.kwargs)
        for name in sorted(set(t.kwargs) & set(r.kwargs)):
            if (t.input_source, r.input_source) == (f"input_kwargs.{name}",) * 2:
                continue  # already compared as the primary input
            comparisons.append(compare_target(f"input_kwargs.{name}", t.key, r.key, t.kwargs[name], r.kwargs[name], tol))
    if not comparisons:
        return (), "missing"
    summary = _summarise(comparisons)
    return tuple(comparisons), ("partial" if names_differ and summary == "aligned" else summary)


def _summarise(targets: Sequence[TargetComparison]) -> str:
    states = {t.consistency for t in targets}
    if "mismatch" in states:
        return "mismatch"
    return "aligned" if "aligned" in states else "missing"


def _bucket(train_keys: Sequence[str], rollout_keys: Sequence[str], output: TargetComparison, inputs: str,
            params: str, kwargs: str) -> tuple[str, int, str]:
    inputs_ok = inputs == "aligned" and kwargs in ("aligned", "partial", "not_applicable", "missing")
    inputs_bad = inputs == "mismatch" or kwargs == "mismatch"
    params_ok = params in ("aligned", "not_applicable")
    if output.consistency == "missing":
        return "insufficient_output_evidence", 3, f"output not comparable: {output.reason}"
    if output.consistency == "aligned":
        if params_ok and inputs_ok:
            return "normal_aligned", 4, "output, inputs and parameters aligned"
        if params == "missing" or kwargs in ("missing", "partial") or inputs == "missing":
            return ("comparison_premise_abnormal_but_output_aligned", 5,
                    "output aligned; some inputs or parameters could not be compared")
        return "internal_difference_but_output_aligned", 5, "output aligned although inputs or parameters differ"
    if not inputs_bad and len(train_keys) == 1 and len(rollout_keys) == 1:
        if any(t in train_keys[0] for t in _FUSED_QKV_TRAIN) and _FUSED_QKV_ROLLOUT in rollout_keys[0]:
            return "fused_qkv_structural_mismatch", 5, "one part of a fused projection mapped 1:1 onto the fused module"
        if output.shape_relation == "numel_mismatch":
            return ("structural_shape_mismatch", 5,
                    "outputs have different sizes: the pair is probably one part of a fused/split group (map it 1:N or N:1)")
    if inputs_bad:
        if params == "mismatch":
            return "systemic_misalignment", 2, "inputs and parameters both differ"
        return "upstream_propagation_or_amplification", 2, "inputs already differ"
    if params == "mismatch":
        return "parameter_sync_mismatch", 1, "inputs aligned, parameters differ, output differs"
    note = "" if params_ok else " (parameters could not be compared)"
    return "module_impl_mismatch", 1, f"inputs and parameters aligned, output differs{note}"


def compare_module(train: Sequence[ModuleEntry], rollout: Sequence[ModuleEntry], tol: Tolerances) -> ModuleComparison:
    train_keys = tuple(t.key for t in train)
    rollout_keys = tuple(r.key for r in rollout)
    aggregated = len(train) > 1 or len(rollout) > 1
    output = compare_target("output.0", _join(train_keys), _join(rollout_keys), _combined(train, "output"),
                            _combined(rollout, "output"), tol, aggregated=aggregated)
    inputs = _input_comparisons(train, rollout, tol)
    parameters, params_state = _parameter_comparisons(train, rollout, tol)
    kwargs, kwargs_state = _kwargs_comparisons(train, rollout, tol)
    input_state = _summarise(inputs)
    bucket, rank, reasoning = _bucket(train_keys, rollout_keys, output, input_state, params_state, kwargs_state)
    return ModuleComparison(train_keys, rollout_keys, output, inputs, parameters, kwargs, output.consistency,
                            input_state, params_state, kwargs_state, bucket, rank, reasoning)
