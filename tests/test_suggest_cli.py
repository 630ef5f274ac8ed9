"""`rca-lsp suggest-mapping`: the file it writes, the coverage it prints, and one-line errors naming the bad file."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from rca_lsp.cli.main import main

TRAIN_FC2 = "Module.module.module.decoder.layers.0.mlp.linear_fc2.RowParallelLinear.forward.0"
TRAIN_NORM = "Module.module.module.decoder.final_layernorm.RMSNorm.forward.0"
ROLLOUT_DOWN = "Module.model.layers.0.mlp.down_proj.Linear.forward.0"
ROLLOUT_NORM = "Module.model.norm.RMSNorm.forward.0"


def _tensor(shape: list[int], norm: float) -> dict[str, object]:
    return {
        "type": "torch.Tensor",
        "dtype": "torch.float32",
        "shape": shape,
        "Max": 2.5,
        "Min": -2.0,
        "Mean": 0.01,
        "Norm": norm,
    }


def _dump_text(entries: dict[str, tuple[list[int], float]]) -> str:
    data = {
        key: {"input_args": [_tensor(shape, norm)], "input_kwargs": {}, "output": [_tensor(shape, norm + 1)]}
        for key, (shape, norm) in entries.items()
    }
    return json.dumps({"task": "statistics", "level": "L0", "framework": "pytorch", "data": data}, indent=1)


@pytest.fixture()
def pair(tmp_path: Path) -> tuple[Path, Path]:
    train = tmp_path / "train.json"
    rollout = tmp_path / "rollout.json"
    train.write_text(_dump_text({TRAIN_FC2: ([8, 1, 16], 3.0), TRAIN_NORM: ([8, 1, 16], 5.0)}))
    # Overflowing rollout runs write bare NaN/Infinity literals: they must load.
    rollout.write_text(
        _dump_text({ROLLOUT_DOWN: ([1, 8, 16], 3.0), ROLLOUT_NORM: ([1, 8, 16], 5.0)}).replace(
            '"Mean": 0.01', '"Mean": NaN', 1
        )
    )
    return train, rollout


def _run(*argv: str) -> int:
    return main(["suggest-mapping", *argv])


def test_writes_the_mapping_and_prints_coverage(
    pair: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "mapping.json"
    assert _run("--train", str(pair[0]), "--rollout", str(pair[1]), "-o", str(output)) == 0
    assert list(orjson.loads(output.read_bytes()).items()) == [(TRAIN_FC2, ROLLOUT_DOWN), (TRAIN_NORM, ROLLOUT_NORM)]
    printed = capsys.readouterr().out
    assert "train modules mapped: 2 of 2" in printed and f"wrote 2 entries to {output}" in printed
    assert [path.name for path in tmp_path.iterdir() if path.name.startswith(".")] == []  # no temporary file left


def test_existing_entries_are_kept(pair: tuple[Path, Path], tmp_path: Path) -> None:
    existing = tmp_path / "existing.json"
    existing.write_text(json.dumps({TRAIN_NORM: "Module.model.some_other.RMSNorm.forward.0"}))
    output = tmp_path / "mapping.json"
    assert _run("--train", str(pair[0]), "--rollout", str(pair[1]), "-o", str(output), "--existing", str(existing)) == 0
    assert orjson.loads(output.read_bytes()) == {
        TRAIN_FC2: ROLLOUT_DOWN,
        TRAIN_NORM: "Module.model.some_other.RMSNorm.forward.0",
    }


@pytest.mark.parametrize("broken", ["train", "existing", "rules", "output"])
def test_bad_input_exits_2_with_one_line_naming_the_file(
    broken: str, pair: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = {
        "train": str(pair[0]),
        "existing": str(tmp_path / "existing.json"),
        "rules": str(tmp_path / "rules.toml"),
        "output": str(tmp_path / "mapping.json"),
    }
    Path(paths["existing"]).write_text("{}")
    Path(paths["rules"]).write_text("")
    if broken == "train":
        paths["train"] = str(tmp_path / "missing.json")
    elif broken == "existing":
        Path(paths["existing"]).write_text('{\n  "a": "b",\n  "c": \n}')
    elif broken == "rules":
        Path(paths["rules"]).write_text("[[rename]]\ncanonical = 3\nnames = ['x']\n")
    else:
        paths["output"] = str(tmp_path / "no" / "such" / "dir" / "mapping.json")
    code = _run(
        "--train",
        paths["train"],
        "--rollout",
        str(pair[1]),
        "-o",
        paths["output"],
        "--existing",
        paths["existing"],
        "--rules",
        paths["rules"],
    )
    error = capsys.readouterr().err
    assert code == 2
    assert error.count("\n") == 1 and error.startswith(f"rca-lsp: error: {paths[broken]}")  # as every command's
    assert not (tmp_path / "mapping.json").exists()
