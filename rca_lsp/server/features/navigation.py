"""Go-to-definition into the dumps and document symbols grouped by layer."""

from __future__ import annotations

from itertools import groupby
from pathlib import Path

from lsprotocol import types

from rca_lsp.base.cancel import ShouldStop, never, stop_if
from rca_lsp.diagnose.analysis import Analysis
from rca_lsp.mapping.model import MappingEntry, ParsedMapping, Span
from rca_lsp.model.keys import layer_index
from rca_lsp.server.positions import Positions

MAX_SYMBOL_ENTRIES = 5000


def definition(analysis: Analysis, train_key: str, rollout_key: str | None) -> types.Location | None:
    dump, key = (analysis.rollout, rollout_key) if rollout_key is not None else (analysis.train, train_key)
    calls = dump.calls_of(key)  # `forward.*`: its first call
    found = dump.location_of(calls[0]) if calls else None
    if found is None:
        return None
    file, line = found
    position = types.Position(line=line, character=0)
    return types.Location(uri=Path(file).as_uri(), range=types.Range(start=position, end=position))


def document_symbols(
    mapping: ParsedMapping, positions: Positions, should_stop: ShouldStop = never
) -> list[types.DocumentSymbol]:
    """One namespace per layer holding its entries; above MAX_SYMBOL_ENTRIES entries the namespaces alone (an
    outline of 10^5 entries helps nobody, and building it would take seconds). Raises Cancelled on request."""

    def layer_of(entry_index: int) -> int:
        layer = layer_index(mapping.entries[entry_index].train_key)
        return -1 if layer is None else layer

    with_children = len(mapping.entries) <= MAX_SYMBOL_ENTRIES
    symbols = []
    ordered = sorted(range(len(mapping.entries)), key=lambda i: (layer_of(i), i))
    for layer, members in groupby(ordered, key=layer_of):
        stop_if(should_stop)
        indexes = list(members)
        children = [_entry_symbol(mapping, positions, mapping.entries[i]) for i in indexes] if with_children else []
        first, last = mapping.spans(mapping.entries[indexes[0]]), mapping.spans(mapping.entries[indexes[-1]])
        name = f"layer {layer}" if layer >= 0 else "outside layers"
        symbols.append(
            types.DocumentSymbol(
                name=name,
                kind=types.SymbolKind.Namespace,
                detail=f"{len(indexes)} entries",
                range=positions.range(Span(first.key.start, last.value.end)),
                selection_range=positions.range(first.key),
                children=children or None,
            )
        )
    symbols.sort(key=lambda s: (s.range.start.line, s.range.start.character))
    return symbols


def _entry_symbol(mapping: ParsedMapping, positions: Positions, entry: MappingEntry) -> types.DocumentSymbol:
    spans = mapping.spans(entry)
    return types.DocumentSymbol(
        name=entry.train_key,
        detail=" + ".join(entry.rollout_keys),
        kind=types.SymbolKind.Field,
        range=positions.range(spans.whole),
        selection_range=positions.range(spans.key),
    )
