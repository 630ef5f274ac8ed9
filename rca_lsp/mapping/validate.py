"""Mapping entries checked against both dumps: unknown keys, with the closest existing keys as suggestions."""

from __future__ import annotations

import itertools
from typing import Iterable, NamedTuple

from rapidfuzz import fuzz, process

from rca_lsp.dumps.dump import Dump
from rca_lsp.mapping.model import MappingEntry, MappingIssue, ParsedMapping, Span
from rca_lsp.model.keys import parse_module_key, same_module, unwrapped_key, unwrapped_path, wrapper_parts

MAX_SUGGESTED_LOOKUPS = 25  # each costs ~20-50 ms on 10^5 keys; beyond a few the mapping belongs to another dump

Suggestions = dict[tuple[str, str], tuple[str, ...]]  # (dump path, key) -> closest keys, kept across analyses


def closest_keys(key: str, dump: Dump, limit: int = 3) -> tuple[str, ...]:
    """The dump's keys of the same module named with or without wrappers (FSDP, checkpointing, compile, DDP: see
    model.keys.unwrapped_key), then the closest by spelling."""
    same = tuple(_by_unwrapped_name(dump).get(unwrapped_key(key), ()))[:limit]
    found = process.extract(key, dump.keys, scorer=fuzz.ratio, limit=limit, score_cutoff=60)
    return tuple(dict.fromkeys(same + tuple(match for match, _score, _index in found)))[:limit]


NOT_DUMPED = "not-dumped"


class _Names(NamedTuple):
    """A dump's keys by their names without wrappers, and its module paths (without wrappers) with and without a
    record."""

    keys: list[str]  # the dump's key list these were built from
    by_unwrapped: dict[str, list[str]]
    recorded: frozenset[str]
    unrecorded_parents: frozenset[str]  # paths with recorded submodules but no record of their own


_NAMES: dict[int, _Names] = {}  # id(dump) -> its names, for a few dumps


def _names(dump: Dump) -> _Names:
    """Built once per dump, on its first unknown key."""
    cached = _NAMES.get(id(dump))
    if cached is not None and cached.keys is dump.keys:
        return cached
    index: dict[str, list[str]] = {}
    recorded: set[str] = set()
    for key in dump.keys:
        index.setdefault(unwrapped_key(key), []).append(key)
        recorded.add(unwrapped_path(dump.entries[key].path))
    parents = {path.rsplit(".", depth)[0] for path in recorded for depth in range(1, path.count(".") + 1)}
    names = _Names(dump.keys, index, frozenset(recorded), frozenset(parents - recorded))
    if len(_NAMES) >= 4:
        _NAMES.clear()
    _NAMES[id(dump)] = names
    return names


def _by_unwrapped_name(dump: Dump) -> dict[str, list[str]]:
    return _names(dump).by_unwrapped


def skipped_by_dumper(key: str, dump: Dump) -> str | None:
    """Why a module key has no record when the dump's shape says the dumper skipped it: msprobe writes no record of
    some modules (with `verl` imported, the model's second and last modules, e.g. `model` and `lm_head`); None when
    nothing says so."""
    parsed = parse_module_key(key[:-1] + "0" if key.endswith(".forward.*") else key)
    if parsed is None:
        return None
    names = _names(dump)
    path = unwrapped_path(parsed.path)
    if path in names.recorded:
        return None
    if path in names.unrecorded_parents:
        return (
            f"msprobe wrote no record of `{path}` though it wrote its submodules': it skips some modules (with "
            "`verl` imported, a model's second and last modules, such as `model` and `lm_head`), so this one "
            "cannot be compared; map its submodules instead"
        )
    top = sorted(p for p in names.unrecorded_parents if "." not in p)
    if "." not in path and top:
        return (
            f"probably skipped by msprobe: with `verl` imported it skips a model's second and last modules, and "
            f"this dump has no record of `{top[0]}` either, though it has its submodules'; this module cannot be "
            "compared"
        )
    return None


def _wrapper_hint(key: str, suggestions: tuple[str, ...]) -> str:
    """When the closest key is the same module under other wrapper names: which parts differ."""
    if not suggestions or not same_module(suggestions[0], key):
        return ""
    theirs, ours = wrapper_parts(suggestions[0]), wrapper_parts(key)
    seen = [p for p in theirs if p not in ours]
    if seen:
        return f"; the dump names this module with wrapper parts ({', '.join(seen)}): {suggestions[0]}"
    return f"; the dump names this module without the wrapper parts ({', '.join(ours)}): {suggestions[0]}"


class _Unknown:
    def __init__(self, suggestions: Suggestions) -> None:
        self.suggestions = suggestions
        self.lookups_left = MAX_SUGGESTED_LOOKUPS

    def closest(self, key: str, dump: Dump) -> tuple[str, ...]:
        cached = self.suggestions.get((dump.path, key))
        if cached is None:  # the same module under other wrapper names: one look-up in an index, no budget
            same = tuple(_by_unwrapped_name(dump).get(unwrapped_key(key), ()))
            if same:
                cached = self.suggestions[(dump.path, key)] = same[:3]
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
        hint = _wrapper_hint(key, suggestions) or (f"; closest: {', '.join(suggestions)}" if suggestions else "")
        renamed = bool(suggestions) and same_module(suggestions[0], key)
        skipped = None if renamed else skipped_by_dumper(key, dump)
        if skipped is not None:
            return MappingIssue(NOT_DUMPED, f"{side} key not in {dump.path}: {skipped}", span, train_key, ())
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
