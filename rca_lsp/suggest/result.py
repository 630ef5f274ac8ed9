"""What the matcher hands back: suggestions, ranked candidates, and the resulting mapping with its coverage."""

from __future__ import annotations

from dataclasses import dataclass, field

MappingValue = str | list[str]


@dataclass(frozen=True, slots=True)
class Suggestion:
    train_key: str
    rollout_keys: list[str]
    confidence: float  # 0..1
    reason: str
    accepted: bool  # written to the mapping (confidence high enough and not beaten by another claim)


@dataclass(frozen=True, slots=True)
class Candidate:
    keys: list[str]  # one key, or the keys of a split group
    score: float  # 0..1, higher is better
    reason: str


@dataclass(frozen=True, slots=True)
class MappingGroup:
    kind: str  # "1:N" (one train module, split rollout modules) or "N:1" (split train modules, one rollout module)
    train_keys: list[str]
    rollout_keys: list[str]


@dataclass
class SuggestionResult:
    mapping: dict[str, MappingValue]  # train dump order; entries from the existing mapping kept
    suggestions: list[Suggestion]  # one per train key the existing mapping lacked and a candidate was found for
    low_confidence: list[Suggestion]  # the suggestions not written to the mapping
    unmatched_train: list[str]  # train dump order
    unmatched_rollout: list[str]  # rollout dump order
    groups: list[MappingGroup]
    kept: int = 0  # entries taken over from the existing mapping
    train_total: int = 0
    rollout_total: int = 0
    accepted: list[Suggestion] = field(init=False)

    def __post_init__(self) -> None:
        self.accepted = [suggestion for suggestion in self.suggestions if suggestion.accepted]


def as_mapping_value(keys: list[str]) -> MappingValue:
    return keys[0] if len(keys) == 1 else list(keys)


def mapping_keys(value: MappingValue) -> list[str]:
    return [value] if isinstance(value, str) else list(value)
