"""Character offsets of the core <-> LSP positions in the client's encoding."""

from __future__ import annotations

from lsprotocol import types
from pygls.workspace import PositionCodec

from rca_lsp.base.lines import split_lines
from rca_lsp.mapping.model import ParsedMapping, Span


class Positions:
    def __init__(self, mapping: ParsedMapping, codec: PositionCodec) -> None:
        self._mapping = mapping
        self._codec = codec
        # the lines as the client counts them (str.splitlines also splits at U+2028, a form feed, ...)
        self._lines = None if mapping.text.isascii() else split_lines(mapping.text)

    @property
    def char_columns(self) -> bool:
        """Whether client columns equal character columns (an ASCII text), so (line, column) pairs identify ranges."""
        return self._lines is None

    def position(self, offset: int) -> types.Position:
        line, column = self._mapping.lines.position(offset)
        position = types.Position(line=line, character=column)
        return position if self._lines is None else self._codec.position_to_client_units(self._lines, position)

    def range(self, span: Span) -> types.Range:
        return types.Range(start=self.position(span.start), end=self.position(span.end))

    def offset(self, position: types.Position) -> int:
        if self._lines is None:
            return self._mapping.lines.offset(position.line, position.character)
        in_characters = self._codec.position_from_client_units(self._lines, position)
        return self._mapping.lines.offset(in_characters.line, in_characters.character)


def top_of_file() -> types.Range:
    return types.Range(start=types.Position(line=0, character=0), end=types.Position(line=0, character=1))
