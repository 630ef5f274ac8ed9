"""Merging the rank dumps of a parallel run into one logical dump, on small dumps built from real values."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
from builders import tensor, write_dump, write_mapping
from conftest import train_without_weights

from rca_lsp.base.errors import InputError
from rca_lsp.diagnose.run import SideOptions, analyze_paths
from rca_lsp.dumps.load import DumpCache
from rca_lsp.dumps.sources import ParallelLayout, resolve_dump_source
from rca_lsp.report.root_cause import root_cause_report

P = "Module.module.module.decoder.layers"
R = "Module.model.layers"
RNG = random.Random(7)


def values(n: int) -> list[float]:
    return [RNG.uniform(-2, 2) for _ in range(n)]


def node(vals: list[float], shape: list[int]) -> dict:
    return tensor(vals, shape=shape)


def module(inp: dict | None, out: dict | None, params: dict | None = None) -> dict:
    return {
        "input_args": [inp] if inp else [],
        "input_kwargs": {},
        "output": [out, None] if out else [],
        "parameters": params or {},
    }


def tp_layer(
    layer: int,
    x: list[float],
    fc1_w: list[float],
    fc1_out: list[float],
    norm_w: list[float],
    prefix: str = P,
    rank: int = 0,
    tp: int = 2,
    local_layer: int | None = None,
) -> dict:
    """A norm (replicated) and a column-parallel linear (output and weight sharded on their last/first dim)."""
    index = layer if local_layer is None else local_layer
    half_out, half_w = len(fc1_out) // tp, len(fc1_w) // tp
    shard_out = fc1_out[rank * half_out : (rank + 1) * half_out]
    shard_w = fc1_w[rank * half_w : (rank + 1) * half_w]
    return {
        f"{prefix}.{index}.pre_mlp_layernorm.RMSNorm.forward.0": module(
            node(x, [len(x), 1]), node(x, [len(x), 1]), {"weight": node(norm_w, [len(norm_w)])}
        ),
        f"{prefix}.{index}.mlp.linear_fc1.ColumnParallelLinear.forward.0": module(
            node(x, [len(x), 1]),
            node(shard_out, [len(x), half_out // len(x)]),
            {"weight": node(shard_w, [half_w // 2, 2])},
        ),
    }


def full_layer(layer: int, x: list[float], fc1_w: list[float], fc1_out: list[float], norm_w: list[float]) -> dict:
    return {
        f"{R}.{layer}.post_attention_layernorm.Qwen2RMSNorm.forward.0": module(
            node(x, [1, len(x)]), node(x, [1, len(x)]), {"weight": node(norm_w, [len(norm_w)])}
        ),
        f"{R}.{layer}.mlp.up_proj.Linear.forward.0": module(
            node(x, [1, len(x)]), node(fc1_out, [1, len(fc1_out)]), {"weight": node(fc1_w, [len(fc1_w) // 2, 2])}
        ),
    }


MAPPING = {
    f"{P}.{i}.pre_mlp_layernorm.RMSNorm.forward.0": f"{R}.{i}.post_attention_layernorm.Qwen2RMSNorm.forward.0"
    for i in range(2)
} | {
    f"{P}.{i}.mlp.linear_fc1.ColumnParallelLinear.forward.0": f"{R}.{i}.mlp.up_proj.Linear.forward.0" for i in range(2)
}


def make_pair(
    tmp_path: Path,
    desync_norm_rank1: bool = False,
    shard_fault: bool = False,
    extreme_off_rank1: float = 0.0,
    norm_extreme_off_rank1: float = 0.0,
) -> tuple[Path, Path, Path]:
    RNG.seed(7)  # the same values in every pair: only the fault differs
    layers = [(values(4), values(8), values(16), [1.0 + 0.1 * v for v in values(4)]) for _ in range(2)]
    for rank in range(2):
        data: dict = {}
        for i, (x, w, out, norm_w) in enumerate(layers):
            if rank == 1 and i == 1 and desync_norm_rank1:
                norm_w = [v * 1.05 for v in norm_w]
            if rank == 1 and i == 1 and norm_extreme_off_rank1:  # its replica's largest weight a hair off
                norm_w = [v * (1 + norm_extreme_off_rank1) if v == max(norm_w) else v for v in norm_w]
            if rank == 1 and i == 1 and shard_fault:  # its shard of the weight, and so of the output, is off
                w, out = [v * 1.03 for v in w], [v * 1.03 for v in out]
            if rank == 1 and i == 1 and extreme_off_rank1:  # the extreme of all weights, in its shard, a hair off
                extreme = max(w, key=abs)
                assert extreme in w[4:], "the extreme must lie in rank 1's shard"
                w = w[:4] + [v * (1 + extreme_off_rank1) if v == extreme else v for v in w[4:]]
            data |= tp_layer(i, x, w, out, norm_w, rank=rank)
        write_dump(tmp_path / "train" / "step0" / f"rank{rank}" / "dump.json", data)
    rollout = {}
    for i, (x, w, out, norm_w) in enumerate(layers):
        rollout |= full_layer(i, x, w, out, norm_w)
    write_dump(tmp_path / "rollout" / "step0" / "rank0" / "dump.json", rollout)
    return tmp_path / "train", tmp_path / "rollout", write_mapping(tmp_path / "mapping_key.json", MAPPING)


def test_tensor_parallel_shards_merge_exactly_and_a_clean_pair_stays_clean(tmp_path: Path) -> None:
    train, rollout, mapping = make_pair(tmp_path)
    analysis = analyze_paths(train, rollout, mapping)
    assert analysis.suspects == []
    merged = analysis.train.entries[f"{P}.0.mlp.linear_fc1.ColumnParallelLinear.forward.0"]
    full = analysis.rollout.entries[f"{R}.0.mlp.up_proj.Linear.forward.0"]
    for mine, theirs in ((merged.output, full.output), (merged.parameters["weight"], full.parameters["weight"])):
        assert mine.numel == theirs.numel and (mine.max, mine.min) == (theirs.max, theirs.min)
        assert math.isclose(mine.norm, theirs.norm, rel_tol=1e-12) and math.isclose(
            mine.mean, theirs.mean, rel_tol=1e-9, abs_tol=1e-12
        )
    assert merged.output.shape == (4, 4) and merged.parameters["weight"].shape == (4, 2)
    info = analysis.train.parallel
    assert info is not None and info.layout.startswith("tp=2, pp=1, ep=1, dp=1")
    assert "sharded along dim 1 over 2 ranks" in info.merges[f"{P}.0.mlp.linear_fc1.ColumnParallelLinear.forward.0"]
    assert root_cause_report(analysis)["parallel"]["train"]["ranks"] == [0, 1]


def test_one_ranks_shard_desynced_is_a_parameter_issue(tmp_path: Path) -> None:
    analysis = analyze_paths(*make_pair(tmp_path, shard_fault=True))
    first = analysis.suspects[0]
    assert (first.train_key, first.classification) == (
        f"{P}.1.mlp.linear_fc1.ColumnParallelLinear.forward.0",
        "parameter_or_checkpoint_issue",
    )


def test_a_shards_weight_off_within_the_tolerance_is_named_rank_by_rank(tmp_path: Path) -> None:
    """Rank 1's shard holds the weight's extreme value, a hair off (the output unchanged): the merged weights' extremes
    differ, which is a parameter desync, and the rank-by-rank verdict names rank 1 by the same rule."""
    clean, _, _ = make_pair(tmp_path / "clean")
    faulty, _, _ = make_pair(tmp_path / "faulty", extreme_off_rank1=1e-8)
    mapping = write_mapping(tmp_path / "identity_mapping_key.json", {k: k for k in MAPPING})
    analysis = analyze_paths(clean, faulty, mapping)
    first = root_cause_report(analysis)["first_divergence"]
    assert (first["train_key"], first["classification"]) == (
        f"{P}.1.mlp.linear_fc1.ColumnParallelLinear.forward.0",
        "parameter_or_checkpoint_issue",
    )
    assert first["rank_by_rank"] == ["rank 1: parameters.weight differ"]


def test_a_replicated_weight_whose_extreme_is_off_at_all_is_a_disagreement(tmp_path: Path) -> None:
    """Replicas hold the same values: a norm weight's Max off by 1e-6 on rank 1, far within the tolerance, is a
    disagreement of the ranks (model.stats.extremes_differ)."""
    analysis = analyze_paths(*make_pair(tmp_path, norm_extreme_off_rank1=1e-6))
    norm = analysis.train.entries[f"{P}.1.pre_mlp_layernorm.RMSNorm.forward.0"]
    assert [(d.slot, d.reference, d.members) for d in norm.disagreements] == [("parameters.weight", 0, (1,))]
    assert analysis.suspects[0].classification == "rank_replica_disagreement"


def test_replicas_that_disagree_are_a_finding_of_their_own(tmp_path: Path) -> None:
    analysis = analyze_paths(*make_pair(tmp_path, desync_norm_rank1=True))
    first = analysis.suspects[0]
    assert (first.train_key, first.classification) == (
        f"{P}.1.pre_mlp_layernorm.RMSNorm.forward.0",
        "rank_replica_disagreement",
    )
    assert first.credible_origin and "ranks 0 and 1 disagree" in first.rationale
    rows = root_cause_report(analysis)["disagreements"]
    assert [(r["key"], r["slot"], r["members"]) for r in rows] == [
        (f"{P}.1.pre_mlp_layernorm.RMSNorm.forward.0", "parameters.weight", [1])
    ]
    assert "ranks disagree" in root_cause_report(analysis)["top_hypothesis"]


@pytest.mark.parametrize("first_rank", [0, 1], ids=["rank order", "stages in other ranks"])
def test_pipeline_stages_are_named_by_global_layer(tmp_path: Path, first_rank: int) -> None:
    layers = [(values(4), values(8), values(16), values(4)) for _ in range(4)]
    for stage in range(2):
        data: dict = {}
        if stage == 0:
            data["Module.module.module.embedding.word_embeddings.VocabParallelEmbedding.forward.0"] = module(
                node([1.0, 5.0, 3.0, 2.0], [1, 4]), node(values(8), [4, 1, 2])
            )
        for local in range(2):
            x, w, out, norm_w = layers[stage * 2 + local]
            data |= tp_layer(stage * 2 + local, x, w, out, norm_w, tp=1, local_layer=local)
        if stage == 1:
            data["Module.module.module.output_layer.ColumnParallelLinear.forward.0"] = module(
                node(values(4), [4, 1]), node(values(8), [4, 2])
            )
        data["Module.module.module.GPTModel.forward.0"] = module(
            node([1.0, 5.0], [1, 2]) if stage == 0 else None, node(values(6), [2, 3])
        )
        write_dump(tmp_path / "train" / "step0" / f"rank{(stage + first_rank) % 2}" / "dump.json", data)
    dump = DumpCache().get(tmp_path / "train")
    assert dump.keys[0].startswith("Module.module.module.embedding")
    assert (first_rank == 1) == any("ordered by their content" in note for note in dump.parallel.notes)
    assert [k for k in dump.keys if "linear_fc1" in k] == [
        f"{P}.{i}.mlp.linear_fc1.ColumnParallelLinear.forward.0" for i in range(4)
    ]
    model = dump.entries["Module.module.module.GPTModel.forward.0"]
    assert dump.keys[-1] == "Module.module.module.GPTModel.forward.0" and model.input is not None
    assert [e.position for e in map(dump.entries.get, dump.keys)] == list(range(len(dump.keys)))
    assert dump.parallel is not None and "pp=2" in dump.parallel.layout
    second_stage = tmp_path / f"train/step0/rank{(1 + first_rank) % 2}/dump.json"
    assert dump.file_key(f"{P}.3.mlp.linear_fc1.ColumnParallelLinear.forward.0") == (
        str(second_stage.resolve()),
        f"{P}.1.mlp.linear_fc1.ColumnParallelLinear.forward.0",
    )
    file, line = dump.location_of(f"{P}.3.mlp.linear_fc1.ColumnParallelLinear.forward.0")
    assert f"{P}.1.mlp.linear_fc1" in Path(file).read_text().splitlines()[line]


def test_a_rank_that_stopped_early_loses_only_its_missing_keys(tmp_path: Path) -> None:
    train, rollout, mapping = make_pair(tmp_path)
    rank1 = train / "step0" / "rank1" / "dump.json"
    import json

    document = json.loads(rank1.read_text())
    keys = list(document["data"])
    document["data"] = {k: document["data"][k] for k in keys[:-1]}
    rank1.write_text(json.dumps(document))
    analysis = analyze_paths(train, rollout, mapping)
    lost = keys[-1]
    assert lost not in analysis.train.entries
    notes = root_cause_report(analysis)["parallel"]["train"]["notes"]
    assert any("rank 1" in n and "lacks 1 keys" in n and lost in n for n in notes)
    issue = next(i for i in analysis.issues if i.key == lost)
    assert "left out of the merged ranks" in issue.message and "rank 1" in issue.message


def test_a_truncated_rank_file_is_one_line_naming_it(tmp_path: Path) -> None:
    train, rollout, mapping = make_pair(tmp_path)
    rank1 = train / "step0" / "rank1" / "dump.json"
    rank1.write_text(rank1.read_text()[:200])
    with pytest.raises(InputError) as raised:
        analyze_paths(train, rollout, mapping)
    assert str(rank1.resolve()) in str(raised.value) and "\n" not in str(raised.value)


def test_data_parallel_replicas_are_not_merged(tmp_path: Path) -> None:
    x, w, out, norm_w = values(4), values(8), values(16), values(4)
    for rank in range(2):
        data = {
            "Module.module.module.embedding.word_embeddings.VocabParallelEmbedding.forward.0": module(
                node([1.0, 2.0 + rank], [1, 2]), node(values(4), [2, 1, 2])
            )
        }
        data |= tp_layer(0, x if rank == 0 else values(4), w, out if rank == 0 else values(16), norm_w, tp=1)
        write_dump(tmp_path / "train" / "step0" / f"rank{rank}" / "dump.json", data)
    dump = DumpCache().get(tmp_path / "train")
    assert dump.parallel is not None and "dp=2" in dump.parallel.layout
    assert any("analysed the first group (ranks 0)" in n for n in dump.parallel.notes)
    assert dump.entries[f"{P}.0.mlp.linear_fc1.ColumnParallelLinear.forward.0"].output.numel == 16


def test_an_explicit_layout_overrides_inference(tmp_path: Path) -> None:
    """Where the dumps cannot tell (no weights, the same batch): the given layout decides. Where they contradict it
    (other shards of every sharded weight: tensor-parallel peers), it is an error (tests/test_given_layout.py)."""
    train, _, _ = make_pair(tmp_path)
    with pytest.raises(InputError, match="ranks 0 and 1 cannot be data-parallel replicas: they hold other shards"):
        DumpCache().get(resolve_dump_source(train, layout=ParallelLayout(tp=1, dp=2)))
    unweighed = train_without_weights("tp2_healthy", tmp_path / "unweighed")
    dump = DumpCache().get(resolve_dump_source(unweighed, layout=ParallelLayout(tp=1, dp=2)))
    assert dump.parallel is not None and "given: tp=1,dp=2" in dump.parallel.layout
    fc1 = "Module.module.module.decoder.layers.0.mlp.linear_fc1.ColumnParallelLinear.forward.0"
    inferred = DumpCache().get(resolve_dump_source(unweighed))
    assert dump.entries[fc1].output.numel * 2 == inferred.entries[fc1].output.numel  # one rank's
    with pytest.raises(InputError, match="cannot form pp=3"):
        DumpCache().get(resolve_dump_source(train, layout=ParallelLayout(pp=3)))
    assert SideOptions(layout=ParallelLayout(tp=2)).resolve(train).layout == ParallelLayout(tp=2)


@pytest.mark.parametrize(
    "variant",
    [
        "tp2_healthy",
        "tp2_sp_healthy",
        "pp2_healthy",
        "tp2_pp2_healthy",
        "tp2_pp2_sp_healthy",
        "tp2_dp2_healthy",
        "tp2_dp2_same_data",
        "tp2_dp2_shuffled_data",
        "tp2_dp2_same_data_replica_drift",
        "tp2_pp2_dp2_healthy",
    ],
)
def test_real_merged_ranks_equal_the_unsharded_run(variant: str) -> None:
    """Real Megatron-core TP=2 / TP=2+SP / PP=2 / TP=2 x PP=2 (+SP) / TP=2 x DP=2 / TP=2 x PP=2 x DP=2 dumps, merged
    (DP: the first group, which read the TP=1 run's batch), against the TP=1 run of the same model and inputs."""
    from conftest import FIXTURES, expected

    from rca_lsp.dumps.ranks.slots import entry_slots
    from rca_lsp.model.stats import copy_difference

    merged = DumpCache().get(FIXTURES / variant / "train")
    reference = DumpCache().get(FIXTURES / "tp1_healthy4" / "train")
    assert set(merged.keys) == set(reference.keys)
    compared = 0
    for key in reference.keys:
        mine = dict(entry_slots(merged.entries[key]))
        for slot, theirs in entry_slots(reference.entries[key]):
            if theirs is None or mine.get(slot) is None or theirs.norm is None:
                continue
            ours = mine[slot]
            assert ours.numel == theirs.numel, (key, slot)
            assert (
                copy_difference(
                    theirs, ours.__class__(theirs.dtype, theirs.shape, ours.max, ours.min, ours.mean, ours.norm)
                )
                <= 1e-5
            ), (key, slot)
            compared += 1
    assert compared > 100
    assert merged.parallel is not None
    assert merged.parallel.sequence_parallel == expected(variant)["parallel"]["sequence_parallel"]


@pytest.mark.parametrize("variant", ["tp2_replica_desync", "tp2_sp_replica_desync", "tp2_shard_desync"])
def test_a_rank_local_fault_changes_values_not_the_merged_shapes(variant: str) -> None:
    """One rank's desynced weight makes its copies of downstream replicated activations differ: they are replicas
    that disagree (the norm's output, the next module's input), never shards of a tensor twice as wide."""
    from conftest import FIXTURES

    from rca_lsp.dumps.ranks.slots import entry_slots

    merged = DumpCache().get(FIXTURES / variant / "train")
    reference = DumpCache().get(FIXTURES / "tp1_healthy4" / "train")
    for key in reference.keys:
        mine = dict(entry_slots(merged.entries[key]))
        for slot, theirs in entry_slots(reference.entries[key]):
            if theirs is not None and mine.get(slot) is not None:
                assert mine[slot].numel == theirs.numel, (key, slot)  # type: ignore[union-attr]


def test_a_desynced_norm_weight_without_sequence_parallel_is_a_disagreement_of_its_output_too() -> None:
    from conftest import FIXTURES

    merged = DumpCache().get(FIXTURES / "tp2_replica_desync" / "train")
    norm = next(k for k in merged.keys if "layers.1.pre_mlp_layernorm" in k)
    slots = {(d.slot, d.reference, d.members) for d in merged.entries[norm].disagreements}
    assert slots == {("output", 0, (1,)), ("parameters.weight", 0, (1,))}
    assert "sharded" not in (merged.parallel.merges.get(norm, "") if merged.parallel else "")


def test_the_same_layout_on_both_sides_is_compared_rank_by_rank(tmp_path: Path) -> None:
    clean, _, _ = make_pair(tmp_path / "clean")
    faulty, _, _ = make_pair(tmp_path / "faulty", shard_fault=True)
    # the same TP=2 run on both sides, but one side's rank 1 shard of layer 1 fc1 is desynced
    mapping = write_mapping(tmp_path / "identity_mapping_key.json", {k: k for k in MAPPING})
    analysis = analyze_paths(clean, faulty, mapping)
    first = root_cause_report(analysis)["first_divergence"]
    assert first["train_key"] == f"{P}.1.mlp.linear_fc1.ColumnParallelLinear.forward.0"
    assert first["rank_by_rank"] == ["rank 1: output.0, parameters.weight differ"]
    assert {(row["slot"], row["rank"]) for row in first["train_per_rank"]} == {
        ("output.0", 0),
        ("output.0", 1),
        ("parameters.weight", 0),
        ("parameters.weight", 1),
    }
