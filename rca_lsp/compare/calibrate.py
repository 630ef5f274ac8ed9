"""The run's own noise floor: what "aligned" means for these two dumps, below the fixed per-dtype tolerances.

Two correct fp32 runs agree to ~1e-7, so a real divergence of 1e-5 hides under the fixed 1e-4 tolerance. The errors
of the mapped pairs in execution order are the run's noise until the first pair whose error jumps well above the
noise seen so far and stays up downstream (a change point in the error-along-depth series): the noise floor is the
largest error before it, and "differs" means more than JUMP_FACTOR times that floor. The fixed tolerances stay the
ceiling of what may count as noise, and the fallback when too few pairs were compared.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

from rca_lsp.compare.records import ModuleRecord
from rca_lsp.model.tolerance import Tolerances, normalise_dtype

JUMP_FACTOR = 8.0  # an error this many times the noise floor is a divergence (a jump of ~30x the noise is found)
THRESHOLD_STEPS = 4  # thresholds are rounded up to 2**(1/4) steps
WARMUP_PAIRS = 6  # compared pairs of a dtype needed to calibrate it at all; fewer: the fixed tolerance
MIN_PRIOR_PAIRS = 2  # pairs before a jump (with the rounding unit as the least floor, a layer-0 fault is found)
PERSIST_WINDOW = 4  # the next pairs after a jump, of which half must stay above the threshold too
# Rounding unit of each dtype: a floor never goes below it (identical runs have a floor of 0).
ROUNDING = {"float64": 2.2e-16, "float32": 1.2e-7, "float16": 9.8e-4, "bfloat16": 7.8e-3}


@dataclass(frozen=True)
class DtypeCalibration:
    dtype: str
    pairs: int  # compared pairs of this dtype in the series
    floor: float  # the largest error among the pairs before the jump (or all of them)
    threshold: float  # what counts as a difference: JUMP_FACTOR x floor, at most the fixed tolerance
    ceiling: float  # the fixed tolerance
    jump_key: str | None  # the train key of the first pair above the threshold that stays up
    jump_error: float | None
    fallback: bool  # too few pairs: the fixed tolerance is used

    @property
    def jump_factor(self) -> float | None:
        """How far above the noise the divergence is."""
        return None if self.jump_error is None else self.times_the_floor(self.jump_error)

    def times_the_floor(self, error: float) -> float:
        """An error as a multiple of the noise floor (never below the dtype's rounding unit)."""
        return error / max(self.floor, ROUNDING.get(self.dtype, 0.0), 1e-300)

    def describe(self) -> str:
        if self.fallback:
            return (
                f"{self.dtype}: {self.pairs} compared pairs, too few to calibrate: the fixed tolerance "
                f"{self.ceiling:g} applies"
            )
        text = (
            f"{self.dtype}: noise floor {self.floor:.2g} over {self.pairs} pairs, threshold {self.threshold:.2g} "
            f"({'capped at the fixed tolerance' if self.threshold >= self.ceiling else f'{JUMP_FACTOR:g}x the floor, rounded up'})"
        )
        if self.jump_key is not None and self.jump_factor is not None:
            text += f"; first jump {self.jump_error:.2g} ({self.jump_factor:.3g}x the floor) at {self.jump_key}"
        return text


@dataclass(frozen=True)
class Calibration:
    by_dtype: dict[str, DtypeCalibration]

    def tolerances(self, base: Tolerances) -> Tolerances:
        """The base tolerances with each calibrated dtype's threshold."""
        calibrated = dict(base.by_dtype)
        calibrated.update({dtype: c.threshold for dtype, c in self.by_dtype.items() if not c.fallback})
        return Tolerances(calibrated)

    def describe(self) -> list[str]:
        return [c.describe() for c in self.by_dtype.values()]


def error_series(records: Iterable[ModuleRecord]) -> dict[str, list[tuple[str, float]]]:
    """Per dtype, (train key, error) of each compared pair in execution order (calls in order)."""
    series: dict[str, list[tuple[str, float]]] = {}
    for record in sorted(records, key=lambda r: (r.call_index, r.train_position)):
        comparison = record.comparison
        error = comparison.output_error
        dtype = normalise_dtype(comparison.output_dtype)
        if error is None or dtype is None:
            continue
        series.setdefault(dtype, []).append((record.train_key, error))
    return series


def _threshold(floor: float, rounding: float, ceiling: float) -> float:
    """JUMP_FACTOR x the floor, rounded up on a grid of 2**(1/THRESHOLD_STEPS) (a slightly different floor after an
    edit keeps the same threshold, so the analysis is not redone), at most the ceiling."""
    wanted = JUMP_FACTOR * max(floor, rounding)
    if wanted <= 0:
        return ceiling
    return min(ceiling, 2.0 ** (math.ceil(math.log2(wanted) * THRESHOLD_STEPS) / THRESHOLD_STEPS))


def calibrate_series(dtype: str, series: Sequence[tuple[str, float]], ceiling: float) -> DtypeCalibration:
    """The change point of one dtype's error series (see the module docstring)."""
    if len(series) < WARMUP_PAIRS:
        return DtypeCalibration(dtype, len(series), 0.0, ceiling, ceiling, None, None, True)
    rounding = ROUNDING.get(dtype, 0.0)
    floor = 0.0
    for index, (key, error) in enumerate(series):
        threshold = _threshold(floor, rounding, ceiling)
        if index >= MIN_PRIOR_PAIRS and error > threshold and _persists(series, index, threshold):
            return DtypeCalibration(dtype, len(series), floor, threshold, ceiling, key, error, False)
        if error <= ceiling:  # an error past the ceiling is no noise, whatever follows it
            floor = max(floor, error)
    return DtypeCalibration(dtype, len(series), floor, _threshold(floor, rounding, ceiling), ceiling, None, None, False)


def _persists(series: Sequence[tuple[str, float]], index: int, threshold: float) -> bool:
    """Half of the next pairs stay above the threshold (the last pairs of a run have nothing after them)."""
    following = [error for _, error in series[index + 1 : index + 1 + PERSIST_WINDOW]]
    return not following or 2 * sum(error > threshold for error in following) >= len(following)


def calibrate(records: Iterable[ModuleRecord], base: Tolerances) -> Calibration:
    return Calibration(
        {
            dtype: calibrate_series(dtype, series, base.for_dtypes(dtype))
            for dtype, series in error_series(records).items()
        }
    )
