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
   report says so (when the dumps cannot tell, too); the source's `data_rank` selects another group (the one whose
   data the rollout read, chosen by the caller, which sees both sides); a weight a replica holds otherwise than its first-group peer
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

from pathlib import Path
from typing import Callable, Sequence

from rca_lsp.dumps.dump import Dump, ParallelInfo, combined_dump
from rca_lsp.dumps.rankload import load_rank_files
from rca_lsp.dumps.ranks.plan import Plan, plan_merge
from rca_lsp.dumps.ranks.shards import Merger
from rca_lsp.dumps.ranks.stages import join_stages, renumber
from rca_lsp.dumps.sources import DumpSource


def load_ranks(source: DumpSource, load_files: Callable[[Sequence[Path]], list[Dump]] | None = None) -> Dump:
    """Load every rank file of the source (with `load_files`, e.g. on both cores) and merge them; errors name the
    rank file."""
    dumps = (load_files or load_rank_files)(source.files)
    return merge_ranks(dumps, source)


def merge_ranks(dumps: Sequence[Dump], source: DumpSource) -> Dump:
    plan = plan_merge(dumps, source)
    merger = Merger(plan.dumps, source)
    stage_dumps, stage_merges = [], []
    for ranks in plan.stages:
        merger.merges, merger.varied = {}, set()  # per stage: keys are the stage's local names until stages join
        stage_dumps.append(merger.stage(ranks, plan))
        stage_merges.append((merger.merges, merger.varied))
    keys, entries, origins, merger.merges, varied = join_stages(
        stage_dumps, [ranks[0] for ranks in plan.stages], stage_merges
    )
    renumber(keys, entries)
    merger.origins.update(origins)
    (first, *_), *later_stages = plan.stages
    if first != 0 and not later_stages:
        # The analysed data-parallel group is not the first (the rollout read another group's data): its files hold
        # the merged entries, not file 0 (the default origin). join_stages says so for several stages.
        for key in keys:
            merger.origins.setdefault(key, (first, key))
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
        plan.notes + merger.notes + merger.unknown_notes(),
        merger.merges,
        merger.origins,
        merger.dropped,
        _tensor_parallel_peers(plan),
        frozenset(varied),
        plan.data_groups,
        plan.analysed_group,
    )
    return combined_dump(
        source.label, dumps, keys, entries, info, frozenset().union(*(d.null_keys for d in dumps)) - set(entries)
    )


def _tensor_parallel_peers(plan: Plan) -> dict[int, tuple[int, ...]]:
    """Each merged rank's tensor-parallel peers (itself included): the ranks of its stage and expert-parallel rank
    in the analysed data-parallel group, Megatron's rank order (tp fastest, then ep) within it."""
    peers: dict[int, tuple[int, ...]] = {}
    for ranks in plan.stages:
        for e in range(plan.ep):
            group = tuple(ranks[e * plan.tp : (e + 1) * plan.tp])
            peers.update(dict.fromkeys(group, group))
    return peers
