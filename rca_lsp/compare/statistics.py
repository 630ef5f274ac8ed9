"""Statistic-level comparison of one target (output, input, a parameter) between train and rollout."""

from __future__ import annotations

import math
from functools import lru_cache
from math import isfinite, isnan
from typing import Any, Literal, NamedTuple

from rca_lsp.model.stats import (
    TensorStats,
    comparison_scale,
    dtype_pair,
    exact_extremes,
    parameter_sum_tolerance,
    stat_error,
    statistic_pairs,
)
from rca_lsp.model.tolerance import WARN_FACTOR, Tolerances

STAT_NAMES = ("Max", "Min", "Mean", "Norm")
EXTREMES = ("Max", "Min")
PARAMETER_PREFIX = "parameters."
Consistency = Literal["aligned", "mismatch", "missing"]  # of one target
GroupConsistency = Literal["aligned", "mismatch", "missing", "partial", "not_applicable"]  # of a group's targets


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


def _stat_cells(name: str, t: float | None, r: float | None, scale: float, tol: float) -> tuple[float | None, str]:
    """(rel_err, status) of one statistic."""
    if t is None or r is None:
        return None, "missing"
    if t == r and isfinite(t):
        err = 0.0  # what stat_error gives; identical statistics are the common case
    elif not (isfinite(t) and isfinite(r)):
        same = (isnan(t) and isnan(r)) or t == r
        return (0.0, "nonfinite_both") if same else (math.inf, "alert")
    else:
        err = stat_error(name, t, r, scale)
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


Verdict = tuple[Consistency, int, float]  # quick_verdict's: consistency, flags, the largest error measured


class PlainVerdict(NamedTuple):
    """What a plain 1:1 pair's targets, judged as quick_verdict judges them, say of the pair (compare.targettable
    .plain_verdicts judges every plain pair of an analysis at once; ModuleComparison.of_plain_pair reads it)."""

    output: Consistency
    inputs: Consistency
    parameters: GroupConsistency
    kwargs: GroupConsistency
    errors: list[float] | None  # the largest error of each target judged, when not a mismatch and not 0
    output_nonfinite_both: bool
    output_error: float | None  # model.stats.relative_error of the output; None when infinite
    dtype_path: tuple[str, str] | None  # the output dtypes, when they differ while the inputs' agree


def quick_verdict(
    train: TensorStats | None, rollout: TensorStats | None, tolerances: Tolerances, parameter: bool = False
) -> Verdict:
    """The consistency `compare_target` would give, plus non-finite flags, without building any objects; and,
    unless a mismatch, the largest relative error of a statistic (model.stats.relative_error; 0 when none was
    measured): what says whether the verdict holds under tighter tolerances (a mismatch always does). A `parameter`
    of one dtype and size on both sides has its Max and Min judged for equality (model.stats.exact_extremes), its
    Mean and Norm under model.stats.parameter_sum_tolerance.

    Every target of every mapped pair goes through this; the detailed comparison is built only when shown.
    """
    if train is None or rollout is None or not train.observable or not rollout.observable:
        return "missing", 0, 0.0
    dtype_match, same_form = dtype_pair(train.dtype, rollout.dtype)
    if not same_form:
        return "missing", 0, 0.0
    if _identical_statistics(train, rollout):
        return "aligned", 0, 0.0  # synced weights, untouched activations
    scale = tolerance = -1.0  # computed once a statistic differs: identical statistics need neither
    worst = 0.0
    compared = bad = beyond_mean = False
    flags = 0
    exact = parameter and exact_extremes(train, rollout)
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
                scale = comparison_scale(train, rollout, dtype_match)
                tolerance = tolerances.for_dtypes(train.dtype, rollout.dtype)
                if exact:  # Max and Min are judged for equality below, Mean and Norm under this
                    tolerance = parameter_sum_tolerance(train.dtype, tolerance)
            error = stat_error(name, t, r, scale)
            bad = error > tolerance or (exact and name in EXTREMES)
            if error > worst:
                worst = error
    if not compared or not (bad or beyond_mean):
        return "missing", flags, worst  # nothing compared, or a Mean alone: agreeing Means do not show agreeing tensors
    return ("mismatch" if bad else "aligned"), flags, worst


def target_verdict(
    target: str, train: TensorStats | None, rollout: TensorStats | None, tolerances: Tolerances
) -> Verdict:
    """quick_verdict of a named target ("output.0", "parameters.weight", ...): parameters judged as parameters."""
    return quick_verdict(train, rollout, tolerances, target.startswith(PARAMETER_PREFIX))


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
    dtype_match, same_form = dtype_pair(train.dtype, rollout.dtype)
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
    note = dtype_note(dtype_match, train.dtype, rollout.dtype)
    if tol >= 0.0 and _identical_statistics(train, rollout):  # every error 0.0, every status "ok"
        return _IDENTICAL_ERRORS, tol, dtype_match, relation, "aligned", "match", within(target, tol) + note
    scale = comparison_scale(train, rollout, dtype_match)
    exact = target.startswith(PARAMETER_PREFIX) and exact_extremes(train, rollout)
    extremes_tol, sums_tol = (0.0, parameter_sum_tolerance(train.dtype, tol)) if exact else (tol, tol)
    max_err, max_status = _stat_cells("Max", train.max, rollout.max, scale, extremes_tol)
    min_err, min_status = _stat_cells("Min", train.min, rollout.min, scale, extremes_tol)
    mean_err, mean_status = _stat_cells("Mean", train.mean, rollout.mean, scale, sums_tol)
    norm_err, norm_status = _stat_cells("Norm", train.norm, rollout.norm, scale, sums_tol)
    errors = (max_err, max_status, min_err, min_status, mean_err, mean_status, norm_err, norm_status)
    if max_status == min_status == mean_status == norm_status == "ok":
        return errors, tol, dtype_match, relation, "aligned", "match", within(target, tol) + note
    parameter_tol = sums_tol if exact else None
    consistency, status, reason = _verdict(target, _stat_comparisons(train, rollout, errors), tol, parameter_tol)
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


def _verdict(
    target: str, stats: tuple[StatComparison, ...], tol: float, parameter_tol: float | None
) -> tuple[str, str, str]:
    """(consistency, value_status, reason) when not every statistic is simply within tolerance (`parameter_tol`: of a
    parameter held to its rule, model.stats.exact_extremes, the tolerance of its Mean and Norm; its Max and Min are
    judged for equality)."""
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
        return "mismatch", "mismatch", differs(target, worst.name, worst.rel_err or 0.0, tol, parameter_tol)
    if all(s.name == "Mean" for s in compared):
        return (
            "missing",
            "mean_only",
            f"{target}: only the Mean is known on both sides (it agrees, which alone does not show the tensors agree)",
        )
    both = [s.name for s in compared if s.status == "nonfinite_both"]
    return "aligned", "match", f"{target}: {', '.join(both)} non-finite on both sides" if both else within(target, tol)


def differs(target: str, statistic: str, error: float, tol: float, parameter_tol: float | None = None) -> str:
    """Why a target is a mismatch: its statistic beyond the tolerance, or, of a parameter held to its rule
    (model.stats.exact_extremes; `parameter_tol`: the tolerance of its Mean and Norm), an extreme that differs at all
    or a Mean or Norm beyond what rounding can make of the same values (model.stats.parameter_sum_tolerance)."""
    if parameter_tol is not None and error <= tol:
        if statistic in EXTREMES:
            return (
                f"{target}: {statistic} differs by {error:.3g} relative, where a parameter of one dtype and size on "
                "both sides must be equal (synced weights hold the same values, so the same extremes)"
            )
        return (
            f"{target}: {statistic} differs by {error:.3g} relative, beyond the {parameter_tol:.3g} that rounding "
            "the sums of the same values can make of a parameter of one dtype and size on both sides (tolerance "
            f"{tol:g} otherwise)"
        )
    return f"{target}: {statistic} differs by {error:.3g} relative (tolerance {tol:g})"


def dtype_note(match: str, train: str | None, rollout: str | None) -> str:
    """What a target's reason adds when its two dtypes differ (`match`: dtype_pair's verdict)."""
    return f"; dtype {train} vs {rollout}" if match == "mismatch" else ""


@lru_cache(maxsize=1024)
def within(target: str, tol: float) -> str:
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
