"""The mapping matcher on small hand-made dump pairs: naming variants, groups, forms, order, existing entries,
ranking."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_generated_runs import dump as generated_dump

from rca_lsp.base.errors import InputError
from rca_lsp.dumps.dump import Dump, build_dump
from rca_lsp.model.stats import TensorStats
from rca_lsp.suggest import Matcher, NamingRules, suggest_mapping
from rca_lsp.suggest.coverage import render_coverage
from rca_lsp.suggest.evidence import concatenate, shape_relation, stats_relation

Node = dict[str, Any]
SEQ, HIDDEN, HEADS_DIM, KV_DIM, FFN, VOCAB = 8, 16, 16, 8, 32, 64
TRAIN = "Module.module.module"


# ---------------------------------------------------------------------------------------------------------------
# Building dumps


class Stats:
    """Seeded statistics of plausible float tensors; `perturbed` returns the same tensor after a numeric fault."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)

    def tensor(self, *shape: int, dtype: str = "torch.float32") -> Node:
        scale = self._rng.uniform(0.5, 2.0)
        mean = self._rng.uniform(-0.1, 0.1)
        return {
            "type": "torch.Tensor",
            "dtype": dtype,
            "shape": list(shape),
            "Max": round(3 * scale, 6),
            "Min": round(-2.9 * scale, 6),
            "Mean": mean,
            "Norm": scale * math.sqrt(math.prod(shape)),
        }

    @staticmethod
    def ids(*shape: int) -> Node:
        return {
            "type": "torch.Tensor",
            "dtype": "torch.int64",
            "shape": list(shape),
            "Max": VOCAB - 1,
            "Min": 0,
            "Mean": None,
            "Norm": None,
        }

    @staticmethod
    def perturbed(node: Node) -> Node:
        return {**node, "Max": node["Max"] * 1.3, "Min": node["Min"] * 1.2, "Norm": node["Norm"] * 1.25}


def reshaped(node: Node, *shape: int) -> Node:
    return {**node, "shape": list(shape)}


def concat(nodes: list[Node], *shape: int) -> Node:
    sizes = [math.prod(node["shape"]) for node in nodes]
    return {
        **nodes[0],
        "shape": list(shape),
        "Max": max(node["Max"] for node in nodes),
        "Min": min(node["Min"] for node in nodes),
        "Mean": sum(node["Mean"] * size for node, size in zip(nodes, sizes)) / sum(sizes),
        "Norm": math.sqrt(sum(node["Norm"] ** 2 for node in nodes)),
    }


@dataclass
class Side:
    prefix: str
    data: dict[str, Node] = field(default_factory=dict)

    def add(
        self,
        path: str,
        class_name: str,
        inputs: Node | None = None,
        output: Node | None = None,
        weight: Node | None = None,
        call: int = 0,
        kwargs: dict[str, Node] | None = None,
    ) -> str:
        key = f"{'.'.join(filter(None, (self.prefix, path, class_name)))}.forward.{call}"
        entry: Node = {
            "input_args": [inputs] if inputs else [],
            "input_kwargs": kwargs or {},
            "output": [output, None] if output else [],
        }
        if weight is not None:
            entry["parameters"] = {"weight": weight}
        self.data[key] = entry
        return key

    def dump(self, name: str) -> Dump:
        return build_dump(name, {"task": "statistics", "level": "L0", "framework": "pytorch", "data": self.data})


@dataclass
class Pair:
    train: Dump
    rollout: Dump
    expected: dict[str, str | list[str]]


Twin = tuple[Node, Node]  # one logical tensor as (train side [s, 1, h], rollout side [1, s, h])

HF_NAMES = {  # role -> (rollout module path, class); "{i}" is the layer index
    "embed": ("model.embed_tokens", "Embedding"),
    "rotary": ("model.rotary_emb", "Qwen2RotaryEmbedding"),
    "layer": ("model.layers.{i}", "Qwen2DecoderLayer"),
    "ln1": ("model.layers.{i}.input_layernorm", "Qwen2RMSNorm"),
    "attn": ("model.layers.{i}.self_attn", "Qwen2Attention"),
    "q": ("model.layers.{i}.self_attn.q_proj", "Linear"),
    "k": ("model.layers.{i}.self_attn.k_proj", "Linear"),
    "v": ("model.layers.{i}.self_attn.v_proj", "Linear"),
    "o": ("model.layers.{i}.self_attn.o_proj", "Linear"),
    "ln2": ("model.layers.{i}.post_attention_layernorm", "Qwen2RMSNorm"),
    "mlp": ("model.layers.{i}.mlp", "Qwen2MLP"),
    "gate": ("model.layers.{i}.mlp.gate_proj", "Linear"),
    "act": ("model.layers.{i}.mlp.act_fn", "SiLUActivation"),
    "up": ("model.layers.{i}.mlp.up_proj", "Linear"),
    "down": ("model.layers.{i}.mlp.down_proj", "Linear"),
    "norm": ("model.norm", "Qwen2RMSNorm"),
    "head": ("lm_head", "Linear"),
    "root": ("model", "Qwen2Model"),
}
LITGPT_NAMES = {
    "embed": ("transformer.wte", "Embedding"),
    "layer": ("transformer.h.{i}", "Block"),
    "ln1": ("transformer.h.{i}.norm_1", "RMSNorm"),
    "attn": ("transformer.h.{i}.attn", "CausalSelfAttention"),
    "qkv": ("transformer.h.{i}.attn.qkv", "Linear"),
    "o": ("transformer.h.{i}.attn.proj", "Linear"),
    "ln2": ("transformer.h.{i}.norm_2", "RMSNorm"),
    "mlp": ("transformer.h.{i}.mlp", "LLaMAMLP"),
    "gate": ("transformer.h.{i}.mlp.fc_1", "Linear"),
    "up": ("transformer.h.{i}.mlp.fc_2", "Linear"),
    "down": ("transformer.h.{i}.mlp.proj", "Linear"),
    "norm": ("transformer.ln_f", "RMSNorm"),
    "head": ("lm_head", "Linear"),
}
ROLLOUT_NAMES = {"hf": HF_NAMES, "litgpt": LITGPT_NAMES}


def model_pair(
    rollout_naming: str = "hf", layers: int = 2, calls: int = 1, fault_layer: int | None = None, seed: int = 0
) -> Pair:
    """A Megatron-core train dump and a rollout dump of the same tiny model, plus the mapping a person would write.

    With `fault_layer`, the train side's statistics diverge from that layer's attention output onwards."""
    stats = Stats(seed)
    train, rollout = Side(TRAIN), Side("Module")
    names = ROLLOUT_NAMES[rollout_naming]
    expected: dict[str, str | list[str]] = {}
    diverged = False
    call = 0

    def hidden(width: int = HIDDEN) -> Twin:
        node = stats.tensor(1, SEQ, width)
        train_node = reshaped(node, SEQ, 1, width)
        return (stats.perturbed(train_node) if diverged else train_node), node

    def on_rollout(role: str, layer: int | None, inputs: Node | None, output: Node) -> str:
        path, class_name = names[role]
        return rollout.add(path.format(i=layer), class_name, inputs, output, call=call)

    def pair(role: str, train_path: str, train_class: str, layer: int | None, inputs: Twin, output: Twin) -> None:
        train_key = train.add(train_path, train_class, inputs[0], output[0], call=call)
        expected[train_key] = on_rollout(role, layer, inputs[1], output[1])

    for call in range(calls):
        diverged = False
        ids = stats.ids(1, SEQ)
        embedding = hidden()
        pair("embed", "embedding.word_embeddings", "VocabParallelEmbedding", None, (ids, ids), embedding)
        train.add("embedding", "LanguageModelEmbedding", ids, embedding[0], call=call)
        train.add("rotary_pos_emb", "RotaryEmbedding", None, stats.tensor(SEQ, 1, 1, HEADS_DIM), call=call)
        if "rotary" in names:
            on_rollout("rotary", None, embedding[1], stats.tensor(1, SEQ, HEADS_DIM))
        x = embedding
        for i in range(layers):
            layer = f"decoder.layers.{i}"
            n1, q, k, v, context = hidden(), hidden(HEADS_DIM), hidden(KV_DIM), hidden(KV_DIM), hidden()
            pair("ln1", f"{layer}.input_layernorm", "RMSNorm", i, x, n1)
            width = HEADS_DIM + 2 * KV_DIM
            qkv = train.add(
                f"{layer}.self_attention.linear_qkv",
                "ColumnParallelLinear",
                n1[0],
                concat([q[0], k[0], v[0]], SEQ, 1, width),
                call=call,
            )
            if "qkv" in names:
                expected[qkv] = on_rollout("qkv", i, n1[1], concat([q[1], k[1], v[1]], 1, SEQ, width))
            else:
                expected[qkv] = [on_rollout(part, i, n1[1], node[1]) for part, node in zip("qkv", (q, k, v))]
            train.add(f"{layer}.self_attention.q_layernorm", "IdentityOp", q[0], q[0], call=call)
            train.add(f"{layer}.self_attention.core_attention", "DotProductAttention", q[0], context[0], call=call)
            diverged = diverged or i == fault_layer
            attention, residual, n2 = hidden(), hidden(), hidden()
            pair("o", f"{layer}.self_attention.linear_proj", "RowParallelLinear", i, context, attention)
            pair("attn", f"{layer}.self_attention", "SelfAttention", i, n1, attention)
            pair("ln2", f"{layer}.pre_mlp_layernorm", "RMSNorm", i, residual, n2)
            gate, up, activated, out = hidden(FFN), hidden(FFN), hidden(FFN), hidden()
            fc1 = train.add(
                f"{layer}.mlp.linear_fc1",
                "ColumnParallelLinear",
                n2[0],
                concat([gate[0], up[0]], SEQ, 1, 2 * FFN),
                call=call,
            )
            gate_key = on_rollout("gate", i, n2[1], gate[1])
            if "act" in names:
                on_rollout("act", i, gate[1], activated[1])
            expected[fc1] = [gate_key, on_rollout("up", i, n2[1], up[1])]
            pair("down", f"{layer}.mlp.linear_fc2", "RowParallelLinear", i, activated, out)
            pair("mlp", f"{layer}.mlp", "MLP", i, n2, out)
            x_out = hidden()
            pair("layer", layer, "TransformerLayer", i, x, x_out)
            x = x_out
        final, logits = hidden(), hidden(VOCAB)
        pair("norm", "decoder.final_layernorm", "RMSNorm", None, x, final)
        train.add("decoder", "TransformerBlock", embedding[0], final[0], call=call)
        if "root" in names:
            on_rollout("root", None, ids, final[1])
        pair("head", "output_layer", "ColumnParallelLinear", None, final, logits)
        train.add("", "GPTModel", ids, logits[0], call=call)
    return Pair(train.dump("train.json"), rollout.dump("rollout.json"), expected)


def as_lists(mapping: dict[str, str | list[str]]) -> dict[str, list[str]]:
    return {key: [value] if isinstance(value, str) else list(value) for key, value in mapping.items()}


# ---------------------------------------------------------------------------------------------------------------
# Whole mappings


@pytest.mark.parametrize("naming", ["hf", "litgpt"])
def test_healthy_pair_is_mapped_exactly_as_a_person_would(naming: str) -> None:
    pair = model_pair(naming)
    result = suggest_mapping(pair.train, pair.rollout)
    assert as_lists(result.mapping) == as_lists(pair.expected)
    assert all(suggestion.confidence >= 0.9 for suggestion in result.suggestions if suggestion.accepted)


def test_mapping_follows_train_dump_order() -> None:
    pair = model_pair()
    result = suggest_mapping(pair.train, pair.rollout)
    order = [key for key in pair.train.keys if key in result.mapping]
    assert list(result.mapping) == order


def test_faulty_pair_is_still_matched_by_names_and_shapes() -> None:
    pair = model_pair(fault_layer=0)
    result = suggest_mapping(pair.train, pair.rollout)
    assert as_lists(result.mapping) == as_lists(pair.expected)
    fc2 = f"{TRAIN}.decoder.layers.1.mlp.linear_fc2.RowParallelLinear.forward.0"
    downstream = next(suggestion for suggestion in result.suggestions if suggestion.train_key == fc2)
    assert downstream.accepted and "statistics differ" in downstream.reason
    assert downstream.confidence < 0.9


def test_calls_pair_with_the_same_call_index() -> None:
    pair = model_pair(calls=3)
    result = suggest_mapping(pair.train, pair.rollout)
    assert as_lists(result.mapping) == as_lists(pair.expected)
    for train_key, value in as_lists(result.mapping).items():
        call = train_key.rpartition(".")[2]
        assert all(key.rpartition(".")[2] == call for key in value)


def test_different_forms_are_not_paired() -> None:
    result = suggest_mapping(*_dumps(model_pair()))
    unpaired = {s.train_key.split(".")[-3]: s.reason for s in result.low_confidence}
    assert "integer tensors on the rollout side" in unpaired["TransformerBlock"]  # hidden states vs input ids
    assert "no tensors on the train side" in unpaired["RotaryEmbedding"]  # Megatron's takes a length, HF's a tensor
    assert not any("IdentityOp" in key for key in result.mapping)
    assert any("IdentityOp" in key for key in result.unmatched_train)


def test_identity_placeholders_are_never_paired() -> None:
    stats = Stats(5)
    train, rollout = Side(TRAIN), Side("Module")
    x = stats.tensor(SEQ, HIDDEN)
    train.add("decoder.layers.0.self_attention.q_layernorm", "IdentityOp", x, x)
    rollout.add("model.layers.0.self_attn.q_norm", "Identity", x, x)
    result = suggest_mapping(train.dump("t"), rollout.dump("r"))
    assert result.mapping == {}
    assert "identity placeholder" in result.low_confidence[0].reason


def test_names_alone_are_not_trusted_when_shapes_disagree() -> None:
    train, rollout = Side(TRAIN), Side("Module")
    stats = Stats(1)
    x = stats.tensor(SEQ, 1, HIDDEN)
    train.add("decoder.layers.0.mlp.linear_fc2", "RowParallelLinear", x, stats.tensor(SEQ, 1, HIDDEN))
    rollout.add("model.layers.0.mlp.down_proj", "Linear", reshaped(x, 1, SEQ, HIDDEN), stats.tensor(1, SEQ, 3 * HIDDEN))
    result = suggest_mapping(train.dump("t"), rollout.dump("r"))
    assert result.mapping == {}
    assert result.low_confidence[0].rollout_keys == ["Module.model.layers.0.mlp.down_proj.Linear.forward.0"]
    assert "output shapes differ ([8,1,16] vs [1,8,48])" in result.low_confidence[0].reason


def test_split_train_modules_share_one_fused_rollout_module() -> None:
    stats = Stats(2)
    train, rollout = Side("Module"), Side("Module")
    x, q = stats.tensor(SEQ, HIDDEN), stats.tensor(SEQ, HEADS_DIM)
    k, v = stats.tensor(SEQ, KV_DIM), stats.tensor(SEQ, KV_DIM)
    parts = [
        train.add(f"model.layers.0.self_attn.{name}_proj", "Linear", x, node) for name, node in zip("qkv", (q, k, v))
    ]
    fused = rollout.add(
        "model.layers.0.self_attn.qkv_proj", "QKVParallelLinear", x, concat([q, k, v], SEQ, HEADS_DIM + 2 * KV_DIM)
    )
    result = suggest_mapping(train.dump("t"), rollout.dump("r"))
    assert result.mapping == {key: fused for key in parts}
    assert [(group.kind, group.train_keys, group.rollout_keys) for group in result.groups] == [("N:1", parts, [fused])]


def test_unknown_names_are_aligned_by_order_when_statistics_confirm() -> None:
    stats = Stats(3)
    train, rollout = Side("Module"), Side("Module")
    x, mid, out = stats.tensor(SEQ, HIDDEN), stats.tensor(SEQ, HIDDEN), stats.tensor(SEQ, HIDDEN)
    train.add("model.layers.0.input_layernorm", "RMSNorm", x, mid)
    train.add("model.layers.0.mixer_a", "Linear", mid, out)
    train.add("model.layers.0.mixer_b", "Linear", out, stats.tensor(SEQ, HIDDEN))
    rollout.add("model.layers.0.input_layernorm", "RMSNorm", x, mid)
    rollout.add("model.layers.0.alpha", "Linear", mid, out)
    rollout.add("model.layers.0.beta", "Linear", out, stats.tensor(SEQ, HIDDEN))
    result = suggest_mapping(train.dump("t"), rollout.dump("r"))
    mixer_a, mixer_b = (f"Module.model.layers.0.mixer_{name}.Linear.forward.0" for name in "ab")
    assert result.mapping[mixer_a] == "Module.model.layers.0.alpha.Linear.forward.0"
    assert mixer_b not in result.mapping  # same place, but only its input statistics agree
    low = {suggestion.train_key: suggestion for suggestion in result.low_confidence}
    assert low[mixer_b].rollout_keys == ["Module.model.layers.0.beta.Linear.forward.0"]


def test_existing_entries_are_kept_and_only_missing_ones_proposed() -> None:
    pair = model_pair()
    kept_key = f"{TRAIN}.decoder.layers.0.mlp.linear_fc2.RowParallelLinear.forward.0"
    odd_choice = "Module.model.layers.1.mlp.down_proj.Linear.forward.0"
    existing = {kept_key: odd_choice, "Module.not.in.the.dump.Linear.forward.0": "Module.x.Linear.forward.0"}
    result = suggest_mapping(pair.train, pair.rollout, existing)
    assert result.mapping[kept_key] == odd_choice
    assert result.mapping["Module.not.in.the.dump.Linear.forward.0"] == "Module.x.Linear.forward.0"
    assert kept_key not in {s.train_key for s in result.suggestions}
    assert f"{TRAIN}.decoder.layers.1.mlp.linear_fc2.RowParallelLinear.forward.0" not in result.mapping  # pair taken
    assert result.kept == 2


def test_coverage_text_reports_counts_groups_and_unmatched_classes() -> None:
    result = suggest_mapping(*_dumps(model_pair()))
    text = render_coverage(result)
    assert f"train modules mapped: {len(result.mapping)} of {len(result.mapping) + len(result.unmatched_train)}" in text
    assert "groups: 4 1:N" in text
    assert "unmatched train modules:" in text and "IdentityOp (2)" in text
    assert "unmatched rollout modules:" in text and "SiLUActivation (2)" in text
    assert "low-confidence suggestions, not written:" in text


# ---------------------------------------------------------------------------------------------------------------
# Ranking for the server


def test_rollout_candidates_put_the_split_group_first() -> None:
    pair = model_pair()
    matcher = Matcher(pair.train, pair.rollout)
    qkv = f"{TRAIN}.decoder.layers.0.self_attention.linear_qkv.ColumnParallelLinear.forward.0"
    candidates = matcher.rank_rollout_candidates(qkv)
    assert candidates[0].keys == pair.expected[qkv]
    assert candidates[0].score > candidates[1].score


def test_rollout_candidates_fix_a_misspelt_value() -> None:
    pair = model_pair()
    matcher = Matcher(pair.train, pair.rollout)
    fc2 = f"{TRAIN}.decoder.layers.1.mlp.linear_fc2.RowParallelLinear.forward.0"
    typo = "Module.model.layers.1.mlp.dwn_proj.Linear.forward.0"
    candidates = matcher.rank_rollout_candidates(fc2, limit=3, text_hint=typo)
    assert candidates[0].keys == [pair.expected[fc2]]
    assert len(candidates) == 3


def test_rollout_candidates_rank_completions_of_a_typed_prefix() -> None:
    pair = model_pair()
    matcher = Matcher(pair.train, pair.rollout)
    fc2 = f"{TRAIN}.decoder.layers.1.mlp.linear_fc2.RowParallelLinear.forward.0"
    candidates = matcher.rank_rollout_candidates(fc2, limit=10, text_hint="Module.model.layers.1.mlp.")
    assert candidates[0].keys == [pair.expected[fc2]] and "starts with" in candidates[0].reason
    assert all(key.startswith("Module.model.layers.1.mlp.") for candidate in candidates[:4] for key in candidate.keys)


def test_train_candidates_fix_a_misspelt_or_foreign_named_key() -> None:
    pair = model_pair()
    matcher = Matcher(pair.train, pair.rollout)
    proj = f"{TRAIN}.decoder.layers.1.self_attention.linear_proj.RowParallelLinear.forward.0"
    assert matcher.rank_train_candidates(proj.replace("linear_proj", "linear_prj"))[0].keys == [proj]
    foreign = "Module.model.layers.1.self_attn.o_proj.Linear.forward.0"  # rollout naming typed in key position
    best = matcher.rank_train_candidates(foreign)[0]
    assert best.keys == [proj] and "naming rules" in best.reason


# ---------------------------------------------------------------------------------------------------------------
# Rules and evidence


def test_user_rules_extend_the_defaults(tmp_path: Path) -> None:
    stats = Stats(4)
    train, rollout = Side("Module"), Side("Module")
    x, y = stats.tensor(SEQ, HIDDEN), stats.tensor(SEQ, HIDDEN)
    train.add("model.layers.0.token_mixer", "Mixer", x, y)
    rollout.add("model.layers.0.time_mix", "Mixer", x, stats.perturbed(y))
    assert suggest_mapping(train.dump("t"), rollout.dump("r")).mapping == {}
    rules_file = tmp_path / "rules.toml"
    rules_file.write_text('[[rename]]\ncanonical = "mixer"\nnames = ["token_mixer", "time_mix"]\n')
    result = suggest_mapping(train.dump("t"), rollout.dump("r"), rules=NamingRules.from_files([rules_file]))
    assert result.mapping == {
        "Module.model.layers.0.token_mixer.Mixer.forward.0": "Module.model.layers.0.time_mix.Mixer.forward.0"
    }
    assert "token_mixer↔time_mix" in result.suggestions[0].reason


def test_bad_rules_file_is_an_input_error(tmp_path: Path) -> None:
    rules_file = tmp_path / "rules.toml"
    rules_file.write_text("[[rename]\n")
    with pytest.raises(InputError, match="rules.toml"):
        NamingRules.from_files([rules_file])
    rules_file.write_text('[[rename]]\nnames = ["a"]\n')
    with pytest.raises(InputError, match="canonical"):
        NamingRules.from_files([rules_file])


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('[[rename]]\nname = ["a"]\ncanonical = "b"\n', "unknown key 'name' in rename rule 1 (expected canonical,"),
        ('[[renames]]\nnames = ["a"]\ncanonical = "b"\n', "unknown key 'renames' in the file"),
        ('[[rename]]\ncanonical = "b"\n', "rename rule 1: no names"),
        ('[rename]\nnames = ["a"]\ncanonical = "b"\n', "rename must be an array of tables, each under its own"),
        ('class_kinds = ["norm"]\n', "class_kinds must be a table"),
        (
            '[[fused]]\nnames = ["qkv"]\ncanonical = "qkv"\nparts = ["q", "k"]\n',
            "fused rule 1: parts must be a list of",
        ),
        (
            '[[rename]]\nnames = ["a"]\ncanonical = "b"\n[[rename]]\nnames = "c"\ncanonical = "d"\n',
            "rename rule 2: names",
        ),
    ],
)
def test_a_rules_file_the_matcher_would_misread_is_an_error_naming_the_key(
    tmp_path: Path, text: str, said: str
) -> None:
    """A misspelt key or a table where an array of tables belongs: said, naming the key and the rule, never
    silently left out (the user's rules would not apply) nor a Python message ('str' object has no attribute)."""
    rules_file = tmp_path / "rules.toml"
    rules_file.write_text(text)
    with pytest.raises(InputError) as caught:
        NamingRules.from_files([rules_file])
    assert caught.value.path == str(rules_file) and said in caught.value.message, caught.value.message


def test_litgpt_fc_2_is_the_up_projection_not_megatrons_linear_fc2() -> None:
    canonical = Matcher(*_dumps(model_pair("litgpt"))).canonicalizer.canonical
    assert canonical("transformer.h.3.mlp.fc_2").path == "layers.3.mlp.gate_up[1]"
    assert canonical("module.module.decoder.layers.3.mlp.linear_fc2").path == "layers.3.mlp.down_proj"
    assert canonical("transformer.h.3.mlp.proj").path == canonical("model.layers.3.mlp.down_proj").path
    assert canonical("transformer.h.3.attn.proj").path == canonical("model.layers.3.self_attn.o_proj").path
    core_attention = canonical("module.decoder.layers.0.self_attention.core_attention").path
    assert canonical("model.layers.0.self_attn.attn").path == core_attention


def _tensor(
    shape: tuple[int, ...],
    mx: float = 2.0,
    mn: float = -2.0,
    mean: float = 0.1,
    norm: float = 5.0,
    dtype: str = "torch.float32",
) -> TensorStats:
    return TensorStats(dtype, shape, mx, mn, mean, norm)


def test_shape_relations_allow_layout_differences_only() -> None:
    assert shape_relation((8, 1, 64), (1, 8, 64)) == "same"
    assert shape_relation((8, 2, 64), (2, 8, 64)) == "permuted"
    assert shape_relation((8, 2, 64), (16, 64)) == "flattened"
    assert shape_relation((8, 1, 4, 16), (8, 64)) == "numel"
    assert shape_relation((8, 1, 64), (8, 128)) == "different"


def test_statistics_equality_depends_on_dtype_and_handles_non_finite_values() -> None:
    assert stats_relation(_tensor((4,)), _tensor((4,), norm=5.0004)) == "equal"
    assert stats_relation(_tensor((4,)), _tensor((4,), norm=5.05)) == "different"
    bf16 = "torch.bfloat16"
    assert stats_relation(_tensor((4,), dtype=bf16), _tensor((4,), norm=5.05, dtype=bf16)) == "equal"
    overflowed = _tensor((4,), mean=math.nan, norm=math.inf)
    assert stats_relation(overflowed, _tensor((4,), mean=math.nan, norm=math.inf)) == "equal"
    assert stats_relation(_tensor((4,), norm=math.inf), _tensor((4,))) == "different"
    assert stats_relation(_tensor((0,), None, None, None, None), _tensor((0,), None, None, None, None)) == "unknown"


def test_concatenated_statistics_are_exact() -> None:
    parts = [_tensor((2, 3), 1.0, -1.0, 0.5, 3.0), _tensor((2, 1), 4.0, -0.5, -1.0, 4.0)]
    joined = concatenate(parts, axis=-1)
    assert joined == TensorStats("torch.float32", (2, 4), 4.0, -1.0, (0.5 * 6 - 1.0 * 2) / 8, 5.0)
    assert concatenate([_tensor((2, 3)), _tensor((3, 3))], axis=-1) is None


def _dumps(pair: Pair) -> tuple[Dump, Dump]:
    return pair.train, pair.rollout


# numbers in digits of any script: ASCII mostly, or the superscripts str.isdigit() passes and int() refuses
_numbers = st.integers(0, 12).map(str) | st.text(st.characters(categories=("Nd", "No")), min_size=1, max_size=2)
_layered = st.builds(
    lambda root, number, rest: ".".join(filter(None, (root, "layers", number, rest))),
    st.sampled_from(["decoder", "model", ""]),
    _numbers,
    st.sampled_from(["mlp", "self_attention.linear_qkv", "mlp.experts.0", ""]),
)
_paths = _layered | st.lists(st.sampled_from(["decoder", "mlp", "experts"]) | _numbers, min_size=1, max_size=4).map(
    ".".join
)


@settings(max_examples=150, deadline=None)
@given(st.lists(_paths, min_size=1, max_size=4), st.lists(_paths, min_size=1, max_size=4))
def test_any_module_paths_are_matched_without_an_exception(train_paths: list[str], rollout_paths: list[str]) -> None:
    stats = Stats(7)
    train, rollout = Side(TRAIN), Side("Module")
    for side, paths in ((train, train_paths), (rollout, rollout_paths)):
        for path in paths:
            side.add(path, "Linear", stats.tensor(SEQ, HIDDEN), stats.tensor(SEQ, HIDDEN))
    result = suggest_mapping(train.dump("t"), rollout.dump("r"))
    assert set(result.mapping) <= set(train.data) and all(
        key in rollout.data for keys in as_lists(result.mapping).values() for key in keys
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(generated_dump(), generated_dump())
def test_any_generated_dumps_get_suggestions_without_an_exception(
    train: dict[str, Any], rollout: dict[str, Any]
) -> None:
    """Dumps as test_generated_runs draws them: statistics of every kind, odd shapes (text, floats, lists, negative
    sizes) and dtypes among them."""
    try:
        train_dump, rollout_dump = build_dump("t", train), build_dump("r", rollout)
    except InputError:  # no module entry at all
        return
    result = suggest_mapping(train_dump, rollout_dump)
    assert set(result.mapping) <= set(train_dump.keys) and all(
        rollout_dump.calls_of(key)
        for keys in as_lists(result.mapping).values()
        for key in keys  # forward.*: all calls
    )
