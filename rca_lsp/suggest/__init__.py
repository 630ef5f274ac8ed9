"""Mapping-key suggestion: proposes train -> rollout module pairs from names, order, shapes and statistics."""

from __future__ import annotations

from rca_lsp.core.dump import Dump
from rca_lsp.suggest.matcher import Matcher
from rca_lsp.suggest.result import Candidate, MappingGroup, MappingValue, Suggestion, SuggestionResult
from rca_lsp.suggest.rules import NamingRules

__all__ = [
    "Candidate",
    "MappingGroup",
    "Matcher",
    "NamingRules",
    "Suggestion",
    "SuggestionResult",
    "rank_rollout_candidates",
    "rank_train_candidates",
    "suggest_mapping",
]


def suggest_mapping(train: Dump, rollout: Dump, existing: dict[str, MappingValue] | None = None,
                    rules: NamingRules | None = None) -> SuggestionResult:
    """Propose rollout keys for every train key the existing mapping lacks (see Matcher.suggest)."""
    return Matcher(train, rollout, rules).suggest(existing)


def rank_rollout_candidates(train: Dump, rollout: Dump, train_key: str, limit: int = 5,
                            text_hint: str | None = None) -> list[Candidate]:
    """One-off ranking; interactive callers should keep a Matcher per dump pair and call its method."""
    return Matcher(train, rollout).rank_rollout_candidates(train_key, limit, text_hint)


def rank_train_candidates(train: Dump, rollout: Dump, text_hint: str, limit: int = 5) -> list[Candidate]:
    """One-off ranking; interactive callers should keep a Matcher per dump pair and call its method."""
    return Matcher(train, rollout).rank_train_candidates(text_hint, limit)
