"""Parameters are held to their own rule (README, "What the analysis does"): of one dtype and size on both sides,
their Max and Min must be equal, since a weight synced by value holds the same values, and their Mean and Norm may
differ only by the rounding of sums of those values into the dtype (its epsilon, plus the float32 tolerance for the
order they were summed in); parameters of another dtype or size keep the dtype's tolerance. A module whose inputs
agree and whose parameters differ is a finding even while its output stays within tolerance."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from builders import ROLLOUT, TRAIN, entry, write_dump, write_mapping

from rca_lsp.compare.module import _bucket
from rca_lsp.compare.statistics import compare_target, quick_verdict
from rca_lsp.compare.targettable import TargetTable, listed_side
from rca_lsp.diagnose.run import analyze_paths
from rca_lsp.model.stats import TensorStats
from rca_lsp.model.tolerance import DEFAULT_TOLERANCES, Tolerances

# one rounding unit of each dtype at 0.5: what a single changed value of a weight moves its Max by
STEP = {"torch.float32": 2.0**-24, "torch.bfloat16": 2.0**-9, "torch.float16": 2.0**-12}
# each dtype's epsilon (the gap between 1 and the next value)
EPSILON = {"torch.float32": 2.0**-23, "torch.bfloat16": 2.0**-7, "torch.float16": 2.0**-10}


def weight(dtype: str, top: float, mean: float = 1e-3, norm: float = 20.0, shape: tuple[int, ...] = (64, 32)):
    return TensorStats(dtype, shape, top, -0.49, mean, norm)


@pytest.mark.parametrize("dtype", sorted(STEP))
def test_one_step_in_a_parameters_max_is_a_mismatch_though_far_within_the_tolerance(dtype: str) -> None:
    train, rollout = weight(dtype, 0.5 + STEP[dtype]), weight(dtype, 0.5)
    assert quick_verdict(train, rollout, Tolerances(), parameter=True)[0] == "mismatch"
    found = compare_target("parameters.weight", "t", "r", train, rollout, Tolerances())
    assert found.consistency == "mismatch"
    assert found.stats[0].rel_err < DEFAULT_TOLERANCES[dtype.removeprefix("torch.")]
    assert "Max differs" in found.reason and "must be equal" in found.reason
    # the same statistics as an activation are noise
    assert quick_verdict(train, rollout, Tolerances())[0] == "aligned"
    assert compare_target("output.0", "t", "r", train, rollout, Tolerances()).consistency == "aligned"


def judged(train: TensorStats, rollout: TensorStats, tolerances: Tolerances = Tolerances()) -> tuple[str, ...]:
    """The verdict of a parameter pair as quick_verdict, assess and the arrays (output_3's rows) each give it."""
    table = TargetTable(
        [("parameters.weight", "t", "r", train, rollout, False)],
        listed_side([train]),
        listed_side([rollout]),
        [0, 1],
        [tolerances],
    )
    return (
        quick_verdict(train, rollout, tolerances, parameter=True)[0],
        compare_target("parameters.weight", "t", "r", train, rollout, tolerances).consistency,
        "mismatch" if table.bad[0].any() else "aligned",
    )


def moved(stats: TensorStats, statistic: str, step: float) -> TensorStats:
    """A weight's statistics with its Norm `step` relatively larger, or its Mean `step` of its scale (the RMS, which
    a Mean is judged against) larger."""
    if statistic == "mean":
        return weight(stats.dtype, stats.max, mean=stats.mean + step * stats.norm / math.sqrt(stats.numel))
    return weight(stats.dtype, stats.max, norm=stats.norm * (1 + step))


def rounding_bound(dtype: str) -> float:
    """What a parameter's Mean or Norm may differ by: for bfloat16 the rounding of its sums (its epsilon plus the
    float32 tolerance); float16 and float32 keep their tolerance (float16's CPU sums were measured beyond that bound)."""
    if dtype == "torch.bfloat16":
        return EPSILON[dtype] + DEFAULT_TOLERANCES["float32"]
    return DEFAULT_TOLERANCES[dtype.removeprefix("torch.")]


@pytest.mark.parametrize("dtype", sorted(STEP))
@pytest.mark.parametrize("statistic", ["mean", "norm"])
def test_a_parameters_mean_and_norm_may_differ_by_the_rounding_of_their_sums(dtype: str, statistic: str) -> None:
    """A Norm (or a Mean, against the tensor's scale) summed in float32 and rounded to the dtype, on each side or
    for each part a side recombined: the two differ by at most the dtype's epsilon and what the order of the float32
    sums moves (bf16: a fused or sharded weight's Norm differs by up to 0.51 % on healthy runs, ~0.66 epsilon)."""
    rollout = weight(dtype, 0.5)
    assert judged(moved(rollout, statistic, 0.99 * rounding_bound(dtype)), rollout) == ("aligned",) * 3


@pytest.mark.parametrize("dtype", sorted(STEP))
@pytest.mark.parametrize("statistic", ["mean", "norm"])
def test_a_parameters_mean_or_norm_beyond_that_rounding_is_a_mismatch(dtype: str, statistic: str) -> None:
    """A shard or an expert of a bf16 weight off by 3 % moves the whole's Norm by its share (0.9-1 % for a TP=4 or
    TP=2 shard) with Max and Min those of the untouched parts: within the bf16 tolerance (3e-2), beyond what rounding
    can do. float32 statistics are limited by their float32 sums, whose tolerance this is: the same as before."""
    rollout = weight(dtype, 0.5)
    step = 1.3 * rounding_bound(dtype)
    train = moved(rollout, statistic, step)
    assert judged(train, rollout) == ("mismatch",) * 3
    tolerance = DEFAULT_TOLERANCES[dtype.removeprefix("torch.")]
    within = step < tolerance  # bfloat16 and float16: the rounding bound is the tighter
    if within:
        reason = compare_target("parameters.weight", "t", "r", train, rollout, Tolerances()).reason
        assert f"beyond the {rounding_bound(dtype):.3g} that rounding the sums" in reason
    # the same statistics as an activation, or as a parameter of another size, keep the dtype's tolerance
    expected = "aligned" if within else "mismatch"
    assert quick_verdict(train, rollout, Tolerances())[0] == expected
    padded = weight(dtype, 0.5, shape=(66, 32))
    assert quick_verdict(train, padded, Tolerances(), parameter=True)[0] == expected


@pytest.mark.parametrize("dtype", sorted(STEP))
def test_a_tighter_tolerance_than_the_rounding_bound_is_kept(dtype: str) -> None:
    tight = Tolerances.with_overrides({dtype: rounding_bound(dtype) / 4})
    rollout = weight(dtype, 0.5)
    assert judged(moved(rollout, "norm", rounding_bound(dtype) / 2), rollout, tight) == ("mismatch",) * 3


@pytest.mark.parametrize(
    "other",
    [
        weight("torch.float32", 0.5 + 2.0**-9),  # an fp32 copy against a bf16 weight: rounding moves the extremes
        weight("torch.bfloat16", 0.5 + 2.0**-9, shape=(66, 32)),  # a padded vocabulary: more values
        TensorStats("torch.bfloat16", None, 0.5 + 2.0**-9, -0.49, 1e-3, 20.0),  # size unknown
    ],
)
def test_another_dtype_or_size_keeps_the_tolerance(other: TensorStats) -> None:
    synced = weight("torch.bfloat16", 0.5)
    assert quick_verdict(other, synced, Tolerances(), parameter=True)[0] == "aligned"
    assert compare_target("parameters.weight", "t", "r", other, synced, Tolerances()).consistency == "aligned"


def test_parameters_differing_under_an_aligned_output_are_a_finding() -> None:
    bucket, rank, reasoning = _bucket(["t"], ["r"], "aligned", False, "aligned", "mismatch", "not_applicable", [])
    assert (bucket, rank) == ("parameter_sync_mismatch", 1)
    assert "within its tolerance" in reasoning
    # inputs that differ too: the parameters are not what starts it
    assert _bucket(["t"], ["r"], "aligned", False, "mismatch", "mismatch", "not_applicable", [])[1] == 5


def test_a_container_whose_mapped_modules_all_agree_says_where_the_difference_can_be(tmp_path: Path) -> None:
    """An MLP container (no parameters of its own) differs while its mapped linear agrees: the in-module finding says
    the difference is in unmapped code inside it or in a submodule below its tolerance (an expert of a bf16 group)."""
    x, w, h = [0.5, -1.0, 0.25, 2.0], [0.1, 0.2, -0.3, 0.4], [1.0, -2.0, 0.5, 0.75]
    for side, scale in (("train", 1.0), ("rollout", 1.1)):
        write_dump(
            tmp_path / side / "dump.json",
            {
                "Module.layers.0.mlp.fc.Linear.forward.0": entry(x, h, w),
                "Module.layers.0.mlp.MLP.forward.0": entry(x, [v * scale for v in h]),
            },
        )
    keys = ["Module.layers.0.mlp.fc.Linear.forward.0", "Module.layers.0.mlp.MLP.forward.0"]
    write_mapping(tmp_path / "mapping_key.json", {k: k for k in keys})
    analysis = analyze_paths(tmp_path / "train", tmp_path / "rollout", tmp_path / "mapping_key.json")
    first = analysis.suspects[0]
    assert (first.train_key, first.classification) == (keys[1], "in_module_impl_difference")
    assert "holds no parameters of its own and the mapped modules inside it all agree" in first.rationale


# how far the up part of a fused weight is off in test_one_part_of_a_fused_weight_off_is_found: the whole's Norm moves
# by 1.0 % (bfloat16: within its tolerance, beyond the rounding bound), 1.0 % (float16) and 0.033 % (float32), beyond
# their tolerances
PART_SCALE = {"torch.bfloat16": 1.03, "torch.float16": 1.03, "torch.float32": 1.001}


@pytest.mark.parametrize("dtype", sorted(STEP))
def test_one_part_of_a_fused_weight_off_is_found(dtype: str, tmp_path: Path) -> None:
    """A fused weight (gate | up) whose up part is off on the train side (a stale shard, an expert of a group): its
    extremes are the gate's on both sides and its Norm moves by the part's share (for bfloat16 within its tolerance):
    a parameter finding, found by the Norm."""
    x, gate, up = [0.5, -1.0, 0.25, 2.0], [1.0, -1.0, 0.0625, -0.125], [0.5, 0.5, -0.5, 0.5]
    up_off = [v * PART_SCALE[dtype] for v in up]
    out = [0.75, -0.5, 1.5, 0.25]
    train = f"{TRAIN}.0.mlp.linear_fc1.ColumnParallelLinear.forward.0"
    parts = [f"{ROLLOUT}.0.mlp.{name}_proj.Linear.forward.0" for name in ("gate", "up")]
    write_dump(tmp_path / "train" / "dump.json", {train: entry(x, out + out, gate + up_off, dtype)})
    write_dump(
        tmp_path / "rollout" / "dump.json",
        {parts[0]: entry(x, out, gate, dtype), parts[1]: entry(x, out, up, dtype)},
    )
    write_mapping(tmp_path / "mapping_key.json", {train: parts})
    analysis = analyze_paths(tmp_path / "train", tmp_path / "rollout", tmp_path / "mapping_key.json")
    assert [(s.train_key, s.classification) for s in analysis.suspects] == [(train, "parameter_or_checkpoint_issue")]
