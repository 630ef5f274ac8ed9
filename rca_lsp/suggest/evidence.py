"""What the dumps say about a candidate pair: tensor forms, shapes and statistics on both sides."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Callable, Sequence

from rca_lsp.core.dump import ModuleEntry, TensorStats
from rca_lsp.suggest.rules import NamingRules

_HALF_PRECISION = ("bfloat16", "float16", "half")
_TOLERANCE_FULL = 1e-3
_TOLERANCE_HALF = 3e-2


class ShapeRelation(Enum):
    SAME = "same shape"
    PERMUTED = "same dimensions in another order"
    FLATTENED = "same feature size and element count"
    NUMEL = "same element count"
    DIFFERENT = "different shapes"
    UNKNOWN = "shape unknown"

    @property
    def compatible(self) -> bool:
        return self in (ShapeRelation.SAME, ShapeRelation.PERMUTED, ShapeRelation.FLATTENED)


class StatsRelation(Enum):
    EQUAL = "equal"
    DIFFERENT = "different"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class ModuleView:
    """One side of a candidate pair: a module, or a group of split modules seen as their concatenation."""

    input: TensorStats | None
    output: TensorStats | None
    weight: TensorStats | None
    kind: str | None  # from NamingRules.class_kind; "identity" for placeholders
    class_name: str


@dataclass(frozen=True, slots=True)
class Evidence:
    conflict: str | None  # why the two cannot be the same module (different tensor forms), else None
    output_shape: ShapeRelation
    input_shape: ShapeRelation
    weight_shape: ShapeRelation
    output_stats: StatsRelation
    input_stats: StatsRelation
    same_kind: bool | None  # None when a side's kind is unknown
    shapes: tuple[tuple[int, ...] | None, tuple[int, ...] | None]  # output shapes, for the reason text


def module_view(entry: ModuleEntry, rules: NamingRules) -> ModuleView:
    weight = entry.parameters.get("weight")
    return ModuleView(entry.input, entry.output, weight if weight is not None and weight.observable else None,
                      rules.class_kind(entry.class_name), entry.class_name)


def group_view(entries: Sequence[ModuleEntry], rules: NamingRules) -> ModuleView:
    """Split modules as their fused equivalent: outputs concatenated on the last dim, weights on the first."""
    views = [module_view(entry, rules) for entry in entries]
    kinds = {view.kind for view in views}
    return ModuleView(
        input=views[0].input,
        output=concatenate([view.output for view in views], axis=-1),
        weight=concatenate([view.weight for view in views], axis=0),
        kind=kinds.pop() if len(kinds) == 1 else None,
        class_name="+".join(dict.fromkeys(view.class_name for view in views)),
    )


def concatenate(parts: Sequence[TensorStats | None], axis: int) -> TensorStats | None:
    """Statistics of the concatenation of `parts` (exact for Max, Min, Norm and the numel-weighted Mean)."""
    present = [part for part in parts if part is not None and part.shape]
    if not present or len(present) != len(parts):
        return None
    shapes = [part.shape for part in present if part.shape is not None]
    if len({shape[:axis % len(shape)] + shape[axis % len(shape) + 1:] for shape in shapes}) != 1:
        return None
    joined = list(shapes[0])
    joined[axis] = sum(shape[axis] for shape in shapes)
    sizes = [math.prod(shape) for shape in shapes]
    return TensorStats(
        dtype=present[0].dtype,
        shape=tuple(joined),
        max=_combine([part.max for part in present], max),
        min=_combine([part.min for part in present], min),
        mean=_combine([part.mean for part in present],
                      lambda means: sum(m * n for m, n in zip(means, sizes)) / max(sum(sizes), 1)),
        norm=_combine([part.norm for part in present], lambda norms: math.sqrt(sum(n * n for n in norms))),
    )


def _combine(values: list[float | None], how: Callable[[list[float]], float]) -> float | None:
    known = [value for value in values if value is not None]
    return float(how(known)) if len(known) == len(values) else None


def compare(train: ModuleView, rollout: ModuleView) -> Evidence:
    return Evidence(
        conflict=form_conflict(train, rollout),
        output_shape=shape_relation(_shape(train.output), _shape(rollout.output)),
        input_shape=shape_relation(_shape(train.input), _shape(rollout.input)),
        weight_shape=shape_relation(_shape(train.weight), _shape(rollout.weight)),
        output_stats=stats_relation(train.output, rollout.output),
        input_stats=stats_relation(train.input, rollout.input),
        same_kind=None if train.kind is None or rollout.kind is None else train.kind == rollout.kind,
        shapes=(_shape(train.output), _shape(rollout.output)),
    )


def form_conflict(train: ModuleView, rollout: ModuleView) -> str | None:
    """Why the two cannot compute the same thing: placeholder vs real module, ids vs hidden states, ..."""
    if (train.kind == "identity") != (rollout.kind == "identity"):
        return "identity placeholder on one side only"
    for what, left, right in (("input", train.input, rollout.input), ("output", train.output, rollout.output)):
        left_form, right_form = tensor_form(left), tensor_form(right)
        if left_form != right_form:
            return f"{what} is {left_form} on the train side but {right_form} on the rollout side"
    return None


def tensor_form(stats: TensorStats | None) -> str:
    if stats is None:
        return "not a tensor"
    dtype = (stats.dtype or "").lower()
    if "bool" in dtype:
        return "a boolean tensor"
    if "int" in dtype:
        return "an integer tensor"
    return "a float tensor"


def _shape(stats: TensorStats | None) -> tuple[int, ...] | None:
    return stats.shape if stats is not None else None


def shape_relation(left: tuple[int, ...] | None, right: tuple[int, ...] | None) -> ShapeRelation:
    if left is None or right is None:
        return ShapeRelation.UNKNOWN
    if left == right:
        return ShapeRelation.SAME
    left_dims = [dim for dim in left if dim != 1]
    right_dims = [dim for dim in right if dim != 1]
    if left_dims == right_dims:
        return ShapeRelation.SAME
    if sorted(left_dims) == sorted(right_dims):
        return ShapeRelation.PERMUTED
    if math.prod(left_dims) != math.prod(right_dims):
        return ShapeRelation.DIFFERENT
    if left_dims and right_dims and left_dims[-1] == right_dims[-1]:
        return ShapeRelation.FLATTENED
    return ShapeRelation.NUMEL


def stats_relation(left: TensorStats | None, right: TensorStats | None) -> StatsRelation:
    """EQUAL when Max, Min, Mean and Norm agree within what the dtype's rounding allows."""
    if left is None or right is None or not left.observable or not right.observable:
        return StatsRelation.UNKNOWN
    tolerance = _tolerance(left.dtype, right.dtype)
    scale = _rms(left)
    compared = 0
    for a, b, floor in ((left.max, right.max, 0.0), (left.min, right.min, 0.0),
                        (left.norm, right.norm, 0.0), (left.mean, right.mean, scale)):
        if a is None or b is None:
            continue
        if not _close(a, b, tolerance, floor * tolerance):
            return StatsRelation.DIFFERENT
        compared += 1
    return StatsRelation.EQUAL if compared >= 2 else StatsRelation.UNKNOWN


def _tolerance(*dtypes: str | None) -> float:
    half = any(dtype and any(name in dtype for name in _HALF_PRECISION) for dtype in dtypes)
    return _TOLERANCE_HALF if half else _TOLERANCE_FULL


def _rms(stats: TensorStats) -> float:
    numel = stats.numel
    if stats.norm is None or not numel or not math.isfinite(stats.norm):
        return 0.0
    return stats.norm / math.sqrt(numel)


def _close(a: float, b: float, relative: float, absolute: float) -> bool:
    if a == b or (math.isnan(a) and math.isnan(b)):
        return True
    if not (math.isfinite(a) and math.isfinite(b)):
        return False
    return abs(a - b) <= relative * max(abs(a), abs(b)) + absolute
