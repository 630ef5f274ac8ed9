"""Expert-parallel ranks that read their own batches (fixtures/moe_ep2_own_data_*: real Megatron-core EP=2, each EP
rank its data-parallel rank's batch, as Megatron runs them): told from data-parallel replicas by their experts, the
modules outside the experts taken from EP rank 0, the experts merged by global index with their activations (which
hold tokens of every rank's batch) left out and said so, their parameters compared."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest
from conftest import FIXTURES, expected, train_without_weights

from rca_lsp.base.errors import InputError
from rca_lsp.diagnose.run import SideOptions, analyze_paths
from rca_lsp.dumps.load import DumpCache
from rca_lsp.dumps.sources import ParallelLayout, resolve_dump_source
from rca_lsp.report.markdown import render_markdown
from rca_lsp.report.root_cause import root_cause_report

OWN_DATA = ["moe_ep2_own_data_healthy", "moe_ep2_own_data_expert_desync"]
EXPERT = ".mlp.experts."
NOTE = "expert parallel, each EP rank its own batch"


def analyse(variant: str, layout: ParallelLayout | None = None, folder: Path | None = None):
    folder = folder or FIXTURES / variant
    return analyze_paths(
        folder / "train", folder / "rollout", folder / "mapping_key.json", train_options=SideOptions(layout=layout)
    )


def rank_data(variant: str, rank: int) -> dict:
    return json.loads((FIXTURES / variant / "train/step0" / f"rank{rank}/dump.json").read_text())["data"]


@pytest.mark.parametrize("variant", OWN_DATA)
def test_what_the_inference_relies_on_in_the_real_dumps(variant: str) -> None:
    """Rank 1 read another batch (every module outside the experts but the rotary table differs from rank 0's) and
    holds other experts under the same local names (every expert weight differs), the same weights elsewhere."""
    assert expected(variant)["parallel"]["data_parallel_batches"] == "own"
    ranks = [rank_data(variant, r) for r in range(2)]
    assert list(ranks[0]) == list(ranks[1])
    outside = [k for k in ranks[0] if EXPERT not in k]
    differing = [k for k in outside if ranks[0][k].get("output") != ranks[1][k].get("output")]
    assert len(differing) > len(outside) - 5
    embedding = "Module.module.module.embedding.word_embeddings.VocabParallelEmbedding.forward.0"
    assert ranks[0][embedding]["input_args"] != ranks[1][embedding]["input_args"]
    for key in ranks[0]:
        if ranks[0][key].get("parameters"):
            same = ranks[0][key]["parameters"] == ranks[1][key]["parameters"]
            assert same == (EXPERT not in key), key


@pytest.mark.parametrize("variant", OWN_DATA)
def test_the_layout_is_inferred_and_the_report_says_what_was_left_out(variant: str) -> None:
    analysis = analyse(variant)
    info = analysis.train.parallel
    assert info is not None and info.layout == "tp=1, pp=1, ep=2, dp=1 (inferred from the dumps)"
    (note,) = [n for n in info.notes if n.startswith(NOTE)]
    assert "EP rank 0's (rank 0)" in note and "ep x dp = 2" in note and "activations are left out" in note
    assert not any(n.startswith("data parallel") for n in info.notes)  # not read as data-parallel replicas
    assert note in root_cause_report(analysis)["parallel"]["train"]["notes"] and note in render_markdown(analysis)
    assert root_cause_report(analysis)["disagreements"] == []  # other batches are not replicas disagreeing
    assert analysis.issues == []  # every global expert the mapping names is there (rank 1's too)


@pytest.mark.parametrize("variant", OWN_DATA)
def test_outside_the_experts_rank_0_inside_every_rank_by_global_index(variant: str) -> None:
    merged = DumpCache().get(FIXTURES / variant / "train")
    rank0 = DumpCache().get(FIXTURES / variant / "train/step0/rank0/dump.json")
    rank1 = DumpCache().get(FIXTURES / variant / "train/step0/rank1/dump.json")
    for key in rank0.keys:
        if EXPERT not in key:
            mine = msgspec.structs.replace(merged.entries[key], position=rank0.entries[key].position)
            assert mine == rank0.entries[key], key  # experts joined before: a later position in the merged dump
    assert merged.parallel is not None
    for layer in range(2):
        for expert in range(4):
            owner = rank0 if expert < 2 else rank1
            for fc, cls in (("linear_fc1", "ColumnParallelLinear"), ("linear_fc2", "RowParallelLinear")):
                name = (
                    f"Module.module.module.decoder.layers.{layer}.mlp.experts.local_experts.{{}}.{fc}.{cls}.forward.0"
                )
                entry = merged.entries[name.format(expert)]
                assert entry.parameters == owner.entries[name.format(expert % 2)].parameters
                assert entry.other_batches and entry.input is None and entry.output is None
                assert "activations left out" in merged.parallel.merges[name.format(expert)]
        container = f"Module.module.module.decoder.layers.{layer}.mlp.experts.SequentialMLP.forward.0"
        assert merged.entries[container].other_batches and merged.entries[container].output is None
    # one batch's tokens: the experts' rows (both batches' routed tokens) no longer count as tokens of the call
    assert merged.tokens_per_call == {0: 8}


def test_the_expert_desynced_on_rank_1_is_found_through_the_parameters() -> None:
    truth = expected("moe_ep2_own_data_expert_desync")
    analysis = analyse("moe_ep2_own_data_expert_desync")
    first = analysis.suspects[0]
    assert (first.train_key, first.classification) == (
        truth["root_cause"]["train_key"],
        "parameter_or_checkpoint_issue",
    )
    by_key = {s.train_key: s for s in analysis.suspects}
    moe = "Module.module.module.decoder.layers.1.mlp.MoELayer.forward.0"
    assert moe in by_key and not by_key[moe].credible_origin  # rank 0's batch went through the bad expert
    assert not any(".layers.0." in key for key in by_key)  # everything before layer 1's experts is clean


def test_experts_mapped_one_to_one_compare_by_parameters_only(tmp_path: Path) -> None:
    """Against a side with per-expert modules (the EP=1 run of the rollout's batch, moe_ep1_healthy, under the same
    logical keys) the experts map 1:1: their activations would differ (both batches' tokens against one's), so
    only their weights compare: the healthy run is clean and the desynced expert is named exactly."""
    reference = FIXTURES / "moe_ep1_healthy" / "train"
    keys = [k for k in DumpCache().get(reference).keys if ".Float16Module." not in k]
    mapping = tmp_path / "identity.json"
    mapping.write_text(json.dumps({k: k for k in keys}))
    healthy = analyze_paths(FIXTURES / "moe_ep2_own_data_healthy" / "train", reference, mapping)
    assert healthy.issues == [] and healthy.suspects == []
    faulty = analyze_paths(FIXTURES / "moe_ep2_own_data_expert_desync" / "train", reference, mapping)
    credible = [s for s in faulty.suspects if s.credible_origin]
    fault = expected("moe_ep2_own_data_expert_desync")["true_fault"]
    global_key = fault["dump_key_on_that_rank"].replace(
        f"local_experts.{fault['local_expert']}.", f"local_experts.{fault['global_expert']}."
    )
    assert [(s.train_key, s.classification) for s in credible] == [(global_key, "parameter_or_checkpoint_issue")]
    record = next(r for r in faulty.records if r.train_key == global_key)
    assert "expert-parallel ranks read their own batches" in record.comparison.reasoning


@pytest.mark.parametrize(
    ("given", "said"),
    [
        (ParallelLayout(ep=2), "(given: ep=2)"),
        (ParallelLayout(ep=2, dp=1), "(given: ep=2,dp=1)"),
        (ParallelLayout(tp=1, ep=2, dp=2), "(given: tp=1,ep=2,dp=2)"),
    ],
)
def test_a_given_layout_merges_as_the_inferred_one(given: ParallelLayout, said: str) -> None:
    inferred, told = analyse("moe_ep2_own_data_expert_desync"), analyse("moe_ep2_own_data_expert_desync", given)
    assert told.train.parallel is not None and told.train.parallel.layout == f"tp=1, pp=1, ep=2, dp=1 {said}"
    assert told.train.keys == inferred.train.keys and told.train.entries == inferred.train.entries
    assert [(s.train_key, s.classification) for s in told.suspects] == [
        (s.train_key, s.classification) for s in inferred.suspects
    ]
    megatron = [n for n in told.train.parallel.notes if "read as Megatron's data-parallel size" in n]
    assert len(megatron) == (given.dp == 2)


@pytest.mark.parametrize(
    ("given", "message"), [(ParallelLayout(ep=4), "tp=1 x ep=4"), (ParallelLayout(tp=2, ep=2), "tp=2 x ep=2")]
)
def test_a_layout_that_does_not_fit_is_one_line(given: ParallelLayout, message: str) -> None:
    source = resolve_dump_source(FIXTURES / "moe_ep2_own_data_healthy" / "train", layout=given)
    with pytest.raises(InputError) as raised:
        DumpCache().get(source)
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_ep_ranks_of_one_batch_are_merged_as_before() -> None:
    """moe_ep2_healthy feeds both EP ranks the same batch: no own-data note, the experts' activations are kept."""
    merged = DumpCache().get(FIXTURES / "moe_ep2_healthy" / "train")
    assert merged.parallel is not None and not any(n.startswith(NOTE) for n in merged.parallel.notes)
    assert not any(e.other_batches for e in merged.entries.values())
    fc1 = "Module.module.module.decoder.layers.1.mlp.experts.local_experts.2.linear_fc1.ColumnParallelLinear.forward.0"
    assert merged.entries[fc1].output is not None


def test_a_replicated_weight_out_of_sync_between_own_data_ep_ranks_is_a_disagreement(tmp_path: Path) -> None:
    """Other batches do not excuse other weights: rank 1's copy of a layer 1 norm weight changed is a disagreement
    of the EP ranks (the layout is still told by the experts)."""
    folder = tmp_path / "moe"
    shutil.copytree(FIXTURES / "moe_ep2_own_data_healthy", folder)
    rank1 = folder / "train" / "step0" / "rank1" / "dump.json"
    document = json.loads(rank1.read_text())
    key = "Module.module.module.decoder.layers.1.pre_mlp_layernorm.RMSNorm.forward.0"
    document["data"][key]["parameters"]["weight"]["Norm"] *= 1.05
    rank1.write_text(json.dumps(document))
    analysis = analyse("moe_ep2_own_data_healthy", folder=folder)
    assert analysis.train.parallel is not None and analysis.train.parallel.layout.startswith("tp=1, pp=1, ep=2, dp=1")
    assert [(d["key"], d["slot"], d["members"]) for d in root_cause_report(analysis)["disagreements"]] == [
        (key, "parameters.weight", [1])
    ]


def test_without_weights_the_dumps_cannot_tell_and_say_so_and_the_flag_decides(tmp_path: Path) -> None:
    """The own-data run with every weight removed from the dumps: other data alone looks like data-parallel
    replicas, which the note says, naming --parallel ep=N; given ep=2 the ranks merge as with weights."""
    train = train_without_weights("moe_ep2_own_data_healthy", tmp_path / "train")
    guessed = DumpCache().get(train)
    assert guessed.parallel is not None and "dp=2" in guessed.parallel.layout
    (note,) = [n for n in guessed.parallel.notes if "told by their other data alone" in n]
    assert "--parallel ep=N" in note
    told = DumpCache().get(resolve_dump_source(train, layout=ParallelLayout(ep=2)))
    assert told.parallel is not None and told.parallel.layout == "tp=1, pp=1, ep=2, dp=1 (given: ep=2)"
    assert any(n.startswith(NOTE) for n in told.parallel.notes)
    reference = DumpCache().get(FIXTURES / "moe_ep2_own_data_healthy" / "train")
    assert told.keys == reference.keys
    assert all(told.entries[k].output == reference.entries[k].output for k in reference.keys)


def test_the_cli_says_how_the_ranks_were_read_and_refuses_a_layout_that_does_not_fit(tmp_path: Path) -> None:
    folder = FIXTURES / "moe_ep2_own_data_expert_desync"
    args = [sys.executable, "-m", "rca_lsp", "analyze", "--train", str(folder / "train"), "--rollout"]
    args += [str(folder / "rollout"), "--mapping-key", str(folder / "mapping_key.json"), "--no-chart"]
    args += ["--out-dir", str(tmp_path / "o")]
    result = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert "- train: merged 2 ranks (tp=1, pp=1, ep=2, dp=1 (inferred from the dumps))" in result.stdout
    assert f"  - {NOTE}" in result.stdout
    cause = expected("moe_ep2_own_data_expert_desync")["root_cause"]
    assert f"  - parameter_or_checkpoint_issue: {cause['train_key']}\n" in result.stdout
    wrong = subprocess.run([*args, "--parallel", "ep=4"], capture_output=True, text=True, timeout=120)
    assert wrong.returncode == 2 and len(wrong.stderr.strip().splitlines()) == 1 and "tp=1 x ep=4" in wrong.stderr
