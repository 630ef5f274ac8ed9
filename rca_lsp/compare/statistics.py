"""Statistic-level comparison of one target (output, input, a parameter) between train and rollout."""

from __future__ import annotations

import math
from functools import lru_cache
from math import isfinite, isnan
from typing import Any, Literal, NamedTuple, Sequence

from rca_lsp.core.dump import TensorStats, is_integer_dtype
from rca_lsp.core.tolerance import WARN_FACTOR, Tolerances, normalise_dtype

STAT_NAMES = ("Max", "Min", "Mean", "Norm")
Consistency = Literal["aligned", "mismatch", "missing"]  # of one target; groups add "partial" and "not_applicable"


class StatComparison(NamedTuple):  # NamedTuples: output_3 builds ~10^6 of these, frozen dataclasses cost 3x more
    name: str
    train: float | None
    rollout: float | None
    rel_err: float | None
    status: str  # ok | warn | alert | missing | nonfinite_both


class TargetComparison(NamedTuple):
    target: str  # "output.0", "input_args.0", "parameters.weight", "input_kwargs.<name>"
    train_key: str
    rollout_key: str
    train: TensorStats | None
    rollout: TensorStats | None
    aggregated: bool  # statistics of several modules combined exactly (fused/split pair)
    stats: tuple[StatComparison, ...]
    tolerance: float
    dtype_match: str  # match | mismatch | unknown
    shape_relation: str
    consistency: Consistency
    value_status: str
    reason: str

    @property
    def nonfinite_one_side(self) -> bool:
        return any(s.status == "alert" and _one_nonfinite(s.train, s.rollout) for s in self.stats)


# A NamedTuple's generated __new__ is a Python function; tuple.__new__ builds the same object in about half the
# time, which counts on the hot paths (output_3 builds ~5 per row).
_new = tuple.__new__


def aggregate(
    parts: Sequence[TensorStats], shape: tuple[int, ...] | None = None, with_mean: bool = True
) -> TensorStats:
    """Exact statistics of the concatenation of the parts, in any order or permutation; `shape` is the
    concatenation's shape when known (else flat). `with_mean=False` leaves the Mean out: for tensors whose parts
    are not pieces of one tensor's elements (attention probabilities of decode steps lack the masked triangle)."""
    if len(parts) == 1 and shape is None and with_mean:
        return parts[0]
    numels = [p.numel for p in parts]
    total = sum(n for n in numels if n is not None) if all(n is not None for n in numels) else None
    maxes = [p.max for p in parts]
    mins = [p.min for p in parts]
    norms = [p.norm for p in parts]
    means = [p.mean for p in parts]
    mean = None
    if with_mean and total and all(m is not None for m in means) and all(n is not None for n in numels):
        mean = math.fsum(m * n for m, n in zip(means, numels)) / total  # type: ignore[operator]
    dtypes = {p.dtype for p in parts}
    return TensorStats(
        dtype=dtypes.pop() if len(dtypes) == 1 else None,
        shape=shape if shape is not None else ((total,) if total is not None else None),
        max=max(maxes) if all(v is not None for v in maxes) else None,  # type: ignore[type-var]
        min=min(mins) if all(v is not None for v in mins) else None,  # type: ignore[type-var]
        mean=mean,
        norm=math.sqrt(math.fsum(n * n for n in norms)) if all(n is not None for n in norms) else None,  # type: ignore[operator]
    )


def shape_relation(train: TensorStats, rollout: TensorStats) -> str:
    if train.shape is None or rollout.shape is None:
        return "unknown"
    if train.shape == rollout.shape:
        return "exact_match"
    if tuple(d for d in train.shape if d != 1) == tuple(d for d in rollout.shape if d != 1):
        return "singleton_compatible_numel_match"
    return "numel_match" if train.numel == rollout.numel else "numel_mismatch"


def _one_nonfinite(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return False
    return math.isfinite(a) != math.isfinite(b)


def _scale(stats: TensorStats) -> float:
    """Typical magnitude of the tensor's elements: RMS from Norm, else the largest absolute extreme."""
    numel = stats.numel
    if stats.norm is not None and numel and math.isfinite(stats.norm):
        return stats.norm / math.sqrt(numel)
    extremes = [abs(v) for v in (stats.max, stats.min) if v is not None and math.isfinite(v)]
    return max(extremes, default=0.0)


def _comparison_scale(train: TensorStats, rollout: TensorStats, dtype_match: str) -> float:
    """The rollout tensor's scale (the train one's too when the dtypes differ); the train one's when the rollout
    statistics do not give one (e.g. only the Mean of a sum of two tensors is known)."""
    if dtype_match == "mismatch":
        return max(_scale(rollout), _scale(train))
    return _scale(rollout) or _scale(train)


def sum_of(a: TensorStats | None, b: TensorStats | None) -> TensorStats | None:
    """What the statistics of a + b (same shape) say exactly: the Mean; Max, Min and Norm stay unknown."""
    if a is None or b is None or a.mean is None or b.mean is None or a.shape != b.shape:
        return None
    return TensorStats(a.dtype if a.dtype == b.dtype else None, a.shape, None, None, a.mean + b.mean, None)


def statistic_pairs(train: TensorStats, rollout: TensorStats) -> tuple[tuple[str, float | None, float | None], ...]:
    """(statistic name, train value, rollout value) for Max, Min, Mean and Norm, in the seed's order."""
    return (
        ("Max", train.max, rollout.max),
        ("Min", train.min, rollout.min),
        ("Mean", train.mean, rollout.mean),
        ("Norm", train.norm, rollout.norm),
    )


def relative_error(train: TensorStats | None, rollout: TensorStats | None) -> float | None:
    """The largest relative error of a statistic between the two sides, judged as quick_verdict judges them (Mean,
    Max and Min against the tensor's scale); None when nothing is comparable, inf when only one side is finite."""
    if train is None or rollout is None or not train.observable or not rollout.observable:
        return None
    dtype_match, same_form = _dtype_pair(train.dtype, rollout.dtype)
    if not same_form:
        return None
    t_max, t_min, t_mean, t_norm = train.max, train.min, train.mean, train.norm
    if (t_max, t_min, t_mean, t_norm) == (rollout.max, rollout.min, rollout.mean, rollout.norm) and all(
        v is None or isfinite(v) for v in (t_max, t_min, t_mean, t_norm)
    ):
        return None if t_max is None and t_min is None and t_mean is None and t_norm is None else 0.0  # the common case
    scale = _comparison_scale(train, rollout, dtype_match)
    worst: float | None = None
    for name, t, r in statistic_pairs(train, rollout):
        if t is None or r is None:
            continue
        if not (isfinite(t) and isfinite(r)):
            if not ((isnan(t) and isnan(r)) or t == r):
                return math.inf
            continue
        error = 0.0 if t == r else _stat_error(name, t, r, scale)
        worst = error if worst is None else max(worst, error)
    return worst


def copy_difference(reference: TensorStats, copy: TensorStats) -> float:
    """The largest relative difference of a statistic between two copies of what should be one tensor (0 when
    identical; inf when their shapes differ, a statistic is on one only, or only one side is finite)."""
    if reference.shape != copy.shape or _present(reference) != _present(copy):
        return math.inf
    return relative_error(copy, reference) or 0.0


def _present(stats: TensorStats) -> tuple[bool, ...]:
    return stats.max is not None, stats.min is not None, stats.mean is not None, stats.norm is not None


def _stat_error(name: str, t: float, r: float, scale: float) -> float:
    # Mean, Max and Min are judged against the tensor's scale (a mean near zero would make any noise "huge");
    # Norm is a magnitude itself.
    floor = 1e-12 if name == "Norm" else max(scale, 1e-12)
    return abs(t - r) / max(abs(r), floor)


def _stat_cells(name: str, t: float | None, r: float | None, scale: float, tol: float) -> tuple[float | None, str]:
    """(rel_err, status) of one statistic."""
    if t is None or r is None:
        return None, "missing"
    if t == r and isfinite(t):
        err = 0.0  # what _stat_error gives; identical statistics are the common case
    elif not (isfinite(t) and isfinite(r)):
        same = (isnan(t) and isnan(r)) or t == r
        return (0.0, "nonfinite_both") if same else (math.inf, "alert")
    else:
        err = _stat_error(name, t, r, scale)
    return err, "ok" if err <= tol else ("warn" if err <= tol * WARN_FACTOR else "alert")


def _identical_statistics(train: TensorStats, rollout: TensorStats) -> bool:
    """All four statistics known, finite and the same on both sides: the common case, with nothing to compute."""
    t_max, t_min, t_mean, t_norm = train.max, train.min, train.mean, train.norm
    return (
        t_max is not None
        and t_min is not None
        and t_mean is not None
        and t_norm is not None
        and (t_max, t_min, t_mean, t_norm) == (rollout.max, rollout.min, rollout.mean, rollout.norm)
        and isfinite(t_max)
        and isfinite(t_min)
        and isfinite(t_mean)
        and isfinite(t_norm)
    )


_IDENTICAL_ERRORS = (0.0, "ok") * 4  # what _stat_cells gives each statistic of _identical_statistics


NONFINITE_BOTH = 1
NONFINITE_ONE_SIDE = 2


def quick_verdict(
    train: TensorStats | None, rollout: TensorStats | None, tolerances: Tolerances
) -> tuple[Consistency, int]:
    """The consistency `compare_target` would give, plus non-finite flags, without building any objects.

    Every target of every mapped pair goes through this; the detailed comparison is built only when shown.
    """
    if train is None or rollout is None or not train.observable or not rollout.observable:
        return "missing", 0
    dtype_match, same_form = _dtype_pair(train.dtype, rollout.dtype)
    if not same_form:
        return "missing", 0
    if _identical_statistics(train, rollout):
        return "aligned", 0  # synced weights, untouched activations
    scale = -1.0  # computed once a statistic differs: identical statistics need neither scale nor tolerance
    compared = bad = beyond_mean = False
    flags = 0
    for name, t, r in statistic_pairs(train, rollout):
        if t is None or r is None:
            continue
        compared = True
        beyond_mean |= name != "Mean"
        if t == r and isfinite(t):
            continue
        if not (isfinite(t) and isfinite(r)):
            if (isnan(t) and isnan(r)) or t == r:
                flags |= NONFINITE_BOTH
            else:
                bad = True
                flags |= NONFINITE_ONE_SIDE
        elif not bad:
            if scale < 0.0:
                scale = _comparison_scale(train, rollout, dtype_match)
            bad = _stat_error(name, t, r, scale) > tolerances.for_dtypes(train.dtype, rollout.dtype)
    if not compared or not (bad or beyond_mean):
        return "missing", flags  # nothing compared, or a Mean alone: agreeing Means do not show agreeing tensors
    return ("mismatch" if bad else "aligned"), flags


# What compare_target and output_3 need of one target: (errors, tolerance, dtype_match, shape_relation,
# consistency, value_status, reason), errors being (rel_err, status) of Max, Min, Mean and Norm in a row, or ()
# when no statistic was compared. A plain tuple: output_3 assesses ~10^6 targets without building objects.
Assessment = tuple[tuple[Any, ...], float, str, str, str, str, str]


def compare_target(
    target: str,
    train_key: str,
    rollout_key: str,
    train: TensorStats | None,
    rollout: TensorStats | None,
    tolerances: Tolerances,
    aggregated: bool = False,
) -> TargetComparison:
    errors, tol, dtype_match, relation, consistency, status, reason = assess(target, train, rollout, tolerances)
    return _new(
        TargetComparison,
        (
            target,
            train_key,
            rollout_key,
            train,
            rollout,
            aggregated,
            _stat_comparisons(train, rollout, errors),
            tol,
            dtype_match,
            relation,
            consistency,
            status,
            reason,
        ),
    )


def assess(target: str, train: TensorStats | None, rollout: TensorStats | None, tolerances: Tolerances) -> Assessment:
    if train is None or rollout is None or not train.observable or not rollout.observable:
        side = "train" if train is None or not train.observable else "rollout"
        what = "absent" if (train if side == "train" else rollout) is None else "without statistics (unobservable)"
        return (), 0.0, "unknown", "unknown", "missing", f"missing_on_{side}", f"{target} {what} on {side}"
    tol = tolerances.for_dtypes(train.dtype, rollout.dtype)
    dtype_match, same_form = _dtype_pair(train.dtype, rollout.dtype)
    relation = shape_relation(train, rollout)
    if not same_form:
        return (
            (),
            tol,
            dtype_match,
            relation,
            "missing",
            "not_comparable",
            f"{target} is {train.dtype} on train and {rollout.dtype} on rollout: not the same tensor form",
        )
    note = f"; dtype {train.dtype} vs {rollout.dtype}" if dtype_match == "mismatch" else ""
    if tol >= 0.0 and _identical_statistics(train, rollout):  # every error 0.0, every status "ok"
        return _IDENTICAL_ERRORS, tol, dtype_match, relation, "aligned", "match", _within(target, tol) + note
    scale = _comparison_scale(train, rollout, dtype_match)
    max_err, max_status = _stat_cells("Max", train.max, rollout.max, scale, tol)
    min_err, min_status = _stat_cells("Min", train.min, rollout.min, scale, tol)
    mean_err, mean_status = _stat_cells("Mean", train.mean, rollout.mean, scale, tol)
    norm_err, norm_status = _stat_cells("Norm", train.norm, rollout.norm, scale, tol)
    errors = (max_err, max_status, min_err, min_status, mean_err, mean_status, norm_err, norm_status)
    if max_status == min_status == mean_status == norm_status == "ok":
        return errors, tol, dtype_match, relation, "aligned", "match", _within(target, tol) + note
    consistency, status, reason = _verdict(target, _stat_comparisons(train, rollout, errors), tol)
    return errors, tol, dtype_match, relation, consistency, status, reason + note


def _stat_comparisons(
    train: TensorStats | None, rollout: TensorStats | None, errors: tuple[Any, ...]
) -> tuple[StatComparison, ...]:
    if not errors or train is None or rollout is None:  # errors are measured only when both sides have stats
        return ()
    return (
        _new(StatComparison, ("Max", train.max, rollout.max, errors[0], errors[1])),
        _new(StatComparison, ("Min", train.min, rollout.min, errors[2], errors[3])),
        _new(StatComparison, ("Mean", train.mean, rollout.mean, errors[4], errors[5])),
        _new(StatComparison, ("Norm", train.norm, rollout.norm, errors[6], errors[7])),
    )


@lru_cache(maxsize=1024)
def _dtype_pair(train: str | None, rollout: str | None) -> tuple[str, bool]:
    """(dtype_match, whether both are integer or both floating)."""
    match = (
        "unknown"
        if train is None or rollout is None
        else ("match" if normalise_dtype(train) == normalise_dtype(rollout) else "mismatch")
    )
    return match, is_integer_dtype(train) == is_integer_dtype(rollout)


def _verdict(target: str, stats: tuple[StatComparison, ...], tol: float) -> tuple[str, str, str]:
    """(consistency, value_status, reason) when not every statistic is simply within tolerance."""
    compared = [s for s in stats if s.status != "missing"]
    bad = [s for s in compared if s.status in ("warn", "alert")]
    if not compared:
        return "missing", "missing_statistics", f"{target}: no statistic on both sides"
    if bad:
        nonfinite = [s for s in bad if _one_nonfinite(s.train, s.rollout)]
        if nonfinite:
            side = "train" if not math.isfinite(nonfinite[0].train) else "rollout"  # type: ignore[arg-type]
            return (
                "mismatch",
                f"nonfinite_on_{side}",
                f"{target}: {', '.join(s.name for s in nonfinite)} non-finite on {side} only",
            )
        worst = max(bad, key=lambda s: s.rel_err or 0.0)
        return (
            "mismatch",
            "mismatch",
            f"{target}: {worst.name} differs by {worst.rel_err:.3g} relative (tolerance {tol:g})",
        )
    if all(s.name == "Mean" for s in compared):
        return (
            "missing",
            "mean_only",
            f"{target}: only the Mean is known on both sides (it agrees, which alone does not show the tensors agree)",
        )
    both = [s.name for s in compared if s.status == "nonfinite_both"]
    return "aligned", "match", f"{target}: {', '.join(both)} non-finite on both sides" if both else _within(target, tol)


@lru_cache(maxsize=1024)
def _within(target: str, tol: float) -> str:
    return f"{target}: within {tol:g}"


@lru_cache(maxsize=64)
def priority_for(consistency: str, relation: str) -> tuple[str, str]:
    """The seed's P1..P4 buckets for one target (P5 demotion needs the module context)."""
    if consistency == "missing":
        return "-", "missing_compare_target"
    shape_ok = relation in ("exact_match", "singleton_compatible_numel_match", "unknown")
    if consistency == "mismatch":
        if shape_ok:
            return "P1", "value_mismatch_shape_match"
        if relation == "numel_match":
            return "P1", "value_mismatch_numel_match"
        return "P2", "value_mismatch_shape_mismatch"
    if relation == "numel_mismatch":
        return "P3", "value_match_shape_mismatch"
    return "P4", "value_match_shape_match"
