"""Statistic comparison: exact aggregation, dtype tolerances, scale-relative means, non-finite values."""

from __future__ import annotations

import math
import random

import pytest
from builders import tensor

from rca_lsp.compare.statistics import compare_target, quick_verdict
from rca_lsp.dumps.dump import first_tensor
from rca_lsp.model.stats import aggregate, relative_error
from rca_lsp.model.tolerance import Tolerances


def stats(values, dtype="torch.float32", shape=None):
    return first_tensor(tensor(values, dtype, shape))


@pytest.mark.parametrize("seed", range(5))
def test_aggregate_equals_statistics_of_the_concatenation(seed: int) -> None:
    rng = random.Random(seed)
    parts = [[rng.gauss(0, 1) for _ in range(rng.randint(1, 50))] for _ in range(rng.randint(2, 4))]
    whole = stats([v for part in parts for v in part])
    combined = aggregate([stats(p) for p in parts])
    assert combined.max == whole.max and combined.min == whole.min
    assert combined.mean == pytest.approx(whole.mean, rel=1e-12, abs=1e-15)
    assert combined.norm == pytest.approx(whole.norm, rel=1e-12)
    assert combined.numel == whole.numel


def test_bf16_noise_is_aligned_but_the_same_noise_in_fp32_is_not() -> None:
    values = [0.5, -1.25, 2.0, 0.75]
    noisy = [v * 1.01 for v in values]
    tol = Tolerances()
    bf16 = compare_target("output.0", "t", "r", stats(values, "torch.bfloat16"), stats(noisy, "torch.bfloat16"), tol)
    fp32 = compare_target("output.0", "t", "r", stats(values), stats(noisy), tol)
    assert bf16.consistency == "aligned" and fp32.consistency == "mismatch"


def test_mean_near_zero_is_judged_against_the_tensor_scale() -> None:
    values = [1.0, -1.0, 2.0, -2.0 + 1e-9]
    shifted = [v + 1e-7 for v in values]
    result = compare_target("output.0", "t", "r", stats(values), stats(shifted), Tolerances())
    assert result.consistency == "aligned"


def test_nonfinite_on_one_side_is_a_mismatch_with_a_reason() -> None:
    bad = stats([1.0, 2.0])
    bad = type(bad)(bad.dtype, bad.shape, math.inf, bad.min, bad.mean, math.inf)
    result = compare_target("output.0", "t", "r", stats([1.0, 2.0]), bad, Tolerances())
    assert result.consistency == "mismatch" and result.value_status == "nonfinite_on_rollout"
    assert "non-finite on rollout" in result.reason


def test_nonfinite_on_both_sides_is_reported_not_a_mismatch() -> None:
    a = stats([1.0, 2.0])
    a = type(a)(a.dtype, a.shape, a.max, -math.inf, a.mean, a.norm)
    result = compare_target("output.0", "t", "r", a, a, Tolerances())
    assert result.consistency == "aligned" and "non-finite on both sides" in result.reason


def test_dtype_difference_is_recorded_and_uses_the_coarser_tolerance() -> None:
    result = compare_target("output.0", "t", "r", stats([1.0, 2.0]), stats([1.01, 2.0], "torch.bfloat16"), Tolerances())
    assert result.dtype_match == "mismatch" and result.consistency == "aligned"
    assert result.tolerance == Tolerances().for_dtypes("torch.bfloat16")


def test_unobservable_weight_is_missing_not_a_mismatch() -> None:
    empty = type(stats([1.0]))("torch.float32", (0,), None, None, None, None)
    result = compare_target("parameters.weight", "t", "r", stats([1.0, 2.0]), empty, Tolerances())
    assert result.consistency == "missing"


def test_shape_relations() -> None:
    tol = Tolerances()
    assert (
        compare_target(
            "o", "t", "r", stats([1.0] * 6, shape=[2, 1, 3]), stats([1.0] * 6, shape=[2, 3]), tol
        ).shape_relation
        == "singleton_compatible_numel_match"
    )
    assert (
        compare_target(
            "o", "t", "r", stats([1.0] * 6, shape=[3, 2]), stats([1.0] * 6, shape=[2, 3]), tol
        ).shape_relation
        == "numel_match"
    )


@pytest.mark.parametrize("target", ["output.0", "parameters.weight"])
def test_quick_verdict_agrees_with_the_detailed_comparison(target: str) -> None:
    rng = random.Random(7)
    parameter = target.startswith("parameters.")
    specials = [None, math.nan, math.inf, -math.inf, 0.0]
    dtypes = ["torch.float32", "torch.bfloat16", "torch.float16", "torch.int64", None]

    def value() -> float | None:
        return rng.choice(specials) if rng.random() < 0.15 else rng.gauss(0, 3)

    for _ in range(3000):
        base = stats([rng.gauss(0, 1) for _ in range(rng.randint(1, 8))], rng.choice(dtypes[:3]))
        train = type(base)(rng.choice(dtypes), base.shape, value(), value(), value(), value())
        if rng.random() < 0.5:
            factor = 1 + rng.choice([0.0, 1e-6, 1e-3, 2e-2, 0.5])
            rollout = type(base)(
                train.dtype if rng.random() < 0.8 else rng.choice(dtypes),
                base.shape,
                *(v * factor if v is not None else None for v in (train.max, train.min, train.mean, train.norm)),
            )
        else:
            rollout = type(base)(rng.choice(dtypes), base.shape, value(), value(), value(), value())
        detailed = compare_target(target, "t", "r", train, rollout, Tolerances())
        consistency, _, worst = quick_verdict(train, rollout, Tolerances(), parameter)
        assert consistency == detailed.consistency, (train, rollout)
        if consistency != "mismatch":  # the error calibration's re-judging reads: model.stats.relative_error's
            assert worst == (relative_error(train, rollout) or 0.0), (train, rollout)
