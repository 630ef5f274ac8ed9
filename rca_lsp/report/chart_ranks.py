"""The divergence chart's rank views (chart_schema.ChartRank, RankCopies, SharedCopies): for a side merged from
several rank files, each merged rank's own copy of every module against the other side.

What a rank's copy is compared with:
- rank by rank, when both sides were merged from ranks laid out alike (a TP=2 trainer against a TP=2 engine): the
  same rank's copy on the other side, every slot (shards against shards), as the report's rank-by-rank verdicts
  are; a view is then a pair of ranks;
- otherwise the other side's merged tensors, on the slots the rank holds whole (replicated, not sharded nor a
  partial result: a shard is not the whole tensor).

A rank's part of a record is compared as the record is (compare_module on its copies of the record's keys: calls
joined, fused parts combined, readings applied). Only what can differ between ranks is read from the rank files:
where the merge saw every merged rank's copy equal (ParallelInfo.varied) and nothing is compared shard by shard,
a rank's copy is the merged entry and every rank holding it shares the record's own comparison (SharedCopies: the
merged series but for the slots left out). Pipeline stages hold their own modules (`held`); a decoding engine's
steps joined as calls are read from each step's rank file.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Callable, NamedTuple, Sequence

import msgspec

from rca_lsp.compare.groupform import TargetSpec
from rca_lsp.compare.module import compare_module
from rca_lsp.compare.rankview import holders, rank_parts, read_rank_copies
from rca_lsp.compare.records import ModuleRecord
from rca_lsp.compare.residual import branch_facts
from rca_lsp.compare.statistics import target_verdict
from rca_lsp.dumps.dump import Dump, ParallelInfo
from rca_lsp.model.stats import TensorStats, relative_error
from rca_lsp.model.tolerance import Tolerances
from rca_lsp.report.chart_schema import ChartRank, Number, RankCopies, SharedCopies

if TYPE_CHECKING:
    from rca_lsp.diagnose.analysis import Analysis

Errors = Callable[[TensorStats | None, TensorStats | None], float | None]
Worst = tuple[float | None, float | None, float | None]  # output, input, parameters: the largest error of each kind
Rounding = Callable[[float | None], Number | None]
_KIND = {"o": 0, "i": 1, "p": 2}  # a target's kind by its first letter: output.0, input_args.0, parameters.*
_LAYOUT_RE = re.compile(r"\b(tp|pp|ep|dp)=(\d+)")


class RankResult(NamedTuple):
    worst: Worst
    differs: bool  # a compared target differs beyond the tolerance


class _Side(NamedTuple):
    name: str  # train | rollout
    dump: Dump
    info: ParallelInfo
    ranks: list[int]  # the merged ranks, in rank order
    view: dict[int, int]  # rank -> its ChartData.ranks index


def _slot(target: str) -> str:
    """A target's slot as the merge names it (output.0 -> output, input_args.0 -> input, parameters.w as is)."""
    if target.startswith("output"):
        return "output"
    if target.startswith("input_args"):
        return "input"
    return target


def _whole(how: str, slot: str) -> bool:
    """Whether a rank holds the slot whole: not a shard, not a partial result of some tokens."""
    if slot in ("input", "output") and ("partial results" in how or "activations left out" in how):
        return False
    return f"{slot} sharded" not in how


def worst_of(specs: Sequence[TargetSpec], errors: Errors) -> Worst:
    found: list[float | None] = [None, None, None]
    for spec in specs:
        error, kind = errors(spec.train, spec.rollout), _KIND.get(spec.target[0], 2)
        known = found[kind]
        if error is not None and (known is None or error > known):
            found[kind] = error
    return found[0], found[1], found[2]


def layout_of(info: ParallelInfo) -> dict[str, int]:
    """tp, pp, ep, dp of a merge's layout ("tp=2, pp=1, ep=1, dp=1 (inferred ...)")."""
    return {name: int(size) for name, size in _LAYOUT_RE.findall(info.layout.split(" (", 1)[0])}


def coordinates(info: ParallelInfo, rank: int) -> str:
    """A rank's place in Megatron's default rank order (tp fastest, then ep, dp, pp), its dimensions of size > 1;
    "" when the layout does not account for the ranks."""
    ranks = sorted(set(info.ranks))
    sizes = layout_of(info)
    tp, ep, dp, pp = (sizes.get(name, 1) for name in ("tp", "ep", "dp", "pp"))
    if tp * ep * dp * pp != len(ranks):
        return ""
    place = ranks.index(rank)
    found = {"tp": place % tp, "pp": place // (tp * ep * dp), "ep": place // tp % ep, "dp": place // (tp * ep) % dp}
    return ", ".join(f"{name}={found[name]}" for name in ("tp", "pp", "ep", "dp") if sizes.get(name, 1) > 1)


def _merged_ranks(info: ParallelInfo) -> list[int]:
    files = sorted(info.peers) if info.peers else range(len(info.files))
    return sorted({info.ranks[file] for file in files})


def _alike(train: ParallelInfo, rollout: ParallelInfo) -> bool:
    """Both sides laid out alike: rank r of one holds what rank r of the other does."""
    return layout_of(train) == layout_of(rollout) and _merged_ranks(train) == _merged_ranks(rollout)


Known = dict[tuple[str, tuple[str, ...], tuple[str, ...]], dict[int, RankResult]]  # by side and record keys
_RESULTS: dict[tuple[object, ...], tuple[tuple[Dump, Dump], Known]] = {}  # of the latest dumps charted


def _known(analysis: Analysis, paired: bool) -> Known:
    """The results read from rank files for these dumps (a chart after an edit of the mapping reads only the new
    records'). The same Dump objects are the same files: a dump reloaded after a change is a new object (the cache
    holds the dumps, so their ids are not reused meanwhile)."""
    dumps = (analysis.train, analysis.rollout)
    identity = (id(dumps[0]), id(dumps[1]), analysis.judge.tolerances.key(), paired)
    found = _RESULTS.get(identity)
    if found is None:
        _RESULTS.clear()
        found = _RESULTS[identity] = (dumps, {})
    return found[1]


class RankViews(NamedTuple):
    ranks: list[ChartRank]
    copies: list[list[RankCopies]]  # per call
    shared: list[list[SharedCopies]]  # per call


def rank_views(
    analysis: Analysis,
    calls: Sequence[Sequence[ModuleRecord]],
    merged: Sequence[Sequence[tuple[Number | None, Number | None, Number | None]]],
    errors: Errors,
    rounded: Rounding,
) -> RankViews:
    """The rank views of the chart's calls (`calls`: each call's records in chart order; `merged`: the chart's
    rounded merged errors per module), see the module doc."""
    sides: list[_Side] = []
    chart_ranks: list[ChartRank] = []
    for name, dump in (("train", analysis.train), ("rollout", analysis.rollout)):
        info = dump.parallel
        if info is None or len(_merged_ranks(info)) < 2:
            continue
        ranks = _merged_ranks(info)
        sides.append(_Side(name, dump, info, ranks, {}))
    paired = len(sides) == 2 and _alike(sides[0].info, sides[1].info)
    if paired:  # one view per pair of ranks: train rank r against rollout rank r
        train, rollout = sides
        sides = [train]
        for rank in train.ranks:
            train.view[rank] = len(chart_ranks)
            chart_ranks.append(ChartRank("both", rank, coordinates(train.info, rank), f"rollout rank {rank}"))
    else:
        for side in sides:
            other = "rollout" if side.name == "train" else "train"
            for rank in side.ranks:
                side.view[rank] = len(chart_ranks)
                chart_ranks.append(ChartRank(side.name, rank, coordinates(side.info, rank), f"{other} merged"))
    if not sides:
        return RankViews([], [[] for _ in calls], [[] for _ in calls])
    known = _known(analysis, paired)
    copies: list[list[RankCopies]] = []
    shared: list[list[SharedCopies]] = []
    for records, series in zip(calls, merged):
        call_copies, call_shared = [], []
        for side in sides:
            built = _side_views(analysis, side, records, series, paired, known, errors, rounded)
            call_copies += built[0]
            call_shared.append(built[1])
        copies.append(call_copies)
        shared.append(call_shared)
    return _without_empty(RankViews(chart_ranks, copies, shared))


def _without_empty(views: RankViews) -> RankViews:
    """Only ranks holding a charted module in some call (an expert-parallel rank whose experts are mapped as one
    group with the others' holds none of its own)."""
    kept = sorted({copy.rank for call in views.copies for copy in call if copy.held})
    if len(kept) < 2:
        return RankViews([], [[] for _ in views.copies], [[] for _ in views.shared])
    new = {old: at for at, old in enumerate(kept)}
    copies = [
        [msgspec.structs.replace(copy, rank=new[copy.rank]) for copy in call if copy.rank in new]
        for call in views.copies
    ]
    return RankViews([views.ranks[old] for old in kept], copies, views.shared)


def _held_by(info: ParallelInfo, keys: Sequence[str], cache: dict[tuple[int, ...], frozenset[int]]) -> frozenset[int]:
    """The merged ranks holding a copy of every key (as rankview reads them: the key's tensor-parallel peers on its
    pipeline stage, step and expert-parallel rank, in the analysed data-parallel group)."""
    found: frozenset[int] | None = None
    for key in keys:
        peers = tuple(holders(info, key)[0])
        ranks = cache.get(peers)
        if ranks is None:
            ranks = cache[peers] = frozenset(info.ranks[p] for p in peers)
        found = ranks if found is None else found & ranks
    return found or frozenset()


def _side_views(
    analysis: Analysis,
    side: _Side,
    records: Sequence[ModuleRecord],
    merged: Sequence[tuple[Number | None, Number | None, Number | None]],
    paired: bool,
    known: Known,
    errors: Errors,
    rounded: Rounding,
) -> tuple[list[RankCopies], SharedCopies]:
    other = analysis.rollout if side.name == "train" else analysis.train
    other_info = other.parallel
    tolerances = analysis.judge.tolerances
    copies = {rank: RankCopies(side.view[rank], [], [], [], [], [], []) for rank in side.ranks}
    shared = SharedCopies("both" if paired else side.name, [], [], [], [])
    held_cache: dict[tuple[int, ...], frozenset[int]] = {}
    other_cache: dict[tuple[int, ...], frozenset[int]] = {}
    read: list[tuple[int, ModuleRecord, frozenset[int]]] = []
    runs: list[tuple[frozenset[int], int, int]] = []  # consecutive modules held by the same ranks
    for index, record in enumerate(records):
        comparison = record.comparison
        mine, theirs = _keys(side.name, comparison.train_keys, comparison.rollout_keys)
        held = _held_by(side.info, mine, held_cache)
        if paired and other_info is not None:
            held &= _held_by(other_info, theirs, other_cache)
        if not held:
            continue
        if runs and runs[-1][0] == held and runs[-1][2] == index:
            runs[-1] = (held, runs[-1][1], index + 1)
        else:
            runs.append((held, index, index + 1))
        how = _how(side.info, mine)
        if paired and other_info is not None:
            how += "; " + _how(other_info, theirs)
        varied = any(key in side.info.varied for key in mine) or (
            paired and other_info is not None and any(key in other_info.varied for key in theirs)
        )
        if varied or (paired and "sharded" in how):
            read.append((index, record, held))
            continue
        if paired or not how.strip("; "):
            continue  # every rank's copy is the merged entry, compared whole: the merged errors
        specs = comparison.target_specs()
        whole = [spec for spec in specs if _whole(how, _slot(spec.target))]
        if len(whole) != len(specs):
            values = tuple(rounded(e) for e in worst_of(whole, errors))
            if values != merged[index]:
                _change(shared.changed, (shared.output, shared.input, shared.parameters), index, values)
    for held, start, end in runs:
        for rank in held:
            ranges = copies[rank].held
            if ranges and ranges[-1] == start:
                ranges[-1] = end
            else:
                ranges += [start, end]
    results = _read_results(analysis, side, other, read, paired, known, tolerances)
    differing: dict[int, list[int]] = {}
    for (index, _, held), found in zip(read, results):
        for rank in held:
            result = found.get(rank)
            target = copies[rank]
            values = tuple(rounded(e) for e in result.worst) if result is not None else (None, None, None)
            _change(target.changed, (target.output, target.input, target.parameters), index, values)
            if result is not None and result.differs:
                differing.setdefault(index, []).append(rank)
    # where a rank parts from the others: a difference every rank holding the module shares (what follows a
    # divergence) says nothing about the ranks
    for index, _, held in read:
        parting = differing.get(index, [])
        if len(parting) < len(held):
            for rank in parting:
                copies[rank].mismatch.append(index)
    return list(copies.values()), shared


def _keys(side: str, train: Sequence[str], rollout: Sequence[str]) -> tuple[Sequence[str], Sequence[str]]:
    return (train, rollout) if side == "train" else (rollout, train)


def _how(info: ParallelInfo, keys: Sequence[str]) -> str:
    """How the merge combined the keys' slots (ParallelInfo.merges), as one text."""
    if len(keys) == 1:
        return info.merges.get(keys[0], "")
    return "; ".join(info.merges.get(key, "") for key in keys)


def _change(
    changed: list[int], columns: tuple[list[Number | None], ...], index: int, values: tuple[Number | None, ...]
) -> None:
    changed.append(index)
    for column, value in zip(columns, values):
        column.append(value)


def _read_results(
    analysis: Analysis,
    side: _Side,
    other: Dump,
    read: list[tuple[int, ModuleRecord, frozenset[int]]],
    paired: bool,
    known: Known,
    tolerances: Tolerances,
) -> list[dict[int, RankResult]]:
    """Each rank's result of the records that need their rank files (results of earlier charts of these dumps
    reused), reading each rank file once."""
    missing = []
    for _, record, _ in read:
        comparison = record.comparison
        if (side.name, comparison.train_keys, comparison.rollout_keys) not in known:
            missing.append(record)
    if missing:
        train, rollout = analysis.train, analysis.rollout
        pairs = [_keys(side.name, r.comparison.train_keys, r.comparison.rollout_keys) for r in missing]
        read_rank_copies(side.dump, [key for mine, _ in pairs for key in mine])
        if paired:
            read_rank_copies(other, [key for _, theirs in pairs for key in theirs])
        for record in missing:
            comparison = record.comparison
            mine, theirs = _keys(side.name, comparison.train_keys, comparison.rollout_keys)
            parts = rank_parts(side.dump, mine)
            other_parts = rank_parts(other, theirs) if paired else None
            logical = [other.entries[key] for key in theirs]
            how = _how(side.info, mine)
            facts = branch_facts(train, rollout, comparison.train_keys, comparison.rollout_keys)
            found: dict[int, RankResult] = {}
            for rank, ours in parts.items():
                against = other_parts.get(rank) if other_parts is not None else logical
                if against is None:
                    continue
                pair = (ours, against) if side.name == "train" else (against, ours)
                specs = compare_module(*pair, tolerances, facts).target_specs()
                if not paired:
                    specs = [spec for spec in specs if _whole(how, _slot(spec.target))]
                differs = any(target_verdict(s.target, s.train, s.rollout, tolerances)[0] == "mismatch" for s in specs)
                found[rank] = RankResult(worst_of(specs, relative_error), differs)
            known[(side.name, comparison.train_keys, comparison.rollout_keys)] = found
    return [known[(side.name, r.comparison.train_keys, r.comparison.rollout_keys)] for _, r, _ in read]
