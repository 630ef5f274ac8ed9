"""Mapping entries checked against both dumps: unknown keys, with the closest existing keys as suggestions."""

from __future__ import annotations

import itertools
from typing import Iterable

from rapidfuzz import fuzz, process

from rca_lsp.dumps.dump import Dump
from rca_lsp.mapping.model import MappingEntry, MappingIssue, ParsedMapping, Span

MAX_SUGGESTED_LOOKUPS = 25  # each costs ~20-50 ms on 10^5 keys; beyond a few the mapping belongs to another dump

Suggestions = dict[tuple[str, str], tuple[str, ...]]  # (dump path, key) -> closest keys, kept across analyses


def closest_keys(key: str, dump: Dump, limit: int = 3) -> tuple[str, ...]:
    found = process.extract(key, dump.keys, scorer=fuzz.ratio, limit=limit, score_cutoff=60)
    return tuple(match for match, _score, _index in found)


class _Unknown:
    def __init__(self, suggestions: Suggestions) -> None:
        self.suggestions = suggestions
        self.lookups_left = MAX_SUGGESTED_LOOKUPS

    def closest(self, key: str, dump: Dump) -> tuple[str, ...]:
        cached = self.suggestions.get((dump.path, key))
        if cached is None and self.lookups_left > 0:
            self.lookups_left -= 1
            cached = self.suggestions[(dump.path, key)] = closest_keys(key, dump)
        return cached or ()

    def issue(self, code: str, side: str, key: str, dump: Dump, span: Span, train_key: str) -> MappingIssue:
        if key in dump.null_keys:  # no suggestions: the key is right, its entry is empty
            return MappingIssue(
                code, f"{side} key has no entry data in {dump.path} (a null entry)", span, train_key, ()
            )
        suggestions = self.closest(key, dump)
        hint = f"; closest: {', '.join(suggestions)}" if suggestions else ""
        dropped = dump.parallel.dropped.get(key) if dump.parallel is not None else None
        what = (
            f"left out of the merged ranks of {dump.path} ({dropped})"
            if dropped
            else f"no calls of this module in {dump.path}"
            if key.endswith(".forward.*")
            else f"not a forward module key of {dump.path}"
        )
        return MappingIssue(code, f"unknown {side} key: {what}{hint}", span, train_key, suggestions)


def unknown_entries(entries: Iterable[MappingEntry], train: Dump, rollout: Dump) -> list[MappingEntry]:
    """The entries naming a key that is not in its dump, in the given order."""
    entries = list(entries)
    unknown_train = {e.train_key for e in entries if e.train_key not in train.entries}
    unknown_rollout = {
        k
        for k in itertools.chain.from_iterable(e.rollout_keys for e in entries)
        if k not in rollout.entries and not rollout.calls_of(k)
    }
    if not unknown_train and not unknown_rollout:
        return []
    return [e for e in entries if e.train_key in unknown_train or not unknown_rollout.isdisjoint(e.rollout_keys)]


def unknown_key_issues(
    mapping: ParsedMapping,
    flagged: list[MappingEntry],
    train: Dump,
    rollout: Dump,
    suggestions: Suggestions | None = None,
) -> list[MappingIssue]:
    """The issues of entries found by `unknown_entries` (in file order); `suggestions` caches the fuzzy lookups
    between calls."""
    unknown = _Unknown(suggestions if suggestions is not None else {})
    issues: list[MappingIssue] = []
    for entry in flagged:
        spans = mapping.spans(entry)
        if entry.train_key not in train.entries:
            issues.append(
                unknown.issue("unknown-train-key", "train", entry.train_key, train, spans.key, entry.train_key)
            )
        for rollout_key, span in zip(entry.rollout_keys, spans.values):
            if rollout_key not in rollout.entries and not rollout.calls_of(rollout_key):
                issues.append(
                    unknown.issue("unknown-rollout-key", "rollout", rollout_key, rollout, span, entry.train_key)
                )
    return issues
