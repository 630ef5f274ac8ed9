"""One key's entry as each rank dumped it, read on demand from the rank files (the merged dump keeps only the
merge): what the hover and the report show when a sharded slot diverges, so the rank carrying it can be seen."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple, Sequence

from rca_lsp.core.compare import quick_verdict
from rca_lsp.core.dump import Dump, ModuleEntry, ParallelInfo, raw_entry, slot_label
from rca_lsp.core.rankfile import read_raw_entry
from rca_lsp.core.rankmerge import slot_stats
from rca_lsp.core.tolerance import Tolerances


class RankCopy(NamedTuple):
    rank: int
    file: str
    entry: ModuleEntry


def rank_copies(dump: Dump, key: str) -> list[RankCopy]:
    """The key's entry in every rank file whose copy of it was merged (the tensor-parallel peers of the rank that
    holds it, under its name there), in rank order; [] for a dump that was not merged from ranks or a file that
    cannot be read."""
    info = dump.parallel
    if info is None:
        return []
    cached = dump.rank_entry_cache.get(key)
    if cached is not None:
        return cached  # type: ignore[no-any-return]
    peers, original = _holders(info, key)
    found = []
    for peer in peers:
        entry = _read_entry(Path(info.files[peer]), original)
        if entry is not None:
            found.append(RankCopy(info.ranks[peer], info.files[peer], entry))
    dump.rank_entry_cache[key] = found
    return found


def _holders(info: ParallelInfo, key: str) -> tuple[Sequence[int], str]:
    """The file indexes whose copies of a logical key were merged, and the key's name in those files."""
    index, original = info.origins.get(key, (0, key))
    return info.peers.get(index, range(len(info.files))), original


def held_by(dump: Dump, key: str) -> dict[str, Any] | None:
    """Where a logical key is in the rank files: the ranks whose copies were merged into it and its name there
    (a later pipeline stage's local layer name); None for a dump that was not merged from ranks."""
    if dump.parallel is None:
        return None
    peers, original = _holders(dump.parallel, key)
    return {"ranks": [dump.parallel.ranks[i] for i in peers], "key": original}


def _read_entry(path: Path, key: str) -> ModuleEntry | None:
    value = read_raw_entry(path, key)
    return raw_entry(key, value) if value is not None else None


StatRow = tuple[str, int, tuple[float | None, float | None, float | None, float | None]]


def per_rank_rows(dump: Dump, key: str, slots: list[str]) -> list[StatRow]:
    """(slot, rank, (Max, Min, Mean, Norm)) for each slot on each rank."""
    rows: list[StatRow] = []
    copies = rank_copies(dump, key)
    for slot in slots:
        for copy in copies:
            stats = slot_stats(copy.entry, slot)
            if stats is not None:
                rows.append((slot, copy.rank, (stats.max, stats.min, stats.mean, stats.norm)))
    return rows


def merged_slots(dump: Dump, key: str) -> list[str]:
    """The slots of a key that were merged from shards or whose copies disagree (what per-rank rows are for)."""
    how = dump.parallel.merges.get(key, "") if dump.parallel is not None else ""
    return [slot for slot in ("input", "output") if f"{slot} sharded" in how] + sorted(
        {part.split(" ", 1)[0] for part in how.split("; ") if part.startswith("parameters.")}
    )


def rank_by_rank(train: Dump, rollout: Dump, train_key: str, rollout_key: str, tolerances: Tolerances) -> list[str]:
    """When both sides were merged from the same number of ranks: each rank's copy of each slot against the same
    rank's on the other side, naming the ranks that differ ([] when the layouts differ or nothing differs)."""
    if train.parallel is None or rollout.parallel is None or train.parallel.rank_count != rollout.parallel.rank_count:
        return []
    theirs = {copy.rank: copy.entry for copy in rank_copies(rollout, rollout_key)}
    found = []
    for copy in rank_copies(train, train_key):
        other = theirs.get(copy.rank)
        if other is None:
            continue
        differing = [
            slot
            for slot in ("input", "output", *(f"parameters.{n}" for n in copy.entry.parameters))
            if quick_verdict(slot_stats(copy.entry, slot), slot_stats(other, slot), tolerances)[0] == "mismatch"
        ]
        if differing:
            found.append(f"rank {copy.rank}: {', '.join(slot_label(s) for s in differing)} differ")
    return found
