"""Facts about the committed real vLLM rollout fixtures (fixtures/vllm_<variant>/, made by generate_vllm.py).

Only what must hold in the dumps themselves (keys, structure, empty repacked weights, tuple outputs, and the numeric
identities that follow from vLLM's fused-residual forward). The analysis results on these pairs are not asserted
here (see fixtures/README.md for what the analysis currently reports on them).
"""

from __future__ import annotations

import json
import math
from functools import cache
from pathlib import Path

import pytest

VLLM = Path(__file__).resolve().parents[1] / "fixtures"
VARIANTS = ["vllm_healthy", "vllm_missing_activation", "vllm_param_desync"]
T = "Module.module.module."
R = "Module."
TOKENS, HIDDEN, INTER, QKV = 8, 128, 256, 256  # 4 heads + 2 kv heads of dim 32

ROLLOUT_KEYS = [
    "Module.model.embed_tokens.VocabParallelEmbedding.forward.0",
    *[
        k
        for i in range(2)
        for k in (
            f"Module.model.layers.{i}.input_layernorm.RMSNorm.forward.0",
            f"Module.model.layers.{i}.self_attn.qkv_proj.QKVParallelLinear.forward.0",
            f"Module.model.layers.0.self_attn.rotary_emb.RotaryEmbedding.forward.{i}",  # shared module, keyed layers.0
            f"Module.model.layers.{i}.self_attn.attn.Attention.forward.0",
            f"Module.model.layers.{i}.self_attn.o_proj.RowParallelLinear.forward.0",
            f"Module.model.layers.{i}.self_attn.Qwen2Attention.forward.0",
            f"Module.model.layers.{i}.post_attention_layernorm.RMSNorm.forward.0",
            f"Module.model.layers.{i}.mlp.gate_up_proj.MergedColumnParallelLinear.forward.0",
            f"Module.model.layers.{i}.mlp.act_fn.SiluAndMul.forward.0",
            f"Module.model.layers.{i}.mlp.down_proj.RowParallelLinear.forward.0",
            f"Module.model.layers.{i}.mlp.Qwen2MLP.forward.0",
            f"Module.model.layers.{i}.Qwen2DecoderLayer.forward.0",
        )
    ],
    "Module.model.norm.RMSNorm.forward.0",
    "Module.logits_processor.LogitsProcessor.forward.0",
]
LINEARS = [
    "self_attn.qkv_proj.QKVParallelLinear",
    "self_attn.o_proj.RowParallelLinear",
    "mlp.gate_up_proj.MergedColumnParallelLinear",
    "mlp.down_proj.RowParallelLinear",
]


@cache
def load(variant: str, side: str, name: str = "dump.json"):
    data = json.loads((VLLM / variant / side / "step0" / "rank0" / name).read_text())
    return data["data"] if name == "dump.json" else data


@cache
def meta(variant: str, name: str):
    return json.loads((VLLM / variant / name).read_text())


def rk(variant, path, cls, call=0):
    return load(variant, "rollout")[f"{R}{path}.{cls}.forward.{call}"]


def tk(variant, path, cls, call=0):
    return load(variant, "train")[f"{T}{path}.{cls}.forward.{call}"]


def same_stats(a: dict, b: dict, rel: float = 1e-5) -> bool:
    return all(math.isclose(a[s], b[s], rel_tol=rel, abs_tol=1e-6) for s in ("Max", "Min", "Mean", "Norm"))


def is_tensor(node, shape, dtype="torch.float32"):
    return (
        isinstance(node, dict) and node["type"] == "torch.Tensor" and node["shape"] == shape and node["dtype"] == dtype
    )


@pytest.mark.parametrize("variant", VARIANTS)
def test_layout_and_files(variant: str) -> None:
    for side in ("train", "rollout"):
        dump = json.loads((VLLM / variant / side / "step0" / "rank0" / "dump.json").read_text())
        assert (dump["task"], dump["level"], dump["framework"]) == ("statistics", "L0", "pytorch")
        construct = load(variant, side, "construct.json")
        assert set(construct) == set(dump["data"])
    assert (VLLM / variant / "expected.json").is_file()


@pytest.mark.parametrize("variant", VARIANTS)
def test_rollout_keys_are_exactly_vllms_modules(variant: str) -> None:
    keys = list(load(variant, "rollout"))
    assert keys == ROLLOUT_KEYS  # dump order; no Qwen2Model, no lm_head, no model root
    assert not any("lm_head" in k or "Qwen2Model" in k or ".layers.1.self_attn.rotary_emb" in k for k in keys)
    construct = load(variant, "rollout", "construct.json")
    assert (
        construct["Module.model.layers.0.self_attn.rotary_emb.RotaryEmbedding.forward.1"]
        == "Module.model.layers.1.self_attn.Qwen2Attention.forward.0"
    )
    assert construct["Module.model.layers.0.Qwen2DecoderLayer.forward.0"] is None  # Qwen2Model is not dumped


@pytest.mark.parametrize("variant", VARIANTS)
def test_mapping_is_one_to_one_between_present_keys(variant: str) -> None:
    mapping = meta(variant, "mapping_key.json")
    train, rollout = load(variant, "train"), load(variant, "rollout")
    assert len(mapping) == 20
    assert all(isinstance(v, str) for v in mapping.values())  # vLLM fuses like Megatron: all pairs 1:1
    assert set(mapping) <= set(train) and set(mapping.values()) <= set(rollout)
    assert not any("output_layer" in k for k in mapping)
    assert (
        mapping[f"{T}decoder.layers.0.mlp.linear_fc1.ColumnParallelLinear.forward.0"]
        == f"{R}model.layers.0.mlp.gate_up_proj.MergedColumnParallelLinear.forward.0"
    )


@pytest.mark.parametrize("variant", VARIANTS)
def test_repacked_linear_weights_are_empty(variant: str) -> None:
    for i in range(2):
        for lin in LINEARS:
            path, cls = lin.rsplit(".", 1)
            entry = rk(variant, f"model.layers.{i}.{path}", cls)
            w = entry["parameters"]["weight"]
            assert w["shape"] == [0] and all(w[s] is None for s in ("Max", "Min", "Mean", "Norm"))
            assert entry["output"][1] is None and len(entry["output"]) == 2  # (out, bias) like Megatron
        bias = rk(variant, f"model.layers.{i}.self_attn.qkv_proj", "QKVParallelLinear")["parameters"]["bias"]
        assert is_tensor(bias, [QKV]) and isinstance(bias["Norm"], float)
        for norm in ("input_layernorm", "post_attention_layernorm"):
            assert is_tensor(rk(variant, f"model.layers.{i}.{norm}", "RMSNorm")["parameters"]["weight"], [HIDDEN])
    assert is_tensor(rk(variant, "model.embed_tokens", "VocabParallelEmbedding")["parameters"]["weight"], [128, HIDDEN])


@pytest.mark.parametrize("variant", VARIANTS)
def test_tensors_have_no_batch_dim(variant: str) -> None:
    assert is_tensor(rk(variant, "model.layers.0.self_attn.o_proj", "RowParallelLinear")["output"][0], [TOKENS, HIDDEN])
    assert is_tensor(
        tk(variant, "decoder.layers.0.self_attention.linear_proj", "RowParallelLinear")["output"][0],
        [TOKENS, 1, HIDDEN],
    )
    act = rk(variant, "model.layers.0.mlp.act_fn", "SiluAndMul")
    assert is_tensor(act["input_args"][0], [TOKENS, 2 * INTER]) and is_tensor(act["output"][0], [TOKENS, INTER])


@pytest.mark.parametrize("variant", VARIANTS)
def test_fused_residual_rmsnorm_takes_and_returns_pairs(variant: str) -> None:
    first = rk(variant, "model.layers.0.input_layernorm", "RMSNorm")
    assert len(first["input_args"]) == 1 and len(first["output"]) == 1
    for path in (
        "model.layers.0.post_attention_layernorm",
        "model.layers.1.input_layernorm",
        "model.layers.1.post_attention_layernorm",
        "model.norm",
    ):
        e = rk(variant, path, "RMSNorm")
        assert [n["shape"] for n in e["input_args"]] == [[TOKENS, HIDDEN]] * 2, path
        assert [n["shape"] for n in e["output"]] == [[TOKENS, HIDDEN]] * 2, path
    # input_args.0 is the branch output (here: attention), not the full hidden state
    post = rk(variant, "model.layers.0.post_attention_layernorm", "RMSNorm")
    assert post["input_args"][0] == rk(variant, "model.layers.0.self_attn", "Qwen2Attention")["output"][0]


@pytest.mark.parametrize("variant", VARIANTS)
def test_decoder_layer_returns_mlp_out_and_residual(variant: str) -> None:
    l0, l1 = rk(variant, "model.layers.0", "Qwen2DecoderLayer"), rk(variant, "model.layers.1", "Qwen2DecoderLayer")
    for layer in (l0, l1):
        assert layer["input_kwargs"] == {}
        assert is_tensor(layer["input_args"][0], [TOKENS], "torch.int64")  # positions
        assert layer["input_args"][0]["Mean"] is None
        assert [n["shape"] for n in layer["output"]] == [[TOKENS, HIDDEN]] * 2
    assert l0["input_args"][2] is None  # no residual yet
    assert l0["output"][0] == rk(variant, "model.layers.0.mlp", "Qwen2MLP")["output"][0]  # output.0 = mlp_out
    assert l0["output"][1] == rk(variant, "model.layers.0.post_attention_layernorm", "RMSNorm")["output"][1]
    assert l1["input_args"][1:] == l0["output"]
    # train TransformerLayer: hidden states as a keyword, output (hidden, None)
    t0 = tk(variant, "decoder.layers.0", "TransformerLayer")
    assert t0["input_args"] == [] and is_tensor(t0["input_kwargs"]["hidden_states"], [TOKENS, 1, HIDDEN])
    assert t0["output"][1] is None


def test_healthy_full_hidden_state_is_the_next_norms_residual_output() -> None:
    v = "vllm_healthy"
    # train layer output (full hidden state) == vLLM's x + residual, visible only as the next norm's output.1
    assert same_stats(
        tk(v, "decoder.layers.0", "TransformerLayer")["output"][0],
        rk(v, "model.layers.1.input_layernorm", "RMSNorm")["output"][1],
    )
    assert same_stats(
        tk(v, "decoder.layers.0.pre_mlp_layernorm", "RMSNorm")["input_args"][0],
        rk(v, "model.layers.0.post_attention_layernorm", "RMSNorm")["output"][1],
    )
    assert same_stats(
        tk(v, "decoder.final_layernorm", "RMSNorm")["input_args"][0], rk(v, "model.norm", "RMSNorm")["output"][1]
    )
    # ... while the naive pairs differ (structure, not a fault)
    assert not same_stats(
        tk(v, "decoder.layers.0", "TransformerLayer")["output"][0],
        rk(v, "model.layers.0", "Qwen2DecoderLayer")["output"][0],
        rel=1e-2,
    )
    assert not same_stats(
        tk(v, "decoder.layers.1.input_layernorm", "RMSNorm")["input_args"][0],
        rk(v, "model.layers.1.input_layernorm", "RMSNorm")["input_args"][0],
        rel=1e-2,
    )
    # every mapped output.0 that is not a decoder layer matches
    for t_key, r_key in meta(v, "mapping_key.json").items():
        if "TransformerLayer" not in t_key:
            assert same_stats(load(v, "train")[t_key]["output"][0], load(v, "rollout")[r_key]["output"][0]), t_key


def test_logits_and_truth() -> None:
    assert meta("vllm_healthy", "expected.json")["last_position_logits_max_abs_diff"][0] < 1e-4
    for v in VARIANTS[1:]:
        exp = meta(v, "expected.json")
        assert not exp["clean"] and exp["last_position_logits_max_abs_diff"][0] > 1e-2
        assert exp["root_cause"]["train_key"] in load(v, "train")
        assert exp["root_cause"]["rollout_key"] in load(v, "rollout")
    assert meta("vllm_healthy", "expected.json")["clean"] is True


def test_missing_activation_diverges_between_fc1_and_fc2() -> None:
    v = "vllm_missing_activation"
    assert not any("activation" in k or "act_fn" in k for k in load(v, "train"))
    fc1, gate_up = (
        tk(v, "decoder.layers.0.mlp.linear_fc1", "ColumnParallelLinear"),
        rk(v, "model.layers.0.mlp.gate_up_proj", "MergedColumnParallelLinear"),
    )
    assert same_stats(fc1["output"][0], gate_up["output"][0])
    fc2, down = (
        tk(v, "decoder.layers.0.mlp.linear_fc2", "RowParallelLinear"),
        rk(v, "model.layers.0.mlp.down_proj", "RowParallelLinear"),
    )
    assert not same_stats(fc2["input_args"][0], down["input_args"][0], rel=1e-2)
    assert down["input_args"][0] == rk(v, "model.layers.0.mlp.act_fn", "SiluAndMul")["output"][0]


def test_param_desync_only_visible_on_the_train_side() -> None:
    v, h = "vllm_param_desync", "vllm_healthy"
    path = "decoder.layers.1.self_attention.linear_proj"
    assert not same_stats(
        tk(v, path, "RowParallelLinear")["parameters"]["weight"],
        tk(h, path, "RowParallelLinear")["parameters"]["weight"],
        rel=1e-3,
    )
    o_proj = rk(v, "model.layers.1.self_attn.o_proj", "RowParallelLinear")
    assert o_proj["parameters"]["weight"]["shape"] == [0]
    assert same_stats(tk(v, path, "RowParallelLinear")["input_args"][0], o_proj["input_args"][0])
    assert not same_stats(tk(v, path, "RowParallelLinear")["output"][0], o_proj["output"][0], rel=1e-3)
