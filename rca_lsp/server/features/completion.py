"""Completion of train keys (key position) and rollout keys (value position), best candidates first."""

from __future__ import annotations

import itertools
import re
from typing import Iterator

from lsprotocol import types

from rca_lsp.base.lines import line_start
from rca_lsp.compare.calls import all_calls_key, is_all_calls_key
from rca_lsp.diagnose.analysis import Analysis
from rca_lsp.dumps.dump import Dump
from rca_lsp.mapping.model import ParsedMapping
from rca_lsp.model.keys import matches_typed
from rca_lsp.server.matching import MatcherCache

MAX_ITEMS = 200
_WINDOW = 4000
_TOKEN_RE = re.compile(r'"[^"\\\n]*(?:\\.[^"\\\n]*)*"|[{}\[\]:,]')


def completion_context(text: str, offset: int) -> tuple[str, str, int] | None:
    """(position kind "key"|"value", typed prefix, offset of the opening quote) when the cursor is in a string."""
    start = line_start(text, offset)
    quote = text.rfind('"', start, offset)
    if quote < 0 or text[start:quote].count('"') % 2 == 1:
        return None
    before = text[max(0, quote - _WINDOW) : quote]
    tokens = _TOKEN_RE.findall(before)
    depth_list = 0
    for token in reversed(tokens):
        if token == "]":
            depth_list -= 1
        elif token == "[":
            depth_list += 1
            if depth_list > 0:
                return "value", text[quote + 1 : offset], quote
        elif token == ":" and depth_list == 0:
            return "value", text[quote + 1 : offset], quote
        elif token in ("{", ",") and depth_list == 0:
            return "key", text[quote + 1 : offset], quote
    return "key", text[quote + 1 : offset], quote


def _train_candidates(analysis: Analysis, mapping: ParsedMapping, offset: int, prefix: str) -> list[str]:
    mapped = mapping.effective()
    previous = mapping.entry_before(offset)
    known = previous is not None and previous.train_key in analysis.train.entries
    start = analysis.train.entries[previous.train_key].position + 1 if known else 0  # type: ignore[union-attr]
    keys = analysis.train.keys
    ordered = itertools.chain(keys[start:], keys[:start])  # the modules right after the previous entry come first
    return list(itertools.islice((k for k in ordered if k not in mapped and matches_typed(prefix, k)), MAX_ITEMS))


def _rollout_candidates(
    analysis: Analysis, mapping: ParsedMapping, offset: int, prefix: str, matchers: MatcherCache
) -> list[str]:
    found = mapping.entry_at(offset)
    ranked: list[str] = []
    if found is not None and found[0].train_key in analysis.train.entries:
        matcher = matchers.get(analysis.train, analysis.rollout)
        for candidate in matcher.rank_rollout_candidates(found[0].train_key, limit=10, text_hint=prefix or None):
            ranked += [k for k in candidate.keys if k not in ranked]
    rest = (k for k in _with_all_calls(analysis.rollout) if matches_typed(prefix, k) and k not in ranked)
    return ranked[:MAX_ITEMS] + list(itertools.islice(rest, max(0, MAX_ITEMS - len(ranked))))


def _with_all_calls(dump: Dump) -> Iterator[str]:
    """The dump's keys, each module with several calls offered first as `forward.*` (every call)."""
    for key in dump.keys:
        if dump.entries[key].call_index == 0 and len(dump.calls_of(all_calls_key(key))) > 1:
            yield all_calls_key(key)
        yield key


def _detail(analysis: Analysis, kind: str, key: str) -> str:
    if kind == "key":
        return "train module"
    if is_all_calls_key(key):
        return f"every call of this rollout module ({len(analysis.rollout.calls_of(key))} calls)"
    return "rollout module"


def complete(
    analysis: Analysis, mapping: ParsedMapping, offset: int, matchers: MatcherCache, to_range
) -> types.CompletionList | None:
    context = completion_context(mapping.text, offset)
    if context is None:
        return None
    kind, prefix, quote = context
    keys = (
        _train_candidates(analysis, mapping, offset, prefix)
        if kind == "key"
        else _rollout_candidates(analysis, mapping, offset, prefix, matchers)
    )
    edit_range = to_range(quote + 1, offset)
    items = [
        types.CompletionItem(
            label=key,
            kind=types.CompletionItemKind.Field if kind == "key" else types.CompletionItemKind.Value,
            sort_text=f"{rank:05d}",
            filter_text=key,
            text_edit=types.TextEdit(range=edit_range, new_text=key),
            detail=_detail(analysis, kind, key),
        )
        for rank, key in enumerate(keys)
    ]
    return types.CompletionList(is_incomplete=True, items=items)
