"""output_3 under msprobe compare's column names (statistics mode): msprobe's header, its arithmetic, our columns."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
from conftest import FIXTURES

from rca_lsp.cli.main import main
from rca_lsp.report.tables.columns import MSPROBE_COLUMNS, msprobe_rows
from rca_lsp.report.tables.values import TARGET_COLUMNS

# CompareConst.SUMMARY_COMPARE_RESULT_HEADER of msprobe (python/msprobe/core/common/const.py)
MSPROBE_SUMMARY_HEADER = [
    "NPU Name", "Bench Name", "NPU Dtype", "Bench Dtype", "NPU Tensor Shape", "Bench Tensor Shape",
    "NPU Requires_grad", "Bench Requires_grad",
    "Max diff", "Min diff", "Mean diff", "L2norm diff",
    "MaxRelativeErr", "MinRelativeErr", "MeanRelativeErr", "NormRelativeErr",
    "NPU max", "NPU min", "NPU mean", "NPU l2norm", "Bench max", "Bench min", "Bench mean", "Bench l2norm",
    "Requires_grad Consistent", "Result", "Err_message",
]  # fmt: skip


def run(tmp_path: Path, variant: str, columns: str) -> Path:
    fixture = FIXTURES / variant
    out = tmp_path / columns
    args = ["--train", str(fixture / "train"), "--rollout", str(fixture / "rollout")]
    assert main(["analyze", *args, "--mapping-key", str(fixture / "mapping_key.json"), "--out-dir", str(out), "--columns", columns]) == 0  # fmt: skip
    return out


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict], list[dict], list[dict]]:
    tmp_path = tmp_path_factory.mktemp("columns")
    ours = json.loads((run(tmp_path, "missing_activation", "rca") / "output_3_value_compare.json").read_text())
    out = run(tmp_path, "missing_activation", "msprobe")
    theirs = json.loads((out / "output_3_value_compare.json").read_text())
    with (out / "output_3_value_compare.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    return ours["rows"], theirs["rows"], rows


def test_the_header_is_msprobes_then_ours(tables) -> None:
    ours, theirs, csv_rows = tables
    assert list(MSPROBE_COLUMNS) == MSPROBE_SUMMARY_HEADER
    assert list(theirs[0])[: len(MSPROBE_SUMMARY_HEADER)] == MSPROBE_SUMMARY_HEADER
    assert list(csv_rows[0])[: len(MSPROBE_SUMMARY_HEADER)] == MSPROBE_SUMMARY_HEADER
    assert len(theirs) == len(ours) == len(csv_rows)


def _msprobe_relative(npu: float, bench: float) -> str:
    return f"{abs((npu - bench) / bench * 100)}%" if bench != 0 else "N/A"


def test_each_row_is_msprobes_arithmetic_on_the_same_statistics(tables) -> None:
    ours, theirs, _ = tables
    compared = 0
    for mine, row in zip(ours, theirs):
        target = mine["target"].replace("input_args", "input").replace("input_kwargs", "input")
        assert row["NPU Name"] == f"{mine['train_key']}.{target}"
        assert row["Bench Name"] == f"{mine['rollout_key']}.{target}"
        assert (row["NPU Dtype"], row["Bench Dtype"]) == (mine["train_dtype"], mine["rollout_dtype"])
        for stat, name, relative in (("Max", "max", "Max"), ("Min", "min", "Min"), ("Mean", "mean", "Mean"), ("Norm", "l2norm", "Norm")):  # fmt: skip
            npu, bench = mine[f"train_{stat}"], mine[f"rollout_{stat}"]
            assert row[f"NPU {name}"] == npu and row[f"Bench {name}"] == bench
            diff_column = "L2norm diff" if stat == "Norm" else f"{stat} diff"
            if isinstance(npu, float) and isinstance(bench, float):
                assert math.isclose(row[diff_column], npu - bench, abs_tol=0.0)
                assert row[f"{relative}RelativeErr"] == _msprobe_relative(npu, bench)
                compared += 1
            else:
                assert row[diff_column] == "N/A" and row[f"{relative}RelativeErr"] == "N/A"
        assert row["Result"] == {"aligned": "pass", "mismatch": "error"}.get(mine["numeric_consistency"], "warning")
        assert row["Err_message"] == mine["reason"]
        assert all(row[k] == v for k, v in mine.items() if k in row)  # our columns, unchanged
    assert compared > 100


def test_the_mismatches_of_the_fixture_are_errors(tables) -> None:
    _, theirs, _ = tables
    errors = [r["NPU Name"] for r in theirs if r["Result"] == "error"]
    assert "Module.module.module.decoder.layers.0.mlp.linear_fc2.RowParallelLinear.forward.0.input.0" in errors
    assert any(r["Result"] == "pass" for r in theirs)


def test_non_finite_and_missing_statistics_are_spelled_as_msprobe_does() -> None:
    """NaN -> "Nan", infinities "inf"/"-inf", a Bench value of 0 gives no relative error, a missing one "N/A"."""
    columns, convert = msprobe_rows(TARGET_COLUMNS)
    row = dict.fromkeys(TARGET_COLUMNS)
    row.update(train_key="Module.a.A.forward.0", rollout_key="Module.b.B.forward.0", target="input_kwargs.mask")
    row.update(train_Max=math.inf, rollout_Max=1.0, train_Min=-math.inf, rollout_Min=-math.inf)
    row.update(train_Mean=math.nan, rollout_Mean=0.5, train_Norm=2.0, rollout_Norm=0.0)
    row.update(numeric_consistency="missing", reason="why")
    converted = dict(zip(columns, convert(tuple(row.values()))))
    assert converted["NPU Name"] == "Module.a.A.forward.0.input.mask"
    assert (converted["NPU max"], converted["NPU min"], converted["NPU mean"]) == ("inf", "-inf", "Nan")
    assert (converted["Max diff"], converted["MaxRelativeErr"]) == ("inf", "inf%")
    assert (converted["Min diff"], converted["MinRelativeErr"]) == ("Nan", "Nan")  # -inf - -inf
    assert (converted["Mean diff"], converted["MeanRelativeErr"]) == ("Nan", "Nan")
    assert (converted["L2norm diff"], converted["NormRelativeErr"]) == (2.0, "N/A")
    assert converted["Result"] == "warning" and converted["Err_message"] == "why"
    row.update(train_Max=None)
    assert dict(zip(columns, convert(tuple(row.values()))))["Max diff"] == "N/A"


def test_an_unknown_column_style_is_refused(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit):
        main(["analyze", "--columns", "excel"])
    assert "invalid choice" in capsys.readouterr().err


def test_the_columns_setting_of_the_server() -> None:
    from rca_lsp.server.settings import Settings

    assert Settings.from_client({"columns": "msprobe"}) == (Settings(columns="msprobe"), [])
    assert Settings.from_client({}) == (Settings(columns="rca"), [])
    assert Settings.from_client({"columns": ["msprobe"]}) == (
        Settings(),
        ["rcaLsp.columns must be one of rca, msprobe; using rca"],
    )
