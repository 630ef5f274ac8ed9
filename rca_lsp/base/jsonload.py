"""JSON loading: orjson on the fast path, still accepting the NaN/Infinity literals real dumps contain, and errors
that point at the offending token."""

from __future__ import annotations

import re
from contextlib import contextmanager
from typing import Any, Iterator

import orjson

from rca_lsp.base.errors import InputError
from rca_lsp.base.lines import line_and_column

# Python's json writes NaN, Infinity and -Infinity bare; orjson rejects them. Quoted, they become strings that
# float() reads back. The same-length stand-ins below make a document that fails (if at all) at the same line and
# column as the original.
_PLACEHOLDERS = {b"NaN": b"0.0", b"Infinity": b"0.000000", b"-Infinity": b"-0.000000"}


_CLEARER = {"number is infinity when parsed as double": "number out of the range of a double (beyond 1.8e308)"}


def _escaped_quotes(data: bytes) -> list[int]:
    """Offsets of the quotes escaped inside strings (after an odd run of backslashes), in order."""
    escaped = []
    at = data.find(b'\\"')
    while at >= 0:
        run = 1
        while run <= at and data[at - run] == 0x5C:  # backslash
            run += 1
        if run % 2:
            escaped.append(at + 1)
        at = data.find(b'\\"', at + 2)
    return escaped


def _literal_spans(data: bytes) -> list[tuple[int, int]]:
    """(start, end) of every NaN, Infinity and -Infinity, in or out of strings, in order. bytes.find, not a
    regular expression: ~40 ms per 100 MB and word against ~2 s for `-?Infinity|NaN`."""
    spans = []
    for word in (b"NaN", b"Infinity"):
        at = data.find(word)
        while at >= 0:
            end = at + len(word)
            spans.append((at - 1 if word == b"Infinity" and data[at - 1 : at] == b"-" else at, end))
            at = data.find(word, end)
    spans.sort()
    return spans


def _literals_outside_strings(data: bytes) -> list[tuple[int, int]]:
    """(start, end) of the NaN/Infinity/-Infinity tokens that are not inside a string. A token is outside strings
    when an even number of unescaped quotes precede it: counted with bytes.count between tokens, so the work in
    Python is per literal, not per character."""
    escaped = _escaped_quotes(data)
    found = []
    counted = quotes = escapes = 0
    for start, end in _literal_spans(data):
        quotes += data.count(b'"', counted, start)
        counted = start
        while escapes < len(escaped) and escaped[escapes] < start:
            escapes += 1
        if (quotes - escapes) % 2 == 0:
            found.append((start, end))
    return found


def _rewrite_literals(data: bytes, quoted: bool) -> bytes:
    if b"Infinity" not in data and b"NaN" not in data:
        return data
    pieces: list[bytes] = []
    copied = 0
    for start, end in _literals_outside_strings(data):
        literal = data[start:end]
        pieces += (data[copied:start], b'"' + literal + b'"' if quoted else _PLACEHOLDERS[literal])
        copied = end
    if not pieces:
        return data
    pieces.append(data[copied:])
    return b"".join(pieces)


def quote_literals(data: bytes) -> bytes:
    """`data` with the NaN/Infinity/-Infinity literals outside strings quoted; `data` itself when it has none."""
    return _rewrite_literals(data, quoted=True)


def loads_or_error(data: bytes | str) -> tuple[Any, orjson.JSONDecodeError | None]:
    """The JSON document, or None and orjson's error without its traceback. A caller keeps the error past its except
    clause: with its traceback, which holds the caller's frame, the two would be a reference cycle, holding the frames
    of a parse and what they refer to (the text, the error's `doc` too), that only the cyclic collector frees, and
    never once a pause of it (base.gcpause) has frozen them."""
    try:
        return orjson.loads(data), None
    except orjson.JSONDecodeError as error:
        return None, error.with_traceback(None)


def loads_lenient(data: bytes, path: str) -> Any:
    """Parse JSON bytes; NaN/Infinity/-Infinity literals come back as the strings "NaN"/"Infinity"/"-Infinity".
    Raises InputError with the line and column of the first problem."""
    document, error = loads_or_error(data)
    if error is None:
        return document
    quoted = quote_literals(data)
    if quoted is not data:
        document, error = loads_or_error(quoted)
        if error is None:
            return document
        _, placed_error = loads_or_error(_rewrite_literals(data, quoted=False))
        if placed_error is not None:
            error = placed_error  # the same problem, at its place in `data` (quoting shifts columns)
    raise _located_error(data, path, error)


def _located_error(data: bytes, path: str, error: orjson.JSONDecodeError) -> InputError:
    """The InputError for orjson's `error` on `data`: orjson reports invalid UTF-8 at 1:1, so find the byte."""
    if "UTF-8" in error.msg:
        bad = first_invalid_utf8(data)
        if bad is not None:
            return invalid_utf8_error(data, path, bad)
    message = _CLEARER.get(error.msg, error.msg)
    return InputError(path, f"invalid JSON: {message}", line=error.lineno, column=error.colno)


def first_invalid_utf8(data: bytes) -> int | None:
    """The offset of the first byte of `data` that is not UTF-8; None when it all is. ASCII (most dumps) is told at
    memory speed (~10 ms per 200 MB), other text decoded."""
    if data.isascii():
        return None
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as error:
        return error.start
    return None


def invalid_utf8_error(data: bytes, path: str, offset: int) -> InputError:
    """The InputError for the byte at `offset` of `data`, which is not UTF-8: at its line and column."""
    line, column = text_position(data, offset)
    return InputError(path, f"invalid UTF-8: byte 0x{data[offset]:02x} (the file must be UTF-8)", line, column)


# strings (an unterminated one runs to the end: linear, whatever the text) and the brackets outside them
_NESTING_TOKENS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}]', re.S)
_SHOWN_DEPTH = 100  # where the error points: the nesting passes this many levels there (msprobe's dumps nest ~5)


def nesting_error(data: bytes, path: str) -> InputError:
    """The InputError for a JSON document nested too deeply to read: its decoders (msgspec, Python's json) and the
    code walking what they built recurse once per level, so ~1000 levels (Python's recursion limit) end in a
    RecursionError, which callers turn into this. It points at the bracket where the nesting passes 100 levels (or
    at the deepest, if it never does) and says how deep it goes; the scan runs only then."""
    depth = deepest = shown = 0
    for match in _NESTING_TOKENS.finditer(data):
        bracket = data[match.start()]
        if bracket in b"[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if depth <= _SHOWN_DEPTH + 1:
                    shown = match.start()
        elif bracket in b"]}":
            depth -= 1
    line, column = text_position(data, shown)
    return InputError(
        path, f"nested {deepest} levels deep, too deep to read (an msprobe dump nests a few levels)", line, column
    )


def text_position(data: bytes, offset: int) -> tuple[int, int]:
    """1-based (line, column) of the byte at `offset` (lines as base.lines counts them), the column counted in
    characters of the valid UTF-8 text before it."""
    line, byte_column = line_and_column(data, offset)
    column = len(data[offset - byte_column : offset].decode("utf-8", errors="replace")) + 1
    return line + 1, column


def as_float(value: object) -> float | None:
    """A statistic as a float: numbers, booleans, and the quoted non-finite literals; None otherwise. An integer
    beyond a double raises ValueError "Number out of range": in a TensorStats' __post_init__, msgspec turns it into
    the ValidationError it gives for 1e400, which decode_dump locates."""
    if isinstance(value, (int, float)):  # bool included
        try:
            return float(value)
        except OverflowError:
            raise ValueError("Number out of range") from None
    if isinstance(value, str) and value in ("NaN", "Infinity", "-Infinity", "inf", "-inf", "nan"):
        return float(value)
    return None


@contextmanager
def nesting_reported(data: bytes, path: str) -> Iterator[None]:
    """A RecursionError raised inside (decoding or walking `data`, the file at `path`) as its nesting_error."""
    try:
        yield
    except RecursionError:
        raise nesting_error(data, path) from None
