"""Expert-parallel ranks: ranks that hold other experts (the same weights outside them), experts renumbered to
their global index, and EP ranks that read their own batches."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Iterator, Sequence

from rca_lsp.dumps.dump import Dump, ModuleEntry
from rca_lsp.dumps.ranks.slots import MERGE_TOLERANCES, parallel_kind
from rca_lsp.dumps.sources import DumpSource
from rca_lsp.model.stats import copy_difference

EXPERT_RE = re.compile(r"(?<![^.])local_experts\.(\d+)(?=\.|$)")


_EXPERTS_SCOPE_RE = re.compile(r"(?<![^.])experts(?=\.|$)")  # a module of the experts: per-rank partial on EP ranks


def expert_free(dump: Dump) -> list[str]:
    return [k for k in dump.keys if not is_expert_path(dump.entries[k].path)]


def unweighed_experts(dump: Dump) -> bool:
    """The dump has experts, none with its weights dumped."""
    experts = [e for e in dump.entries.values() if EXPERT_RE.search(e.path)]
    return bool(experts) and not any(e.parameters for e in experts)


def _compared_weights(a: Dump, b: Dump, experts: bool) -> Iterator[tuple[ModuleEntry, ModuleEntry]]:
    """The two ranks' copies of the modules with weights inside (or outside) the experts."""
    other = b.entries
    return (
        (e, other[k]) for k, e in a.entries.items() if e.parameters and k in other and is_expert_path(e.path) == experts
    )


@lru_cache(maxsize=1 << 16)
def is_expert_path(path: str) -> bool:
    """A module path inside a MoE layer's experts (a dump's paths repeat over its calls and ranks)."""
    return _EXPERTS_SCOPE_RE.search(path) is not None


def hold_other_experts(a: Dump, b: Dump) -> bool:
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
    rest = [(e, o) for e, o in rest if parallel_kind(e.class_name)] or rest
    return 2 * sum(e.parameters == o.parameters for e, o in rest) > len(rest)


def ep_reads_own_data(dumps: Sequence[Dump], group: list[int], tp: int, ep: int) -> bool:
    """Do the expert-parallel ranks of a data-parallel group read their own batches? Then the modules outside the
    experts (embedding, attention, router, the MoE layer's combined output) differ from EP rank 0's beyond
    noise; with one batch for all they are copies (the token dispatcher returns each rank its own tokens)."""
    for t in range(tp):
        reference = dumps[group[t]]
        keys = expert_free(reference)
        for e in range(1, ep):
            other = dumps[group[t + e * tp]]
            for key in keys:
                mine, theirs = reference.entries[key].output, other.entries.get(key)
                copy = theirs.output if theirs is not None else None
                if mine is not None and copy is not None and mine != copy:
                    difference = copy_difference(mine, copy)  # None: a copy without statistics tells nothing
                    if difference is not None and difference > MERGE_TOLERANCES.for_dtypes(mine.dtype):
                        return True
    return False


def own_data_note(first: list[int], ep: int, dp: int, source: DumpSource) -> str:
    """`first`: the ranks of EP rank 0 (its tensor-parallel peers, on every stage)."""
    ranks = ", ".join(str(source.ranks[i]) for i in first)
    return (
        f"expert parallel, each EP rank its own batch: the ep={ep} EP ranks differ outside their experts (they are "
        f"data-parallel ranks of the dense layers: Megatron's data-parallel size is ep x dp = {ep * dp}); the "
        f"modules outside the experts are EP rank 0's (rank{'s' if len(first) > 1 else ''} {ranks}), the experts "
        "are merged across the EP ranks by global index. Every expert got routed tokens of every EP rank's batch, "
        "which a rollout of one batch did not see: the experts' activations are left out, their parameters compared"
    )
