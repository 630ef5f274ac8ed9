"""One logical dump from the rank dumps of one step of a parallel run (TP, SP, PP, EP, DP).

msprobe keys carry no rank: every tensor-parallel rank dumps the same keys with its shard or its replica of each
tensor, every pipeline stage names its layers by local index, every expert-parallel rank names its experts
`local_experts.0..`. The merge, in Megatron's default rank order (tp fastest, then ep, dp, pp):

1. pipeline stages: ranks with the same key set (or a prefix of it: a rank that died mid-dump) form a stage; a
   stage's layers are renamed to global indices (offset = distinct layers on the earlier stages); modules on every
   stage (model, block, rotary) take their input from the first stage and their output from the last;
2. data parallel: ranks one data-parallel group apart whose first module (the embedding) read other data, or that
   hold the same sharded weights of the parallel layers but for a few (a replica out of sync), are replicas
   (unless they hold other experts: expert-parallel peers): the first data-parallel group is analysed, and the
   report says so (when the dumps cannot tell, too); a weight a replica holds otherwise than its first-group peer
   is a disagreement of replicas on the merged entry;
3. expert parallel: ranks with the same weights outside their experts (or, without weights, identical outside
   them) hold different experts: `local_experts.<j>` of EP rank e becomes `local_experts.<e * local + j>`. EP
   ranks that read their own batches (Megatron carves them out of the data-parallel ranks) give the modules outside
   the experts from EP rank 0, and leave out the experts' activations (every expert got tokens of every batch);
   their parameters still compare;
4. tensor parallel, per slot: identical copies are replicas; differing activations are shards (column-parallel
   outputs and row-parallel inputs along the last dim, other sequence-parallel activations along the sequence);
   differing parameters are shards for parallel linear / embedding classes and otherwise a disagreement of
   replicas (a desynced weight), which is a finding of its own.

Shards aggregate exactly (max of maxes, min of mins, root of summed squared norms, numel-weighted mean).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterable, Iterator, NamedTuple, Sequence

import msgspec

from rca_lsp.core.compare import aggregate, copy_difference
from rca_lsp.core.dump import Disagreement, Dump, ModuleEntry, ParallelInfo, TensorStats, combined_dump, leading_size
from rca_lsp.core.dumpsource import DumpSource, ParallelLayout
from rca_lsp.core.errors import InputError
from rca_lsp.core.qkvlayout import (
    QKV_CLASS,
    QkvEntry,
    QkvLayout,
    find_qkv_layouts,
    layout_notes,
    merged_column_how,
    qkv_entry,
)
from rca_lsp.core.rankload import load_rank_files
from rca_lsp.core.tolerance import Tolerances

_LAYER_RE = re.compile(r"(?<![^.])layers\.(\d+)(?=\.|$)")
_EXPERT_RE = re.compile(r"(?<![^.])local_experts\.(\d+)(?=\.|$)")
_EXPERTS_SCOPE_RE = re.compile(r"(?<![^.])experts(?=\.|$)")  # a module of the experts: per-rank partial on EP ranks
_COLUMN_CLASSES = ("ColumnParallel", "QKVParallel", "VocabParallel")  # MergedColumnParallelLinear included
_ROW_CLASSES = ("RowParallel",)
_TOLERANCES = Tolerances()
MAX_LISTED_KEYS = 5


def load_ranks(source: DumpSource, load_files: Callable[[Sequence[Path]], list[Dump]] | None = None) -> Dump:
    """Load every rank file of the source (with `load_files`, e.g. on both cores) and merge them; errors name the
    rank file."""
    dumps = (load_files or load_rank_files)(source.files)
    return merge_ranks(dumps, source)


@dataclass
class _Plan:
    """Which ranks are merged how (indexes into the source's files)."""

    stages: list[list[int]]  # per pipeline stage, the ranks of its first data-parallel group
    dumps: Sequence[Dump]  # the ranks' dumps, the first group's entries carrying any disagreement with replicas
    tp: int
    ep: int
    dp: int
    inferred: bool
    notes: list[str]
    own_data: bool = False  # the expert-parallel ranks read their own batches (see _ep_reads_own_data)


def merge_ranks(dumps: Sequence[Dump], source: DumpSource) -> Dump:
    plan = _plan(dumps, source)
    merger = _Merger(plan.dumps, source)
    stage_dumps, stage_merges = [], []
    for ranks in plan.stages:
        merger.merges, merger.varied = {}, set()  # per stage: keys are the stage's local names until stages join
        stage_dumps.append(merger.stage(ranks, plan))
        stage_merges.append((merger.merges, merger.varied))
    keys, entries, origins, merger.merges, varied = _join_stages(
        stage_dumps, [ranks[0] for ranks in plan.stages], stage_merges
    )
    _renumber(keys, entries)
    merger.origins.update(origins)
    layout = f"tp={plan.tp}, pp={len(plan.stages)}, ep={plan.ep}, dp={plan.dp}" + (
        " (inferred from the dumps)" if plan.inferred else f" (given: {source.layout})"
    )
    if merger.sequence_parallel:
        plan.notes.append(
            "sequence parallel: norm, residual and dropout activations are sharded along the "
            "sequence and were merged along it"
        )
    info = ParallelInfo(
        tuple(str(p) for p in source.files),
        source.ranks,
        layout,
        merger.sequence_parallel,
        plan.notes + merger.notes,
        merger.merges,
        merger.origins,
        merger.dropped,
        _tensor_parallel_peers(plan),
        frozenset(varied),
    )
    return combined_dump(
        source.label, dumps, keys, entries, info, frozenset().union(*(d.null_keys for d in dumps)) - set(entries)
    )


def _tensor_parallel_peers(plan: _Plan) -> dict[int, tuple[int, ...]]:
    """Each merged rank's tensor-parallel peers (itself included): the ranks of its stage and expert-parallel rank
    in the analysed data-parallel group, Megatron's rank order (tp fastest, then ep) within it."""
    peers: dict[int, tuple[int, ...]] = {}
    for ranks in plan.stages:
        for e in range(plan.ep):
            group = tuple(ranks[e * plan.tp : (e + 1) * plan.tp])
            peers.update(dict.fromkeys(group, group))
    return peers


# ---------------------------------------------------------------------------------------------------------------
# Which ranks are stages, data-parallel replicas, expert- and tensor-parallel peers
# ---------------------------------------------------------------------------------------------------------------


def _same_stage(a: Dump, b: Dump) -> bool:
    """Same key set, or one a prefix of the other in dump order (a rank that stopped early)."""
    shorter, longer = (a.keys, b.keys) if len(a.keys) <= len(b.keys) else (b.keys, a.keys)
    return longer[: len(shorter)] == shorter


def _plan(dumps: Sequence[Dump], source: DumpSource) -> _Plan:
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
        if odd and given.pp is None:
            raise InputError(
                source.label,
                f"cannot tell the pipeline stages: rank {source.ranks[odd[0]]} dumps other "
                f"modules than rank {source.ranks[stage[0]]}; pass --parallel pp=N",
            )
    stages = _in_pipeline_order(stages, dumps, source, notes)
    group = _data_group_size(dumps, stages[0], given, source, notes)
    dp = stage_size // group
    if dp > 1:
        notes.append(_data_parallel_note(dumps, stages, group, source))
        if given.ep is None and _unweighed_experts(dumps[stages[0][0]]):
            notes.append(
                "the data-parallel groups were told by their other data alone: their expert weights were not "
                "dumped, and expert-parallel ranks that read their own batches look the same; if they are such "
                "ranks, pass --parallel ep=N (setting `parallel`)"
            )
    tp, ep = _tp_ep(dumps, stages[0][:group], given, source)
    own_data = ep > 1 and any(_ep_reads_own_data(dumps, stage[:group], tp, ep) for stage in stages)
    if own_data:
        notes.append(_own_data_note([i for stage in stages for i in stage[:tp]], ep, dp, source))
    return _Plan(
        [stage[:group] for stage in stages],
        _replica_disagreements(dumps, stages, group, source) if dp > 1 else dumps,
        tp,
        ep,
        dp,
        given.tp is None and given.pp is None and given.ep is None and given.dp is None,
        notes,
        own_data,
    )


_FIRST_STAGE_RE = re.compile(r"(?<![^.])(embedding|embed_tokens|word_embeddings|wte)(?=\.|$)")
_LAST_STAGE_RE = re.compile(r"(?<![^.])(output_layer|lm_head|final_layernorm)(?=\.|$)")


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


def _data_group_size(
    dumps: Sequence[Dump], stage: list[int], given: ParallelLayout, source: DumpSource, notes: list[str]
) -> int:
    """Ranks of the first data-parallel group of a stage. In Megatron's rank order (tp-cp-ep-dp-pp) a rank's
    data-parallel peer is one group size further: the smallest distance at which every rank and the rank that far
    on are data-parallel replicas (see `_replicas_of_other_data`) is the group size; none: one group."""
    if given.dp is not None:
        return _given_group_size(len(stage), given, source, notes)
    undecided: tuple[int, int, str] | None = None
    unit = (given.tp or 1) * (given.ep or 1)  # a data-parallel group holds tp x ep ranks
    for size in range(1, len(stage)):
        if len(stage) % size or size % unit:
            continue
        first_undecided: tuple[int, int, str] | None = None
        for a, b in ((stage[i], stage[i + size]) for i in range(len(stage) - size)):
            verdict = _replicas_of_other_data(dumps[a], dumps[b])
            if verdict.replicas is False:
                break  # not this size (nor undecided at it): the other pairs need no look
            if verdict.replicas is None and first_undecided is None:
                first_undecided = (a, b, verdict.why)
        else:
            if first_undecided is None:
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


def _replicas_of_other_data(a: Dump, b: Dump) -> _Verdict:
    """Are two ranks of one stage data-parallel replicas? Yes when they read other data (their first module, the
    embedding, has another input: tensor-parallel peers always read the same batch); else their weights decide (see
    `_weights_differ`): tensor-parallel peers hold other shards of every weight a parallel layer shards and the same
    replicated weights, expert-parallel peers other experts, replicas the same weights - all but any that drifted
    out of sync. Ranks that hold other experts are expert-parallel peers (which read their own batches in
    Megatron), not replicas."""
    if _hold_other_experts(a, b):
        return _Verdict(False, "")
    first = a.keys[0]
    other = b.entries.get(first)
    if other is not None and a.entries[first].input is not None and other.input != a.entries[first].input:
        return _Verdict(True, "")
    sharded, replicated = _weights_differ(a, b)
    if not sharded:
        weighted = [(e, b.entries[k]) for k, e in a.entries.items() if e.parameters and k in b.entries]
        if not weighted:
            return _Verdict(None, "read the same first input and dump no weights to compare")
        return _Verdict(all(e.parameters == o.parameters for e, o in weighted), "")
    differing = [d for scope in sharded.values() for d in scope]
    if not any(differing):
        return _Verdict(True, "")
    if any(all(scope) for scope in sharded.values()):
        # A scope (the experts, the rest) whose every sharded weight differs: other shards or other experts, i.e.
        # peers - unless most replicated weights differ too (peers share those: a replica that missed an update?)
        if not replicated or 2 * sum(replicated) < len(replicated):
            return _Verdict(False, "")
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
        kind = _parallel_kind(entry.class_name)
        for name, stats in entry.parameters.items():
            theirs = other.parameters.get(name)
            if theirs is None or not stats.observable or stats.max == stats.min:
                continue
            # Exact: replicas hold bit-identical weights (no arithmetic between them), and so every pair compares
            # in C (a TP=8 dump has 10^4 weights per rank).
            if kind is not None and _shard_dim(f"parameters.{name}", kind, stats) is not None:
                sharded.setdefault(_in_experts(entry.path), []).append(stats != theirs)
            else:
                replicated.append(stats != theirs)
    return sharded, replicated


def _data_parallel_note(dumps: Sequence[Dump], stages: list[list[int]], group: int, source: DumpSource) -> str:
    dp = len(stages[0]) // group
    pairs = [(dumps[stage[i]], dumps[stage[i % group]]) for stage in stages for i in range(group, len(stage))]
    if all(mine.entries == peer.entries for mine, peer in pairs):
        seen = "read the same batch as the first (their dumps are copies of its ranks')"
    elif all(_same_but_weights(mine, peer) for mine, peer in pairs):
        seen = (
            "read the same batch as the first (their dumps are copies of its ranks' up to a weight that differs: "
            "see the disagreements)"
        )
    else:
        seen = "saw other data (other batches: their statistics are not those of the first group)"
    ranks = ", ".join(str(source.ranks[i]) for each in stages for i in each[:group])
    return (
        f"data parallel: dp={dp} (groups of {group} ranks per stage); the other data-parallel groups {seen} "
        f"and are not merged: analysed the first group (ranks {ranks})"
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


def _replica_disagreements(
    dumps: Sequence[Dump], stages: list[list[int]], group: int, source: DumpSource
) -> list[Dump]:
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
                    disagreement = _disagreement(f"parameters.{name}", copies, [stage[i], *replicas], source)
                    if disagreement is not None:
                        found.append(disagreement)
                if found:
                    changed[key] = msgspec.structs.replace(entry, disagreements=entry.disagreements + tuple(found))
            if changed:
                marked[stage[i]] = dataclasses.replace(
                    mine, entries={**mine.entries, **changed}, _line_cache={}, rank_entry_cache={}
                )
    return marked


def _expert_free(dump: Dump) -> list[str]:
    return [k for k in dump.keys if not _in_experts(dump.entries[k].path)]


def _unweighed_experts(dump: Dump) -> bool:
    """The dump has experts, none with its weights dumped."""
    experts = [e for e in dump.entries.values() if _EXPERT_RE.search(e.path)]
    return bool(experts) and not any(e.parameters for e in experts)


def _compared_weights(a: Dump, b: Dump, experts: bool) -> Iterator[tuple[ModuleEntry, ModuleEntry]]:
    """The two ranks' copies of the modules with weights inside (or outside) the experts."""
    other = b.entries
    return (
        (e, other[k]) for k, e in a.entries.items() if e.parameters and k in other and _in_experts(e.path) == experts
    )


@lru_cache(maxsize=1 << 16)
def _in_experts(path: str) -> bool:
    """A module path inside a MoE layer's experts (a dump's paths repeat over its calls and ranks)."""
    return _EXPERTS_SCOPE_RE.search(path) is not None


def _hold_other_experts(a: Dump, b: Dump) -> bool:
    """Expert-parallel peers (of one tensor-parallel rank): every expert's weights differ (other experts under the
    same local names) while the weights outside the experts are the same: those of the parallel layers (which
    tensor-parallel peers shard) when there are any, all of them otherwise; most of them, so that one replicated
    weight out of sync is a disagreement of these peers, not another layout."""
    compared = False
    for mine, theirs in _compared_weights(a, b, experts=True):
        if mine.parameters == theirs.parameters:
            return False  # one expert the same: not other experts (the common case of tensor-parallel peers)
        compared = True
    if not compared:
        return False
    rest = list(_compared_weights(a, b, experts=False))
    rest = [(e, o) for e, o in rest if _parallel_kind(e.class_name)] or rest
    return 2 * sum(e.parameters == o.parameters for e, o in rest) > len(rest)


def _ep_reads_own_data(dumps: Sequence[Dump], group: list[int], tp: int, ep: int) -> bool:
    """Do the expert-parallel ranks of a data-parallel group read their own batches? Then the modules outside the
    experts (embedding, attention, router, the MoE layer's combined output) differ from EP rank 0's beyond
    noise; with one batch for all they are copies (the token dispatcher returns each rank its own tokens)."""
    for t in range(tp):
        reference = dumps[group[t]]
        keys = _expert_free(reference)
        for e in range(1, ep):
            other = dumps[group[t + e * tp]]
            for key in keys:
                mine, theirs = reference.entries[key].output, other.entries.get(key)
                copy = theirs.output if theirs is not None else None
                if mine is not None and copy is not None and mine != copy:
                    if copy_difference(mine, copy) > _TOLERANCES.for_dtypes(mine.dtype):
                        return True
    return False


def _own_data_note(first: list[int], ep: int, dp: int, source: DumpSource) -> str:
    """`first`: the ranks of EP rank 0 (its tensor-parallel peers, on every stage)."""
    ranks = ", ".join(str(source.ranks[i]) for i in first)
    return (
        f"expert parallel, each EP rank its own batch: the ep={ep} EP ranks differ outside their experts (they are "
        f"data-parallel ranks of the dense layers: Megatron's data-parallel size is ep x dp = {ep * dp}); the "
        f"modules outside the experts are EP rank 0's (rank{'s' if len(first) > 1 else ''} {ranks}), the experts "
        "are merged across the EP ranks by global index. Every expert got routed tokens of every EP rank's batch, "
        "which a rollout of one batch did not see: the experts' activations are left out, their parameters compared"
    )


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
        return tp, size // tp
    has_experts = any(_EXPERT_RE.search(k) for k in dumps[group[0]].keys)
    if size == 1 or not has_experts:
        return size, 1
    # Expert-parallel peers hold other experts and the same weights outside them (whatever batch they read);
    # without weights: they agree on everything outside their experts when they read one batch. Tensor-parallel
    # peers differ on shards.
    shared = _expert_free(dumps[group[0]])

    def fingerprint(index: int) -> tuple[object, ...]:
        entries = dumps[index].entries
        return tuple(entries[k].output if k in entries else None for k in shared)

    def ep_peers(a: int, b: int) -> bool:
        if any(e.parameters for e in dumps[a].entries.values()):
            return _hold_other_experts(dumps[a], dumps[b])
        return fingerprint(a) == fingerprint(b)

    ep = 1 + sum(1 for i in group[1:] if ep_peers(group[0], i))
    tp = size // ep
    if tp * ep != size or not all(ep_peers(group[t], group[t + e * tp]) for t in range(tp) for e in range(1, ep)):
        raise InputError(
            source.label,
            "cannot tell tensor-parallel from expert-parallel ranks; pass --parallel tp=N,ep=M (setting `parallel`)",
        )
    return tp, ep


# ---------------------------------------------------------------------------------------------------------------
# Merging
# ---------------------------------------------------------------------------------------------------------------


def _rename(entry: ModuleEntry, key: str, path: str) -> ModuleEntry:
    return msgspec.structs.replace(entry, key=key, path=path)


def _renamed_key(key: str, path: str, new_path: str) -> str:
    return key.replace("." + path + ".", "." + new_path + ".", 1)


class _Merger:
    def __init__(self, dumps: Sequence[Dump], source: DumpSource) -> None:
        self.dumps = dumps
        self.source = source
        self.notes: list[str] = []
        self.merges: dict[str, str] = {}
        self.origins: dict[str, tuple[int, str]] = {}
        self.dropped: dict[str, str] = {}
        self.varied: set[str] = set()  # see ParallelInfo.varied
        # differing activation copies (by the first rank's): the dim they are shards along, _PARTIAL_SUMS, or None
        # for replicas that disagree (see _slot)
        self.decided: dict[tuple[object, ...], tuple[tuple[int, ...] | None, int | None]] = {}
        self.sequence_parallel = False
        self.qkv_layouts: dict[tuple[int, ...], dict[str, QkvLayout]] = {}  # per tensor-parallel group, per key

    def stage(self, ranks: list[int], plan: _Plan) -> tuple[list[str], dict[str, ModuleEntry]]:
        """One stage's logical keys (local layer names) and entries: experts joined, then tensor shards merged."""
        by_tp = [
            self._experts_joined([ranks[t + e * plan.tp] for e in range(plan.ep)], plan.own_data)
            for t in range(plan.tp)
        ]
        if plan.tp == 1:
            return by_tp[0]
        keys = self._common_keys([k for k, _ in by_tp], [ranks[t] for t in range(plan.tp)])
        peers = [ranks[t] for t in range(plan.tp)]
        entries = {}
        # Replicas are mostly the same object on every rank (rankload): tuple.count tests identity first, in C.
        for key, parts in zip(keys, zip(*(map(e.__getitem__, keys) for _, e in by_tp))):
            first = parts[0]
            entries[key] = first if parts.count(first) == len(parts) else self._tensor_parallel(key, parts, peers)
        return keys, entries

    def _common_keys(self, key_lists: list[list[str]], ranks: list[int]) -> list[str]:
        """The keys every peer has, in the first peer's order; the others are dropped and said so."""
        if all(keys == key_lists[0] for keys in key_lists[1:]):
            return key_lists[0]
        everywhere = set(key_lists[0]).intersection(*key_lists[1:])
        longest = max(key_lists, key=len)
        for keys, rank in zip(key_lists, ranks):
            present = set(keys)
            lacking = [k for k in longest if k not in present]
            if lacking:
                label = self.source.rank_label(rank)
                self.notes.append(
                    f"{label} lacks {len(lacking)} keys the other ranks have (did it stop mid-dump?), "
                    f"e.g. {', '.join(lacking[:MAX_LISTED_KEYS])}; they are left out, the rest is "
                    "analysed"
                )
                for key in lacking:
                    self.dropped.setdefault(key, f"{label} lacks it")
        return [k for k in longest if k in everywhere]

    def _experts_joined(self, ranks: list[int], own_data: bool = False) -> tuple[list[str], dict[str, ModuleEntry]]:
        """EP peers: shared modules once (checked to agree), each rank's experts under their global index. With
        `own_data` (each EP rank read its own batch) the shared modules are EP rank 0's (their weights checked to
        agree) and the experts' activations are left out (see _other_batches)."""
        first = self.dumps[ranks[0]]
        if len(ranks) == 1:
            return first.keys, first.entries
        local = len({m.group(1) for k in first.keys if (m := _EXPERT_RE.search(k))})
        keys: list[str] = []
        entries: dict[str, ModuleEntry] = {}
        run: list[str] = []

        def flush() -> None:
            for ep_rank, rank in enumerate(ranks):
                dump = self.dumps[rank]
                for key in run:
                    entry = dump.entries.get(key)
                    if entry is None:
                        self.dropped.setdefault(key, f"{self.source.rank_label(rank)} lacks it")
                        continue
                    match = _EXPERT_RE.search(entry.path)
                    assert match is not None
                    path = (
                        entry.path[: match.start(1)]
                        + str(ep_rank * local + int(match.group(1)))
                        + entry.path[match.end(1) :]
                    )
                    new_key = _renamed_key(key, entry.path, path)
                    keys.append(new_key)
                    entries[new_key] = _rename(
                        self._other_batches(new_key, entry) if own_data else entry, new_key, path
                    )
                    if (rank, key) != (ranks[0], new_key):
                        self.origins[new_key] = (rank, key)
            run.clear()

        for key in first.keys:
            if _EXPERT_RE.search(key):
                run.append(key)
                continue
            if run:
                flush()
            keys.append(key)
            copies = [self.dumps[r].entries.get(key) for r in ranks]
            in_experts = _in_experts(first.entries[key].path)
            if in_experts and own_data:
                entries[key] = self._other_batches(key, first.entries[key])
            elif in_experts and all(c is not None for c in copies):
                # the experts' container on each EP rank handles the tokens routed to its experts: shards
                entries[key] = self._shards(key, copies, ranks, "expert-parallel")  # type: ignore[arg-type]
            else:
                entries[key] = self._replicas(key, copies, ranks, parameters_only=own_data)
        flush()
        return keys, entries

    def _other_batches(self, key: str, entry: ModuleEntry) -> ModuleEntry:
        """A module of the experts on EP ranks that read their own batches: its activations hold routed tokens of
        every rank's batch, not a one-batch run's: left out (and flagged for the comparison), parameters kept."""
        if entry.input is None and entry.output is None and not entry.kwargs:
            return msgspec.structs.replace(entry, other_batches=True)
        left_out = "activations left out: they hold the routed tokens of every expert-parallel rank's batch"
        self.merges[key] = left_out + ("; parameters compared" if entry.parameters else "")
        return msgspec.structs.replace(
            entry, input=None, output=None, kwargs={}, stream_input=None, stream_output=None, other_batches=True
        )

    def _replicas(
        self, key: str, copies: list[ModuleEntry | None], ranks: list[int], parameters_only: bool = False
    ) -> ModuleEntry:
        """A module every peer computes identically (EP peers outside the experts): the first copy, with any
        disagreement of a slot recorded (`parameters_only`: of a weight, for peers that read other batches)."""
        first = copies[0]
        assert first is not None
        if all(c == first for c in copies[1:]):
            return first  # the common case: nothing to compare slot by slot
        self.varied.add(key)
        found = list(_carried(copies))
        for slot, _ in entry_slots(first):
            if parameters_only and not slot.startswith("parameters."):
                continue
            others = [slot_stats(c, slot) if c is not None else None for c in copies]
            disagreement = _disagreement(slot, others, ranks, self.source)
            if disagreement is not None:
                found.append(disagreement)
        if found:
            described = [d.describe() for d in found if d not in first.disagreements]
            if described:
                self.merges[key] = "; ".join(described)
            return msgspec.structs.replace(first, disagreements=tuple(found))
        return first

    def _shards(self, key: str, parts: list[ModuleEntry], ranks: list[int], what: str) -> ModuleEntry:
        """Every differing slot concatenated along the token dim (the ranks' partial results of one module)."""
        first = parts[0]
        if all(p == first for p in parts[1:]):
            return first
        self.varied.add(key)
        merged: dict[str, TensorStats | None] = {}
        for slot, stats in entry_slots(first):
            copies = [slot_stats(p, slot) for p in parts]
            if stats is None or any(c is None for c in copies) or all(c == stats for c in copies[1:]):
                merged[slot] = stats
            else:
                merged[slot] = aggregate(copies, _concatenated(stats.shape, 0, len(copies)))  # type: ignore[arg-type]
        self.merges[key] = f"{what} partial results concatenated over {len(parts)} ranks"
        return _with_slots(first, merged, _carried(parts))

    def _tensor_parallel(self, key: str, parts: Sequence[ModuleEntry], ranks: list[int]) -> ModuleEntry:
        """Peers that are not all equal, slot by slot."""
        first = parts[0]
        kind = _parallel_kind(first.class_name)
        qkv = (
            qkv_entry(self._qkv_layout(key, ranks), self.dumps, self.source.files, ranks, key)
            if QKV_CLASS in first.class_name
            else None
        )
        merged: dict[str, TensorStats | None] = {}
        described: list[str] = []
        found: list[Disagreement] = list(_carried(parts))
        same_inputs = kind is None and _same_inputs(parts)
        for slot, _ in entry_slots(first):
            copies = [slot_stats(p, slot) for p in parts]
            stats, how, disagreement = self._slot(slot, copies, kind, ranks, first.call_index, qkv, same_inputs)
            merged[slot] = stats
            if not how.startswith("sharded") and any(c != copies[0] for c in copies[1:]):
                self.varied.add(key)
            if how:
                described.append(
                    f"{slot} {how}{merged_column_how(first.class_name) if how.startswith('sharded') else ''}"
                )
            if disagreement is not None:
                found.append(disagreement)
                described.append(disagreement.describe())
        if described:  # after what joining the experts said (their activations left out)
            self.merges[key] = "; ".join(([self.merges[key]] if key in self.merges else []) + described)
        return _with_slots(first, merged, tuple(found))

    def _qkv_layout(self, key: str, ranks: list[int]) -> QkvLayout:
        """How the fused q/k/v projection `key` of these tensor-parallel peers spreads KV heads: decided for every
        projection of the group when the first is merged (each on its own evidence, checked against the others);
        said once in the notes."""
        group = tuple(ranks)
        layouts = self.qkv_layouts.get(group)
        if layouts is None:
            first = self.dumps[ranks[0]]
            keys = [k for k in first.keys if QKV_CLASS in first.entries[k].class_name]
            names = [self.source.ranks[r] for r in ranks]
            layouts = find_qkv_layouts(self.dumps, self.source.files, ranks, keys, names)
            self.qkv_layouts[group] = layouts
            if len(self.qkv_layouts) == 1:
                self.notes += layout_notes(layouts, {k: first.entries[k].path for k in keys}, len(ranks))
        return layouts[key]

    def _slot(
        self,
        slot: str,
        copies: list[TensorStats | None],
        kind: str | None,
        ranks: list[int],
        call: int,
        qkv: QkvEntry | None = None,
        same_inputs: bool = False,
    ) -> tuple[TensorStats | None, str, Disagreement | None]:
        """(merged statistics, how they were merged, a disagreement of replicas); `qkv` for the slots of a fused
        q/k/v projection; `same_inputs`: the module is no parallel layer and every rank gave it the same inputs."""
        first = copies[0]
        if first is None or any(c is None for c in copies):
            return first, "", None
        stats: list[TensorStats] = copies  # type: ignore[assignment]
        if all(c == first for c in stats[1:]):
            return first, "", None
        tol = _TOLERANCES.for_dtypes(first.dtype)
        worst = max(copy_difference(first, c) for c in stats[1:])
        parameter = slot.startswith("parameters.")
        dim = _shard_dim(slot, kind, first)
        if parameter and dim is None:
            if worst <= tol:
                return first, "", None
            return first, "", _disagreement(slot, copies, ranks, self.source)
        if worst <= tol and not parameter:
            return first, f"replicated (copies differ by {worst:.2g}, within noise)", None
        identity = _tensor_identity(first)
        if dim is None:  # an activation of a module that is not a parallel layer: along the sequence or features
            dim = _same_tensor_dim(self.decided.get(identity), first.shape)
            if dim is _UNDECIDED:
                if leading_size(first) * len(stats) == self.dumps[ranks[0]].tokens_per_call.get(call, 0):
                    dim = 0  # sequence parallel: each rank holds a slice of the tokens
                    self.sequence_parallel = True
                elif slot == "output" and kind == "row":
                    # A row-parallel output whose copies differ was not all-reduced inside the module (SGLang
                    # reduces o_proj / down_proj outputs after it): each rank's partial sum.
                    dim = _PARTIAL_SUMS
                elif kind is not None or (same_inputs and slot in ("output", "stream_output")):
                    # A parallel layer's class says this slot is whole on every rank (a column-parallel input); a
                    # module that holds no shard computes the same output from the same inputs. Copies that differ
                    # there are replicas that disagree (a desynced weight upstream, a non-deterministic kernel),
                    # not shards of a tensor twice as wide.
                    dim = None
                else:
                    dim = max(len(first.shape or ()) - 1, 0)
        # one tensor is often dumped twice (a module's output is the next one's input, a container's output its
        # last child's, e.g. SGLang's Qwen2MLP returning its down_proj's partial sums): where it is seen again it is
        # what it was first decided to be
        self.decided.setdefault(identity, (first.shape, dim))
        if dim is None:
            return first, "", _disagreement(slot, copies, ranks, self.source)
        if dim == _PARTIAL_SUMS:
            return _sum_of_all(stats), _PARTIAL_SUMS_HOW.format(len(stats)), None
        if qkv is not None and not slot.startswith("input"):
            merged, how = qkv.merge(slot, stats, dim)
            return merged, how, None
        shape = _concatenated(first.shape, dim, len(stats))
        return aggregate(stats, shape), f"sharded along dim {dim} over {len(stats)} ranks", None


_UNDECIDED = -1  # not a dim: a tensor not seen yet (see _Merger.decided)
_PARTIAL_SUMS = -2  # not a dim: each rank holds a partial sum of the whole tensor
_PARTIAL_SUMS_HOW = "partial sums over {} ranks (reduced after this module): only the Mean of their sum is known"


def _sum_of_all(parts: Sequence[TensorStats]) -> TensorStats:
    """What the statistics of the sum of same-shape tensors say exactly: the Mean; Max, Min and Norm unknown."""
    means = [part.mean for part in parts]
    mean = sum(means) if all(type(m) is float for m in means) else None
    first = parts[0]
    return TensorStats(first.dtype, first.shape, None, None, mean, None)


def _same_tensor_dim(
    decided: tuple[tuple[int, ...] | None, int | None] | None, shape: tuple[int, ...] | None
) -> int | None:
    """What a tensor seen before was decided to be (its shape then, the dim it is sharded along, _PARTIAL_SUMS, or
    None for a replica), for this view of it: the sharded size's dim, last first (a transpose moves the others); _UNDECIDED
    when it was not seen or the size is not in this view."""
    if decided is None:
        return _UNDECIDED
    seen_shape, dim = decided
    if dim is None or dim == _PARTIAL_SUMS or seen_shape == shape:
        return dim
    size = seen_shape[dim] if seen_shape and dim < len(seen_shape) else None
    return next((d for d in reversed(range(len(shape or ()))) if shape[d] == size), _UNDECIDED)  # type: ignore[index]


def _tensor_identity(stats: TensorStats) -> tuple[object, ...]:
    """What tells one dumped tensor from another: where a module's output is the next one's input, both entries
    hold these same statistics (the shape may be another view: a transpose, a flattened batch)."""
    return stats.dtype, stats.numel, stats.max, stats.min, stats.mean, stats.norm


def _same_inputs(parts: Sequence[ModuleEntry]) -> bool:
    """Every rank's copy of the entry has the same dumped inputs (its primary input, keyword tensors and second
    float input), within their dtype's noise."""
    first = parts[0]
    if first.input is None:
        return False
    for slot, stats in entry_slots(first):
        if not slot.startswith(("input", "stream_input")):
            continue
        for part in parts[1:]:
            copy = slot_stats(part, slot)
            if (stats is None) != (copy is None):
                return False
            if (
                stats is not None
                and copy is not None
                and copy_difference(stats, copy) > _TOLERANCES.for_dtypes(stats.dtype)
            ):
                return False
    return True


@lru_cache(maxsize=1 << 12)
def _parallel_kind(class_name: str) -> str | None:
    if any(token in class_name for token in _COLUMN_CLASSES):
        return "column"
    if any(token in class_name for token in _ROW_CLASSES):
        return "row"
    return None


def _shard_dim(slot: str, kind: str | None, stats: TensorStats) -> int | None:
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


def _concatenated(shape: tuple[int, ...] | None, dim: int, count: int) -> tuple[int, ...] | None:
    if not shape or dim >= len(shape):
        return None
    return shape[:dim] + (shape[dim] * count,) + shape[dim + 1 :]


def _disagreement(
    slot: str, copies: list[TensorStats | None], ranks: list[int], source: DumpSource
) -> Disagreement | None:
    first = copies[0]
    if first is None:
        return None
    tol = _TOLERANCES.for_dtypes(first.dtype)
    differing: list[int] = []
    worst = 0.0
    for rank, copy in zip(ranks[1:], copies[1:]):
        error = copy_difference(first, copy) if copy is not None else float("inf")
        if error > tol:
            differing.append(source.ranks[rank])
            worst = max(worst, error)
    return Disagreement(slot, "ranks", source.ranks[ranks[0]], tuple(differing), worst) if differing else None


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


def _carried(entries: Sequence[ModuleEntry | None]) -> tuple[Disagreement, ...]:
    """The disagreements the entries of one logical module already carry (with data-parallel replicas), once each:
    merging the ranks keeps them."""
    return tuple(dict.fromkeys(d for e in entries if e is not None for d in e.disagreements))


def _with_slots(
    entry: ModuleEntry, merged: dict[str, TensorStats | None], disagreements: tuple[Disagreement, ...]
) -> ModuleEntry:
    kwargs = {n: merged[f"input_kwargs.{n}"] or s for n, s in entry.kwargs.items()}
    parameters = {n: merged[f"parameters.{n}"] or s for n, s in entry.parameters.items()}
    return msgspec.structs.replace(
        entry,
        input=merged["input"],
        output=merged["output"],
        kwargs=kwargs or entry.kwargs,
        parameters=parameters or entry.parameters,
        stream_input=merged.get("stream_input", entry.stream_input),
        stream_output=merged.get("stream_output", entry.stream_output),
        disagreements=disagreements,
    )


# ---------------------------------------------------------------------------------------------------------------
# Pipeline stages
# ---------------------------------------------------------------------------------------------------------------


def _layer_indices(keys: Iterable[str]) -> list[int]:
    return sorted({int(m.group(1)) for k in keys if (m := _LAYER_RE.search(k))})


def _join_stages(
    stages: list[tuple[list[str], dict[str, ModuleEntry]]],
    first_ranks: list[int],
    merges: list[tuple[dict[str, str], set[str]]],
) -> tuple[list[str], dict[str, ModuleEntry], dict[str, tuple[int, str]], dict[str, str], set[str]]:
    """Stages in order, layers renamed to global indices (in the keys and in each stage's `merges`: how its keys'
    slots were merged, and its varied keys, see ParallelInfo.varied); a module on several stages (model, block)
    completes on the last: its input comes from the first stage that saw one, its output from the last."""
    if len(stages) == 1:
        keys, entries = stages[0]
        return list(keys), dict(entries), {}, *merges[0]
    renamed: list[list[tuple[str, ModuleEntry]]] = []
    origins: dict[str, tuple[int, str]] = {}
    merged_how: dict[str, str] = {}
    varied: set[str] = set()
    offset = 0
    for (keys, entries), rank, (how, stage_varied) in zip(stages, first_ranks, merges):
        stage = []
        for key in keys:
            entry = entries[key]
            match = _LAYER_RE.search(entry.path) if offset else None
            if match is not None:
                path = entry.path[: match.start(1)] + str(offset + int(match.group(1))) + entry.path[match.end(1) :]
                new_key = _renamed_key(key, entry.path, path)
                entry = _rename(entry, new_key, path)
            else:
                new_key = key
            stage.append((new_key, entry))
            if key in how:
                merged_how[new_key] = how[key]  # a module on several stages: as its last stage merged it
            if key in stage_varied:
                varied.add(new_key)
            if rank != 0 or new_key != key:
                origins.setdefault(new_key, (rank, key))
        renamed.append(stage)
        offset += len(_layer_indices(keys))
    last_stage_of: dict[str, int] = {}
    for index, stage in enumerate(renamed):
        for key, _ in stage:
            last_stage_of[key] = index
    keys_out: list[str] = []
    entries_out: dict[str, ModuleEntry] = {}
    seen: dict[str, ModuleEntry] = {}
    for index, stage in enumerate(renamed):
        for key, entry in stage:
            earlier = seen.get(key)
            if earlier is not None:
                entry = msgspec.structs.replace(
                    entry,
                    input=earlier.input or entry.input,
                    kwargs=earlier.kwargs or entry.kwargs,
                    output=entry.output or earlier.output,
                )
            if last_stage_of[key] != index:
                seen[key] = entry
                continue
            keys_out.append(key)
            entries_out[key] = entry
    return keys_out, entries_out, {k: v for k, v in origins.items() if k in entries_out}, merged_how, varied


def _renumber(keys: list[str], entries: dict[str, ModuleEntry]) -> None:
    """Positions in the logical dump's order (keys were dropped, experts and stages joined)."""
    for position, key in enumerate(keys):
        if entries[key].position != position:
            entries[key] = msgspec.structs.replace(entries[key], position=position)
