"""Element-wise comparison of two tensors of one shape (tensor-mode dumps): cosine similarity, max absolute and max
relative error, relative L2 error, bitwise equality and, for integer tensors, how many elements differ; and the
evidence one mapped slot carries from tensors or md5 hashes, which the verdicts and reports read. torch is imported
by the callers that hold tensors (compare/tensorpass), never at import time."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

ALIGNED = "aligned"
MISMATCH = "mismatch"


class Elementwise(NamedTuple):
    cosine: float | None  # None for integer tensors and all-zero ones
    max_abs: float
    max_rel: float  # max |t - r| / |r| over elements (|r| floored at the smallest normal float32)
    rel_l2: float  # ||t - r|| / ||r||
    bitwise_equal: bool
    differing: int | None  # integer and boolean tensors: elements that differ; None for floating ones
    numel: int

    def describe(self) -> str:
        if self.bitwise_equal:
            return f"bitwise equal ({self.numel} elements)"
        if self.differing is not None:
            return f"{self.differing} of {self.numel} elements differ"
        cosine = f"cosine {self.cosine:.6g}, " if self.cosine is not None else ""
        return f"{cosine}max abs {self.max_abs:.3g}, max rel {self.max_rel:.3g}, relative L2 {self.rel_l2:.3g}"


class SlotEvidence(NamedTuple):
    """What the tensors (or their hashes) of one compared target say, beside its statistics.

    `source`: "tensors" | "md5" | "statistics" (the best evidence both sides have); `verdict`: ALIGNED, MISMATCH or
    "" (the tensors could not be compared: `note` says why); `layout`: how the two were made comparable;
    `permutation`: the reordering that makes them equal, when one does ("transposed", "tokens shifted by 2", ...);
    `weak`: a hash that may be of a later value (a slot the model changes in place after msprobe's hook)."""

    target: str
    train_key: str
    rollout_key: str
    source: str
    verdict: str
    metrics: Elementwise | None = None
    layout: str = ""
    permutation: str = ""
    note: str = ""
    weak: bool = False

    def describe(self) -> str:
        if self.source == "statistics":
            return f"statistics only ({self.note})" if self.note else "statistics only"
        parts = [self.source + ":"]
        if self.metrics is not None:
            parts.append(self.metrics.describe())
        elif self.note:
            parts.append(self.note)
        if self.permutation:
            parts.append(f"- equal once reordered: {self.permutation}")
        if self.layout:
            parts.append(f"[{self.layout}]")
        if self.metrics is not None and self.note:
            parts.append(f"({self.note})")
        return " ".join(parts)


def is_integer(tensor: Any) -> bool:
    return not (tensor.is_floating_point() or tensor.is_complex())


def identical(numel: int) -> Elementwise:
    """The measures of two bitwise-equal tensors."""
    return Elementwise(1.0 if numel else None, 0.0, 0.0, 0.0, True, None, numel)


def elementwise(train: Any, rollout: Any) -> Elementwise:
    """The element-wise measures of two tensors of one shape (bitwise equality needs the same dtype and the same
    bytes; differences are taken in float32, or float64 for float64 tensors, and norms accumulated in float64)."""
    import torch

    numel = rollout.numel()
    integer = is_integer(train) and is_integer(rollout)
    if train.dtype == rollout.dtype and bool(torch.equal(train, rollout)):
        found = identical(numel)
        return found._replace(cosine=None, differing=0) if integer else found
    if integer:
        differing = int((train.to(torch.int64) != rollout.to(torch.int64)).sum())
    else:
        differing = None
    work = torch.float64 if torch.float64 in (train.dtype, rollout.dtype) else torch.float32
    t, r = (x.reshape(-1).to(work) for x in (train, rollout))
    diff = (t - r).abs_()
    max_abs = float(diff.max()) if numel else 0.0
    max_rel = float((diff / r.abs().clamp_min_(torch.finfo(torch.float32).tiny)).max()) if numel else 0.0
    r_norm, t_norm, d_norm = (float(torch.linalg.vector_norm(x, dtype=torch.float64)) for x in (r, t, diff))
    rel_l2 = d_norm / r_norm if r_norm else (0.0 if d_norm == 0 else math.inf)
    cosine = None
    if differing is None and r_norm and t_norm and math.isfinite(r_norm) and math.isfinite(t_norm):
        cosine = float(torch.dot(t.to(torch.float64), r.to(torch.float64))) / (t_norm * r_norm)
    return Elementwise(cosine, max_abs, max_rel, rel_l2, False, differing, numel)


def verdict_of(metrics: Elementwise, tolerance: float) -> str:
    """Aligned when bitwise equal or within the slot's tolerance (relative L2 error); integers: every element."""
    if metrics.bitwise_equal:
        return ALIGNED
    if metrics.differing is not None:
        return ALIGNED if metrics.differing == 0 else MISMATCH
    return ALIGNED if metrics.rel_l2 <= tolerance else MISMATCH
