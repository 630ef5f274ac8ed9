"""How the tables' cells are written: CSV text that reads back as Python's csv module writes the same rows (a fast
path through orjson, checked), text cells kept from starting a spreadsheet formula, and the non-finite numbers of
output_3 in both formats.

Formula injection (OWASP, "CSV Injection"): a spreadsheet opening a CSV runs a cell that starts with `=`, `+`, `-`
or `@` (or a tab or carriage return before one) as a formula, e.g. `=HYPERLINK(...)` from a key or dtype in a dump.
Such a TEXT cell is written with a leading `'`, which spreadsheets show as the text itself. Numbers are written as
numbers, and text that spells one (`-inf`, msprobe's `-12.5%`) is left as it is: a spreadsheet reads it as the
number, not as a formula; so is a lone `-` (the tables' placeholder for "none"). The JSON tables keep every
string as it is.
"""

from __future__ import annotations

import csv
import io
import math
import re
from typing import Any, Iterable, Sequence

import orjson


class _NonFinite:
    """A NaN or infinite number of output_3, told apart from a missing one (null, an empty cell): written as
    "NaN", "Infinity", "-Infinity" in JSON (strings: valid JSON, msprobe's spelling) and nan, inf, -inf in CSV."""

    __slots__ = ("json", "csv")

    def __init__(self, json: str, csv: str) -> None:
        self.json, self.csv = json, csv

    def __str__(self) -> str:  # the csv module's spelling
        return self.csv


_NAN, _INFINITY, _MINUS_INFINITY = (
    _NonFinite("NaN", "nan"),
    _NonFinite("Infinity", "inf"),
    _NonFinite("-Infinity", "-inf"),
)


def json_spelling(value: object) -> str:
    """msgspec's hook for what it cannot encode itself."""
    if isinstance(value, _NonFinite):
        return value.json
    raise NotImplementedError(f"cannot write {type(value).__name__}")


def _csv_spelling(value: object) -> str:
    """orjson's hook for what it cannot encode itself."""
    if isinstance(value, _NonFinite):
        return value.csv
    raise TypeError(f"cannot write {type(value).__name__}")


def marked_non_finite(value: Any) -> Any:
    """A NaN or an infinity as the marker its cells spell it with ("nan", "inf", "-inf"); other values as they are."""
    if type(value) is not float or math.isfinite(value):
        return value
    return _NAN if value != value else (_INFINITY if value > 0 else _MINUS_INFINITY)


_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|inf|infinity|nan)%?", re.IGNORECASE)
# in the fast path's JSON every `"` delimits a string (one inside would be escaped: a backslash, not taken), and
# a closing one is followed by `,` or `]`: `"=` opens a string starting with `=`; `"-"` is the placeholder
_RISKY_JSON = re.compile(rb'"((?:[=+@]|-(?!"))[^"]*)"')
_RISKY_START = re.compile(rb'"(?:[=+@]|-[^"])')  # one search finds any (a regex scans faster than `in` here)


def text_cell(text: str) -> str:
    """A text cell as written to CSV: with a leading `'` when a spreadsheet would run it as a formula."""
    if text.startswith(_FORMULA_STARTS) and text != "-" and not _NUMBER.fullmatch(text):  # "-": our placeholder
        return "'" + text
    return text


def _neutralised(match: re.Match[bytes]) -> bytes:
    text = match[1].decode()
    cell = text_cell(text)
    return match[0] if cell is text else b'"' + cell.encode() + b'"'


def csv_table(columns: Sequence[str], rows: Iterable[Sequence[Any]], list_columns: Sequence[int] = ()) -> bytes:
    """CSV with list cells joined by '|' and None as an empty cell."""
    return ",".join(columns).encode() + b"\n" + csv_body(rows, list_columns)


def csv_body(rows: Iterable[Sequence[Any]], list_columns: Sequence[int] = (), nulls: int | None = None) -> bytes:
    """The rows as CSV; `nulls`: how many cells are None, when the caller knows (the JSON of the same rows tells
    it for nothing), else counted."""
    table: list[Sequence[Any]] = _join_lists(rows, list_columns) if list_columns else list(rows)
    if not table:
        return b""
    if nulls is None:
        nulls = sum(row.count(None) for row in table)
    fast = _csv_through_json(table, nulls)
    return fast if fast is not None else csv_reference(table)


def _csv_through_json(rows: list[Sequence[Any]], nulls: int) -> bytes | None:
    """orjson writes the table ~10x faster than the csv module. Its text is the csv module's (read back) once the
    row brackets become line ends and each null an empty cell, when no string needed a JSON escape (`"`, `\\`,
    control characters) and none holds what is replaced: `],[` (counted: once between each two rows) or `null`
    (counted: once per None cell). Else None: the csv module writes it. (A list cell, `[]` or `[1,2]` here, is
    not in a table's rows: _join_lists joins the list columns.)"""
    try:
        data = orjson.dumps(rows, default=_csv_spelling)
    except orjson.JSONEncodeError:  # e.g. an integer beyond 64 bits
        return None
    if b"\\" in data or data.count(b"],[") != len(rows) - 1 or data.count(b"null") != nulls:
        return None
    if min(map(len, rows)) < 2:  # a row of one empty cell is `""` in the csv module's text: not an empty line
        return None
    if _RISKY_START.search(data):
        data = _RISKY_JSON.sub(_neutralised, data)
    body = data[2:-2].replace(b"],[", b"\n")
    body = body.replace(b",null", b",").replace(b"\nnull", b"\n")
    if body.startswith(b"null"):
        body = body[4:]
    return body + b"\n"


def csv_reference(rows: list[Sequence[Any]]) -> bytes:
    """Rows through Python's csv module (text cells as text_cell writes them): the fallback for cells the fast path
    cannot write, and what csv_table reads back as. A field holding a carriage return is quoted as one holding a
    line feed is (Python 3.11's csv module quotes only the characters of its line terminator, and a bare `\r` reads
    back as a line end): such a row is written with `\r\n` as its terminator, then ended with `\n`."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    for row in rows:
        cells = [text_cell(cell) if type(cell) is str else cell for cell in row]
        if any(type(cell) is str and "\r" in cell for cell in cells):
            one = io.StringIO()
            csv.writer(one, lineterminator="\r\n").writerow(cells)
            buffer.write(one.getvalue()[:-2] + "\n")
        else:
            writer.writerow(cells)
    return buffer.getvalue().encode()


def _join_lists(rows: Iterable[Sequence[Any]], list_columns: Sequence[int]) -> list[Sequence[Any]]:
    joined: dict[Any, str] = {}  # list cells repeat (shapes, key lists): join each distinct one once
    table: list[Sequence[Any]] = []
    for row in rows:
        cells = list(row)
        for index in list_columns:
            value = cells[index]
            if type(value) is tuple:
                if len(value) == 1 and type(value[0]) is str:  # one key (1:1 mappings): itself
                    cells[index] = value[0]
                    continue
                try:
                    text = joined.get(value)
                except TypeError:  # a malformed dump's shape holding lists: not hashable, joined as it is
                    text = "|".join(map(str, value))
                if text is None:
                    text = joined[value] = "|".join(map(str, value))
                cells[index] = text
            elif value is not None:
                cells[index] = "|".join(map(str, value))
        table.append(cells)
    return table
