"""Text from dumps and user files shown to a person (messages, hovers, diagnostics, reports, comments): every
character that is not printable is written as an escape, so a key cannot end a line or a comment, or reorder what is
shown around it (a bidi override such as U+202E, the "Trojan Source" trick), or hide (zero-width characters)."""

from __future__ import annotations

_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(character: str) -> str:
    if character.isprintable():
        return character
    code = ord(character)
    short = _SHORT.get(character)
    if short is not None:
        return short
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def shown(text: str) -> str:
    """`text` with each character Python does not call printable (controls, line and paragraph separators, spaces
    other than ' ', bidi and other format characters, surrogates, unassigned code points) written as repr() writes
    it (`\\n`, `\\x1b`, `\\u202e`, `\\U000e0001`); printable text is returned as it is."""
    if text.isprintable():
        return text
    return "".join(map(_escape, text))
