"""Mapping entries checked against both dumps: unknown keys, with the closest existing keys as suggestions."""

from __future__ import annotations

from rapidfuzz import fuzz, process

from rca_lsp.core.dump import Dump
from rca_lsp.core.mapping import MappingIssue, ParsedMapping, Span

MAX_SUGGESTED_LOOKUPS = 25  # each costs ~20-50 ms on 10^5 keys; beyond a few the mapping belongs to another dump


def closest_keys(key: str, dump: Dump, limit: int = 3) -> tuple[str, ...]:
    found = process.extract(key, dump.keys, scorer=fuzz.ratio, limit=limit, score_cutoff=60)
    return tuple(match for match, _score, _index in found)


def _unknown(code: str, side: str, key: str, dump: Dump, lookups_left: int, span: Span,
             train_key: str) -> MappingIssue:
    suggestions = closest_keys(key, dump) if lookups_left > 0 else ()
    hint = f"; closest: {', '.join(suggestions)}" if suggestions else ""
    return MappingIssue(code, f"unknown {side} key: not a forward module key of {dump.path}{hint}", span, train_key,
                        suggestions)


def validate_against_dumps(mapping: ParsedMapping, train: Dump, rollout: Dump) -> list[MappingIssue]:
    issues: list[MappingIssue] = []
    lookups_left = MAX_SUGGESTED_LOOKUPS
    for entry in mapping.entries:
        if entry.train_key not in train.entries:
            issues.append(_unknown("unknown-train-key", "train", entry.train_key, train, lookups_left, entry.key_span,
                                   entry.train_key))
            lookups_left -= 1
        for rollout_key, span in zip(entry.rollout_keys, entry.value_spans):
            if rollout_key not in rollout.entries:
                issues.append(_unknown("unknown-rollout-key", "rollout", rollout_key, rollout, lookups_left, span,
                                       entry.train_key))
                lookups_left -= 1
    return issues
