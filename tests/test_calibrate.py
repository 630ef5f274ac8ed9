"""Calibration on the run's own noise: properties of the change point on error-along-depth series."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from rca_lsp.compare.calibrate import (
    JUMP_FACTOR,
    MIN_PRIOR_PAIRS,
    PERSIST_FACTOR,
    PERSIST_WINDOW,
    ROUNDING,
    WARMUP_PAIRS,
    DtypeCalibration,
    _threshold,
    calibrate_series,
)

CEILING = 1e-4  # float32's fixed tolerance
# Healthy noise is uniform along depth: every error within a factor of 3 of the run's level.
levels = st.floats(min_value=1e-9, max_value=1e-6)
floors = st.floats(min_value=ROUNDING["float32"], max_value=1e-6)  # noise at least the rounding unit
spreads = st.lists(st.floats(min_value=-0.5, max_value=0.0), min_size=8, max_size=120)


def series(level: float, spread: list[float]) -> list[tuple[str, float]]:
    return [(f"module {i}", level * 10**s) for i, s in enumerate(spread)]


@settings(max_examples=300, deadline=None)
@given(levels, spreads)
def test_healthy_series_never_jump(level: float, spread: list[float]) -> None:
    found = calibrate_series("float32", series(level, spread), CEILING)
    assert found.jump_key is None
    assert all(error <= found.threshold for _, error in series(level, spread))  # so no pair is a mismatch
    assert found.threshold <= CEILING


@settings(max_examples=300, deadline=None)
@given(floors, spreads, st.floats(min_value=32.0, max_value=1e4), st.data())
def test_a_planted_jump_is_found_where_it_starts(
    level: float, spread: list[float], factor: float, data: st.DataObject
) -> None:
    at = data.draw(st.integers(min_value=2, max_value=len(spread) - 1))
    planted = [(key, error * factor if i >= at else error) for i, (key, error) in enumerate(series(level, spread))]
    if planted[at][1] > CEILING:  # above the fixed tolerance anyway: nothing for calibration to find
        return
    found = calibrate_series("float32", planted, CEILING)
    assert found.jump_key == f"module {at}"
    assert found.jump_factor is not None and found.jump_factor > JUMP_FACTOR
    assert all(error <= found.threshold for _, error in planted[:at])  # no false mismatch before it


def test_a_jump_the_residual_stream_dilutes_downstream_is_still_found() -> None:
    """A real run's series (fp32, 4 layers; train layer 2 linear_fc2 weight x1.00003): 60x the floor at the module,
    then 3-12x downstream, under the jump's 8x but well above the noise."""
    noise = [(f"m{i}", error) for i, error in enumerate([2e-7, 3.1e-7, 4.9e-7, 2.5e-7, 4.1e-7, 3.3e-7, 4.6e-7])]
    after = [("fc2", 3.0e-5), ("layer", 5.8e-6), ("norm", 1.5e-6), ("qkv", 2.2e-6), ("proj", 4.0e-6)]
    found = calibrate_series("float32", noise + after, CEILING)
    assert found.jump_key == "fc2" and found.floor == 4.9e-7 and found.threshold < 3e-5


def test_a_lone_spike_back_at_the_noise_is_no_jump() -> None:
    """A pair 60x above the noise whose successors are back within twice the floor: noise of one module."""
    noise = [(f"m{i}", error) for i, error in enumerate([2e-7, 3.1e-7, 4.9e-7, 2.5e-7, 4.1e-7, 3.3e-7, 4.6e-7])]
    after = [("spike", 3.0e-5), ("a", 6e-7), ("b", 9e-7), ("c", 4e-7), ("d", 1.1e-6)]
    assert calibrate_series("float32", noise + after, CEILING).jump_key is None


def test_uniform_bf16_noise_keeps_the_fixed_tolerance() -> None:
    noise = [(f"m{i}", 1e-2 * (1 + 0.5 * math.sin(i))) for i in range(40)]
    found = calibrate_series("bfloat16", noise, 3e-2)
    assert found.jump_key is None and found.threshold == 3e-2 and found.floor < 3e-2


def test_too_few_pairs_fall_back_to_the_fixed_tolerance() -> None:
    found = calibrate_series("float32", [("a", 1e-8), ("b", 5e-5)], CEILING)
    assert found.fallback and found.threshold == CEILING and "too few to calibrate" in found.describe()


def test_identical_runs_still_allow_rounding() -> None:
    found = calibrate_series("float32", [(f"m{i}", 0.0) for i in range(10)], CEILING)
    assert JUMP_FACTOR * ROUNDING["float32"] <= found.threshold < CEILING


def scanned(dtype: str, series: list[tuple[str, float]], ceiling: float) -> DtypeCalibration:
    """The change point as the module docstring says it, pair by pair: what the array scan must equal exactly."""
    if len(series) < WARMUP_PAIRS:
        return DtypeCalibration(dtype, len(series), 0.0, ceiling, ceiling, None, None, True)
    rounding = ROUNDING.get(dtype, 0.0)
    floor = 0.0
    for index, (key, error) in enumerate(series):
        threshold = _threshold(floor, rounding, ceiling)
        following = [e for _, e in series[index + 1 : index + 1 + PERSIST_WINDOW]]
        bar = min(threshold, PERSIST_FACTOR * max(floor, rounding))
        persists = not following or 2 * sum(e > bar for e in following) >= len(following)
        if index >= MIN_PRIOR_PAIRS and error > threshold and persists:
            return DtypeCalibration(dtype, len(series), floor, threshold, ceiling, key, error, False)
        if error <= ceiling:
            floor = max(floor, error)
    return DtypeCalibration(dtype, len(series), floor, _threshold(floor, rounding, ceiling), ceiling, None, None, False)


# errors on the threshold grid and next to it (where a rounding of log2 could tip the grid step), spikes, NaN, zeros
grid_points = st.integers(min_value=-100, max_value=-20).map(lambda k: 2.0 ** (k / 4) / JUMP_FACTOR)
errors = st.one_of(
    st.floats(min_value=0.0, max_value=1e-3),
    grid_points,
    grid_points.map(lambda e: math.nextafter(e, math.inf)),
    grid_points.map(lambda e: math.nextafter(e, 0.0)),
    st.sampled_from([0.0, math.nan, 1.0, 5e-5]),
)


@settings(max_examples=500, deadline=None)
@given(st.sampled_from(["float32", "bfloat16", "float64", "int8"]), st.lists(errors, max_size=60))
def test_the_array_scan_equals_the_scan_pair_by_pair(dtype: str, values: list[float]) -> None:
    series = [(f"m{i}", error) for i, error in enumerate(values)]
    found, expected = calibrate_series(dtype, series, CEILING), scanned(dtype, series, CEILING)
    assert repr(found) == repr(expected)  # repr: NaN jump errors compare equal too
