"""The committed real SGLang rollout fixtures (fixtures/sglang_<variant>/, made by generate_sglang.py): what holds in
the dumps themselves, and how the analysis and the mapping suggester read SGLang's forms (tests/test_fixtures.py
checks each variant's verdict against its expected.json)."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest

from rca_lsp.diagnose.run import analyze_paths
from rca_lsp.dumps.load import DumpCache
from rca_lsp.suggest import suggest_mapping

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
VARIANTS = ["sglang_healthy", "sglang_param_desync"]
R = "Module.model."
T = "Module.module.module."
CACHE = DumpCache()


@cache
def data(variant: str, side: str) -> dict:
    return json.loads((FIXTURES / variant / side / "step0" / "rank0" / "dump.json").read_text())["data"]


def stats(node: dict) -> tuple:
    return tuple(node[k] for k in ("shape", "Max", "Min", "Mean", "Norm"))


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_dump_has_sglangs_modules(variant: str) -> None:
    keys = set(data(variant, "rollout"))
    for layer in (0, 1):
        assert f"{R}layers.{layer}.self_attn.attn.RadixAttention.forward.0" in keys
        assert f"{R}layers.{layer}.self_attn.qkv_proj.QKVParallelLinear.forward.0" in keys
        assert f"{R}layers.{layer}.mlp.gate_up_proj.MergedColumnParallelLinear.forward.0" in keys
        assert f"{R}layers.{layer}.Qwen2DecoderLayer.forward.0" in keys
    assert {f"{R}Qwen2Model.forward.0", "Module.logits_processor.LogitsProcessor.forward.0"} <= keys
    assert not any("lm_head" in key for key in keys)


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_decoder_layer_returns_its_mlp_output_and_the_next_norm_adds_the_residual(variant: str) -> None:
    rollout = data(variant, "rollout")
    for layer in (0, 1):
        out = rollout[f"{R}layers.{layer}.Qwen2DecoderLayer.forward.0"]["output"]
        assert len(out) == 1
        assert stats(out[0]) == stats(rollout[f"{R}layers.{layer}.mlp.Qwen2MLP.forward.0"]["output"][0])
    # layer 1's input is layer 0's MLP output; its input_layernorm gets (that, residual) and returns their sum second
    assert stats(rollout[f"{R}layers.1.Qwen2DecoderLayer.forward.0"]["input_args"][1]) == stats(
        rollout[f"{R}layers.0.Qwen2DecoderLayer.forward.0"]["output"][0]
    )
    norm = rollout[f"{R}layers.1.input_layernorm.RMSNorm.forward.0"]
    assert len(norm["output"]) == 2
    train_layer_out = data(variant, "train")[f"{T}decoder.layers.0.TransformerLayer.forward.0"]["output"][0]
    assert norm["output"][1]["Max"] == pytest.approx(train_layer_out["Max"], rel=1e-5)


def test_weights_are_observable_on_the_native_path() -> None:
    rollout = data("sglang_healthy", "rollout")
    weight = rollout[f"{R}layers.1.self_attn.o_proj.RowParallelLinear.forward.0"]["parameters"]["weight"]
    assert weight["shape"] == [128, 128] and weight["Norm"] is not None


def test_only_the_decoder_layers_hand_on_branch_outputs() -> None:
    folder = FIXTURES / "sglang_healthy"
    rollout = CACHE.get(folder / "rollout").branch_outputs
    assert rollout.returns == {
        f"{R}layers.{i}.Qwen2DecoderLayer.forward.0": f"{R}layers.{i}.mlp.Qwen2MLP.forward.0" for i in (0, 1)
    }
    assert rollout.takes[f"{R}layers.1.Qwen2DecoderLayer.forward.0"] == f"{R}layers.0.Qwen2DecoderLayer.forward.0"
    for plain in (folder / "train", FIXTURES / "healthy_fp32" / "rollout"):  # Megatron, HF: nothing
        assert CACHE.get(plain).branch_outputs.returns == {}


def test_the_decoder_layer_pairs_are_not_compared_as_layers() -> None:
    folder = FIXTURES / "sglang_healthy"
    analysis = analyze_paths(folder / "train", folder / "rollout", folder / "mapping_key.json")
    layers = [r for r in analysis.records if r.train_key.endswith("TransformerLayer.forward.0")]
    assert len(layers) == 2
    assert {r.comparison.output_consistency for r in layers} == {"missing"}
    assert all("branch output" in r.comparison.reasoning for r in layers)
    assert analysis.suspects == []


def test_the_suggested_mapping_leaves_the_whole_model_modules_apart_and_analyses_clean(tmp_path: Path) -> None:
    from rca_lsp.cli.suggest import write_mapping

    folder = FIXTURES / "sglang_healthy"
    result = suggest_mapping(CACHE.get(folder / "train"), CACHE.get(folder / "rollout"))
    assert f"{T}GPTModel.forward.0" not in result.mapping
    (rejected,) = [s for s in result.low_confidence if s.train_key == f"{T}GPTModel.forward.0"]
    assert "output_layer (linear)" in rejected.reason and "model.norm (norm)" in rejected.reason
    write_mapping(tmp_path / "mapping_key.json", result.mapping)
    analysis = analyze_paths(folder / "train", folder / "rollout", tmp_path / "mapping_key.json")
    assert analysis.suspects == []


def test_at_tp2_the_row_parallel_outputs_are_partial_sums_per_rank() -> None:
    """SGLang reduces o_proj / down_proj outputs after the module, and the layer's output is the reduced sum."""
    ranks = [
        json.loads((FIXTURES / "sglang_tp2_healthy" / "rollout" / "step0" / f"rank{r}" / "dump.json").read_text())[
            "data"
        ]
        for r in (0, 1)
    ]
    tp1 = data("sglang_healthy", "rollout")
    for module in ("self_attn.o_proj.RowParallelLinear", "mlp.down_proj.RowParallelLinear"):
        key = f"{R}layers.0.{module}.forward.0"
        outputs = [rank[key]["output"][0] for rank in ranks]
        assert outputs[0]["Max"] != outputs[1]["Max"]
        assert outputs[0]["Mean"] + outputs[1]["Mean"] == pytest.approx(tp1[key]["output"][0]["Mean"], abs=1e-6)
    norm = f"{R}layers.0.post_attention_layernorm.RMSNorm.forward.0"
    for rank in ranks:  # the reduced sum reaches the next norm (rounded as the all-reduce adds)
        assert rank[norm]["output"][0]["Norm"] == pytest.approx(tp1[norm]["output"][0]["Norm"], rel=1e-6)
    assert all(rank[f"{R}layers.0.Qwen2DecoderLayer.forward.0"]["output"] == [None] for rank in ranks)


def test_the_rank_merge_reads_them_as_partial_sums_and_the_layer_as_handing_on_their_sum() -> None:
    folder = FIXTURES / "sglang_tp2_healthy"
    merged = CACHE.get(folder / "rollout")
    tp1 = CACHE.get(FIXTURES / "sglang_healthy" / "rollout")
    assert merged.parallel is not None and merged.parallel.rank_count == 2
    for module in ("self_attn.o_proj.RowParallelLinear", "mlp.down_proj.RowParallelLinear", "mlp.Qwen2MLP"):
        key = f"{R}layers.0.{module}.forward.0"
        assert "partial sums over 2 ranks" in merged.parallel.merges[key]
        out = merged.entries[key].output
        assert (out.max, out.norm) == (None, None) and out.mean == pytest.approx(tp1.entries[key].output.mean, abs=1e-7)
    layer = f"{R}layers.1.Qwen2DecoderLayer.forward.0"
    assert merged.branch_outputs.returns[layer] == f"{R}layers.1.mlp.Qwen2MLP.forward.0"
    analysis = analyze_paths(folder / "train", folder / "rollout", folder / "mapping_key.json")
    assert analysis.suspects == []
