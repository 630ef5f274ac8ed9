"""Data-parallel replicas: ranks one data-parallel group apart that read other data, or that hold the same sharded
weights but for a few (a replica out of sync, a disagreement of replicas on the merged entry)."""

from __future__ import annotations

import dataclasses
from typing import NamedTuple, Sequence

import msgspec

from rca_lsp.base.errors import InputError
from rca_lsp.dumps.dump import Dump, ModuleEntry
from rca_lsp.dumps.ranks.experts import hold_other_experts, is_expert_path
from rca_lsp.dumps.ranks.slots import disagreement_of, parallel_kind, shard_dim
from rca_lsp.dumps.sources import DumpSource, ParallelLayout


def data_group_size(
    dumps: Sequence[Dump], stage: list[int], given: ParallelLayout, source: DumpSource, notes: list[str]
) -> int:
    """Ranks of the first data-parallel group of a stage. In Megatron's rank order (tp-cp-ep-dp-pp) a rank's
    data-parallel peer is one group size further: the smallest distance at which every rank and the rank that far
    on are data-parallel replicas (see `_replicas_of_other_data`) is the group size; none: one group."""
    if given.dp is not None:
        group = _given_group_size(len(stage), given, source, notes)
        for a, b in ((stage[i], stage[i + group]) for i in range(len(stage) - group)):
            verdict = _replicas_of_other_data(dumps[a], dumps[b])
            if verdict.replicas is False:
                raise InputError(
                    source.label,
                    f"the given layout {given} makes ranks {source.ranks[a]} and {source.ranks[b]} data-parallel "
                    f"replicas, but ranks {source.ranks[a]} and {source.ranks[b]} cannot be data-parallel replicas: "
                    f"{verdict.why}",
                )
        return group
    undecided: tuple[int, int, str] | None = None
    unit = (given.tp or 1) * (given.ep or 1)  # a data-parallel group holds tp x ep ranks
    for size in range(1, len(stage)):
        if len(stage) % size or size % unit:
            continue
        first_undecided: tuple[int, int, str] | None = None
        confirmed = False
        for a, b in ((stage[i], stage[i + size]) for i in range(len(stage) - size)):
            verdict = _replicas_of_other_data(dumps[a], dumps[b])
            if verdict.replicas is False:
                break  # not this size (nor undecided at it): the other pairs need no look
            confirmed |= verdict.replicas is True
            if verdict.replicas is None and not verdict.unknown and first_undecided is None:
                first_undecided = (a, b, verdict.why)
        else:
            # pairs a rank without statistics makes unknown neither confirm a size nor stand against it
            if first_undecided is None and confirmed:
                return size
            undecided = undecided or first_undecided
    if undecided is not None:
        a, b, why = undecided
        notes.append(
            f"cannot tell data-parallel replicas from tensor-parallel peers: ranks {source.ranks[a]} and "
            f"{source.ranks[b]} {why}; all ranks of a stage were merged as tensor-parallel peers. If some are "
            "data-parallel replicas, pass --parallel dp=N (setting `parallel`)"
        )
    return len(stage)


def _given_group_size(size: int, given: ParallelLayout, source: DumpSource, notes: list[str]) -> int:
    """The ranks of a data-parallel group for a given dp, which counts replicas of the whole model (tp x ep ranks
    each). With ep > 1 a dp that does not fit so but fits as Megatron's data-parallel size of the dense layers (tp x
    dp ranks per stage, the EP ranks carved out of them: ep divides dp) is read as that, and said so."""
    dp, ep = given.dp or 1, given.ep or 1
    if size % dp:
        raise InputError(source.label, f"{size} ranks per stage cannot form dp={dp} groups")
    group = size // dp
    fits = group % ep == 0 and (given.tp is None or given.tp * ep == group)
    if not fits and ep > 1 and dp % ep == 0 and (given.tp is None or given.tp * dp == size):
        notes.append(
            f"--parallel dp={dp} read as Megatron's data-parallel size of the dense layers, which the ep={ep} "
            f"expert-parallel ranks are carved out of: {dp // ep} replica(s) of the whole model"
        )
        return size * ep // dp
    return group


class _Verdict(NamedTuple):
    replicas: bool | None  # None: the dumps cannot tell
    why: str  # for the report when they cannot
    unknown: bool = False  # they cannot tell because a rank wrote null statistics for what would tell


def _replicas_of_other_data(a: Dump, b: Dump) -> _Verdict:
    """Are two ranks of one stage data-parallel replicas? Yes when they read other data (their first module, the
    embedding, has another input: tensor-parallel peers always read the same batch); else their weights decide (see
    `_weights_differ`): tensor-parallel peers hold other shards of every weight a parallel layer shards and the same
    replicated weights, expert-parallel peers other experts, replicas the same weights - all but any that drifted
    out of sync. Ranks that hold other experts are expert-parallel peers (which read their own batches in
    Megatron), not replicas."""
    if hold_other_experts(a, b):
        return _Verdict(False, "they hold other experts under the same names (expert-parallel peers)")
    first = a.keys[0]
    other = b.entries.get(first)
    mine = a.entries[first].input
    theirs = other.input if other is not None else None
    null_input = (mine is not None and not mine.observable) or (theirs is not None and not theirs.observable)
    if mine is not None and theirs is not None and not null_input and theirs != mine:
        return _Verdict(True, "")
    sharded, replicated = _weights_differ(a, b)
    if not sharded:
        weighted = [(e, b.entries[k]) for k, e in a.entries.items() if e.parameters and k in b.entries]
        known = [
            (stats, theirs)
            for entry, copy in weighted
            for name, stats in entry.parameters.items()
            if (theirs := copy.parameters.get(name)) is None or (stats.observable and theirs.observable)
        ]
        if not known:
            null = null_input or bool(weighted)  # weights there, none with statistics on both
            return _Verdict(None, "read the same first input and dump no weights to compare", null)
        same = all(stats == theirs for stats, theirs in known)
        return _Verdict(same, "" if same else "their weights differ (replicas hold the same weights)")
    differing = [d for scope in sharded.values() for d in scope]
    if not any(differing):
        return _Verdict(True, "")
    if any(all(scope) for scope in sharded.values()):
        # A scope (the experts, the rest) whose every sharded weight differs: other shards or other experts, i.e.
        # peers - unless most replicated weights differ too (peers share those: a replica that missed an update?)
        if not replicated or 2 * sum(replicated) < len(replicated):
            return _Verdict(
                False,
                "they hold other shards of every weight the parallel layers shard (tensor-parallel peers; "
                "replicas hold the same)",
            )
        return _Verdict(
            None,
            f"read the same first input and differ in every weight the parallel layers shard and in "
            f"{sum(replicated)} of the {len(replicated)} replicated ones (tensor-parallel peers share those; a "
            "data-parallel replica that missed an update differs in all)",
        )
    # Some sharded weights the same, some not: shards of one tensor never are the same, so these are replicas of
    # which a few weights drifted (a replica out of sync, reported as a disagreement) - unless most differ, which
    # no reading settles (a replica that missed most of an update, or peers with coinciding shards).
    if 2 * sum(differing) < len(differing):
        return _Verdict(True, "")
    return _Verdict(
        None,
        f"read the same first input and differ in {sum(differing)} of the {len(differing)} weights the parallel "
        "layers shard (tensor-parallel peers differ in all, data-parallel replicas in none)",
    )


def tensor_parallel_contradiction(a: Dump, b: Dump) -> str | None:
    """Why two ranks cannot be tensor-parallel peers, if their weights say so: peers hold other shards of every
    weight a parallel layer shards (outside the experts, which expert-parallel peers hold apart), so ranks holding
    the same copy of each such weight are replicas or expert-parallel peers. None when they may be peers."""
    sharded, _ = _weights_differ(a, b)
    dense = sharded.get(False)
    if dense and not any(dense):
        return (
            f"they hold the same copy of every weight the parallel layers shard outside the experts ({len(dense)} "
            "compared; tensor-parallel peers hold other shards)"
        )
    return None


def _weights_differ(a: Dump, b: Dump) -> tuple[dict[bool, list[bool]], list[bool]]:
    """For every weight both ranks dump that carries information (not constant: the shards of a constant tensor
    look alike), whether their copies differ: those a parallel layer shards (as its class says) grouped by scope (in
    the experts or not: expert-parallel peers share everything but the experts), and the replicated ones."""
    sharded: dict[bool, list[bool]] = {}
    replicated: list[bool] = []
    for key, entry in a.entries.items():
        other = b.entries.get(key)
        if other is None or not entry.parameters:
            continue
        kind = parallel_kind(entry.class_name)
        for name, stats in entry.parameters.items():
            theirs = other.parameters.get(name)
            if theirs is None or not stats.observable or not theirs.observable or stats.max == stats.min:
                continue  # (a weight without statistics, null, tells nothing)
            # Exact: replicas hold bit-identical weights (no arithmetic between them), and so every pair compares
            # in C (a TP=8 dump has 10^4 weights per rank).
            if kind is not None and shard_dim(f"parameters.{name}", kind, stats) is not None:
                sharded.setdefault(is_expert_path(entry.path), []).append(stats != theirs)
            else:
                replicated.append(stats != theirs)
    return sharded, replicated


def data_parallel_note(dumps: Sequence[Dump], stages: list[list[int]], group: int, source: DumpSource) -> str:
    dp = len(stages[0]) // group
    pairs = [(dumps[stage[i]], dumps[stage[i % group]]) for stage in stages for i in range(group, len(stage))]
    if all(mine.entries == peer.entries for mine, peer in pairs):
        seen = "read the same batch as the analysed (their dumps are copies of its ranks')"
    elif all(_same_but_weights(mine, peer) for mine, peer in pairs):
        seen = (
            "read the same batch as the analysed (their dumps are copies of its ranks' up to a weight that differs: "
            "see the disagreements)"
        )
    else:
        seen = "saw other data (other batches: their statistics are not those of the analysed group)"
    ranks = ", ".join(str(source.ranks[i]) for each in stages for i in each[:group])
    which = "the first group" if stages[0][0] == min(stages[0]) else f"the group of rank {source.data_rank}"
    return (
        f"data parallel: dp={dp} (groups of {group} ranks per stage); the other data-parallel groups {seen} "
        f"and are not merged: analysed {which} (ranks {ranks})"
    )


def _same_but_weights(a: Dump, b: Dump) -> bool:
    """Copies up to the first weight that differs (a replica out of sync reading the same batch: what follows the
    drifted weight differs too), or copies throughout."""
    for key in a.keys:
        mine, theirs = a.entries[key], b.entries.get(key)
        if mine == theirs:
            continue
        return theirs is not None and mine.input == theirs.input and mine.parameters != theirs.parameters
    return True


def replica_disagreements(dumps: Sequence[Dump], stages: list[list[int]], group: int, source: DumpSource) -> list[Dump]:
    """Data-parallel replicas hold the same weights, whatever data they read: each weight of a first-group rank whose
    copy on a replica in another group differs becomes a disagreement of that rank's entry (a replica out of sync;
    the merge carries it into the logical entry, a finding of its own). The dumps, the first group's thus marked."""
    marked = list(dumps)
    for stage in stages:
        for i in range(group):
            mine = dumps[stage[i]]
            replicas = [stage[j] for j in range(i + group, len(stage), group)]
            changed: dict[str, ModuleEntry] = {}
            for key, entry in mine.entries.items():
                others = [dumps[r].entries.get(key) for r in replicas]
                if not entry.parameters or all(o is not None and o.parameters == entry.parameters for o in others):
                    continue  # the common case, in C
                found = []
                for name, stats in entry.parameters.items():
                    copies = [stats] + [o.parameters.get(name) if o is not None else None for o in others]
                    disagreement = disagreement_of(f"parameters.{name}", copies, [stage[i], *replicas], source)
                    if disagreement is not None:
                        found.append(disagreement)
                if found:
                    changed[key] = msgspec.structs.replace(entry, disagreements=entry.disagreements + tuple(found))
            if changed:
                marked[stage[i]] = dataclasses.replace(
                    mine, entries={**mine.entries, **changed}, _line_cache={}, rank_entry_cache={}
                )
    return marked
