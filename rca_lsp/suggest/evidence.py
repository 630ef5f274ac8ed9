"""What the dumps say about a candidate pair: tensor forms, shapes and statistics on both sides.

Relations are plain strings (not Enums) because they key the confidence cache on a hot path."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Literal, Sequence

from rca_lsp.dumps.dump import ModuleEntry
from rca_lsp.model.stats import TensorStats
from rca_lsp.suggest.rules import NamingRules

ShapeRelation = Literal["same", "permuted", "flattened", "numel", "different", "unknown"]
StatsRelation = Literal["equal", "different", "unknown"]
SHAPE_WORDS: dict[str, str] = {  # for reasons, when the shapes are not different
    "same": "same shape",
    "permuted": "same dimensions in another order",
    "flattened": "same feature size and element count",
    "numel": "same element count",
}

_HALF_PRECISION = ("bfloat16", "float16", "half")
_TOLERANCE_FULL = 1e-3
_TOLERANCE_HALF = 3e-2


@dataclass(slots=True)  # not frozen: built per module on the hot path, and frozen __init__ is slow
class ModuleView:
    """One side of a candidate pair: a module, or a group of split modules seen as their concatenation."""

    input: TensorStats | None
    input_forms: frozenset[str]  # float / integer / boolean: every input tensor seen (first input, tensor kwargs)
    output: TensorStats | None
    weight: TensorStats | None  # None when absent or unobservable (e.g. repacked to shape [0])
    kind: str | None  # from NamingRules.class_kind; "identity" for placeholders, "wrapper" for wrappers


@dataclass(slots=True)  # not frozen: built per module on the hot path, and frozen __init__ is slow
class Evidence:
    conflict: str | None  # why the two cannot be the same module (different tensor forms), else None
    output_shape: ShapeRelation
    input_shape: ShapeRelation
    weight_shape: ShapeRelation
    output_stats: StatsRelation
    input_stats: StatsRelation
    same_kind: bool | None  # None when a side's kind is unknown
    output_shapes: tuple[tuple[int, ...] | None, tuple[int, ...] | None]  # for the reason text
    scales_alike: bool | None  # output elements per input element equal on both sides; None when not known


def module_view(entry: ModuleEntry, rules: NamingRules) -> ModuleView:
    weight = entry.parameters.get("weight")
    if weight is not None and not _observable(weight):
        weight = None
    dtypes = tuple([stats.dtype for stats in entry.kwargs.values()]) if entry.kwargs else ()
    if entry.input is not None:
        dtypes += (entry.input.dtype,)
    return ModuleView(entry.input, _input_forms(dtypes), entry.output, weight, rules.class_kind(entry.class_name))


@lru_cache(maxsize=1024)
def _input_forms(dtypes: tuple[str | None, ...]) -> frozenset[str]:
    return frozenset(_dtype_form(dtype) for dtype in dtypes)


def group_view(entries: Sequence[ModuleEntry], rules: NamingRules) -> ModuleView:
    """Split modules as their fused equivalent: outputs concatenated on the last dim, weights on the first."""
    views = [module_view(entry, rules) for entry in entries]
    kinds = {view.kind for view in views}
    return ModuleView(
        input=views[0].input,
        input_forms=views[0].input_forms,
        output=concatenate([view.output for view in views], axis=-1),
        weight=concatenate([view.weight for view in views], axis=0),
        kind=kinds.pop() if len(kinds) == 1 else None,
    )


def concatenate(parts: Sequence[TensorStats | None], axis: int) -> TensorStats | None:
    """Statistics of the concatenation of `parts` (exact for Max, Min, Norm and the numel-weighted Mean)."""
    present = [part for part in parts if part is not None and part.sizes]
    if not present or len(present) != len(parts):
        return None
    shapes = [part.sizes for part in present if part.sizes is not None]
    if len({shape[: axis % len(shape)] + shape[axis % len(shape) + 1 :] for shape in shapes}) != 1:
        return None
    joined = list(shapes[0])
    joined[axis] = sum(shape[axis] for shape in shapes)
    sizes = [math.prod(shape) for shape in shapes]
    return TensorStats(
        dtype=present[0].dtype,
        shape=tuple(joined),
        max=_combine([part.max for part in present], max),
        min=_combine([part.min for part in present], min),
        mean=_combine(
            [part.mean for part in present], lambda means: sum(m * n for m, n in zip(means, sizes)) / max(sum(sizes), 1)
        ),
        norm=_combine([part.norm for part in present], lambda norms: math.sqrt(sum(n * n for n in norms))),
    )


def _combine(values: list[float | None], how: Callable[[list[float]], float]) -> float | None:
    known = [value for value in values if value is not None]
    return float(how(known)) if len(known) == len(values) else None


def compare(train: ModuleView, rollout: ModuleView) -> Evidence:
    train_output, rollout_output = train.output, rollout.output
    # sizes: a malformed dump's shape (text, floats or lists in it) is not compared
    output_shapes = (train_output.sizes if train_output else None, rollout_output.sizes if rollout_output else None)
    return Evidence(
        conflict=form_conflict(train, rollout),
        output_shape=shape_relation(*output_shapes),
        input_shape=shape_relation(
            train.input.sizes if train.input else None, rollout.input.sizes if rollout.input else None
        ),
        weight_shape=shape_relation(
            train.weight.sizes if train.weight else None, rollout.weight.sizes if rollout.weight else None
        ),
        output_stats=stats_relation(train_output, rollout_output),
        input_stats=stats_relation(train.input, rollout.input),
        same_kind=None if train.kind is None or rollout.kind is None else train.kind == rollout.kind,
        output_shapes=output_shapes,
        scales_alike=scales_alike(train, rollout),
    )


def scales_alike(train: ModuleView, rollout: ModuleView) -> bool | None:
    """Whether both sides turn the same number of input elements into the same number of output elements (the
    output/input element ratio). The same module does, whatever the batch, padding or layout its inputs have; two
    modules at the same path that do other things do not (HF's `act_fn`, SiLU of the gate: n -> n; vLLM's
    `SiluAndMul` there, SiLU(gate) * up: 2n -> n). None when a side's sizes are not known."""
    sizes = [view.input and view.input.numel for view in (train, rollout)]
    sizes += [view.output and view.output.numel for view in (train, rollout)]
    train_in, rollout_in, train_out, rollout_out = sizes
    if not (train_in and rollout_in and train_out and rollout_out):
        return None
    return train_out * rollout_in == rollout_out * train_in


def form_conflict(train: ModuleView, rollout: ModuleView) -> str | None:
    """Why the two cannot compute the same thing: placeholder vs real module, ids vs hidden states, ...

    Inputs conflict when only one side takes tensors, or only one side takes a float tensor (hidden states)."""
    if train.kind == "identity" or rollout.kind == "identity":
        return "an identity placeholder (it only passes its input through)"
    if train.kind == "wrapper" or rollout.kind == "wrapper":
        return "a wrapper (FSDP, activation checkpointing, compile): the module it wraps is its counterpart"
    train_forms, rollout_forms = train.input_forms, rollout.input_forms
    if train_forms != rollout_forms and (
        bool(train_forms) != bool(rollout_forms) or (FLOAT in train_forms) != (FLOAT in rollout_forms)
    ):
        return f"inputs are {_listed(train_forms)} on the train side but {_listed(rollout_forms)} on the rollout side"
    train_output, rollout_output = train.output, rollout.output
    if train_output is not None and rollout_output is not None and train_output.dtype == rollout_output.dtype:
        return None
    train_form, rollout_form = _output_form(train_output), _output_form(rollout_output)
    if train_form != rollout_form:
        return f"output is {train_form} on the train side but {rollout_form} on the rollout side"
    return None


FLOAT = "float"


@lru_cache(maxsize=256)
def _dtype_form(dtype: str | None) -> str:
    """float, integer or boolean: what kind of values a tensor of this dtype holds."""
    if dtype and "bool" in dtype:
        return "boolean"
    if dtype and "int" in dtype:
        return "integer"
    return FLOAT


def _output_form(stats: TensorStats | None) -> str:
    return "not a tensor" if stats is None else f"a {_dtype_form(stats.dtype)} tensor"


def _listed(forms: frozenset[str]) -> str:
    return " and ".join(f"{form}" for form in sorted(forms)) + " tensors" if forms else "no tensors"


def shape_relation(left: tuple[int, ...] | None, right: tuple[int, ...] | None) -> ShapeRelation:
    if left is None or right is None:
        return "unknown"
    if left == right:
        return "same"
    left_dims = [dim for dim in left if dim != 1]
    right_dims = [dim for dim in right if dim != 1]
    if left_dims == right_dims:
        return "same"
    if sorted(left_dims) == sorted(right_dims):
        return "permuted"
    if math.prod(left_dims) != math.prod(right_dims):
        return "different"
    if left_dims and right_dims and left_dims[-1] == right_dims[-1]:
        return "flattened"
    return "numel"


def stats_relation(left: TensorStats | None, right: TensorStats | None) -> StatsRelation:
    """Equal when Max, Min, Mean and Norm agree within what the dtype's rounding allows (2 or more known)."""
    if left is None or right is None or not (_observable(left) and _observable(right)):
        return "unknown"
    if left.max == right.max and left.min == right.min and left.mean == right.mean and left.norm == right.norm:
        known = (left.max is not None) + (left.min is not None) + (left.mean is not None) + (left.norm is not None)
        return "equal" if known >= 2 else "unknown"
    tolerance = _tolerance(left.dtype, right.dtype)
    compared = 0
    for a, b, floor in (
        (left.max, right.max, 0.0),
        (left.min, right.min, 0.0),
        (left.norm, right.norm, 0.0),
        (left.mean, right.mean, _rms(left) * tolerance),
    ):
        if a is None or b is None:
            continue
        if not _close(a, b, tolerance, floor):
            return "different"
        compared += 1
    return "equal" if compared >= 2 else "unknown"


def _observable(stats: TensorStats) -> bool:
    """Seen and summarised (repacked weights have shape [0] and null statistics)."""
    shape = stats.shape
    return (shape is None or 0 not in shape) and (stats.max is not None or stats.norm is not None)


@lru_cache(maxsize=256)
def _tolerance(left: str | None, right: str | None) -> float:
    half = any(dtype and any(name in dtype for name in _HALF_PRECISION) for dtype in (left, right))
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
