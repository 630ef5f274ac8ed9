"""A rank layout given by the user (--parallel, `parallel` in rca-lsp.toml) is checked against the dumps: where they
contradict it, one line says which ranks and why (it was obeyed and gave false root causes); the true layout of
every real multi-rank fixture is accepted and merges as inferred. And a layout inferred from rank folders that may
lack the last ones (tp=3) says so."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import FIXTURES
from test_cli import analyze_args

from rca_lsp.base.errors import InputError
from rca_lsp.cli.main import main
from rca_lsp.dumps.load import DumpCache
from rca_lsp.dumps.sources import StepSpan, parse_layout, resolve_dump_source

# (fixture, side, its layout as the merge infers it)
LAYOUTS = [
    ("moe_ep2_healthy", "train", "tp=1,pp=1,ep=2,dp=1"),
    ("moe_ep2_own_data_healthy", "train", "tp=1,pp=1,ep=2,dp=1"),
    ("pp2_healthy", "train", "tp=1,pp=2,ep=1,dp=1"),
    ("tp2_dp2_healthy", "train", "tp=2,pp=1,ep=1,dp=2"),
    ("tp2_dp2_same_data_replica_drift", "train", "tp=2,pp=1,ep=1,dp=2"),
    ("tp2_pp2_dp2_healthy", "train", "tp=2,pp=2,ep=1,dp=2"),
    ("tp2_replica_desync", "train", "tp=2,pp=1,ep=1,dp=1"),
    ("tp2_sp_healthy", "train", "tp=2,pp=1,ep=1,dp=1"),
    ("vllm_tp2_decode_steps_healthy", "rollout", "tp=2,pp=1,ep=1,dp=1"),
    ("vllm_tp4_kv_replicated", "rollout", "tp=4,pp=1,ep=1,dp=1"),
]


def _source(variant: str, side: str, layout: str | None):  # type: ignore[no-untyped-def]
    folder = FIXTURES / variant / side
    step = StepSpan() if len(list(folder.glob("step*"))) > 1 else None
    return resolve_dump_source(folder, step, parse_layout(layout))


@pytest.mark.parametrize(("variant", "side", "layout"), LAYOUTS)
def test_the_true_layout_given_merges_as_inferred(variant: str, side: str, layout: str) -> None:
    inferred = DumpCache().get(_source(variant, side, None))
    given = DumpCache().get(_source(variant, side, layout))
    assert inferred.parallel is not None and given.parallel is not None
    assert given.parallel.layout.split(" (")[0].replace(" ", "") == layout
    assert given.keys == inferred.keys and given.entries == inferred.entries


@pytest.mark.parametrize(
    ("variant", "layout", "said"),
    [
        ("tp2_healthy", "pp=2", "ranks 0 and 1 each dump the whole model"),
        ("tp2_healthy", "dp=2", "ranks 0 and 1 cannot be data-parallel replicas: they hold other shards"),
        ("tp2_healthy", "ep=2", "ep=2 expert-parallel ranks, but the dumps hold no experts"),
        ("tp2_healthy", "tp=1", "ep=2 expert-parallel ranks, but the dumps hold no experts"),
        ("moe_ep2_healthy", "dp=2", "ranks 0 and 1 cannot be data-parallel replicas: they hold other experts"),
        ("moe_ep2_healthy", "tp=2", "ranks 0 and 1 cannot be tensor-parallel peers: they hold the same"),
        ("tp2_dp2_healthy", "tp=4", "ranks 0 and 2 cannot be tensor-parallel peers: they hold the same"),
        ("tp2_pp2_healthy", "pp=1", "ranks 0 and 2 dump other modules"),
    ],
)
def test_a_given_layout_the_dumps_contradict_is_one_line_naming_the_ranks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], variant: str, layout: str, said: str
) -> None:
    with pytest.raises(InputError) as raised:
        DumpCache().get(_source(variant, "train", layout))
    assert said in raised.value.message and f"the given layout {layout}" in raised.value.message, raised.value
    folder = tmp_path / variant
    shutil.copytree(FIXTURES / variant, folder)
    assert main([*analyze_args(folder, tmp_path / "out"), "--parallel", layout]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and said in err, err
    assert not (tmp_path / "out").exists()


def test_ranks_merged_as_an_odd_tensor_parallel_size_say_a_folder_may_be_missing(tmp_path: Path) -> None:
    """vLLM TP=4 with its last rank folder gone: no gap, so merged as tp=3; the notes say what it may be."""
    rollout = tmp_path / "rollout"
    shutil.copytree(FIXTURES / "vllm_tp4_kv_replicated" / "rollout", rollout)
    shutil.rmtree(rollout / "step0" / "rank3")
    dump = DumpCache().get(resolve_dump_source(rollout))
    assert dump.parallel is not None and dump.parallel.layout.startswith("tp=3")
    assert "rank 3 and later" in dump.parallel.notes[0] and "missing" in dump.parallel.notes[0], dump.parallel.notes
    whole = DumpCache().get(resolve_dump_source(FIXTURES / "vllm_tp4_kv_replicated" / "rollout"))
    assert whole.parallel is not None and not any("missing" in note for note in whole.parallel.notes)
