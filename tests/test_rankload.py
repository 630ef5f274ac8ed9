"""Rank files read against the first one: the same dumps and the same errors as loading each file alone."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from builders import entry, write_dump
from conftest import FIXTURES

from rca_lsp.base.errors import InputError
from rca_lsp.dumps.dump import Dump, load_dump_file
from rca_lsp.dumps.forkload import load_files_forked
from rca_lsp.dumps.rankfile import read_raw_entries
from rca_lsp.dumps.rankload import load_rank_files

LAYER = "Module.model.layers.{}.mlp.down_proj.Linear.forward.0"


def _same(loaded: list[Dump], paths: list[Path]) -> None:
    direct = [load_dump_file(path) for path in paths]
    for got, want in zip(loaded, direct, strict=True):
        assert (got.path, got.task, got.level, got.framework) == (want.path, want.task, want.level, want.framework)
        assert got.keys == want.keys and repr(got.entries) == repr(want.entries)  # repr: NaN equals NaN there
        assert (got.skipped_keys, got.null_keys) == (want.skipped_keys, want.null_keys)


def _ranks(tmp_path: Path) -> list[Path]:
    """Rank 0 has a null entry; rank 1 differs from rank 0 in one entry's statistics, a null entry, a backward
    key, a key of its own and the order of two keys; rank 2 has a non-finite statistic (a NaN literal: the file
    does not scan); rank 3 has rank 0's keys in its order, one entry's statistics differing."""
    shared = {LAYER.format(i): entry([1.0, 2.0 + i], [3.0, 4.0], weight=[0.5, 0.25]) for i in range(6)}
    first = {**shared, LAYER.format(7): None}
    fourth = {**first, LAYER.format(5): entry([1.0, 6.5], [3.0, 4.0])}
    second = {key: shared[key] for key in [LAYER.format(i) for i in (0, 2, 1, 3, 4, 5)]}
    second[LAYER.format(3)] = entry([1.0, 6.5], [3.0, 4.0], weight=[0.5, 0.25])
    second[LAYER.format(4)] = None
    second[LAYER.format(5).replace("forward", "backward")] = entry([1.0, 2.0], [3.0, 4.0])
    second[LAYER.format(9)] = entry([7.0, 8.0], [9.0, 1.0])
    third = dict(shared)
    third[LAYER.format(2)] = entry([1.0, math.nan], [3.0, 4.0])
    ranks = (first, second, third, fourth)
    return [write_dump(tmp_path / f"rank{r}" / "dump.json", data) for r, data in enumerate(ranks)]


@pytest.mark.parametrize("load", [load_rank_files, load_files_forked], ids=["here", "forked"])
def test_rank_files_give_the_dumps_each_file_gives_alone(tmp_path: Path, load: object) -> None:
    paths = _ranks(tmp_path)
    loaded = load(paths)  # type: ignore[operator]
    _same(loaded, paths)
    first, second = loaded[0], loaded[1]
    # a replica is the first rank's object (what the merge tells replicas by); a changed entry is its own
    assert second.entries[LAYER.format(0)] is first.entries[LAYER.format(0)]
    assert second.entries[LAYER.format(3)] is not first.entries[LAYER.format(3)]
    assert second.entries[LAYER.format(1)].position == 2 and first.entries[LAYER.format(1)].position == 1
    assert loaded[3].entries[LAYER.format(0)] is first.entries[LAYER.format(0)]


def test_real_rank_files_give_the_same_dumps() -> None:
    for name in ("tp2_healthy", "tp2_sp_replica_desync", "pp2_healthy", "moe_ep2_expert_desync"):
        paths = sorted((FIXTURES / name / "train").glob("step0/rank*/dump.json"))
        assert len(paths) > 1
        _same(load_rank_files(paths), paths)


@pytest.mark.parametrize(
    "broken",
    [
        '{\n "data": {\n  "k": [1, 2,,]\n }\n}',  # not JSON
        '{"data": {"' + LAYER.format(0) + '": {"output": [{"dtype": "torch.float32", "Max": 1e400}]}}}',
        '{"data": []}',  # not a dump
    ],
    ids=["syntax", "number beyond a double", "not a dump"],
)
@pytest.mark.parametrize("load", [load_rank_files, load_files_forked], ids=["here", "forked"])
def test_a_broken_rank_file_reports_as_it_would_alone(tmp_path: Path, broken: str, load: object) -> None:
    paths = _ranks(tmp_path)
    bad = paths[2]
    bad.write_text(broken)
    with pytest.raises(InputError) as raised:
        load(paths)  # type: ignore[operator]
    with pytest.raises(InputError) as alone:
        load_dump_file(bad)
    assert str(raised.value) == str(alone.value) and str(bad) in str(raised.value)


@pytest.mark.parametrize("variant", ["tp2_replica_desync", "vllm_tp2_decode_steps_rank_desync"])
def test_many_entries_read_on_demand_are_the_file_s_entries(variant: str) -> None:
    """read_raw_entries reads up to the next key found (and the whole window when that cuts an entry): every key
    of a real rank file, in dump order and out of it, is the entry the file holds."""
    path = next((FIXTURES / variant).glob("*/step*/rank1/dump.json"))
    data = json.loads(path.read_text())["data"]
    keys = list(data)
    assert read_raw_entries(path, keys) == data
    some = keys[::-3]  # out of dump order, with entries between those read
    assert read_raw_entries(path, some) == {key: data[key] for key in some}
    assert read_raw_entries(path, ["Module.not.a.key.forward.0"]) == {"Module.not.a.key.forward.0": None}
