"""What the rank merge knows of one slot of a module: the parallel kind of the module's class, the dim a shard of it is
split along, entries renamed (stages, experts), an entry's slots by name, and copies that disagree."""

from __future__ import annotations

from functools import lru_cache
from typing import Iterable

import msgspec

from rca_lsp.dumps.dump import Disagreement, ModuleEntry
from rca_lsp.dumps.sources import DumpSource
from rca_lsp.model.stats import TensorStats, copy_difference, extremes_differ
from rca_lsp.model.tolerance import Tolerances

_COLUMN_CLASSES = ("ColumnParallel", "QKVParallel", "VocabParallel")  # MergedColumnParallelLinear included


_ROW_CLASSES = ("RowParallel",)


MERGE_TOLERANCES = Tolerances()


def rename_entry(entry: ModuleEntry, key: str, path: str) -> ModuleEntry:
    return msgspec.structs.replace(entry, key=key, path=path)


def renamed_key(key: str, path: str, new_path: str) -> str:
    return key.replace("." + path + ".", "." + new_path + ".", 1)


@lru_cache(maxsize=1 << 12)
def parallel_kind(class_name: str) -> str | None:
    if any(token in class_name for token in _COLUMN_CLASSES):
        return "column"
    if any(token in class_name for token in _ROW_CLASSES):
        return "row"
    return None


def shard_dim(slot: str, kind: str | None, stats: TensorStats) -> int | None:
    """The dim a slot is sharded along, as its module class says; None when the class says nothing."""
    ndim = len(stats.shape) if stats.shape is not None else 0
    if slot.startswith("parameters."):
        if kind == "column":
            return 0
        if kind == "row":
            return 1 if slot == "parameters.weight" and ndim == 2 else None  # a row-parallel bias is replicated
        return None
    if ndim >= 4:
        return ndim - 2  # attention internals [s, b, heads, head_dim]: sharded by heads
    if (kind == "column" and slot.startswith("output")) or (kind == "row" and slot.startswith("input")):
        return max(ndim - 1, 0)
    return None


def disagreement_of(
    slot: str, copies: list[TensorStats | None], ranks: list[int], source: DumpSource
) -> Disagreement | None:
    """The ranks whose copy of a slot differs from the reference's beyond noise, or lacks it; a copy without
    statistics (null) is unknown, no difference, and the reference is the first copy with statistics."""
    if copies[0] is None:
        return None
    found = next(((rank, copy) for rank, copy in zip(ranks, copies) if copy is not None and copy.observable), None)
    if found is None:
        return None
    reference, first = found
    tol = MERGE_TOLERANCES.for_dtypes(first.dtype)
    parameter = slot.startswith("parameters.")
    differing: list[int] = []
    worst = 0.0
    for rank, copy in zip(ranks, copies):
        if rank == reference or (copy is not None and not copy.observable):
            continue
        error = copy_difference(first, copy) if copy is not None else float("inf")
        # a parameter's copies hold the same values: extremes that differ at all differ (model.stats.exact_extremes)
        if error is not None and (error > tol or (parameter and copy is not None and extremes_differ(first, copy))):
            differing.append(source.ranks[rank])
            worst = max(worst, error)
    return Disagreement(slot, "ranks", source.ranks[reference], tuple(differing), worst) if differing else None


# Slots of an entry by name: what the analysis compares, as output_3 names them.
def entry_slots(entry: ModuleEntry) -> Iterable[tuple[str, TensorStats | None]]:
    yield "input", entry.input
    yield "output", entry.output
    for name, stats in entry.kwargs.items():
        yield f"input_kwargs.{name}", stats
    for name, stats in entry.parameters.items():
        yield f"parameters.{name}", stats
    if entry.stream_input is not None:
        yield "stream_input", entry.stream_input
    if entry.stream_output is not None:
        yield "stream_output", entry.stream_output


def slot_stats(entry: ModuleEntry, slot: str) -> TensorStats | None:
    if slot in ("input", "output", "stream_input", "stream_output"):
        return getattr(entry, slot)  # type: ignore[no-any-return]
    group, _, name = slot.partition(".")
    return (entry.kwargs if group == "input_kwargs" else entry.parameters).get(name)


MAX_LISTED_KEYS = 5
