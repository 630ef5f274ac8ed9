"""Combined parallel layouts on real Megatron-core dumps (fixtures/tp2_pp2_*, tp2_dp2_*: 4 gloo ranks): the layout
is inferred as the given one would be, only the first data-parallel group is analysed (and the report says so), a
fault on a later pipeline stage is placed on the ranks that hold it, and what the dumps cannot tell is said."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import FIXTURES, expected, train_without_weights, variants

from rca_lsp.diagnose.run import SideOptions, analyze_paths
from rca_lsp.dumps.load import DumpCache
from rca_lsp.dumps.sources import ParallelLayout, resolve_dump_source
from rca_lsp.report.markdown import render_markdown
from rca_lsp.report.root_cause import root_cause_report
from rca_lsp.server.features.hover import hover_markdown


def layout_of(variant: str) -> ParallelLayout:
    parallel = expected(variant)["parallel"]
    return ParallelLayout(tp=parallel["tp"], pp=parallel["pp"], dp=parallel.get("dp", 1))


COMBINED = [
    v
    for v in variants()
    if sum(expected(v).get("parallel", {}).get(dim, 1) > 1 for dim in ("tp", "pp", "ep", "dp")) > 1
]
DATA_PARALLEL = [v for v in COMBINED if (layout_of(v).dp or 1) > 1]
HEALTHY_DATA_PARALLEL = [v for v in DATA_PARALLEL if expected(v)["clean"]]
DRIFTED_REPLICAS = [v for v in DATA_PARALLEL if not expected(v)["clean"]]  # a replica's weight out of sync


def analyse(variant: str, layout: ParallelLayout | None = None):
    folder = FIXTURES / variant
    return analyze_paths(
        folder / "train", folder / "rollout", folder / "mapping_key.json", train_options=SideOptions(layout=layout)
    )


def test_the_combined_fixtures_are_there() -> None:
    assert {
        "tp2_pp2_healthy",
        "tp2_pp2_shard_desync",
        "tp2_pp2_sp_healthy",
        "tp2_dp2_healthy",
        "tp2_dp2_same_data",
        "tp2_dp2_shuffled_data",
        "tp2_dp2_same_data_replica_drift",
        "tp2_pp2_dp2_healthy",
    } <= set(COMBINED)
    assert DRIFTED_REPLICAS


@pytest.mark.parametrize("variant", COMBINED)
def test_the_inferred_layout_is_the_true_one(variant: str) -> None:
    layout = layout_of(variant)
    inferred, given = analyse(variant), analyse(variant, layout)
    assert inferred.train.parallel is not None and given.train.parallel is not None
    assert (
        inferred.train.parallel.layout
        == f"tp={layout.tp}, pp={layout.pp}, ep=1, dp={layout.dp} (inferred from the dumps)"
    )
    assert given.train.parallel.layout.endswith(f"(given: {layout})")
    assert inferred.train.keys == given.train.keys
    assert inferred.train.entries == given.train.entries
    assert [(s.train_key, s.classification) for s in inferred.suspects] == [
        (s.train_key, s.classification) for s in given.suspects
    ]


@pytest.mark.parametrize("variant", DATA_PARALLEL)
def test_only_the_first_data_parallel_group_is_analysed_and_the_report_says_so(variant: str) -> None:
    truth = expected(variant)["parallel"]
    analysis = analyse(variant)
    info = analysis.train.parallel
    assert info is not None
    analysed = truth["analysed_ranks"]
    (note,) = [n for n in root_cause_report(analysis)["parallel"]["train"]["notes"] if n.startswith("data parallel")]
    assert f"dp={truth['dp']}" in note and f"analysed the first group (ranks {', '.join(map(str, analysed))})" in note
    assert ("read the same batch" in note) == (truth["data_parallel_batches"] == "same")
    assert note in render_markdown(analysis)
    # the merged ranks are the first group's only: per-rank statistics never show the other group's ranks
    assert set(info.peers) == set(analysed)
    assert all(set(p) <= set(analysed) and len(p) == truth["tp"] for p in info.peers.values())
    if variant in DRIFTED_REPLICAS:
        return  # their disagreement and finding: test_a_data_parallel_replica_whose_weight_drifted_is_a_finding
    assert root_cause_report(analysis)["disagreements"] == []  # other data is not a disagreement of replicas
    assert analysis.suspects == []  # the merged first group analyses clean against the rollout of its batch


def test_data_parallel_groups_of_other_data_differ_everywhere_but_in_the_weights() -> None:
    """What the inference relies on, in the real dumps: the second group's ranks read other input ids (with the same
    Max/Min for the shuffled batch) and hold the same weights as their first-group peers."""
    for variant in HEALTHY_DATA_PARALLEL:
        step = FIXTURES / variant / "train" / "step0"
        ranks = [
            json.loads((step / f"rank{r}" / "dump.json").read_text())["data"] for r in range(len(list(step.iterdir())))
        ]
        tp = expected(variant)["parallel"]["tp"]
        for peer in expected(variant)["parallel"]["analysed_ranks"]:
            rank = peer + tp  # its data-parallel peer in group 1 (Megatron's rank order tp-cp-ep-dp-pp)
            for key, entry in ranks[peer].items():
                assert entry.get("parameters") == ranks[rank][key].get("parameters"), (variant, key)
        embedding = "Module.module.module.embedding.word_embeddings.VocabParallelEmbedding.forward.0"
        batches = expected(variant)["parallel"]["data_parallel_batches"]
        assert (ranks[0][embedding]["input_args"] == ranks[tp][embedding]["input_args"]) == (batches != "own"), variant
        assert (ranks[0] == ranks[tp]) == (batches == "same"), variant


def test_a_fault_on_a_later_pipeline_stage_is_placed_on_the_ranks_that_hold_it() -> None:
    truth = expected("tp2_pp2_shard_desync")
    fault = truth["true_fault"]
    analysis = analyse("tp2_pp2_shard_desync")
    first = root_cause_report(analysis)["first_divergence"]
    assert (first["train_key"], first["classification"]) == (fault["train_key"], "parameter_or_checkpoint_issue")
    stage_ranks = [fault["rank"] - fault["tp_rank"] + t for t in range(truth["parallel"]["tp"])]
    assert fault["rank"] in stage_ranks and 0 not in stage_ranks
    assert first["train_ranks"] == {"ranks": stage_ranks, "key": fault["train_dumped_key"]}
    rows = {(row["slot"], row["rank"]): row for row in first["train_per_rank"]}
    assert {rank for _, rank in rows} == set(stage_ranks)
    faulty = json.loads((FIXTURES / "tp2_pp2_shard_desync/train/step0" / f"rank{fault['rank']}/dump.json").read_text())
    weight = faulty["data"][fault["train_dumped_key"]]["parameters"]["weight"]
    assert rows[("parameters.weight", fault["rank"])]["Norm"] == weight["Norm"]
    assert f"ranks {', '.join(map(str, stage_ranks))} (as `{fault['train_dumped_key']}`)" in render_markdown(analysis)
    hover = hover_markdown(analysis, fault["train_key"], None)
    assert hover is not None
    assert {r for r in range(4) if f"| parameters.weight | {r} |" in hover} == set(stage_ranks)
    assert f"Train merged from ranks {', '.join(map(str, stage_ranks))} of 4 (tp=2, pp=2" in hover
    # how the slots were merged is kept under the global name: stage 0's layer 1 and stage 1's (global 3) both
    merges = analysis.train.parallel.merges
    assert "parameters.weight sharded along dim 0" in merges[fault["train_key"]]
    assert "parameters.weight sharded along dim 0" in merges[fault["train_key"].replace("layers.3", "layers.1")]


def test_ranks_the_dumps_cannot_tell_apart_are_said_so_and_the_flag_decides(tmp_path: Path) -> None:
    """The shuffled-batch TP=2 x DP=2 run with its weights removed from the dumps (a dump without parameters): the
    ids have the same Max/Min in both groups, so nothing tells data-parallel replicas from tensor-parallel peers."""
    train = train_without_weights("tp2_dp2_shuffled_data", tmp_path / "train")
    guessed = DumpCache().get(train)
    assert guessed.parallel is not None
    (note,) = [n for n in guessed.parallel.notes if n.startswith("cannot tell data-parallel replicas")]
    assert "--parallel dp=N" in note and "merged as tensor-parallel peers" in note
    told = DumpCache().get(resolve_dump_source(train, layout=ParallelLayout(dp=2)))
    assert told.parallel is not None and not any("cannot tell" in n for n in told.parallel.notes)
    assert "tp=2, pp=1, ep=1, dp=2" in told.parallel.layout
    reference = DumpCache().get(FIXTURES / "tp2_dp2_shuffled_data" / "train")
    assert [told.entries[k].output for k in told.keys] == [reference.entries[k].output for k in reference.keys]


def _rank_disagreements(analysis) -> list[tuple[str, str, list[int]]]:
    return sorted(
        (r["key"], r["slot"], [r["reference"], *r["members"]]) for r in root_cause_report(analysis)["disagreements"]
    )


@pytest.mark.parametrize("variant", DRIFTED_REPLICAS)
def test_a_data_parallel_replica_whose_weight_drifted_is_a_finding(variant: str) -> None:
    """Both data-parallel groups read the same batch and one group's copy of a sharded weight drifted: the dumps of
    the two groups differ only from that weight on, so the ranks are not merged as tp=4 shards (the layout is the
    true one: test_the_inferred_layout_is_the_true_one) and the drift is a disagreement of replicas naming the ranks,
    the module's finding; the analysed group itself matches the rollout."""
    truth = expected(variant)
    analysis = analyse(variant)
    cause = truth["root_cause"]
    assert _rank_disagreements(analysis) == sorted(
        (row["train_key"], row["slot"], row["ranks"]) for row in cause["rank_disagreement"]
    )
    (suspect,) = [s for s in analysis.suspects if s.credible_origin]
    assert (suspect.train_key, suspect.classification) == (cause["train_key"], "rank_replica_disagreement")
    for row in cause["rank_disagreement"]:
        assert f"ranks {row['ranks'][0]} and {row['ranks'][1]} disagree" in suspect.rationale
    (note,) = [n for n in root_cause_report(analysis)["parallel"]["train"]["notes"] if n.startswith("data parallel")]
    assert "up to a weight that differs" in note
    # only the drifted module disagrees: the group read by the analysis is the healthy one
    assert {key for key, _, _ in _rank_disagreements(analysis)} == {cause["train_key"]}
    assert all(r.comparison.output_consistency == "aligned" for r in analysis.records)


def test_a_data_parallel_replica_of_other_data_out_of_sync_is_a_finding_too(tmp_path: Path) -> None:
    """tp2_dp2_healthy (each group its own batch) with rank 3's copy of layer 1 linear_fc1's weight changed: replicas
    hold the same weights whatever they read, so this is the same finding, naming ranks 1 and 3."""
    folder = tmp_path / "tp2_dp2_healthy"
    shutil.copytree(FIXTURES / "tp2_dp2_healthy", folder)
    rank3 = folder / "train" / "step0" / "rank3" / "dump.json"
    document = json.loads(rank3.read_text())
    key = "Module.module.module.decoder.layers.1.mlp.linear_fc1.ColumnParallelLinear.forward.0"
    document["data"][key]["parameters"]["weight"]["Norm"] *= 1.03
    rank3.write_text(json.dumps(document))
    analysis = analyze_paths(folder / "train", folder / "rollout", folder / "mapping_key.json")
    assert _rank_disagreements(analysis) == [(key, "parameters.weight", [1, 3])]
    assert [(s.train_key, s.classification) for s in analysis.suspects] == [(key, "rank_replica_disagreement")]
    assert any(
        "analysed the first group (ranks 0, 1)" in n for n in root_cause_report(analysis)["parallel"]["train"]["notes"]
    )
    assert root_cause_report(analyse("tp2_dp2_healthy"))["disagreements"] == []


def test_a_replica_that_differs_in_most_weights_is_said_undecided_and_the_flag_decides(tmp_path: Path) -> None:
    """The drifted replica with most of its sharded weights changed as well (a replica that missed most of an
    update): neither shards (those differ in all) nor a replica with a few drifted weights - the note says so and
    names --parallel; given dp=2, every changed weight is a disagreement of the replicas."""
    variant = DRIFTED_REPLICAS[0]
    train = tmp_path / "train"
    shutil.copytree(FIXTURES / variant / "train", train)
    changed = 0
    for rank in (2, 3):
        path = train / "step0" / f"rank{rank}" / "dump.json"
        document = json.loads(path.read_text())
        for key, entry in document["data"].items():
            if "Parallel" in key and "layers.3" not in key:  # layer 3's weights stay the same
                for stats in (entry.get("parameters") or {}).values():
                    stats["Norm"] *= 1.01
                    changed += rank == 2
        path.write_text(json.dumps(document))
    guessed = DumpCache().get(train)
    assert guessed.parallel is not None and guessed.parallel.layout.startswith("tp=4")
    (note,) = [n for n in guessed.parallel.notes if n.startswith("cannot tell data-parallel replicas")]
    assert "ranks 0 and 2" in note and "--parallel dp=N" in note
    told = DumpCache().get(resolve_dump_source(train, layout=ParallelLayout(dp=2)))
    assert told.parallel is not None and told.parallel.layout.startswith("tp=2, pp=1, ep=1, dp=2")
    found = {(key, d.slot) for key in told.keys for d in told.entries[key].disagreements}
    assert len(found) == changed
