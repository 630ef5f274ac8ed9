"""Mapping-key suggestion: proposes train -> rollout module pairs from names, order, shapes and statistics."""

from __future__ import annotations

from rca_lsp.dumps.dump import Dump
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
    "suggest_mapping",
]


def suggest_mapping(
    train: Dump, rollout: Dump, existing: dict[str, MappingValue] | None = None, rules: NamingRules | None = None
) -> SuggestionResult:
    """Propose rollout keys for every train key the existing mapping lacks (see Matcher.suggest)."""
    return Matcher(train, rollout, rules).suggest(existing)
