"""The CSV tables read back as Python's csv module writes the same rows, whatever the strings hold (a property test
over arbitrary text, and the real CLI on a fixture whose keys hold CSV and JSON syntax), and no text cell starts a
spreadsheet formula (OWASP's CSV injection advice) while numbers stay numbers, in both `--columns` styles."""

from __future__ import annotations

import csv
import io
import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Sequence

import pytest
from adversarial import CSV_SYNTAX, FORMULAS, hostile_copy, set_dtypes
from conftest import FIXTURES
from hypothesis import given, settings
from hypothesis import strategies as st

from rca_lsp.report.outputs import encode_chunk
from rca_lsp.report.tables.cells import csv_table, marked_non_finite

_NUMBER = re.compile(r"[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|inf|infinity|nan)%?", re.IGNORECASE)


def owasp(text: str) -> str:
    """A text cell as OWASP says to write it: one that a spreadsheet would read as a formula gets a leading `'`
    (not a number, not a lone `-`, the tables' placeholder)."""
    risky = text[:1] in ("=", "+", "-", "@", "\t", "\r") and text != "-" and not _NUMBER.fullmatch(text)
    return "'" + text if risky else text


def read(data: bytes) -> list[list[str]]:
    return list(csv.reader(io.StringIO(data.decode(), newline="")))


def python_csv(rows: Sequence[Sequence[Any]]) -> list[list[str]]:
    """What the csv module writes for the rows (text cells as OWASP says), read back. Its default terminator: the
    one under which it quotes fields holding `\r` too (with `\n` alone, Python 3.11 leaves them bare)."""
    buffer = io.StringIO(newline="")
    csv.writer(buffer).writerows([[owasp(cell) if type(cell) is str else cell for cell in row] for row in rows])
    return read(buffer.getvalue().encode())


def same_cells(written: list[list[str]], expected: list[list[str]], rows: Sequence[Sequence[Any]]) -> None:
    """Cell for cell equal; numbers as numbers (orjson spells 1e-05 `0.00001`), booleans in any case."""
    assert len(written) == len(expected) == len(rows)
    for got_row, want_row, row in zip(written, expected, rows):
        assert len(got_row) == len(want_row)
        for got, want, value in zip(got_row, want_row, row):
            if type(value) in (int, float):
                assert float(got) == float(want) or (math.isnan(float(got)) and math.isnan(float(want)))
            elif type(value) is bool:
                assert got.lower() == want.lower()
            else:
                assert got == want


FRAGMENTS = [
    ",",
    "null",
    "],[",
    "[",
    "]",
    '"',
    "\\",
    "\n",
    "\r",
    "\t",
    "=",
    "-",
    "+",
    "@",
    "|",
    " ",
    "a",
    "é",
    "\u202e",
]
TEXT = st.one_of(st.text(), st.lists(st.sampled_from(FRAGMENTS), max_size=8).map("".join))
CELL = st.one_of(
    TEXT,
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([math.nan, math.inf, -math.inf]).map(marked_non_finite),
)


@st.composite
def tables(draw: st.DrawFn) -> list[list[Any]]:
    width = draw(st.integers(1, 5))
    return draw(st.lists(st.lists(CELL, min_size=width, max_size=width), min_size=1, max_size=6))


@settings(max_examples=400, deadline=None)
@given(tables())
def test_csv_reads_back_as_the_csv_module_writes_the_rows(rows: list[list[Any]]) -> None:
    columns = [f"c{i}" for i in range(len(rows[0]))]
    expected = python_csv(
        [[str(c) if isinstance(c, type(marked_non_finite(math.nan))) else c for c in r] for r in rows]
    )
    table = read(csv_table(columns, rows))
    assert table[0] == columns
    same_cells(table[1:], expected, rows)
    _, chunk = encode_chunk(0, rows, columns, ())  # the streamed tables' path (it counts nulls in the JSON)
    same_cells(read(chunk), expected, rows)


def test_a_cell_holding_json_syntax_is_written_as_it_is() -> None:
    rows = [("a,null,b", None, "x],[y", 1.5), (None, "null", "[null]", None)]
    assert read(csv_table("abcd", rows))[1:] == [["a,null,b", "", "x],[y", "1.5"], ["", "null", "[null]", ""]]


def rca(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rca_lsp", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def _json_cell(value: Any) -> str | None:
    """The CSV text a JSON table's value has (None: a number or boolean, compared as such)."""
    if value is None:
        return ""
    if isinstance(value, list):
        return "|".join(map(str, value))
    if isinstance(value, str):
        return {"NaN": "nan", "Infinity": "inf", "-Infinity": "-inf"}.get(value, owasp(value))
    return None


def csv_matches_json(csv_path: Path, json_rows: list[dict[str, Any]]) -> int:
    """Every CSV row is its JSON row (both written from the same rows); the number of text cells compared."""
    header, *rows = read(csv_path.read_bytes())
    assert len(rows) == len(json_rows)
    compared = 0
    for row, document in zip(rows, json_rows):
        values = list(document.values())
        assert len(row) == len(values) == len(header)
        for cell, value in zip(row, values):
            text = _json_cell(value)
            if text is None:
                assert cell.lower() == str(value).lower() or float(cell) == value
            else:
                assert cell.replace("Nan", "nan") == text or (text in ("nan", "inf", "-inf") and cell == "N/A")
                compared += 1
    return compared


@pytest.mark.parametrize("syntax", CSV_SYNTAX)
@pytest.mark.parametrize("columns", ["rca", "msprobe"])
def test_csv_tables_equal_the_json_tables_with_hostile_keys(tmp_path: Path, columns: str, syntax: str) -> None:
    folder = hostile_copy("missing_activation", tmp_path / "pair", "linear_fc2", f"linear{syntax}fc2")
    result = rca("analyze", "--train", "train", "--rollout", "rollout", "--mapping-key", "mapping_key.json",
                 "--out-dir", "out", "--no-chart", "--columns", columns, cwd=folder)  # fmt: skip
    assert result.returncode == 0, result.stderr
    out = folder / "out"
    for stem, rows in (("output_1_key_mapping", "rows"), ("output_3_value_compare", "rows"), ("output_4_module_analysis", "records")):  # fmt: skip
        assert csv_matches_json(out / f"{stem}.csv", json.loads((out / f"{stem}.json").read_text())[rows])
    mapping = json.loads((out / "output_2_mapping.json").read_text())
    assert read((out / "output_2_mapping.csv").read_bytes())[1:] == [
        [key, value if isinstance(value, str) else "|".join(value)] for key, value in mapping.items()
    ]
    assert any(syntax in key for key in mapping)


@pytest.mark.parametrize("columns", ["rca", "msprobe"])
def test_no_text_cell_starts_a_formula_and_numbers_stay_numbers(tmp_path: Path, columns: str) -> None:
    """Keys cannot start a formula (a dump's module keys start with `Module.`; the property test above covers any
    text); dtypes are written as the dump has them."""
    folder = tmp_path / "pair"
    shutil.copytree(FIXTURES / "missing_activation", folder)
    dtypes = set_dtypes(folder, "linear_fc2", list(FORMULAS))
    result = rca("analyze", "--train", "train", "--rollout", "rollout", "--mapping-key", "mapping_key.json",
                 "--out-dir", "out", "--no-chart", "--columns", columns, cwd=folder)  # fmt: skip
    assert result.returncode == 0, result.stderr
    cells = [cell for path in sorted((folder / "out").glob("*.csv")) for row in read(path.read_bytes()) for cell in row]
    risky = [c for c in cells if owasp(c) != c]
    assert risky == []
    assert len(dtypes) >= 2 and {"'" + dtype for dtype in dtypes} <= set(cells)
    negative = [c for c in cells if c.startswith("-") and _NUMBER.fullmatch(c)]
    assert negative and all(float(c.rstrip("%")) < 0 or c == "-inf" for c in negative)  # e.g. Min -0.5: a number
    compare = json.loads((folder / "out" / "output_3_value_compare.json").read_text())["rows"]
    dtype_column = "NPU Dtype" if columns == "msprobe" else "train_dtype"
    assert set(dtypes) <= {row[dtype_column] for row in compare}  # the JSON tables keep the text as it is


def test_plain_tables_take_the_fast_path() -> None:
    """The checks above must not send ordinary tables (keys, reasons with commas, placeholders, numbers) to the csv
    module, ~4x slower on output_3."""
    from rca_lsp.report.tables.cells import _csv_through_json

    rows = [
        ["Module.a.Linear.forward.0", "Max, Min differ", "-", -0.5, None, 3, True],
        ["Module.b.Linear.forward.0", "within 1e-05", "P1", 1e-05, None, None, False],
    ]
    assert _csv_through_json(rows, 3) is not None
