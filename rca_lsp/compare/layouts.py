"""Two sides' tensors of one mapped slot made comparable before an element-wise comparison, never guessed silently:
every step taken is said in the layout description.

- calls of one module (decode steps, micro-batches) joined along the tokens;
- activations read as [tokens, features]: sequence-first `[s, b, h]` (Megatron) against batch-first `[b, s, h]`
  (HF, vLLM's `[tokens, h]` alike);
- tensor-parallel shards concatenated along the dimension the rank merge gave the merged statistics;
- fused against split modules: the fused tensor cut into the parts' pieces along the fused dimension (rows of a
  weight, features of an activation) by each known arrangement - plain concatenation (vLLM `qkv_proj` /
  `gate_up_proj`, Megatron `linear_fc1 = cat(gate, up)`), per query group `[q_g | k_g | v_g]` (Megatron
  `linear_qkv`), per tensor-parallel rank (each rank's shard holding a slice of every part) - and the arrangement
  under which the most pieces equal their parts is the one used."""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, NamedTuple, Sequence

from rca_lsp.compare.permutation import close


def shape_text(tensor: Any) -> str:
    return "[" + ", ".join(map(str, tensor.shape)) + "]"


def tokens_first(tensor: Any, kind: str, transpose: bool) -> Any:
    """An activation as [tokens, features] (`transpose`: its first two dims swapped first, sequence-first read as
    batch-first); integer ids as [batch, sequence]; parameters as they are."""
    if kind == "parameter":
        return tensor
    if transpose and tensor.dim() >= 3:
        tensor = tensor.transpose(0, 1)
    if kind == "tokens":
        return tensor if tensor.dim() <= 2 else tensor.reshape(-1, tensor.shape[-1])
    if tensor.dim() <= 1:
        return tensor.reshape(-1, 1)
    return tensor.reshape(-1, tensor.shape[-1])


def sequence_first(train: Any, rollout: Any) -> bool:
    """Whether the train tensor is the rollout's with its first two dims swapped ([s, b, h] against [b, s, h])."""
    ts, rs = tuple(train.shape), tuple(rollout.shape)
    return len(ts) >= 3 and len(ts) == len(rs) and ts[0] != ts[1] and ts[:2] == rs[1::-1] and ts[2:] == rs[2:]


def joined_calls(calls: Sequence[Any], kind: str) -> Any:
    """A module's calls as one tensor: activations along the tokens, ids along the sequence, parameters once."""
    import torch

    if len(calls) == 1 or kind == "parameter":
        return calls[0]
    return torch.cat(list(calls), dim=-1 if kind == "tokens" else 0)


class Arranged(NamedTuple):
    """The fused side cut into pieces matching the split side's parts, by one arrangement."""

    name: str
    pieces: list[Any]


def fused_dim(fused: Any, parts: Sequence[Any], kind: str) -> int | None:
    """The dim along which the parts make up the fused tensor: rows of a weight, else the last (features)."""
    for dim in (0, fused.dim() - 1) if kind == "parameter" else (fused.dim() - 1,):
        if dim < 0 or any(p.dim() != fused.dim() for p in parts):
            continue
        others_equal = all(
            p.shape[:dim] == fused.shape[:dim] and p.shape[dim + 1 :] == fused.shape[dim + 1 :] for p in parts
        )
        if others_equal and sum(p.shape[dim] for p in parts) == fused.shape[dim]:
            return dim
    return None


_HEAD_SIZES = (128, 64, 256, 96, 80, 112, 192, 160, 32, 16, 8)
Option = tuple[str, Callable[[], list[Any]]]  # an arrangement's name, and what cuts the fused tensor by it


def arrangements(fused: Any, sizes: Sequence[int], dim: int, ranks: int) -> list[Option]:
    """Every known way the fused tensor may hold the parts (sizes along `dim`), most common first; each cut only
    when tried."""
    found: list[Option] = [("concatenated", lambda: list(fused.split(list(sizes), dim)))]
    if len(sizes) == 3 and sizes[1] == sizes[2]:  # q, k, v: Megatron interleaves them per query group
        common = math.gcd(sizes[0], sizes[1])
        # the usual head sizes first: each candidate cut copies the whole tensor
        candidates = sorted(
            (g for g in range(2, common + 1) if common % g == 0),
            key=lambda g: (_HEAD_SIZES.index(sizes[1] // g) if sizes[1] // g in _HEAD_SIZES else len(_HEAD_SIZES), g),
        )
        for groups in candidates:
            found.append(
                (
                    f"per query group ({groups} groups: [q_g | k_g | v_g])",
                    functools.partial(_grouped, fused, sizes, dim, groups),
                )
            )
    if ranks > 1 and all(size % ranks == 0 for size in sizes):
        found.append(
            (
                f"per tensor-parallel rank ({ranks} shards of every part)",
                functools.partial(_grouped, fused, sizes, dim, ranks),
            )
        )
    return found


def _grouped(fused: Any, sizes: Sequence[int], dim: int, groups: int) -> list[Any]:
    """Parts interleaved in `groups` equal groups, each [part 0's slice | part 1's | ...]."""
    import torch

    slices = [size // groups for size in sizes]
    chunks = fused.chunk(groups, dim)
    per_part: list[list[Any]] = [[] for _ in sizes]
    for chunk in chunks:
        for index, piece in enumerate(chunk.split(slices, dim)):
            per_part[index].append(piece)
    return [torch.cat(pieces, dim) for pieces in per_part]


def best_arrangement(
    options: list[Option], parts: Sequence[Any], tolerance: float, prefer: Callable[[str], bool]
) -> tuple[Arranged, list[bool]]:
    """The arrangement under which the most pieces equal their parts (ties: the preferred kind, then the first);
    tried preferred first, and the first under which every piece is equal ends the search."""
    best: tuple[tuple[int, bool, int], Arranged, list[bool]] | None = None
    for order, (name, cut) in sorted(enumerate(options), key=lambda o: (not prefer(o[1][0]), o[0])):
        pieces = cut()
        equal = [close(piece, part, tolerance) for piece, part in zip(pieces, parts)]
        if all(equal):
            return Arranged(name, pieces), equal
        score = (sum(equal), prefer(name), -order)
        if best is None or score > best[0]:
            best = (score, Arranged(name, pieces), equal)
    assert best is not None  # options always hold the plain concatenation
    return best[1], best[2]
