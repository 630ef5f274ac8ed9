"""Character offsets of the core <-> LSP positions in the client's encoding."""

from __future__ import annotations

from lsprotocol import types
from pygls.workspace import PositionCodec

from rca_lsp.base.lines import split_lines
from rca_lsp.mapping.model import LineIndex, ParsedMapping, Span


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


class OpenText:
    """An open document's text with its line index, as LSP counts lines: an incremental change costs the size of the
    change, not of the file. (pygls splits the whole text into lines for each change: 40-140 ms for a 10 MB mapping
    file, on the event loop; and it splits at U+2028 and form feeds too, where the client does not.)"""

    def __init__(self, text: str, lines: LineIndex | None = None) -> None:
        self.text = text
        self.lines = lines if lines is not None else LineIndex(text)

    def changed(self, change: types.TextDocumentContentChangePartial, codec: PositionCodec) -> OpenText:
        """The text after a change of a range (a column past a line's end means its end, a line past the last the
        text's end, as LSP says)."""
        start = self._offset(change.range.start, codec)
        end = max(start, self._offset(change.range.end, codec))
        text = self.text[:start] + change.text + self.text[end:]
        return OpenText(text, self.lines.after_edit(text, start, end, start + len(change.text)))

    def _offset(self, position: types.Position, codec: PositionCodec) -> int:
        start, end = self.lines.line_span(position.line)
        content = self.text[start:end]
        if content.isascii() or position.character >= codec.client_num_units(content):
            return start + min(position.character, len(content))
        return start + codec.position_from_client_units([content], types.Position(0, position.character)).character
