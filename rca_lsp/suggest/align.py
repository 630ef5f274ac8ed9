"""Order-based pairing of what names could not pair: within a layer and call, the modules left between two
already-paired modules are aligned in dump order, accepted only when shapes and statistics confirm them."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import defaultdict
from dataclasses import dataclass, field

from rca_lsp.suggest.confidence import SAME_PLACE, NameEvidence
from rca_lsp.suggest.index import Scope, SideIndex
from rca_lsp.suggest.proposal import Assessor, Proposal

MAX_CANDIDATES = 32  # rollout modules tried per train module, from the start of its window


@dataclass
class Alignment:
    accepted: list[Proposal] = field(default_factory=list)
    rejected: list[Proposal] = field(default_factory=list)  # the best unconfirmed, unrefuted candidate per module


def align_leftovers(
    assessor: Assessor, accepted: list[Proposal], claimed_train: set[str], claimed_rollout: set[str]
) -> Alignment:
    """Pair unclaimed train modules with unclaimed rollout modules between the same accepted pairs (anchors)."""
    train, rollout = assessor.train, assessor.rollout
    anchors: dict[Scope, list[tuple[int, int]]] = defaultdict(list)
    for proposal in accepted:
        first = proposal.train_keys[0]
        rollout_position = min(rollout.entries[key].position for key in proposal.rollout_keys)
        anchors[train.scope_of(first)].append((train.entries[first].position, rollout_position))
    alignment = Alignment()
    for scope, keys in train.scopes.items():
        leftovers = [key for key in keys if key not in claimed_train]
        free = [key for key in rollout.scopes.get(scope, ()) if key not in claimed_rollout]
        if leftovers and free:
            _align_scope(assessor, scope, leftovers, free, sorted(anchors.get(scope, ())), claimed_rollout, alignment)
    return alignment


def _align_scope(
    assessor: Assessor,
    scope: Scope,
    leftovers: list[str],
    free: list[str],
    anchors: list[tuple[int, int]],
    claimed_rollout: set[str],
    alignment: Alignment,
) -> None:
    train, rollout = assessor.train, assessor.rollout
    anchor_train_positions = [train_position for train_position, _ in anchors]
    free_positions = [rollout.entries[key].position for key in free]
    gap, floor = -1, -1
    for key in leftovers:
        position = train.entries[key].position
        index = bisect_left(anchor_train_positions, position)
        if index != gap:  # entering another gap between anchors: its window starts after the previous anchor
            gap, floor = index, anchors[index - 1][1] if index > 0 else -1
        ceiling = anchors[index][1] if index < len(anchors) else len(rollout.dump.keys)
        start = bisect_right(free_positions, floor)
        candidates = [
            free[slot]
            for slot in range(start, min(start + MAX_CANDIDATES, len(free)))
            if free_positions[slot] < ceiling and free[slot] not in claimed_rollout
        ]
        proposals = [
            assessor.with_name((key,), (candidate,), _same_place(train, rollout, scope, key, candidate))
            for candidate in candidates
        ]
        if not proposals:
            continue
        best = max(proposals, key=lambda proposal: proposal.confidence)
        if not best.assessment.accepted:
            if best.confidence > 0:  # worth listing: nothing speaks against it, only too little for it
                alignment.rejected.append(best)
            continue
        alignment.accepted.append(best)
        claimed_rollout.add(best.rollout_keys[0])
        floor = rollout.entries[best.rollout_keys[0]].position


def _same_place(train: SideIndex, rollout: SideIndex, scope: Scope, train_key: str, rollout_key: str) -> NameEvidence:
    layer, call = scope
    where = f"layer {layer}" if layer is not None else "outside the layers"
    train_name, rollout_name = train.entries[train_key].path, rollout.entries[rollout_key].path
    return NameEvidence(
        SAME_PLACE,
        f"no naming rule pairs {train_name.rpartition('.')[2]} with "
        f"{rollout_name.rpartition('.')[2]}; same place among unpaired modules "
        f"of {where}, call {call}",
    )
