"""Which reordering makes two tensors of one shape equal, when no layout did: a weight transposed, rows or columns in
another order (blocks swapped, heads reordered), tokens shifted or reversed (by how much: a padding-side
difference). Each candidate is checked on the whole tensor within the slot's tolerance, so a name is given only
for a reordering that really makes them equal."""

from __future__ import annotations

from typing import Any, Sequence

MAX_MATCHED = 4096  # slices matched one against every other (a general permutation): beyond it only cheap checks
MAX_LISTED = 16


def close(train: Any, rollout: Any, tolerance: float) -> bool:
    """Equal within `tolerance` relative L2 error (integers: exactly)."""
    import torch

    if train.shape != rollout.shape:
        return False
    if train.dtype == rollout.dtype and torch.equal(train, rollout):
        return True
    if not train.is_floating_point():
        return False
    norm = float(torch.linalg.vector_norm(rollout, dtype=torch.float64))
    difference = float(torch.linalg.vector_norm(train.to(rollout.dtype) - rollout, dtype=torch.float64))
    return difference <= tolerance * max(norm, 1e-30)


def find_reordering(train: Any, rollout: Any, tolerance: float, kind: str, unit: str = "") -> str:
    """The reordering of `train` that gives `rollout`, described; "" when none of the known kinds does.

    `kind`: "parameter" (a weight or bias), "activation" (canonical [tokens, features]) or "tokens" (integer ids,
    [batch, sequence] or [sequence]); `unit`: what a block of rows is when known ("head")."""
    if train.shape != rollout.shape or train.numel() == 0:
        return ""
    if (
        kind == "parameter"
        and train.dim() == 2
        and train.shape[0] == train.shape[1]
        and close(train.T, rollout, tolerance)
    ):
        return "transposed"
    if kind in ("activation", "tokens"):
        dim = train.dim() - 1 if kind == "tokens" else 0
        shifted = _token_shift(train, rollout, tolerance, dim)
        if shifted:
            return shifted
    if train.dim() >= 1:
        rows = _permutation(train, rollout, tolerance)
        if rows is not None:
            what = "tokens" if kind != "parameter" else "rows"
            return _blocks(rows, what, unit)
    if train.dim() == 2 and kind == "parameter":
        columns = _permutation(train.T, rollout.T, tolerance)
        if columns is not None:
            return _blocks(columns, "columns", "")
    return ""


def _token_shift(train: Any, rollout: Any, tolerance: float, dim: int) -> str:
    """Tokens shifted (rolled) or reversed along `dim`."""
    import torch

    n = train.shape[dim]
    if n < 2:
        return ""
    if close(torch.flip(train, (dim,)), rollout, tolerance):
        return f"tokens reversed ({n} positions)"
    first = rollout.select(dim, 0)
    for j in range(n):  # where the rollout's first token sits in the train's: the candidate shifts
        if close(train.select(dim, j), first, tolerance) and j:
            shift = (n - j) % n
            if close(torch.roll(train, shift, dim), rollout, tolerance):
                direction = "later" if shift <= n // 2 else "earlier"
                amount = shift if shift <= n // 2 else n - shift
                return (
                    f"tokens shifted by {amount} ({amount} positions {direction} in the rollout: "
                    "a left- vs right-padding difference?)"
                )
    return ""


def _permutation(train: Any, rollout: Any, tolerance: float) -> list[int] | None:
    """p with train[p] == rollout along dim 0 (not the identity), when one exists."""
    import torch

    n = train.shape[0]
    if n < 2 or n > MAX_MATCHED:
        return None
    t = train.reshape(n, -1).to(torch.float64)
    r = rollout.reshape(n, -1).to(torch.float64)
    # squared distances of every rollout slice to every train slice
    distances = (r * r).sum(1)[:, None] + (t * t).sum(1)[None, :] - 2.0 * (r @ t.T)
    order = distances.argmin(1)
    if len(set(order.tolist())) != n:
        return None
    permutation = order.tolist()
    if permutation == list(range(n)) or not close(train[order], rollout, tolerance):
        return None
    return permutation


def _blocks(permutation: Sequence[int], what: str, unit: str) -> str:
    """A permutation described by its coarsest block structure: which blocks moved where."""
    n = len(permutation)
    for size in sorted((d for d in range(1, n) if n % d == 0), reverse=True):
        starts = [permutation[b * size] for b in range(n // size)]
        if all(s % size == 0 for s in starts) and all(permutation[i] == starts[i // size] + i % size for i in range(n)):
            order = [s // size for s in starts]
            break
    else:  # size 1 always matches: unreachable
        return ""
    noun = unit or "block"
    if len(order) == 2:
        return f"{what} halves swapped" if size * 2 == n and not unit else f"the two {noun}s of {size} {what} swapped"
    moved = [i for i, o in enumerate(order) if o != i]
    if size == 1:
        return f"{what} permuted ({len(moved)} of {n} moved)"
    listed = ", ".join(map(str, order[:MAX_LISTED])) + (" ..." if len(order) > MAX_LISTED else "")
    if len(moved) == 2:
        a, b = moved
        return f"{noun}s {a} and {b} swapped ({noun}s of {size} {what}; the rollout's order {listed})"
    return f"{noun}s reordered ({noun}s of {size} {what}; the rollout holds the train's {noun}s in order {listed})"
