"""One tensor's statistics as msprobe writes them (Max, Min, Mean, Norm, dtype, shape), and their algebra: the exact
statistics of a concatenation of parts, of a sum, and the relative difference of two tensors' statistics judged
against the tensor's scale. Every stage passes these around: the rank merge aggregates shards with them, the
comparison judges mapped pairs with them."""

from __future__ import annotations

import math
import operator
from functools import lru_cache
from math import isfinite, isnan, prod
from typing import Any, Sequence

import msgspec

from rca_lsp.base.jsonload import as_float
from rca_lsp.model.tolerance import BFLOAT16_EPSILON, DEFAULT_TOLERANCES, normalise_dtype


class TensorStats(msgspec.Struct, gc=False):
    """Statistics of one tensor as msprobe summarised it (None where it wrote null).

    Decoded straight from a dump's JSON (the field names are msprobe's): a dump's tensors are ~10^6 of these, and
    building them in C instead of walking parsed dicts in Python makes loading faster than a plain parse.
    `numel` and `observable` are derived on construction, whatever the JSON holds under those names.
    """

    dtype: Any = None
    shape: Any = None
    max: Any = msgspec.field(default=None, name="Max")
    min: Any = msgspec.field(default=None, name="Min")
    mean: Any = msgspec.field(default=None, name="Mean")
    norm: Any = msgspec.field(default=None, name="Norm")
    numel: int | None = None
    # False for tensors msprobe saw but could not summarise (e.g. repacked weights of shape [0]).
    observable: bool = False

    def __post_init__(self) -> None:
        # Run for each of a dump's ~10^6 tensors as it is decoded: what it would call is inlined (a Python call each
        # was a good part of its time), the tables' slow paths taken only for a dtype or shape not seen yet.
        dtype, shape = self.dtype, self.shape
        if dtype is not None:
            if type(dtype) is not str:
                dtype = str(dtype)
            self.dtype = _DTYPES.get(dtype) or _dtype(dtype)
        if type(shape) is list:
            shape = tuple(shape)
        elif type(shape) is not tuple:
            shape = None
        numel = None
        if shape is not None:
            try:
                numel = prod(shape)
            except TypeError:
                pass
            else:
                if type(numel) is int:
                    # a shape of whole numbers (no float in it) is kept once, with its numel if no size is negative
                    shape, numel = _SHAPES.get(shape) or _shape(shape, numel)
                else:  # not a list of sizes
                    numel = None
        self.shape, self.numel = shape, numel
        # Statistics are floats in all but odd cases (int, null, bool, quoted non-finite): convert only those.
        mx, mn, mean, norm = self.max, self.min, self.mean, self.norm
        if type(mx) is not float:
            self.max = mx = as_float(mx)
        if type(mn) is not float:
            self.min = mn = as_float(mn)
        if type(mean) is not float:
            self.mean = mean = as_float(mean)
        if type(norm) is not float:
            self.norm = norm = as_float(norm)
        self.observable = numel != 0 and not (mx is None and mn is None and mean is None and norm is None)

    @property
    def sizes(self) -> tuple[int, ...] | None:
        """The shape when it is one of sizes (its numel known); None when missing or malformed (see _SHAPES)."""
        return self.shape if self.numel is not None else None

    @property
    def is_tensor(self) -> bool:
        """A tensor node, as opposed to the {"type": ..., "value": ...} nodes msprobe writes for other arguments."""
        return self.dtype is not None


# One object per distinct dtype and shape: a dump's 10^6 tensors have a few dtypes and some thousands of shapes, and
# decoding gives each its own string, list and sizes (~100-150 bytes a tensor, held for the whole session otherwise:
# a fifth of a loaded dump's memory, and as many fewer pages to fault in while loading). A shape of whole numbers is
# kept with its numel, None when a size is negative or the count beyond an int64 (a malformed dump), checked once.
# Other odd shapes (a float or a text in it) keep their own, with no numel; one with a boolean is never kept either
# (True == 1: the table is shared by every dump this process reads), and reads as its integers once those were seen.
_DTYPES: dict[str, str] = {}
_SHAPES: dict[tuple[int, ...], tuple[tuple[int, ...], int | None]] = {}
_TABLE_LIMIT = 1 << 16  # distinct values kept in each; beyond it (an odd dump), values stay as decoded
# torch counts a tensor's elements in an int64: a shape of more is malformed (and beyond a float, it stopped the scale)
_MAX_NUMEL = (1 << 63) - 1


def _dtype(dtype: str) -> str:
    if len(_DTYPES) < _TABLE_LIMIT:
        _DTYPES[dtype] = dtype
    return dtype


def _shape(shape: tuple[int, ...], numel: int) -> tuple[tuple[int, ...], int | None]:
    if not all(type(size) is int for size in shape):  # booleans: not sizes, and never kept (True == 1)
        return shape, None
    known = shape, (numel if min(shape, default=0) >= 0 and numel <= _MAX_NUMEL else None)
    if len(_SHAPES) < _TABLE_LIMIT:
        _SHAPES[shape] = known
    return known


def leading_size(stats: TensorStats) -> int:
    """Elements per feature vector: all dims but the last (sequence x batch, or tokens); 0 when unknown."""
    if not stats.shape or stats.numel is None or not stats.shape[-1]:
        return 0
    return stats.numel // stats.shape[-1]


_INTEGER_KINDS = ("int", "uint", "bool", "long", "short", "char", "byte")


@lru_cache(maxsize=256)
def is_integer_dtype(dtype: str | None) -> bool:
    """Integer and boolean tensors (msprobe gives them no Mean/Norm; they never compare with floating ones)."""
    name = (dtype or "").rpartition(".")[2].lower()
    return name.startswith(_INTEGER_KINDS)


def aggregate(
    parts: Sequence[TensorStats], shape: tuple[int, ...] | None = None, with_mean: bool = True
) -> TensorStats:
    """Exact statistics of the concatenation of the parts, in any order or permutation; `shape` is the
    concatenation's shape when known (else flat). `with_mean=False` leaves the Mean out: for tensors whose parts
    are not pieces of one tensor's elements (attention probabilities of decode steps lack the masked triangle)."""
    if len(parts) == 1 and shape is None and with_mean:
        return parts[0]
    # one pass over the parts (a decode rollout's module joins hundreds of calls), then each column in C
    numels, maxes, mins, means, norms, dtypes = zip(*map(_AGGREGATED, parts))
    total = sum(numels) if None not in numels else None
    mean = None
    if with_mean and total and None not in means:
        mean = _exact_sum(list(map(operator.mul, means, numels))) / total
    return TensorStats(
        dtype=_joint_dtype(set(dtypes)),
        shape=shape if shape is not None else ((total,) if total is not None else None),
        max=max(maxes) if None not in maxes else None,
        min=min(mins) if None not in mins else None,
        mean=mean,
        norm=math.sqrt(_exact_sum(list(map(operator.mul, norms, norms)))) if None not in norms else None,
    )


def _exact_sum(terms: list[float]) -> float:
    """The correctly rounded sum (math.fsum); where fsum raises instead of giving what IEEE addition gives (an
    infinity of each sign: NaN; a sum beyond the float range: an infinity), as an overflowing run's statistics
    can have, the plain sum."""
    try:
        return math.fsum(terms)
    except (OverflowError, ValueError):
        return sum(terms)


_AGGREGATED = operator.attrgetter("numel", "max", "min", "mean", "norm", "dtype")
four_statistics = operator.attrgetter("max", "min", "mean", "norm")  # (Max, Min, Mean, Norm) of a TensorStats, in C


def _joint_dtype(dtypes: set[str | None]) -> str | None:
    """The dtype of a tensor made of parts: theirs when they agree. Parts in several floating dtypes (a decode step
    the engine ran in bfloat16 among float32 ones) make a tensor only as precise as the least precise: its dtype,
    whose tolerance judges the whole and which differs from the other side's as that part does. Else unknown."""
    if len(dtypes) == 1:
        return next(iter(dtypes))
    if None in dtypes or any(is_integer_dtype(d) for d in dtypes):
        return None
    ranked = [(DEFAULT_TOLERANCES.get(normalise_dtype(d) or ""), d) for d in dtypes if d is not None]
    if any(tolerance is None for tolerance, _ in ranked):
        return None  # a dtype of unknown precision
    return max(ranked)[1]  # type: ignore[type-var]


def tensor_scale(stats: TensorStats) -> float:
    """Typical magnitude of the tensor's elements: RMS from Norm, else the largest absolute extreme."""
    numel = stats.numel
    if stats.norm is not None and numel and math.isfinite(stats.norm):
        return stats.norm / math.sqrt(numel)
    extremes = [abs(v) for v in (stats.max, stats.min) if v is not None and math.isfinite(v)]
    return max(extremes, default=0.0)


def comparison_scale(train: TensorStats, rollout: TensorStats, dtype_match: str) -> float:
    """The rollout tensor's scale (the train one's too when the dtypes differ); the train one's when the rollout
    statistics do not give one (e.g. only the Mean of a sum of two tensors is known)."""
    if dtype_match == "mismatch":
        return max(tensor_scale(rollout), tensor_scale(train))
    return tensor_scale(rollout) or tensor_scale(train)


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
    dtype_match, same_form = dtype_pair(train.dtype, rollout.dtype)
    if not same_form:
        return None
    t_max, t_min, t_mean, t_norm = train.max, train.min, train.mean, train.norm
    if (t_max, t_min, t_mean, t_norm) == (rollout.max, rollout.min, rollout.mean, rollout.norm) and all(
        v is None or isfinite(v) for v in (t_max, t_min, t_mean, t_norm)
    ):
        return None if t_max is None and t_min is None and t_mean is None and t_norm is None else 0.0  # the common case
    scale = comparison_scale(train, rollout, dtype_match)
    worst: float | None = None
    for name, t, r in statistic_pairs(train, rollout):
        if t is None or r is None:
            continue
        if not (isfinite(t) and isfinite(r)):
            if not ((isnan(t) and isnan(r)) or t == r):
                return math.inf
            continue
        error = 0.0 if t == r else stat_error(name, t, r, scale)
        worst = error if worst is None else max(worst, error)
    return worst


def copy_difference(reference: TensorStats, copy: TensorStats) -> float | None:
    """The largest relative difference of a statistic between two copies of what should be one tensor (0 when
    identical; inf when their shapes differ or only one side is finite); None when no statistic is on both (msprobe
    wrote null): unknown, which is never a difference, for copies on ranks as for mapped pairs (relative_error)."""
    if not reference.observable or not copy.observable:
        return None
    if reference.shape != copy.shape:
        return math.inf
    return relative_error(copy, reference)


def exact_extremes(train: TensorStats, rollout: TensorStats) -> bool:
    """Whether a parameter's Max and Min must be equal on both sides: the same dtype and number of elements. A weight
    synced by value holds the same values, and the extremes of the same values are the same numbers exactly, however
    either side combined them from shards, fused parts or calls (max of maxes); Mean and Norm are sums, so they may
    differ by their rounding (parameter_sum_tolerance). Another dtype (a quantised or fp32 copy) or another size (a
    padded vocabulary) can hold other values and keeps the dtype's tolerance."""
    return (
        train.numel is not None
        and train.numel == rollout.numel
        and train.dtype is not None
        and normalise_dtype(train.dtype) == normalise_dtype(rollout.dtype)
    )


@lru_cache(maxsize=256)
def parameter_sum_tolerance(dtype: str | None, tolerance: float) -> float:
    """The tolerance of the Mean and Norm of a parameter of `dtype`, whose tolerance is `tolerance`, that holds the
    same values on both sides (exact_extremes). msprobe has torch compute them in the tensor's dtype; for bfloat16
    torch sums in float32 and rounds the result once: within half the epsilon of the float32 result, relatively (a
    Mean: relative to the tensor's scale, which bounds it). A side recombined from shards, fused parts or experts
    (the root of the parts' summed squared Norms, their Means weighted) stays within its parts' largest such error.
    So the two sides differ by at most the epsilon, plus what summing in another order moves a float32 result: the
    (fixed) float32 tolerance; the dtype's tolerance where that is tighter (one set so).

    bfloat16 only: its sums were measured within that bound on every healthy dump we have (at most 0.65 of it) and on
    CPU up to 10^8 elements (0.91 epsilon). float16's CPU norms of a whole against its parts reach 1.5 epsilon at
    3x10^6 elements and 6.7 at 10^7, beyond it, so float16 keeps its tolerance until measured on the kernels that
    dump it; float32 and float64 statistics are limited by the order of their sums, which their tolerance covers."""
    if normalise_dtype(dtype) != "bfloat16":
        return tolerance
    return min(tolerance, BFLOAT16_EPSILON + DEFAULT_TOLERANCES["float32"])


def extremes_differ(a: TensorStats, b: TensorStats) -> bool:
    """Whether two copies of one parameter (exact_extremes) have a Max or Min that is not the same number (an unknown
    statistic is no difference, nor NaN against NaN)."""
    return exact_extremes(a, b) and any(
        x is not None and y is not None and x != y and not (isnan(x) and isnan(y))
        for x, y in ((a.max, b.max), (a.min, b.min))
    )


def stat_error(name: str, t: float, r: float, scale: float) -> float:
    # Mean, Max and Min are judged against the tensor's scale (a mean near zero would make any noise "huge");
    # Norm is a magnitude itself.
    floor = 1e-12 if name == "Norm" else max(scale, 1e-12)
    return abs(t - r) / max(abs(r), floor)


@lru_cache(maxsize=1024)
def dtype_pair(train: str | None, rollout: str | None) -> tuple[str, bool]:
    """(dtype_match, whether both are integer or both floating)."""
    match = (
        "unknown"
        if train is None or rollout is None
        else ("match" if normalise_dtype(train) == normalise_dtype(rollout) else "mismatch")
    )
    return match, is_integer_dtype(train) == is_integer_dtype(rollout)
