"""Planning a rank merge: which ranks are pipeline stages (and in which order), which form the analysed
data-parallel group, and the tensor- and expert-parallel sizes within it (given by the user, or told from the dumps)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from rca_lsp.base.errors import InputError
from rca_lsp.dumps.dump import Dump
from rca_lsp.dumps.ranks.experts import (
    EXPERT_RE,
    ep_reads_own_data,
    expert_free,
    hold_other_experts,
    own_data_note,
    unweighed_experts,
)
from rca_lsp.dumps.ranks.replicas import (
    data_group_size,
    data_parallel_note,
    replica_disagreements,
    tensor_parallel_contradiction,
)
from rca_lsp.dumps.sources import DumpSource, ParallelLayout


@dataclass
class Plan:
    """Which ranks are merged how (indexes into the source's files)."""

    stages: list[list[int]]  # per pipeline stage, the ranks of its analysed data-parallel group
    dumps: Sequence[Dump]  # the ranks' dumps, the first group's entries carrying any disagreement with replicas
    tp: int
    ep: int
    dp: int
    inferred: bool
    notes: list[str]
    own_data: bool = False  # the expert-parallel ranks read their own batches (see ep_reads_own_data)
    data_groups: tuple[tuple[int, ...], ...] = ()  # each data-parallel group's ranks, first stage first
    analysed_group: int = 0


def _same_stage(a: Dump, b: Dump) -> bool:
    """Same key set, or one a prefix of the other in dump order (a rank that stopped early)."""
    shorter, longer = (a.keys, b.keys) if len(a.keys) <= len(b.keys) else (b.keys, a.keys)
    return longer[: len(shorter)] == shorter


def plan_merge(dumps: Sequence[Dump], source: DumpSource) -> Plan:
    given = source.layout or ParallelLayout()
    world = len(dumps)
    notes: list[str] = []
    if given.pp is not None:
        if world % given.pp:
            raise InputError(source.label, f"{world} ranks cannot form pp={given.pp} pipeline stages")
        stage_size = world // given.pp
    else:
        stage_size = 1
        while stage_size < world and _same_stage(dumps[0], dumps[stage_size]):
            stage_size += 1
        if world % stage_size:
            raise InputError(
                source.label,
                f"cannot tell the pipeline stages: ranks 0-{stage_size - 1} dump the same "
                f"modules but {world} ranks do not divide into stages of {stage_size}; "
                "pass --parallel pp=N (setting `parallel`)",
            )
    stages = [list(range(start, start + stage_size)) for start in range(0, world, stage_size)]
    for stage in stages:
        odd = [i for i in stage if not _same_stage(dumps[stage[0]], dumps[i])]
        if odd:
            a, b = source.ranks[stage[0]], source.ranks[odd[0]]
            raise InputError(
                source.label,
                f"the given layout {given} puts ranks {a} and {b} in one pipeline stage, but ranks {a} and {b} dump "
                "other modules (pipeline stages hold other layers)"
                if given.pp is not None
                else f"cannot tell the pipeline stages: rank {b} dumps other modules than rank {a}; pass --parallel pp=N",
            )
    if given.pp is not None and len(stages) > 1:
        _check_given_stages(stages, dumps, source, given)
    stages = _in_pipeline_order(stages, dumps, source, notes)
    group = data_group_size(dumps, stages[0], given, source, notes)
    dp = stage_size // group
    groups = tuple(tuple(stage[d * group + i] for stage in stages for i in range(group)) for d in range(dp))
    analysed = _group_of(source, groups)
    if analysed:  # the analysed group first in every stage: the merge and the replica checks take the first group
        stages = [
            stage[analysed * group : (analysed + 1) * group]
            + stage[: analysed * group]
            + stage[(analysed + 1) * group :]
            for stage in stages
        ]
    if dp > 1:
        notes.append(data_parallel_note(dumps, stages, group, source))
        if given.ep is None and unweighed_experts(dumps[stages[0][0]]):
            notes.append(
                "the data-parallel groups were told by their other data alone: their expert weights were not "
                "dumped, and expert-parallel ranks that read their own batches look the same; if they are such "
                "ranks, pass --parallel ep=N (setting `parallel`)"
            )
    tp, ep = _tp_ep(dumps, stages[0][:group], given, source)
    inferred = given.tp is None and given.pp is None and given.ep is None and given.dp is None
    unusual = [f"{name}={size}" for name, size in (("tp", tp), ("ep", ep)) if size & (size - 1)]
    if inferred and unusual:
        # No gap below the highest rank folder (sources would have said), but the last ones may be gone: a TP=4 run
        # missing rank 3 merges as tp=3, every sharded tensor a quarter short, compared as "structural" mismatches.
        notes.insert(
            0,
            f"{' and '.join(unusual)} inferred from {world} rank folders: parallel sizes are almost always powers of "
            f"two; if the run had more ranks, rank {source.ranks[-1] + 1} and later are missing (not dumped, or not "
            "copied) and every sharded tensor here is incomplete",
        )
    own_data = ep > 1 and any(ep_reads_own_data(dumps, stage[:group], tp, ep) for stage in stages)
    if own_data:
        notes.append(own_data_note([i for stage in stages for i in stage[:tp]], ep, dp, source))
    return Plan(
        [stage[:group] for stage in stages],
        replica_disagreements(dumps, stages, group, source) if dp > 1 else dumps,
        tp,
        ep,
        dp,
        inferred,
        notes,
        own_data,
        groups,
        analysed,
    )


def _group_of(source: DumpSource, groups: tuple[tuple[int, ...], ...]) -> int:
    """The data-parallel group holding the source's `data_rank` (0 when none is asked for)."""
    if source.data_rank is None:
        return 0
    for index, members in enumerate(groups):
        if any(source.ranks[i] == source.data_rank for i in members):
            return index
    raise InputError(
        source.label,
        f"train rank {source.data_rank} (--train-rank, setting `train_rank`) is not among the ranks here: "
        + ", ".join(str(r) for r in dict.fromkeys(source.ranks)),
    )


_FIRST_STAGE_RE = re.compile(r"(?<![^.])(embedding|embed_tokens|word_embeddings|wte)(?=\.|$)")


_LAST_STAGE_RE = re.compile(r"(?<![^.])(output_layer|lm_head|final_layernorm)(?=\.|$)")


def _check_given_stages(
    stages: list[list[int]], dumps: Sequence[Dump], source: DumpSource, given: ParallelLayout
) -> None:
    """Given pipeline stages that each dump the whole model (the same modules, the embedding to the output layer)
    are not stages: the ranks are tensor-parallel peers or data-parallel replicas."""
    first = dumps[stages[0][0]]
    whole = all(
        any(pattern.search(first.entries[key].path) for key in first.keys)
        for pattern in (_FIRST_STAGE_RE, _LAST_STAGE_RE)
    )
    if whole and all(_same_stage(first, dumps[stage[0]]) for stage in stages[1:]):
        a, b = source.ranks[stages[0][0]], source.ranks[stages[1][0]]
        raise InputError(
            source.label,
            f"the given layout {given} makes ranks {a} and {b} separate pipeline stages, but ranks {a} and {b} each "
            "dump the whole model (the same modules, the embedding to the output layer): they are tensor-parallel "
            "peers or data-parallel replicas",
        )


def _in_pipeline_order(
    stages: list[list[int]], dumps: Sequence[Dump], source: DumpSource, notes: list[str]
) -> list[list[int]]:
    """Stages in rank order (Megatron's pp is the slowest dimension), unless the content says otherwise: the stage
    holding the embedding runs first, the one holding the output layer last."""
    if len(stages) < 2:
        return stages

    def holds(stage: list[int], pattern: re.Pattern[str]) -> bool:
        dump = dumps[stage[0]]
        return any(pattern.search(dump.entries[key].path) for key in dump.keys)

    first = next((s for s in stages if holds(s, _FIRST_STAGE_RE)), stages[0])
    last = next((s for s in stages if holds(s, _LAST_STAGE_RE) and s is not first), stages[-1])
    ordered = [first] + [s for s in stages if s is not first and s is not last] + ([last] if last is not first else [])
    if ordered != stages:
        notes.append(
            "pipeline stages ordered by their content (the embedding's stage first, the output layer's last): "
            + " -> ".join(f"ranks {source.ranks[s[0]]}-{source.ranks[s[-1]]}" for s in ordered)
        )
    return ordered


def _tp_ep(dumps: Sequence[Dump], group: list[int], given: ParallelLayout, source: DumpSource) -> tuple[int, int]:
    size = len(group)
    if given.tp is not None or given.ep is not None:
        tp = given.tp or max(size // (given.ep or 1), 1)
        if tp * (size // tp) != size or (given.ep is not None and tp * given.ep != size):
            raise InputError(
                source.label,
                f"--parallel {source.layout}: the {size} rank(s) of a data-parallel group "
                f"cannot be split into tp={tp}" + (f" x ep={given.ep}" if given.ep else ""),
            )
        _check_given_peers(dumps, group, tp, size // tp, given, source)
        return tp, size // tp
    if size == 1 or not _has_experts(dumps[group[0]]):
        return size, 1
    # Expert-parallel peers hold other experts and the same weights outside them (whatever batch they read);
    # without weights: they agree on everything outside their experts when they read one batch. Tensor-parallel
    # peers differ on shards.
    shared = expert_free(dumps[group[0]])

    def fingerprint(index: int) -> tuple[object, ...]:
        entries = dumps[index].entries
        return tuple(entries[k].output if k in entries else None for k in shared)

    def ep_peers(a: int, b: int) -> bool:
        if any(e.parameters for e in dumps[a].entries.values()):
            return hold_other_experts(dumps[a], dumps[b])
        return fingerprint(a) == fingerprint(b)

    ep = 1 + sum(1 for i in group[1:] if ep_peers(group[0], i))
    tp = size // ep
    if tp * ep != size or not all(ep_peers(group[t], group[t + e * tp]) for t in range(tp) for e in range(1, ep)):
        raise InputError(
            source.label,
            "cannot tell tensor-parallel from expert-parallel ranks; pass --parallel tp=N,ep=M (setting `parallel`)",
        )
    return tp, ep


def _has_experts(dump: Dump) -> bool:
    return any(EXPERT_RE.search(key) for key in dump.keys)


def _check_given_peers(
    dumps: Sequence[Dump], group: list[int], tp: int, ep: int, given: ParallelLayout, source: DumpSource
) -> None:
    """Given tensor- and expert-parallel peers that the dumps contradict: EP ranks without experts, EP peers that
    hold the same experts (their weights dumped), TP peers that hold the same copy of every sharded weight."""
    first = dumps[group[0]]
    if ep > 1 and not _has_experts(first):
        raise InputError(
            source.label,
            f"the given layout {given} means ep={ep} expert-parallel ranks, but the dumps hold no experts (no "
            "local_experts.<n> modules)",
        )

    def contradicted(other: int, why: str) -> InputError:
        a, b = source.ranks[group[0]], source.ranks[other]
        return InputError(source.label, f"the given layout {given}: ranks {a} and {b} cannot be {why}")

    for t in range(1, tp):
        why = tensor_parallel_contradiction(first, dumps[group[t]])
        if why is not None:
            raise contradicted(group[t], f"tensor-parallel peers: {why}")
    weighed = any(e.parameters for e in first.entries.values() if EXPERT_RE.search(e.path))
    for e in range(1, ep if weighed else 1):
        if not hold_other_experts(first, dumps[group[e * tp]]):
            raise contradicted(group[e * tp], "expert-parallel peers: they do not hold other experts")
