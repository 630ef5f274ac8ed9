"""Parameters are held to their own rule (README, "What the analysis does"): of one dtype and size on both sides,
their Max and Min must be equal, since a weight synced by value holds the same values; Mean and Norm keep the dtype's
tolerance, as do parameters of another dtype or size. A module whose inputs agree and whose parameters differ is a
finding even while its output stays within tolerance."""

from __future__ import annotations

from pathlib import Path

import pytest
from builders import entry, write_dump, write_mapping

from rca_lsp.compare.module import _bucket
from rca_lsp.compare.statistics import compare_target, quick_verdict
from rca_lsp.diagnose.run import analyze_paths
from rca_lsp.model.stats import TensorStats
from rca_lsp.model.tolerance import DEFAULT_TOLERANCES, Tolerances

# one rounding unit of each dtype at 0.5: what a single changed value of a weight moves its Max by
STEP = {"torch.float32": 2.0**-24, "torch.bfloat16": 2.0**-9, "torch.float16": 2.0**-12}


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


@pytest.mark.parametrize("dtype", sorted(STEP))
def test_a_parameters_mean_and_norm_keep_the_tolerance(dtype: str) -> None:
    """Sums rounded in their own dtype and order: a fused weight recombined from parts differs there."""
    tol = DEFAULT_TOLERANCES[dtype.removeprefix("torch.")]
    train, rollout = weight(dtype, 0.5, norm=20.0 * (1 + tol / 2)), weight(dtype, 0.5)
    assert quick_verdict(train, rollout, Tolerances(), parameter=True)[0] == "aligned"
    assert compare_target("parameters.weight", "t", "r", train, rollout, Tolerances()).consistency == "aligned"


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
