"""JSON loading: orjson on the fast path, still accepting the NaN/Infinity literals real dumps contain."""

from __future__ import annotations

import re
from typing import Any

import orjson

from rca_lsp.core.errors import InputError

# Python's json writes these bare; orjson rejects them. They become strings that float() reads back.
_LITERAL_REPLACEMENTS = (
    (b": -Infinity", b': "-Infinity"'),
    (b": Infinity", b': "Infinity"'),
    (b": NaN", b': "NaN"'),
)
_LITERAL_RE = re.compile(rb"(?<![\w\"])(-?Infinity|NaN)(?![\w\"])")


def quote_literals(data: bytes) -> bytes:
    """`data` with the NaN/Infinity/-Infinity literals Python's json writes (after ': ') quoted; `data` itself
    when it has none."""
    if b"Infinity" not in data and b"NaN" not in data:
        return data
    for literal, quoted in _LITERAL_REPLACEMENTS:
        data = data.replace(literal, quoted)
    return data


def _quote_literals_anywhere(data: bytes) -> bytes:
    """Slow path for unusual layouts (no space after ':' or literals inside lists)."""
    return _LITERAL_RE.sub(rb'"\1"', data)


def loads_lenient(data: bytes, path: str) -> Any:
    """Parse JSON bytes; NaN/Infinity/-Infinity literals come back as the strings "NaN"/"Infinity"/"-Infinity"."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as first_error:
        error: orjson.JSONDecodeError = first_error
    for rewrite in (quote_literals, _quote_literals_anywhere):
        rewritten = rewrite(data)
        if rewritten is data:
            continue
        try:
            return orjson.loads(rewritten)
        except orjson.JSONDecodeError as later_error:
            error = later_error  # quoting keeps line numbers, so this one points at the real problem
    raise InputError(path, f"invalid JSON: {error.msg}", line=error.lineno, column=error.colno)


def as_float(value: object) -> float | None:
    """A statistic as a float: numbers, booleans, and the quoted non-finite literals; None otherwise."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and value in ("NaN", "Infinity", "-Infinity", "inf", "-inf", "nan"):
        return float(value)
    return None
