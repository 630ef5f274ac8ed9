"""Quick fixes, one provider per diagnostic code."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import orjson
from lsprotocol import types

from rca_lsp.base.lines import line_break_of, line_start
from rca_lsp.diagnose.analysis import Analysis
from rca_lsp.mapping.model import MSPROBE_SUFFIXES, MappingEntry, ParsedMapping
from rca_lsp.model.keys import same_module
from rca_lsp.server import codes
from rca_lsp.server.diagnostics import SUMMARY
from rca_lsp.server.matching import MatcherCache
from rca_lsp.server.pairing import CONFIG_NAME, config_skeleton
from rca_lsp.server.positions import Positions


@dataclass
class ActionContext:
    uri: str
    version: int | None
    mapping: ParsedMapping
    positions: Positions
    analysis: Analysis | None
    matchers: MatcherCache

    def edit(self, edits: list[types.TextEdit]) -> types.WorkspaceEdit:
        document = types.OptionalVersionedTextDocumentIdentifier(uri=self.uri, version=self.version)
        return types.WorkspaceEdit(document_changes=[types.TextDocumentEdit(text_document=document, edits=edits)])


def _quick_fix(
    title: str, diagnostic: types.Diagnostic, edit: types.WorkspaceEdit, preferred: bool = False
) -> types.CodeAction:
    return types.CodeAction(
        title=title, kind=types.CodeActionKind.QuickFix, diagnostics=[diagnostic], edit=edit, is_preferred=preferred
    )


def _json_string(value: str) -> str:
    return orjson.dumps(value).decode()


def _replace_unknown(ctx: ActionContext, diagnostic: types.Diagnostic) -> list[types.CodeAction]:
    data = diagnostic.data if isinstance(diagnostic.data, dict) else {}
    suggestions = list(data.get("suggestions") or [])
    if ctx.analysis is not None and diagnostic.code == codes.UNKNOWN_TRAIN_KEY and "key" in data:
        matcher = ctx.matchers.get(ctx.analysis.train, ctx.analysis.rollout)
        ranked = [c.keys[0] for c in matcher.rank_train_candidates(str(data["key"]), limit=3) if len(c.keys) == 1]
        suggestions = list(dict.fromkeys(ranked + suggestions))
    actions = [
        _quick_fix(
            f"Replace with {key}",
            diagnostic,
            ctx.edit([types.TextEdit(range=diagnostic.range, new_text=_json_string(key))]),
            index == 0,
        )
        for index, key in enumerate(suggestions[:3])
    ]
    return actions + _rewrite_wrapper_names(ctx, diagnostic, suggestions)


def _key_at(ctx: ActionContext, start: int, end: int) -> str | None:
    try:
        value = orjson.loads(ctx.mapping.text[start:end])
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, str) else None


def _rewrite_wrapper_names(
    ctx: ActionContext, diagnostic: types.Diagnostic, suggestions: list[str]
) -> list[types.CodeAction]:
    """A mapping written for a model without wrappers (or with others) against a wrapped one (FSDP, checkpointing,
    compile): every key the dump names with other wrapper parts rewritten to the dump's name, in one edit."""
    start, end = ctx.positions.offset(diagnostic.range.start), ctx.positions.offset(diagnostic.range.end)
    key = _key_at(ctx, start, end)
    analysis = ctx.analysis
    if key is None or not suggestions or not same_module(key, suggestions[0]) or analysis is None:
        return []
    if analysis.mapping is not ctx.mapping:
        return []
    edits = []
    for issue in analysis.issues:
        named = _key_at(ctx, issue.span.start, issue.span.end)
        if issue.code in UNKNOWN_KEY_CODES and issue.suggestions and named and same_module(named, issue.suggestions[0]):
            edits.append(
                types.TextEdit(range=ctx.positions.range(issue.span), new_text=_json_string(issue.suggestions[0]))
            )
    if len(edits) < 2:
        return []
    return [_quick_fix(f"Rewrite the {len(edits)} keys to the dump's wrapper names", diagnostic, ctx.edit(edits))]


def _entry_text(train_key: str, rollout_keys: list[str], indent: str, line_break: str) -> str:
    value = (
        _json_string(rollout_keys[0])
        if len(rollout_keys) == 1
        else "[" + ", ".join(map(_json_string, rollout_keys)) + "]"
    )
    return f",{line_break}{indent}{_json_string(train_key)}: {value}"


def _entry_for(ctx: ActionContext, diagnostic: types.Diagnostic) -> MappingEntry | None:
    found = ctx.mapping.entry_at(ctx.positions.offset(diagnostic.range.start))
    return found[0] if found else None


def _indent_of(ctx: ActionContext, entry: MappingEntry) -> str:
    key_start = ctx.mapping.spans(entry).key.start
    start = line_start(ctx.mapping.text, key_start)
    prefix = ctx.mapping.text[start:key_start]
    return prefix if prefix.strip() == "" else "  "


def _add_unmapped(ctx: ActionContext, diagnostic: types.Diagnostic) -> list[types.CodeAction]:
    data = diagnostic.data if isinstance(diagnostic.data, dict) else {}
    entry = _entry_for(ctx, diagnostic)
    if entry is None:
        return []
    actions = []
    for item in list(data.get("unmapped") or [])[:5]:
        train_key, keys = item.get("train"), item.get("rollout")
        if not isinstance(train_key, str) or not isinstance(keys, list) or not keys:
            continue
        insert_at = ctx.positions.position(ctx.mapping.spans(entry).value.end)
        edit = ctx.edit(
            [
                types.TextEdit(
                    range=types.Range(start=insert_at, end=insert_at),
                    new_text=_entry_text(train_key, keys, _indent_of(ctx, entry), line_break_of(ctx.mapping.text)),
                )
            ]
        )
        actions.append(
            _quick_fix(f"Add mapping {train_key} → {' + '.join(keys)} ({item.get('reason', '')})", diagnostic, edit)
        )
    return actions


def _to_list(ctx: ActionContext, diagnostic: types.Diagnostic) -> list[types.CodeAction]:
    entry = _entry_for(ctx, diagnostic)
    if ctx.analysis is None or entry is None or entry.train_key not in ctx.analysis.train.entries:
        return []
    matcher = ctx.matchers.get(ctx.analysis.train, ctx.analysis.rollout)
    split = next((c for c in matcher.rank_rollout_candidates(entry.train_key, limit=5) if len(c.keys) > 1), None)
    if split is None:
        return []
    new_value = "[" + ", ".join(map(_json_string, split.keys)) + "]"
    edit = ctx.edit([types.TextEdit(range=ctx.positions.range(ctx.mapping.spans(entry).value), new_text=new_value)])
    return [_quick_fix(f"Map to the split modules ({len(split.keys)} parts): {split.reason}", diagnostic, edit, True)]


def _create_config(ctx: ActionContext, diagnostic: types.Diagnostic) -> list[types.CodeAction]:
    mapping_path = Path(ctx.mapping.path)
    config_uri = (mapping_path.parent / CONFIG_NAME).as_uri()
    start = types.Position(line=0, character=0)
    edit = types.WorkspaceEdit(
        document_changes=[
            types.CreateFile(uri=config_uri, options=types.CreateFileOptions(ignore_if_exists=True)),
            types.TextDocumentEdit(
                text_document=types.OptionalVersionedTextDocumentIdentifier(uri=config_uri, version=None),
                edits=[
                    types.TextEdit(range=types.Range(start=start, end=start), new_text=config_skeleton(mapping_path))
                ],
            ),
        ]
    )
    return [_quick_fix(f"Create {CONFIG_NAME} pairing this file with its dumps", diagnostic, edit, True)]


def _remove_duplicate(ctx: ActionContext, diagnostic: types.Diagnostic) -> list[types.CodeAction]:
    entry = _entry_for(ctx, diagnostic)
    if entry is None:
        return []
    text = ctx.mapping.text
    spans = ctx.mapping.spans(entry)
    start = text.rfind(",", 0, spans.key.start)
    if start < 0:
        return []
    edit = ctx.edit(
        [
            types.TextEdit(
                range=types.Range(start=ctx.positions.position(start), end=ctx.positions.position(spans.value.end)),
                new_text="",
            )
        ]
    )
    return [_quick_fix("Remove this duplicate entry (the earlier one is kept)", diagnostic, edit)]


UNKNOWN_KEY_CODES = (codes.UNKNOWN_TRAIN_KEY, codes.UNKNOWN_ROLLOUT_KEY)

PROVIDERS: dict[str, Callable[[ActionContext, types.Diagnostic], list[types.CodeAction]]] = {
    codes.UNKNOWN_TRAIN_KEY: _replace_unknown,
    codes.UNKNOWN_ROLLOUT_KEY: _replace_unknown,
    codes.UNMAPPED_TRAIN: _add_unmapped,
    codes.FUSED_STRUCTURAL: _to_list,
    codes.UNPAIRED: _create_config,
    codes.DUPLICATE_KEY: _remove_duplicate,
}


_EDITS_JSON = (_replace_unknown, _add_unmapped, _to_list, _remove_duplicate)  # they write JSON into the file


def code_actions(ctx: ActionContext, diagnostics: list[types.Diagnostic]) -> list[types.CodeAction]:
    actions: list[types.CodeAction] = []
    json_text = not ctx.mapping.path.lower().endswith(MSPROBE_SUFFIXES)  # not one of msprobe's YAML mappings
    for diagnostic in diagnostics:
        if isinstance(diagnostic.data, dict) and SUMMARY in diagnostic.data:
            continue  # stands for diagnostics not shown, on no entry
        provider = PROVIDERS.get(str(diagnostic.code)) if diagnostic.source == codes.SOURCE else None
        if provider is not None and (json_text or provider not in _EDITS_JSON):
            actions += provider(ctx, diagnostic)
    return actions
