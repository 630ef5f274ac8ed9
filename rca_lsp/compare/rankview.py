"""One key's entry as each rank dumped it, read on demand from the rank files (the merged dump keeps only the
merge): what the hover and the report show when a sharded slot diverges, so the rank carrying it can be seen.

A record's rows and rank-by-rank verdicts are of its whole group: each rank's copies of every key of the group (a
decoding rollout's calls, one per step file when its steps were joined), joined and combined by the code that joins
and combines the logical dump's (calls, module), never by a second join here."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, NamedTuple, Sequence

import msgspec

from rca_lsp.compare.calls import fold_calls
from rca_lsp.compare.module import compare_module
from rca_lsp.compare.residual import branch_facts
from rca_lsp.compare.statistics import target_verdict
from rca_lsp.dumps.dump import Dump, ModuleEntry, ParallelInfo, raw_entry
from rca_lsp.dumps.rankfile import read_raw_entries, read_raw_entry
from rca_lsp.dumps.ranks.slots import slot_stats
from rca_lsp.model.tolerance import Tolerances


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
    peers, original = holders(info, key)
    found = []
    for peer in peers:
        entry = _read_entry(Path(info.files[peer]), original)
        if entry is not None:
            found.append(RankCopy(info.ranks[peer], info.files[peer], entry))
    dump.rank_entry_cache[key] = found
    return found


def read_rank_copies(dump: Dump, keys: Iterable[str]) -> None:
    """`rank_copies` of many keys at once, each rank file read in one pass (its wanted keys in the order given,
    dump order for one pass): what a chart of every record needs. The copies land in the dump's cache, where
    rank_copies and rank_parts find them."""
    info = dump.parallel
    if info is None:
        return
    todo = [key for key in dict.fromkeys(keys) if key not in dump.rank_entry_cache]
    wanted: dict[int, list[str]] = {}
    for key in todo:
        peers, original = holders(info, key)
        for peer in peers:
            wanted.setdefault(peer, []).append(original)
    read = {peer: read_raw_entries(Path(info.files[peer]), names) for peer, names in wanted.items()}
    for key in todo:
        peers, original = holders(info, key)
        found = []
        for peer in peers:
            value = read[peer].get(original)
            entry = raw_entry(original, value) if value is not None else None
            if entry is not None:
                found.append(RankCopy(info.ranks[peer], info.files[peer], entry))
        dump.rank_entry_cache[key] = found


def holders(info: ParallelInfo, key: str) -> tuple[Sequence[int], str]:
    """The file indexes whose copies of a logical key were merged, and the key's name in those files."""
    index, original = info.origins.get(key, (0, key))
    return info.peers.get(index, range(len(info.files))), original


def held_by(dump: Dump, key: str) -> dict[str, Any] | None:
    """Where a logical key is in the rank files: the ranks whose copies were merged into it and its name there
    (a later pipeline stage's local layer name); None for a dump that was not merged from ranks."""
    if dump.parallel is None:
        return None
    peers, original = holders(dump.parallel, key)
    return {"ranks": [dump.parallel.ranks[i] for i in peers], "key": original}


def _read_entry(path: Path, key: str) -> ModuleEntry | None:
    value = read_raw_entry(path, key)
    return raw_entry(key, value) if value is not None else None


StatRow = tuple[str, int, tuple[float | None, float | None, float | None, float | None]]


def rank_parts(dump: Dump, keys: Sequence[str]) -> dict[int, list[ModuleEntry]]:
    """Each rank's copies of a record's keys on one side (in key order), named as in the logical dump (its key,
    path and call number, not the rank file's local name), so that a rank's copies of one module's calls join as the
    logical dump's calls do (a decoding rollout: one call per step file). Only ranks holding a copy of every key."""
    found: dict[int, list[ModuleEntry]] = {}
    for key in keys:
        logical = dump.entries.get(key)
        for copy in rank_copies(dump, key):
            entry = copy.entry
            if logical is not None:
                entry = msgspec.structs.replace(
                    entry, key=key, path=logical.path, call_index=logical.call_index, position=logical.position
                )
            found.setdefault(copy.rank, []).append(entry)
    return {rank: parts for rank, parts in found.items() if len(parts) == len(keys)}


def _first_module(keys: Sequence[str]) -> list[str]:
    """The keys that are calls of the first key's module (`....forward.<n>` with the same stem)."""
    stem = keys[0].rpartition(".")[0]
    return [key for key in keys if key.rpartition(".")[0] == stem]


def per_rank_rows(dump: Dump, keys: Sequence[str], slots: list[str], tolerances: Tolerances) -> list[StatRow]:
    """(slot, rank, (Max, Min, Mean, Norm)) for each slot on each rank, of a record's first module on one side:
    with several calls (decode steps, micro-batches), each rank's copies of them joined along the sequence as the
    logical dump's are (calls.join_calls), so the rows are the whole group's, not its first call's."""
    rows: list[StatRow] = []
    joined = {}
    for rank, parts in rank_parts(dump, _first_module(keys)).items():
        folded, _ = fold_calls(parts, tolerances)
        joined[rank] = folded[0]
    for slot in slots:
        for rank, entry in joined.items():
            stats = slot_stats(entry, slot)
            if stats is not None:
                rows.append((slot, rank, (stats.max, stats.min, stats.mean, stats.norm)))
    return rows


def merged_slots(dump: Dump, keys: Sequence[str]) -> list[str]:
    """The slots of a record's first module (any of its calls) that were merged from shards or whose copies
    disagree (what per-rank rows are for)."""
    merges = dump.parallel.merges if dump.parallel is not None else {}
    how = "; ".join(merges[key] for key in _first_module(keys) if key in merges)
    return [slot for slot in ("input", "output") if f"{slot} sharded" in how] + sorted(
        {part.split(" ", 1)[0] for part in how.split("; ") if part.startswith("parameters.")}
    )


def rank_by_rank(
    train: Dump, rollout: Dump, train_keys: Sequence[str], rollout_keys: Sequence[str], tolerances: Tolerances
) -> list[str]:
    """When both sides were merged from the same number of ranks: each rank's part of a record against the same
    rank's on the other side, naming the ranks whose targets differ ([] when the layouts differ or nothing differs).
    A rank's part is compared as the record is (module.compare_module on that rank's copies of the record's keys):
    calls joined along the sequence, fused parts combined, a carried residual stream read the same way, so a
    fault only in a rollout's decode steps on one rank is named with its rank."""
    if train.parallel is None or rollout.parallel is None or train.parallel.rank_count != rollout.parallel.rank_count:
        return []
    theirs = rank_parts(rollout, rollout_keys)
    found = []
    for rank, ours in rank_parts(train, train_keys).items():
        other = theirs.get(rank)
        if other is None:
            continue
        comparison = compare_module(ours, other, tolerances, branch_facts(train, rollout, train_keys, rollout_keys))
        differing = dict.fromkeys(
            spec.target
            for spec in comparison.target_specs()
            if target_verdict(spec.target, spec.train, spec.rollout, tolerances)[0] == "mismatch"
        )
        if differing:
            found.append(f"rank {rank}: {', '.join(differing)} differ")
    return found
