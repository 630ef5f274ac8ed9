"""The run's own noise floor: what "aligned" means for these two dumps, below the fixed per-dtype tolerances.

Two correct fp32 runs agree to ~1e-7, so a real divergence of 1e-5 hides under the fixed 1e-4 tolerance. The errors
of the mapped pairs in execution order are the run's noise until the first pair whose error jumps well above the
noise seen so far and stays up downstream (a change point in the error-along-depth series): the noise floor is the
largest error before it, and "differs" means more than JUMP_FACTOR times that floor. "Stays up" asks less than the
jump: half of the next pairs above PERSIST_FACTOR times the floor, since the residual stream dilutes a module's
divergence downstream (a fp32 weight off by 3e-5 jumps 60x at its module, then stays 3-12x above the noise). The fixed
tolerances stay the ceiling of what may count as noise, and the fallback when too few pairs were compared.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from operator import itemgetter
from typing import Iterable, Sequence

import numpy as np

from rca_lsp.compare.records import ModuleRecord
from rca_lsp.model.tolerance import Tolerances, normalise_dtype

JUMP_FACTOR = 8.0  # an error this many times the noise floor is a divergence (a jump of ~30x the noise is found)
THRESHOLD_STEPS = 4  # thresholds are rounded up to 2**(1/4) steps
WARMUP_PAIRS = 6  # compared pairs of a dtype needed to calibrate it at all; fewer: the fixed tolerance
MIN_PRIOR_PAIRS = 2  # pairs before a jump (with the rounding unit as the least floor, a layer-0 fault is found)
PERSIST_WINDOW = 4  # the next pairs after a jump, of which half must stay up too
PERSIST_FACTOR = 2.0  # "up": this many times the floor (at most the threshold)
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


class ErrorSeries:
    """Per dtype, the error of each compared pair in execution order (calls in order, then train order), as an array,
    with the pairs' train keys: built once from an analysis's records, then updated with the records an edit removed
    and added, so that calibrating again after a one-line edit of a 10^5-entry mapping costs array operations, not a
    pass over every record. Never changed in place (an analysis keeps its own)."""

    def __init__(self, series: dict[str, tuple[list[tuple[int, int]], np.ndarray, list[str]]]) -> None:
        self._series = series  # dtype -> (execution order: (call, train position), errors, train keys)

    @classmethod
    def of(cls, records: Iterable[ModuleRecord]) -> ErrorSeries:
        points: dict[str, list[tuple[tuple[int, int], float, str]]] = {}
        for record in records:
            point = _point(record)
            if point is not None:
                points.setdefault(point[0], []).append(point[1:])
        series = {}
        for dtype, found in points.items():
            found.sort(key=itemgetter(0))
            series[dtype] = (
                [p[0] for p in found],
                np.array([p[1] for p in found], dtype=np.float64),
                [p[2] for p in found],
            )
        return cls(series)

    def _dtypes(self) -> list[str]:
        """The dtypes in the order their first pairs ran."""
        return sorted(self._series, key=lambda dtype: self._series[dtype][0][0])

    def updated(self, removed: Iterable[ModuleRecord], added: Iterable[ModuleRecord]) -> ErrorSeries:
        """The series with `removed` (records among this series' pairs) taken out and `added` put in."""
        series = dict(self._series)
        copied: set[str] = set()

        def own(dtype: str) -> tuple[list[tuple[int, int]], np.ndarray, list[str]]:
            """This series' lists of a dtype, copied once (then changed in place: no slices of 10^5 items)."""
            if dtype not in copied:
                orders, errors, keys = series.get(dtype, ([], np.empty(0), []))
                series[dtype] = (list(orders), errors, list(keys))
                copied.add(dtype)
            return series[dtype]

        for record in removed:
            point = _point(record)
            if point is None:
                continue
            orders, errors, keys = own(point[0])
            at = bisect.bisect_left(orders, point[1])
            if at == len(orders) or orders[at] != point[1]:
                raise ValueError(f"{record.train_key} is not in the error series")
            del orders[at], keys[at]
            series[point[0]] = (orders, np.delete(errors, at), keys)
        for record in added:
            point = _point(record)
            if point is None:
                continue
            orders, errors, keys = own(point[0])
            at = bisect.bisect_left(orders, point[1])
            orders.insert(at, point[1])
            keys.insert(at, point[3])
            series[point[0]] = (orders, np.insert(errors, at, point[2]), keys)
        return ErrorSeries({dtype: found for dtype, found in series.items() if found[0]})

    def calibrate(self, base: Tolerances) -> Calibration:
        return Calibration(
            {
                dtype: _calibrate_arrays(dtype, self._series[dtype][1], self._series[dtype][2], base.for_dtypes(dtype))
                for dtype in self._dtypes()
            }
        )


def _point(record: ModuleRecord) -> tuple[str, tuple[int, int], float, str] | None:
    """(dtype, execution order, error, train key) of a record's pair in the series; None when it has no error."""
    comparison = record.comparison
    error = comparison.output_error
    dtype = normalise_dtype(comparison.output_dtype)
    if error is None or dtype is None:
        return None
    return dtype, (record.call_index, record.train_position), error, record.train_key


def _threshold(floor: float, rounding: float, ceiling: float) -> float:
    """JUMP_FACTOR x the floor, rounded up on a grid of 2**(1/THRESHOLD_STEPS) (a slightly different floor after an
    edit keeps the same threshold, so the analysis is not redone), at most the ceiling."""
    wanted = JUMP_FACTOR * max(floor, rounding)
    if wanted <= 0:
        return ceiling
    return min(ceiling, 2.0 ** (math.ceil(math.log2(wanted) * THRESHOLD_STEPS) / THRESHOLD_STEPS))


def calibrate_series(dtype: str, series: Sequence[tuple[str, float]], ceiling: float) -> DtypeCalibration:
    """The change point of one dtype's error series (see the module docstring)."""
    errors = np.array([error for _, error in series], dtype=np.float64)
    return _calibrate_arrays(dtype, errors, [key for key, _ in series], ceiling)


def _calibrate_arrays(dtype: str, errors: np.ndarray, keys: Sequence[str], ceiling: float) -> DtypeCalibration:
    """The change point of one dtype's series, scanned as arrays. The scan it stands for: going along the series,
    the floor is the largest error so far that is at most the ceiling (0 before any); the first pair after
    MIN_PRIOR_PAIRS whose error exceeds _threshold(floor) and stays up (_persists) is the jump."""
    count = len(errors)
    if count < WARMUP_PAIRS:
        return DtypeCalibration(dtype, count, 0.0, ceiling, ceiling, None, None, True)
    rounding = ROUNDING.get(dtype, 0.0)
    counted = np.where(errors <= ceiling, errors, 0.0)  # NaN and errors past the ceiling are no noise
    floors = np.empty(count)  # the floor each pair is judged against: the largest counted error before it
    floors[0] = 0.0
    np.maximum.accumulate(counted[:-1], out=floors[1:])
    np.maximum(floors, 0.0, out=floors)
    # _threshold in numpy may round log2 differently by an ulp, one grid step at most: candidates are the pairs above
    # one step below it, each then judged by _threshold itself
    wanted = JUMP_FACTOR * np.maximum(floors, rounding)
    with np.errstate(divide="ignore"):
        grid = np.exp2(np.ceil(np.log2(wanted) * THRESHOLD_STEPS) / THRESHOLD_STEPS - 1.0 / THRESHOLD_STEPS)
    loose = np.where(wanted > 0, np.minimum(grid, ceiling), ceiling)
    for index in np.flatnonzero(errors > loose).tolist():
        if index < MIN_PRIOR_PAIRS:
            continue
        floor, error = float(floors[index]), float(errors[index])
        threshold = _threshold(floor, rounding, ceiling)
        if error > threshold and _persists(errors, index, min(threshold, PERSIST_FACTOR * max(floor, rounding))):
            return DtypeCalibration(dtype, count, floor, threshold, ceiling, keys[index], error, False)
    floor = max(0.0, float(counted.max()))
    return DtypeCalibration(dtype, count, floor, _threshold(floor, rounding, ceiling), ceiling, None, None, False)


def _persists(errors: np.ndarray, index: int, bar: float) -> bool:
    """Half of the next pairs stay above `bar` (the last pairs of a run have nothing after them)."""
    following = errors[index + 1 : index + 1 + PERSIST_WINDOW]
    return not len(following) or 2 * int(np.count_nonzero(following > bar)) >= len(following)
