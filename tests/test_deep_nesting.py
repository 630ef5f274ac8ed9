"""A dump nested a thousand levels deep or more (a single dump, a rank file, a joined step): one line naming the file
and the line where the nesting gets too deep, never a RecursionError (analyze, suggest-mapping, the server's load)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import FIXTURES
from test_cli import analyze_args

from rca_lsp.base.errors import InputError
from rca_lsp.cli.main import main
from rca_lsp.dumps.dump import entries_with_slots, load_dump_file
from rca_lsp.dumps.load import DumpCache
from rca_lsp.dumps.rankfile import read_raw_entry
from rca_lsp.dumps.sources import StepSpan, resolve_dump_source
from rca_lsp.server.engine import Engine
from rca_lsp.server.pairing import Pair, find_pair


def _deepen(path: Path, depth: int, where: str) -> str:
    """Nest `depth` levels into the first entry of a real dump (lists, or lists and objects alternating, in an
    argument, a parameter or beside the entries), one bracket a line; the entry's key. (Written as text: json.dumps
    itself recurses.)"""
    document = json.loads(path.read_text())
    key = next(iter(document["data"]))
    if where == "parameters":
        document["data"][key]["parameters"]["deep"] = "@deep@"
    elif where == "beside":
        document["deep"] = "@deep@"
    else:
        document["data"][key]["input_args"].append("@deep@")
    opening = ["[" if where != "objects" or level % 2 else '{"x":' for level in range(depth)]
    closing = ["]" if where != "objects" or level % 2 else "}" for level in reversed(range(depth))]
    nest = "\n".join(opening) + "\n0.0\n" + "\n".join(closing)
    path.write_text(json.dumps(document, indent=1).replace('"@deep@"', nest))
    return key


@pytest.mark.parametrize("depth", [1000, 3000, 100_000])
@pytest.mark.parametrize("where", ["lists", "objects", "parameters", "beside"])
def test_a_deeply_nested_dump_is_one_input_error_at_its_line(tmp_path: Path, depth: int, where: str) -> None:
    path = tmp_path / "dump.json"
    shutil.copy(FIXTURES / "healthy_fp32" / "train" / "step0" / "rank0" / "dump.json", path)
    _deepen(path, depth, where)
    with pytest.raises(InputError) as raised:
        load_dump_file(path)
    error = raised.value
    assert error.path == str(path) and "nested" in error.message and "too deep" in error.message, error
    lines = path.read_text().splitlines()
    assert error.line is not None and lines[error.line - 1] in ("[", '{"x":'), error  # a line of the nesting
    with pytest.raises(InputError, match="too deep"):
        DumpCache().get(path)
    with pytest.raises(InputError, match="too deep"):
        entries_with_slots(str(path), ["any"])  # what the YAML export and msprobe's names read


def test_a_deep_entry_read_on_demand_is_no_entry(tmp_path: Path) -> None:
    """A hover's per-rank read of one entry (rankfile) finds nothing to show, without an exception."""
    path = tmp_path / "dump.json"
    shutil.copy(FIXTURES / "healthy_fp32" / "train" / "step0" / "rank0" / "dump.json", path)
    key = _deepen(path, 5000, "lists")
    assert read_raw_entry(path, key) is None


def _copy(variant: str, into: Path) -> Path:
    shutil.copytree(FIXTURES / variant, into / variant)
    return into / variant


def _one_line(argv: list[str], capsys: pytest.CaptureFixture[str], named: Path) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and f"{named}:" in err and "too deep" in err, err


def test_a_deep_rank_file_is_named_by_analyze_and_suggest_mapping(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _copy("tp2_healthy", tmp_path)
    deep = folder / "train" / "step0" / "rank1" / "dump.json"
    _deepen(deep, 2000, "lists")
    with pytest.raises(InputError, match="too deep"):
        DumpCache().get(resolve_dump_source(folder / "train"))
    _one_line(list(analyze_args(folder, tmp_path / "out")), capsys, deep)  # the rank files compared by a child
    suggest = ["suggest-mapping", "--train", str(folder / "train"), "--rollout", str(folder / "rollout")]
    _one_line([*suggest, "-o", str(tmp_path / "m.json")], capsys, deep)
    assert not (tmp_path / "out").exists() and not (tmp_path / "m.json").exists()


def test_a_deep_first_rank_and_a_deep_rollout_are_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _copy("tp2_healthy", tmp_path)
    deep = folder / "rollout" / "step0" / "rank0" / "dump.json"  # the rollout: loaded by a forked child
    _deepen(deep, 2000, "objects")
    _one_line(list(analyze_args(folder, tmp_path / "out")), capsys, deep)
    shutil.copy(FIXTURES / "tp2_healthy" / "rollout" / "step0" / "rank0" / "dump.json", deep)
    deep = folder / "train" / "step0" / "rank0" / "dump.json"  # the first rank, which the others are read against
    _deepen(deep, 2000, "lists")
    _one_line(list(analyze_args(folder, tmp_path / "out")), capsys, deep)


def test_a_deep_joined_step_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _copy("vllm_tp2_decode_steps_healthy", tmp_path)
    deep = folder / "rollout" / "step3" / "rank1" / "dump.json"
    _deepen(deep, 2000, "lists")
    with pytest.raises(InputError, match="too deep"):
        DumpCache().get(resolve_dump_source(folder / "rollout", StepSpan()))
    _one_line([*analyze_args(folder, tmp_path / "out"), "--rollout-step", "all"], capsys, deep)


def test_the_server_s_load_of_a_deep_dump_is_an_input_error(tmp_path: Path) -> None:
    """What the server publishes as a dump problem (a RecursionError was its "internal error"): its loader child is
    a new interpreter, which fails, and the load here says why."""
    folder = _copy("tp2_healthy", tmp_path)
    deep = folder / "rollout" / "step0" / "rank0" / "dump.json"
    _deepen(deep, 2000, "lists")
    pair = find_pair(folder / "mapping_key.json", (), [folder])
    assert isinstance(pair, Pair)
    with pytest.raises(InputError) as raised:
        Engine().load(pair)
    assert raised.value.path == str(deep) and "too deep" in raised.value.message
