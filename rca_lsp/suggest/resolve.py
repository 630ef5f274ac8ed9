"""From accepted and rejected proposals to the mapping, the suggestions and what stays unmatched."""

from __future__ import annotations

from rca_lsp.suggest.index import SideIndex
from rca_lsp.suggest.proposal import Proposal
from rca_lsp.suggest.result import (
    MappingGroup,
    MappingValue,
    Suggestion,
    SuggestionResult,
    as_mapping_value,
    mapping_keys,
)

_LOST_CLAIM = "its rollout module went to a stronger candidate"


def build_result(
    train: SideIndex,
    rollout: SideIndex,
    existing: dict[str, MappingValue],
    accepted: list[Proposal],
    rejected: list[Proposal],
) -> SuggestionResult:
    chosen = {key: _suggestion(key, proposal, accepted=True) for proposal in accepted for key in proposal.train_keys}
    unchosen: dict[str, Suggestion] = {}
    for proposal in rejected:
        for key in proposal.train_keys:
            if key in chosen or key in existing:
                continue
            current = unchosen.get(key)
            if current is None or proposal.confidence > current.confidence:
                unchosen[key] = _suggestion(key, proposal, accepted=False)
    mapping: dict[str, MappingValue] = {}
    suggestions: list[Suggestion] = []
    for key in train.dump.keys:
        if key in existing:
            mapping[key] = existing[key]
        elif key in chosen:
            mapping[key] = as_mapping_value(chosen[key].rollout_keys)
            suggestions.append(chosen[key])
        elif key in unchosen:
            suggestions.append(unchosen[key])
    mapping.update((key, value) for key, value in existing.items() if key not in mapping)
    mapped_rollout = {key for value in mapping.values() for key in mapping_keys(value)}
    return SuggestionResult(
        mapping=mapping,
        suggestions=suggestions,
        low_confidence=[suggestion for suggestion in suggestions if not suggestion.accepted],
        unmatched_train=[key for key in train.dump.keys if key not in mapping],
        unmatched_rollout=[key for key in rollout.dump.keys if key not in mapped_rollout],
        groups=find_groups(mapping),
        kept=len(existing),
        train_total=len(train.dump.keys),
        rollout_total=len(rollout.dump.keys),
    )


def _suggestion(train_key: str, proposal: Proposal, accepted: bool) -> Suggestion:
    reason = proposal.assessment.reason
    if not accepted and proposal.assessment.accepted:
        reason = f"{reason}; {_LOST_CLAIM}"
    return Suggestion(train_key, list(proposal.rollout_keys), proposal.confidence, reason, accepted)


def find_groups(mapping: dict[str, MappingValue]) -> list[MappingGroup]:
    """1:N entries (a list value) and N:1 sets (several train keys naming the same rollout key), in mapping order."""
    groups = [
        MappingGroup("1:N", [train_key], list(value))
        for train_key, value in mapping.items()
        if isinstance(value, list) and len(value) > 1
    ]
    sharing: dict[str, list[str]] = {}
    for train_key, value in mapping.items():
        for rollout_key in mapping_keys(value):
            sharing.setdefault(rollout_key, []).append(train_key)
    groups += [
        MappingGroup("N:1", train_keys, [rollout_key])
        for rollout_key, train_keys in sharing.items()
        if len(train_keys) > 1
    ]
    return groups
