"""Character offsets of the core <-> LSP positions in the client's encoding."""

from __future__ import annotations

from lsprotocol import types
from pygls.workspace import PositionCodec

from rca_lsp.mapping.model import LineIndex, ParsedMapping, Span


class Positions:
    """A text that is not ASCII has its columns converted on the one line a position is on: a split of the whole text
    into lines for each request (and each publish) took ~120 ms of the event loop for 10 MB."""

    def __init__(self, mapping: ParsedMapping, codec: PositionCodec) -> None:
        self._mapping = mapping
        self._codec = codec
        self._ascii = mapping.text.isascii()

    @property
    def char_columns(self) -> bool:
        """Whether client columns equal character columns (an ASCII text), so (line, column) pairs identify ranges."""
        return self._ascii

    def position(self, offset: int) -> types.Position:
        line, column = self._mapping.lines.position(offset)
        if not self._ascii:
            column = self._codec.client_num_units(self._mapping.text[offset - column : offset])
        return types.Position(line=line, character=column)

    def range(self, span: Span) -> types.Range:
        return types.Range(start=self.position(span.start), end=self.position(span.end))

    def offset(self, position: types.Position) -> int:
        if self._ascii:
            return self._mapping.lines.offset(position.line, position.character)
        return client_offset(self._mapping.text, self._mapping.lines, position, self._codec)


def client_offset(text: str, lines: LineIndex, position: types.Position, codec: PositionCodec) -> int:
    """The offset of a position in the client's units (past a line's end: its end; past the last line: the end)."""
    start, end = lines.line_span(position.line)
    content = text[start:end]
    if content.isascii() or position.character >= codec.client_num_units(content):
        return start + min(position.character, len(content))
    return start + codec.position_from_client_units([content], types.Position(0, position.character)).character


def top_of_file() -> types.Range:
    return types.Range(start=types.Position(line=0, character=0), end=types.Position(line=0, character=1))


class OpenText:
    """An open document's text with its line index, as LSP counts lines: an incremental change costs the size of the
    change, not of the file. (pygls splits the whole text into lines for each change: 40-140 ms for a 10 MB mapping
    file, on the event loop; and it splits at U+2028 and form feeds too, where the client does not.)

    `earlier`: the text this one was changed from, and how long a start of it this one keeps unchanged."""

    def __init__(self, text: str, lines: LineIndex | None = None, earlier: tuple[str, int] | None = None) -> None:
        self.text = text
        self.lines = lines if lines is not None else LineIndex(text)
        self.earlier = earlier

    def changed(self, change: types.TextDocumentContentChangePartial, codec: PositionCodec) -> OpenText:
        """The text after a change of a range (a column past a line's end means its end, a line past the last the
        text's end, as LSP says); its `earlier` is this text's own if it has one (the changes of one notification
        count from the text before the first)."""
        start = self.offset(change.range.start, codec)
        end = max(start, self.offset(change.range.end, codec))
        text = self.text[:start] + change.text + self.text[end:]
        earlier = (self.text, start) if self.earlier is None else (self.earlier[0], min(self.earlier[1], start))
        return OpenText(text, self.lines.after_edit(text, start, end, start + len(change.text)), earlier)

    def offset(self, position: types.Position, codec: PositionCodec) -> int:
        return client_offset(self.text, self.lines, position, codec)
