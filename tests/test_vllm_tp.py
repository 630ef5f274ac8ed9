"""Real vLLM tensor-parallel rollouts (TP=2 and TP=4 on CPU, one msprobe folder per worker): the per-rank fused
projections merged exactly where statistics allow it, replicated KV heads found and said, a desynced shard found at
its rank.
(Diagnosis as expected.json says: tests/test_fixtures.py, like every fixture.)"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Callable

import pytest
from conftest import FIXTURES, expected

from rca_lsp.diagnose.run import analyze_paths
from rca_lsp.dumps.dump import Dump
from rca_lsp.dumps.load import DumpCache
from rca_lsp.dumps.ranks.slots import entry_slots
from rca_lsp.model.stats import TensorStats, copy_difference
from rca_lsp.report.root_cause import root_cause_report

QKV = "Module.model.layers.{}.self_attn.qkv_proj.QKVParallelLinear.forward.0"
ATTENTION = "Module.model.layers.{}.self_attn.attn.Attention.forward.0"
ROTARY = "Module.model.layers.0.self_attn.rotary_emb.RotaryEmbedding.forward.{}"  # one module, a call per layer
QKV_BIASES = {(QKV.format(i), "parameters.bias") for i in range(2)}


def rollout(variant: str) -> Dump:
    return DumpCache().get(FIXTURES / variant / "rollout")


def edited(variant: str, tmp_path: Path, edit: Callable[[int, dict], None]) -> Dump:
    """The variant's rollout dump with each rank's data changed by edit(rank, data), merged."""
    folder = tmp_path / variant / "rollout"
    shutil.copytree(FIXTURES / variant / "rollout", folder)
    for dump_file in sorted(folder.glob("step0/rank*/dump.json")):
        rank = int(dump_file.parent.name[len("rank") :])
        document = json.loads(dump_file.read_text())
        edit(rank, document["data"])
        dump_file.write_text(json.dumps(document))
    return DumpCache().get(folder)


def without(variant: str, keys: list[str], tmp_path: Path) -> Dump:
    """The variant's rollout dump with `keys` taken out of every rank file (as a dump scoped to fewer modules)."""

    def remove(_rank: int, data: dict) -> None:
        for key in keys:
            del data[key]

    return edited(variant, tmp_path, remove)


@pytest.mark.parametrize(
    ("variant", "reference"),
    [
        ("vllm_tp2_healthy", "vllm_healthy"),
        ("vllm_tp2_kv_replicated", "vllm_kv1_healthy"),
        ("vllm_tp4_kv_replicated", "vllm_healthy"),
    ],
)
def test_merged_tp_rollout_equals_the_tp1_run(variant: str, reference: str) -> None:
    """Every slot of the merged TP=2 / TP=4 dump against vLLM's TP=1 run of the same model and prompt: equal within fp32
    rounding; with replicated KV heads the fused qkv bias keeps only its exact statistics (Max/Min) and the output is
    merged from its q, k, v parts."""
    merged, single = rollout(variant), rollout(reference)
    assert set(merged.keys) == set(single.keys)
    replicated = expected(variant)["model"]["kv_heads"] < expected(variant)["parallel"]["rollout_tp"]
    compared = 0
    partial = set()
    for key in single.keys:
        mine = dict(entry_slots(merged.entries[key]))
        for slot, theirs in entry_slots(single.entries[key]):
            ours = mine.get(slot)
            if theirs is None or ours is None or not theirs.observable:
                continue
            assert ours.shape == theirs.shape, (key, slot)
            if ours.norm is None and theirs.norm is not None:
                partial.add((key, slot))
                assert ours.mean is None
                assert math.isclose(ours.max, theirs.max, rel_tol=1e-6) and math.isclose(
                    ours.min, theirs.min, rel_tol=1e-6
                )
                continue
            same_form = TensorStats(theirs.dtype, theirs.shape, ours.max, ours.min, ours.mean, ours.norm)
            assert copy_difference(theirs, same_form) <= 1e-5, (key, slot)
            compared += 1
    assert compared > 60
    assert partial == (QKV_BIASES if replicated else set())


def test_kv_heads_replicated_or_sharded_are_told_apart_and_said() -> None:
    sharded, replicated = rollout("vllm_tp2_healthy").parallel, rollout("vllm_tp2_kv_replicated").parallel
    in_pairs = rollout("vllm_tp4_kv_replicated").parallel  # ranks 0, 1 hold kv head 0; ranks 2, 3 kv head 1
    assert sharded is not None and replicated is not None and in_pairs is not None
    assert any("each of the 2 ranks holds its own KV heads" in note for note in sharded.notes)
    assert any("KV heads replicated on 2 ranks each (TP 2 > KV heads 1" in note for note in replicated.notes)
    assert any("KV heads replicated on 2 ranks each (TP 4 > KV heads 2" in note for note in in_pairs.notes)
    assert "Mean/Norm not computable" in replicated.merges[QKV.format(0)]
    assert "permutation of [q | k | v], exact" in sharded.merges[QKV.format(0)]
    gate_up = "Module.model.layers.0.mlp.gate_up_proj.MergedColumnParallelLinear.forward.0"
    assert "[gate_r | up_r]" in sharded.merges[gate_up]


@pytest.mark.parametrize("variant", ["vllm_tp2_healthy", "vllm_tp2_kv_replicated", "vllm_tp4_kv_replicated"])
def test_the_fused_qkv_pair_is_compared_and_aligned(variant: str) -> None:
    """The merged qkv_proj has the train linear_qkv's size (replicated KV heads counted once), so the pair is compared
    (Max/Min only when replicated) and aligned, not set aside as a size mismatch."""
    folder = FIXTURES / variant
    analysis = analyze_paths(folder / "train", folder / "rollout", folder / "mapping_key.json")
    assert root_cause_report(analysis)["structural_false_positives"] == []
    qkv = [r.comparison for r in analysis.records if r.rollout_paths[0].endswith("qkv_proj")]
    assert len(qkv) == 2 and all(c.output_consistency == "aligned" for c in qkv)


def test_an_unknown_kv_layout_keeps_only_the_exact_statistics(tmp_path: Path) -> None:
    """Without the attention module (a dump scoped to the projections), whether KV heads are replicated cannot be
    told: the merge keeps Max/Min (exact either way), leaves Mean/Norm out and says why, instead of assuming."""
    merged = without("vllm_tp2_healthy", [ATTENTION.format(i) for i in range(2)], tmp_path)
    assert merged.parallel is not None
    assert any("could not be told" in note for note in merged.parallel.notes)
    exact = rollout("vllm_tp2_healthy").entries[QKV.format(0)].output
    output = merged.entries[QKV.format(0)].output
    assert exact is not None and output is not None
    assert (output.max, output.min, output.mean, output.norm) == (exact.max, exact.min, None, None)


def test_replicated_kv_without_the_parts_keeps_only_max_and_min(tmp_path: Path) -> None:
    """With replicated KV heads but no rotary entries to read the q/k parts from, the output's Mean/Norm are not
    computable: left out (the replication itself is still found from the attention inputs)."""
    merged = without("vllm_tp2_kv_replicated", [ROTARY.format(i) for i in range(2)], tmp_path)
    assert merged.parallel is not None
    assert any("KV heads replicated on 2 ranks each" in note for note in merged.parallel.notes)
    output = merged.entries[QKV.format(1)].output
    exact = rollout("vllm_kv1_healthy").entries[QKV.format(1)].output
    assert output is not None and exact is not None
    assert (output.shape, output.mean, output.norm) == (exact.shape, None, None)
    assert math.isclose(output.max, exact.max, rel_tol=1e-6) and math.isclose(output.min, exact.min, rel_tol=1e-6)


def test_replicas_whose_kv_copies_disagree_are_not_merged_from_one_copy(tmp_path: Path) -> None:
    """Rank 1's copy of layer 1's (replicated) key made 5 % larger, consistently in its qkv output: its parts still add
    up, but one copy can no longer stand for both, so layer 1 keeps Max/Min only; layer 0 stays exact."""

    def desync_rank1_key(rank: int, data: dict) -> None:
        if rank != 1:
            return
        key = data[ROTARY.format(1)]["input_args"][2]
        output = data[QKV.format(1)]["output"][0]
        larger = key["Norm"] * 1.05
        output["Norm"] = math.sqrt(output["Norm"] ** 2 - key["Norm"] ** 2 + larger**2)
        key["Norm"] = larger

    merged = edited("vllm_tp2_kv_replicated", tmp_path, desync_rank1_key)
    layer0, layer1 = (merged.entries[QKV.format(i)].output for i in range(2))
    assert layer0 is not None and layer0.norm is not None
    assert layer1 is not None and (layer1.mean, layer1.norm) == (None, None) and layer1.max is not None


def test_the_desynced_shard_is_found_at_its_module_and_rank() -> None:
    """Both sides TP=2 (Megatron's rank r linear_fc1 shard is vLLM's rank r gate_up_proj shard): the analysis names
    layer 1's gate_up_proj and, rank by rank, only the faulty rank."""
    truth = expected("vllm_tp2_shard_desync")
    folder = FIXTURES / "vllm_tp2_shard_desync"
    analysis = analyze_paths(folder / "train", folder / "rollout", folder / "mapping_key.json")
    first = root_cause_report(analysis)["first_divergence"]
    cause = truth["root_cause"]
    assert (first["train_key"], first["rollout_key"]) == (cause["train_key"], cause["rollout_key"])
    assert first["rank_by_rank"] == [f"rank {truth['true_fault']['rank']}: output.0 differ"]


def _edit_rank1_layer1_key_copy(rank: int, data: dict) -> None:
    """Rank 1's copy of layer 1's replicated key, as its attention module received it, 5 % larger."""
    if rank == 1:
        data[ATTENTION.format(1)]["input_args"][1]["Norm"] *= 1.05


def _layer1_with_sharded_kv_heads(rank: int, data: dict) -> None:
    """Layer 1's attention inputs as in vllm_tp2_healthy (2 kv heads: each rank its own, the same per-rank widths):
    a model whose layer 1 has other KV heads than layer 0."""
    sharded = json.loads((FIXTURES / f"vllm_tp2_healthy/rollout/step0/rank{rank}/dump.json").read_text())["data"]
    data[ATTENTION.format(1)]["input_args"] = sharded[ATTENTION.format(1)]["input_args"]


@pytest.mark.parametrize(
    ("variant", "edit", "layer", "tp"),
    [
        ("vllm_tp2_kv_replica_desync", None, 0, 2),  # real: rank 1's copy of layer 0's key rows scaled in vLLM
        ("vllm_tp4_kv_replicated", _edit_rank1_layer1_key_copy, 1, 4),  # kv heads in pairs; layer 1 edited
        ("vllm_tp2_kv_replicated", _layer1_with_sharded_kv_heads, 1, 2),  # layers of other KV layouts
    ],
)
def test_the_kv_layout_is_decided_per_layer_and_a_disagreeing_copy_is_said(
    variant: str, edit: Callable[[int, dict], None] | None, layer: int, tp: int, tmp_path: Path
) -> None:
    """Replicated KV heads where one layer's copies on rank 1 differ from rank 0's (a desynced copy, or a layer with
    other KV heads of the same per-rank widths: the dumps cannot tell which): that layer alone is undecided, said
    with the rank and the layer whose identical copies say replicated; Max/Min only there (exact either way). The other layer keeps its replicated layout and its
    exact merge. (Decided on the first layer alone, a fault there made the whole model look sharded and set both qkv
    pairs aside as a size mismatch.)"""
    merged = edited(variant, tmp_path, edit) if edit else rollout(variant)
    assert merged.parallel is not None
    notes = merged.parallel.notes
    other = 1 - layer
    (undecided,) = [n for n in notes if n.startswith(f"model.layers.{layer}.self_attn.qkv_proj: ")]
    assert "could not be told" in undecided and "rank 1's k/v copy differs from rank 0's" in undecided
    assert f"model.layers.{other}.self_attn.attn (the same widths) are identical on 2 ranks each" in undecided
    (replicated,) = [n for n in notes if n.startswith(f"model.layers.{other}.self_attn.qkv_proj: ")]
    assert f"KV heads replicated on 2 ranks each (TP {tp} > KV heads {tp // 2}" in replicated
    output = merged.entries[QKV.format(layer)].output
    assert output is not None and output.max is not None and (output.mean, output.norm) == (None, None)
    assert "whether KV heads are replicated is unknown" in merged.parallel.merges[QKV.format(layer)]
    exact = merged.entries[QKV.format(other)].output
    assert exact is not None and exact.norm is not None and exact.shape is not None
    assert "merged exactly" in merged.parallel.merges[QKV.format(other)]


def test_a_disagreeing_kv_copy_in_the_first_layer_leaves_the_qkv_pairs_compared() -> None:
    """The real fault variant analysed: no qkv pair set aside as a size mismatch; the divergence is placed after
    layer 0's qkv_proj (aligned on Max/Min), at o_proj, with the unmapped rotary / attention between."""
    folder = FIXTURES / "vllm_tp2_kv_replica_desync"
    analysis = analyze_paths(folder / "train", folder / "rollout", folder / "mapping_key.json")
    assert root_cause_report(analysis)["structural_false_positives"] == []
    qkv = [r.comparison for r in analysis.records if r.rollout_paths[0].endswith("qkv_proj")]
    assert [c.output_consistency for c in qkv] == ["aligned", "mismatch"]  # layer 1 after the divergence
    cause = expected("vllm_tp2_kv_replica_desync")["root_cause"]
    first = root_cause_report(analysis)["first_divergence"]
    assert (first["train_key"], first["rollout_key"]) == (cause["train_key"], cause["rollout_key"])
