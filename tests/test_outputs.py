"""Output files: the fast CSV path reads back exactly like the csv module's output."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from rca_lsp.report.outputs import write_atomically, write_table
from rca_lsp.report.tables.cells import csv_reference, csv_table

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
    fast = read(csv_table(COLUMNS, ROWS, (4,)))
    joined = [[*row[:4], "|".join(row[4]) if row[4] is not None else None] for row in ROWS]
    reference = read(",".join(COLUMNS).encode() + b"\n" + csv_reference(joined))
    assert normalise(fast) == normalise(reference)
    assert fast[3][0] == "" and fast[4][3] == "null"


def test_strings_needing_escapes_fall_back_to_the_csv_module() -> None:
    rows = [('a "quoted" key', math.pi, True, "back\\slash", None)]
    assert read(csv_table(COLUMNS, rows, (4,)))[1][:1] == ['a "quoted" key']


def test_atomic_write_leaves_no_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "out" / "file.json"
    write_atomically(target, b"{}")
    write_atomically(target, b"[1]")
    assert target.read_bytes() == b"[1]" and [p.name for p in target.parent.iterdir()] == ["file.json"]


def test_streamed_table_is_one_json_document_and_a_csv(tmp_path: Path, monkeypatch) -> None:
    import json

    from rca_lsp.report import outputs

    monkeypatch.setattr(outputs, "CHUNK", 2)  # several chunks
    write_table(tmp_path, "t", {"tool": "x"}, "rows", COLUMNS, ROWS, (4,))
    document = json.loads((tmp_path / "t.json").read_text())
    assert document["meta"] == {"tool": "x"} and len(document["rows"]) == len(ROWS)
    assert document["rows"][0]["parts"] == ["x", "y"] and document["rows"][1]["value"] is None
    assert len(read((tmp_path / "t.csv").read_bytes())) == len(ROWS) + 1


def _non_finite_pair(tmp_path: Path) -> tuple[Path, Path, Path]:
    from builders import entry, write_dump, write_mapping

    train_key, rollout_key = "Module.a.Linear.forward.0", "Module.b.Linear.forward.0"
    train, rollout = entry([1.0, 2.0], [3.0, 4.0]), entry([1.0, 2.0], [3.0, 4.0])
    train["output"][0].update(Max=math.nan, Min=-math.inf, Mean=None)  # Mean missing on train
    rollout["output"][0].update(Max=math.nan, Min=1.0, Norm=math.inf)
    return (
        write_dump(tmp_path / "train.json", {train_key: train}),
        write_dump(tmp_path / "rollout.json", {rollout_key: rollout}),
        write_mapping(tmp_path / "mapping.json", {train_key: rollout_key}),
    )


def test_non_finite_statistics_are_told_apart_from_missing_ones(tmp_path: Path) -> None:
    import json

    from rca_lsp.diagnose.run import analyze_paths
    from rca_lsp.report.outputs import write_outputs

    analysis = analyze_paths(*_non_finite_pair(tmp_path))
    for fork in (False, True):
        out = tmp_path / f"out_{fork}"
        write_outputs(analysis, out, fork=fork)
        row = next(
            r
            for r in json.loads((out / "output_3_value_compare.json").read_text())["rows"]
            if r["target"] == "output.0"
        )
        assert (row["train_Max"], row["rollout_Max"], row["train_Min"], row["rollout_Min"]) == (
            "NaN",
            "NaN",
            "-Infinity",
            1.0,
        )
        assert row["train_Mean"] is None and row["rollout_Norm"] == "Infinity" and row["train_Norm"] == 5.0
        assert (row["Min_rel_err"], row["Min_status"]) == ("Infinity", "alert")
        assert (row["Mean_rel_err"], row["Mean_status"]) == (None, "missing")
        table = read((out / "output_3_value_compare.csv").read_bytes())
        cells = dict(zip(table[0], next(r for r in table[1:] if "output.0" in r)))
        assert (cells["train_Max"], cells["train_Min"], cells["rollout_Norm"], cells["Min_rel_err"]) == (
            "nan",
            "-inf",
            "inf",
            "inf",
        )
        assert cells["train_Mean"] == "" and cells["Mean_rel_err"] == "" and float(cells["train_Norm"]) == 5.0


def test_non_finite_cells_through_the_csv_module() -> None:
    from rca_lsp.report.tables.cells import marked_non_finite

    rows = [
        ('a "quoted" key', marked_non_finite(math.nan), marked_non_finite(math.inf), marked_non_finite(-math.inf), None)
    ]
    assert read(csv_table(COLUMNS, rows))[1] == ['a "quoted" key', "nan", "inf", "-inf", ""]
    assert read(csv_table(COLUMNS, [("plain", *rows[0][1:])]))[1] == ["plain", "nan", "inf", "-inf", ""]
