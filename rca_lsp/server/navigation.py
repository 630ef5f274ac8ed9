"""Go-to-definition into the dumps and document symbols grouped by layer."""

from __future__ import annotations

from itertools import groupby
from pathlib import Path

from lsprotocol import types

from rca_lsp.core.analysis import Analysis
from rca_lsp.core.keys import layer_index
from rca_lsp.core.mapping import ParsedMapping
from rca_lsp.server.positions import Positions


def definition(analysis: Analysis, train_key: str, rollout_key: str | None) -> types.Location | None:
    dump, key = (analysis.rollout, rollout_key) if rollout_key is not None else (analysis.train, train_key)
    line = dump.line_of(key) if key in dump.entries else None
    if line is None:
        return None
    position = types.Position(line=line, character=0)
    return types.Location(uri=Path(dump.path).as_uri(), range=types.Range(start=position, end=position))


def document_symbols(mapping: ParsedMapping, positions: Positions) -> list[types.DocumentSymbol]:
    def layer_of(entry_index: int) -> int:
        layer = layer_index(mapping.entries[entry_index].train_key)
        return -1 if layer is None else layer

    symbols = []
    ordered = sorted(range(len(mapping.entries)), key=lambda i: (layer_of(i), i))
    for layer, members in groupby(ordered, key=layer_of):
        children = []
        for index in members:
            entry = mapping.entries[index]
            spans = mapping.spans(entry)
            children.append(types.DocumentSymbol(
                name=entry.train_key, detail=" + ".join(entry.rollout_keys), kind=types.SymbolKind.Field,
                range=positions.range(spans.whole), selection_range=positions.range(spans.key)))
        first, last = children[0], children[-1]
        symbols.append(types.DocumentSymbol(
            name=f"layer {layer}" if layer >= 0 else "outside layers", kind=types.SymbolKind.Namespace,
            range=types.Range(start=first.range.start, end=last.range.end), selection_range=first.selection_range,
            children=children))
    symbols.sort(key=lambda s: (s.range.start.line, s.range.start.character))
    return symbols
