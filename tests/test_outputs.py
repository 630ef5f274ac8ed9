"""Output files: the fast CSV path reads back exactly like the csv module's output."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from rca_lsp.core.outputs import _csv, _csv_module, write_atomically, write_table

COLUMNS = ("key", "value", "flag", "reason", "parts")
ROWS = [
    ("Module.a.Linear.forward.0", 1.5e-05, True, "Max, Min differ", ["x", "y"]),
    ("Module.b.Linear.forward.0", None, False, "within 0.0001", None),
    (None, -3.25, True, "", ["z"]),
    ("Module.c.Linear.forward.0", 12, False, "null", []),
]


def read(data: bytes) -> list[list[str]]:
    return list(csv.reader(io.StringIO(data.decode())))


def normalise(table: list[list[str]]) -> list[list[object]]:
    def cell(text: str) -> object:
        try:
            return float(text)
        except ValueError:
            return text.lower()

    return [[cell(text) for text in row] for row in table]


def test_fast_csv_matches_the_csv_module() -> None:
    fast = read(_csv(COLUMNS, ROWS, (4,)))
    joined = [[*row[:4], "|".join(row[4]) if row[4] is not None else None] for row in ROWS]
    reference = read(",".join(COLUMNS).encode() + b"\n" + _csv_module(joined))
    assert normalise(fast) == normalise(reference)
    assert fast[3][0] == "" and fast[4][3] == "null"


def test_strings_needing_escapes_fall_back_to_the_csv_module() -> None:
    rows = [("a \"quoted\" key", math.pi, True, "back\\slash", None)]
    assert read(_csv(COLUMNS, rows, (4,)))[1][:1] == ['a "quoted" key']


def test_atomic_write_leaves_no_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "out" / "file.json"
    write_atomically(target, b"{}")
    write_atomically(target, b"[1]")
    assert target.read_bytes() == b"[1]" and [p.name for p in target.parent.iterdir()] == ["file.json"]


def test_streamed_table_is_one_json_document_and_a_csv(tmp_path: Path, monkeypatch) -> None:
    import json

    from rca_lsp.core import outputs

    monkeypatch.setattr(outputs, "CHUNK", 2)  # several chunks
    write_table(tmp_path, "t", {"tool": "x"}, "rows", COLUMNS, ROWS, (4,))
    document = json.loads((tmp_path / "t.json").read_text())
    assert document["meta"] == {"tool": "x"} and len(document["rows"]) == len(ROWS)
    assert document["rows"][0]["parts"] == ["x", "y"] and document["rows"][1]["value"] is None
    assert len(read((tmp_path / "t.csv").read_bytes())) == len(ROWS) + 1
