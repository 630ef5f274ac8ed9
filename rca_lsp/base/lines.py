"""Lines as LSP counts them: a line ends at `\\r\\n`, `\\r` or `\\n`, and nowhere else (not at U+2028, a form feed or
U+0085, where str.splitlines also splits), so a position means the same in an error message, a diagnostic's range
and the client's editor, whichever line ends the file uses. For text and for bytes."""

from __future__ import annotations

import re
from typing import AnyStr

LINE_BREAK = re.compile(r"\r\n|\r|\n")


def line_and_column(text: AnyStr, offset: int) -> tuple[int, int]:
    """0-based (line, column) of `offset`, the column in items of `text` (characters, or bytes), without an index.
    An offset between the `\r` and the `\n` of one line end is on the line they end."""
    cr, lf = ("\r", "\n") if isinstance(text, str) else (b"\r", b"\n")
    end = offset - 1 if 0 < offset < len(text) and text[offset - 1 : offset + 1] == cr + lf else offset
    line = text.count(lf, 0, end) + text.count(cr, 0, end) - text.count(cr + lf, 0, end)
    return line, offset - (max(text.rfind(lf, 0, end), text.rfind(cr, 0, end)) + 1)


def line_start(text: str, offset: int) -> int:
    """The offset where the line holding `offset` starts (looking back from it only: cheap at any offset)."""
    return max(text.rfind("\n", 0, offset), text.rfind("\r", 0, offset)) + 1


def line_break_of(text: str) -> str:
    """The line break a text uses (its first), for lines added to it; `\n` when it has none."""
    found = LINE_BREAK.search(text)
    return found[0] if found else "\n"
