"""Per-expert train modules against one rollout module holding every expert (HF MixtralExperts, vLLM FusedMoE).

Names do not pair them (`experts.local_experts.<j>.linear_fc1` against `experts`), and their activations are
different tensors; their weights together are the same elements, so the parameters' total size decides, and the
statistics say how sure the pairing is (they differ when a weight is desynced, which the analysis then reports).
"""

from __future__ import annotations

from rca_lsp.compare.groupform import is_experts_container
from rca_lsp.model.stats import aggregate, copy_difference
from rca_lsp.model.tolerance import Tolerances
from rca_lsp.suggest.confidence import Assessment
from rca_lsp.suggest.index import SideIndex
from rca_lsp.suggest.proposal import Proposal

SAME_WEIGHTS_CONFIDENCE = 0.95
SAME_SIZE_CONFIDENCE = 0.7  # the weights' total size matches, their statistics do not


def fused_expert_proposals(
    train: SideIndex,
    rollout: SideIndex,
    claimed_train: set[str],
    claimed_rollout: set[str],
    existing_owners: dict[str, list[str]],
) -> list[Proposal]:
    """`existing_owners`: rollout key -> the train keys the existing mapping already maps to it (a partly written
    experts group is completed, not left alone)."""
    proposals = []
    tolerances = Tolerances()
    for key in rollout.dump.keys:
        entry = rollout.entries[key]
        kept = existing_owners.get(key, [])
        if (key in claimed_rollout and not kept) or not entry.parameters or not is_experts_container(entry):
            continue
        experts = tuple(
            k
            for k in train.scopes.get(rollout.scope_of(key), ())
            if k not in claimed_train and ".experts." in train.entries[k].path and train.entries[k].parameters
        )
        if len(experts) + len(kept) < 2 or not experts:
            continue
        mine = aggregate(
            [p for k in (*kept, *experts) if k in train.entries for p in train.entries[k].parameters.values()]
        )
        theirs = aggregate(list(entry.parameters.values()))
        if mine.numel is None or mine.numel != theirs.numel:
            continue
        difference = copy_difference(theirs, mine)  # None: statistics missing, nothing known to be the same
        same = difference is not None and difference <= tolerances.for_dtypes(mine.dtype, theirs.dtype)
        reason = (
            "per-expert weights together equal the fused experts module's parameters"
            if same
            else "per-expert weights together have the fused experts module's size, but other statistics"
        )
        proposals.append(
            Proposal(experts, (key,), Assessment(SAME_WEIGHTS_CONFIDENCE if same else SAME_SIZE_CONFIDENCE, reason))
        )
    return proposals
