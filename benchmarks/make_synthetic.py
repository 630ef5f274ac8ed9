"""Generate a large, deterministic synthetic train/rollout msprobe dump pair and its mapping-key file.

Train side: Megatron-core MoE GPT (keys `Module.module.module.decoder.layers.<i>...`).
Rollout side: vLLM-like Qwen2-MoE (keys `Module.model.layers.<i>...`), q/k/v split (1:N) or fused qkv_proj.
Mapped modules carry identical statistics on both sides (split q/k/v parts combine exactly into the
train's fused linear_qkv), except for an optional injected fault from the middle layer on:
  --fault act    train skips the expert activation: linear_fc2 inputs diverge while linear_fc1 still
                 matches, and everything downstream diverges (rollout-only act_fn sits in between);
  --fault param  the rollout's o_proj weight is stale: o_proj/linear_proj output diverges, then downstream.
--nan writes a few NaN/Infinity literals into the rollout dump (non-standard JSON, like overflowing runs).

Dumps are written exactly as msprobe does (json, indent=1, NaN/Infinity as bare literals), streamed entry by
entry so generation stays fast and small in memory.
"""

from __future__ import annotations

import argparse
import math
import random
import struct
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Literal, TextIO, Union

import orjson

from bench_common import DEFAULT_DATA_DIR, dataset_paths, mib

BF16 = "torch.bfloat16"
F32 = "torch.float32"
I64 = "torch.int64"
TRAIN_PREFIX = "Module.module.module."
ROLLOUT_PREFIX = "Module."

Fault = Literal["act", "param", "none"]


@dataclass(frozen=True)
class Config:
    layers: int = 60
    experts: int = 256
    calls: int = 4
    seed: int = 0
    fault: Fault = "act"
    nan: bool = False
    qkv: Literal["split", "fused"] = "split"
    hidden: int = 4096
    heads: int = 32
    kv_heads: int = 4
    head_dim: int = 128
    ffn: int = 1536
    topk: int = 8
    vocab: int = 151936
    prefill_tokens: int = 1024
    decode_tokens: int = 64

    @property
    def fault_layer(self) -> int:
        return self.layers // 2

    def tokens(self, call: int) -> int:
        return self.prefill_tokens if call == 0 else self.decode_tokens


# ----------------------------------------------------------------------------------------------------------
# Tensor statistics


@dataclass(frozen=True)
class Tensor:
    """A tensor node's statistics (`Mean`/`Norm` are None for integer tensors)."""

    dtype: str
    shape: tuple[int, ...]
    max: float
    min: float
    mean: float | None
    norm: float | None


@dataclass(frozen=True)
class Pair:
    """One logical tensor as each side records it (shapes may differ, e.g. [T, 1, H] vs [T, H])."""

    train: Tensor
    rollout: Tensor


def numel(shape: tuple[int, ...]) -> int:
    return math.prod(shape)


def to_f32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", x))[0]


def to_bf16(x: float) -> float:
    mantissa, exponent = math.frexp(x)
    return math.ldexp(round(mantissa * 256) / 256, exponent)


def concat(parts: list[Tensor], shape: tuple[int, ...]) -> Tensor:
    """Statistics of the concatenation of `parts` (what a fused module records for split modules)."""
    sizes = [numel(p.shape) for p in parts]
    mean = sum(n * p.mean for n, p in zip(sizes, parts)) / sum(sizes)
    norm = math.sqrt(sum(p.norm**2 for p in parts))
    return Tensor(parts[0].dtype, shape, max(p.max for p in parts), min(p.min for p in parts),
                  to_f32(mean), to_f32(norm))


def overflowed(t: Tensor) -> Tensor:
    return replace(t, max=math.inf, min=-math.inf, mean=math.nan, norm=math.inf)


class StatGen:
    """Seeded source of plausible statistics: bf16-exact Max/Min, float32 Mean/Norm."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)

    def float_tensor(self, shape: tuple[int, ...], std: float, dtype: str = BF16, offset: float = 0.0) -> Tensor:
        rng = self._rng
        mean = offset + std * rng.gauss(0.0, 0.02)
        norm = math.sqrt(numel(shape) * (std**2 + mean**2)) * rng.uniform(0.97, 1.03)
        top = to_bf16(offset + std * rng.uniform(3.0, 8.0))
        bottom = to_bf16(offset - std * rng.uniform(3.0, 8.0))
        return Tensor(dtype, shape, top, bottom, to_f32(mean), to_f32(norm))

    def activation(self, shape: tuple[int, ...], dtype: str = BF16) -> Tensor:
        return self.float_tensor(shape, std=self._rng.lognormvariate(0.0, 0.8), dtype=dtype)

    def weight(self, shape: tuple[int, ...], dtype: str = BF16) -> Tensor:
        return self.float_tensor(shape, std=self._rng.uniform(0.01, 0.03), dtype=dtype)

    def norm_weight(self, shape: tuple[int, ...]) -> Tensor:
        return self.float_tensor(shape, std=0.05, offset=self._rng.uniform(0.8, 1.2))

    def integers(self, shape: tuple[int, ...], high: int) -> Tensor:
        return Tensor(I64, shape, self._rng.randrange(high // 2, high), 0, None, None)

    def diverged(self, t: Tensor) -> Tensor:
        """The same tensor after a numerical divergence: every statistic off by 5-40 %."""
        if t.mean is None or t.norm is None:
            return t
        factor = 1.0 + self._rng.choice((-1.0, 1.0)) * self._rng.uniform(0.05, 0.4)
        return Tensor(t.dtype, t.shape, to_bf16(t.max * factor), to_bf16(t.min * factor),
                      to_f32(t.mean * factor), to_f32(t.norm * abs(factor)))

    def split_tokens(self, total: int, parts: int) -> list[int]:
        """Routed tokens per expert: every expert gets at least one, so every expert module is called."""
        weights = [self._rng.expovariate(1.0) for _ in range(parts)]
        scale = max(total - parts, 0) / sum(weights)
        return [1 + int(w * scale) for w in weights]


# ----------------------------------------------------------------------------------------------------------
# msprobe-compatible JSON text (json.dumps(..., indent=1) byte for byte, NaN/Infinity as bare literals)

Json = Union[Tensor, None, bool, int, float, str, list["Json"], dict[str, "Json"]]


def number_text(x: float | int | None) -> str:
    if x is None:
        return "null"
    if isinstance(x, int):
        return str(x)
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return repr(x)


def tensor_text(t: Tensor, depth: int) -> str:
    pad = "\n" + " " * (depth + 1)
    dims = ",".join(f"{pad} {d}" for d in t.shape)
    shape = f"[{dims}{pad}]" if t.shape else "[]"
    return (f'{{{pad}"type": "torch.Tensor",{pad}"dtype": "{t.dtype}",{pad}"shape": {shape},'
            f'{pad}"Max": {number_text(t.max)},{pad}"Min": {number_text(t.min)},'
            f'{pad}"Mean": {number_text(t.mean)},{pad}"Norm": {number_text(t.norm)},'
            f'{pad}"requires_grad": false\n{" " * depth}}}')


def json_text(value: Json, depth: int) -> str:
    if isinstance(value, Tensor):
        return tensor_text(value, depth)
    pad = "\n" + " " * (depth + 1)
    end = "\n" + " " * depth
    if isinstance(value, dict):
        items = ",".join(f"{pad}{orjson.dumps(k).decode()}: {json_text(v, depth + 1)}" for k, v in value.items())
        return f"{{{items}{end}}}" if value else "{}"
    if isinstance(value, list):
        items = ",".join(f"{pad}{json_text(v, depth + 1)}" for v in value)
        return f"[{items}{end}]" if value else "[]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return orjson.dumps(value).decode()
    return number_text(value)


class DumpWriter:
    """Streams a statistics-level dump.json, one `data` entry at a time, in execution order."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.count = 0
        self._file: TextIO = path.open("w", encoding="utf-8", buffering=1 << 20)
        self._file.write('{\n "task": "statistics",\n "level": "L0",\n "framework": "pytorch",\n'
                         ' "dump_data_dir": null,\n "data": {')

    def add(self, key: str, entry: dict[str, Json]) -> None:
        self._file.write(f'{"," if self.count else ""}\n  "{key}": {json_text(entry, 2)}')
        self.count += 1

    def close(self) -> None:
        self._file.write("\n }\n}")
        self._file.close()


def entry(inputs: list[Json], outputs: list[Json], params: dict[str, Json] | None = None,
          kwargs: dict[str, Json] | None = None) -> dict[str, Json]:
    """A module forward entry; modules without own parameters have no `parameters` field."""
    fields: dict[str, Json] = {"input_args": inputs, "input_kwargs": kwargs or {}, "output": outputs}
    if params is not None:
        fields["parameters"] = params
    return fields


# ----------------------------------------------------------------------------------------------------------
# The two models


class Synth:
    """Walks both models call by call, layer by layer, writing each side's entries in its own dump order."""

    def __init__(self, cfg: Config, train: DumpWriter, rollout: DumpWriter) -> None:
        self.cfg = cfg
        self.gen = StatGen(cfg.seed)
        self.train_dump = train
        self.rollout_dump = rollout
        self.mapping: dict[str, str | list[str]] = {}
        self._params: dict[str, Tensor] = {}
        # Per forward call, set by run():
        self._call = 0
        self._tokens = 0
        self._diverged = False
        self._positions = Tensor(I64, (0,), 0, 0, None, None)
        self._rope = self._positions

    # --- keys and entries ---

    def train(self, path: str, cls: str, fields: dict[str, Json]) -> str:
        key = f"{TRAIN_PREFIX}{path}.{cls}.forward.{self._call}"
        self.train_dump.add(key, fields)
        return key

    def rollout(self, path: str, cls: str, fields: dict[str, Json]) -> str:
        key = f"{ROLLOUT_PREFIX}{path}.{cls}.forward.{self._call}"
        self.rollout_dump.add(key, fields)
        return key

    def pair(self, train: tuple[str, str, dict[str, Json]], rollout: tuple[str, str, dict[str, Json]]) -> None:
        self.mapping[self.train(*train)] = self.rollout(*rollout)

    # --- tensors ---

    def param(self, name: str, make: Callable[[], Tensor]) -> Tensor:
        """Parameters keep their statistics across calls."""
        if name not in self._params:
            self._params[name] = make()
        return self._params[name]

    def weight(self, name: str, shape: tuple[int, ...], dtype: str = BF16) -> Tensor:
        return self.param(name, lambda: self.gen.weight(shape, dtype))

    def norm_weight(self, name: str) -> Tensor:
        return self.param(name, lambda: self.gen.norm_weight((self.cfg.hidden,)))

    def act(self, rollout_shape: tuple[int, ...], train_shape: tuple[int, ...] | None = None,
            dtype: str = BF16, diverged: bool | None = None) -> Pair:
        """A fresh activation; the train side diverges after a fault unless `diverged` says otherwise."""
        rollout = self.gen.activation(rollout_shape, dtype)
        train = replace(rollout, shape=train_shape or rollout_shape)
        if self._diverged if diverged is None else diverged:
            train = self.gen.diverged(train)
        return Pair(train, rollout)

    def hidden(self, width: int) -> Pair:
        """Token-major activation: Megatron records [s, b, h], vLLM [num_tokens, h]."""
        return self.act((self._tokens, width), (self._tokens, 1, width))

    # --- model walk ---

    def run(self) -> None:
        for call in range(self.cfg.calls):
            self._call = call
            self._tokens = tokens = self.cfg.tokens(call)
            self._diverged = False
            self._positions = self.gen.integers((tokens,), 4096)
            self._rope = replace(self.gen.activation((tokens, 1, 1, self.cfg.head_dim), F32), min=-1.0, max=1.0)
            self.forward()

    def forward(self) -> None:
        cfg, tokens, positions = self.cfg, self._tokens, self._positions
        ids_train = self.gen.integers((1, tokens), cfg.vocab)
        ids_rollout = replace(ids_train, shape=(tokens,))
        emb = self.act((tokens, cfg.hidden), (1, tokens, cfg.hidden))
        w_emb = self.weight("embed", (cfg.vocab, cfg.hidden))
        self.pair(("embedding.word_embeddings", "VocabParallelEmbedding",
                   entry([ids_train], [emb.train], {"weight": w_emb})),
                  ("model.embed_tokens", "VocabParallelEmbedding",
                   entry([ids_rollout], [emb.rollout], {"weight": w_emb})))
        h = Pair(replace(emb.train, shape=(tokens, 1, cfg.hidden)), emb.rollout)
        self.train("embedding", "LanguageModelEmbedding",
                   entry([ids_train, positions], [h.train], kwargs={"tokentype_ids": None}))
        block_input = h
        for layer in range(cfg.layers):
            h = self.layer(layer, h)
        final = self.hidden(cfg.hidden)
        w_final = self.norm_weight("final_norm")
        self.pair(("decoder.final_layernorm", "RMSNorm", entry([h.train], [final.train], {"weight": w_final})),
                  ("model.norm", "RMSNorm", entry([h.rollout], [final.rollout], {"weight": w_final})))
        self.train("decoder", "TransformerBlock", entry([block_input.train], [final.train],
                                                        kwargs={"attention_mask": None, "rotary_pos_emb": self._rope}))
        self.rollout("model", "Qwen2MoeModel", entry([ids_rollout, positions], [final.rollout]))
        logits = self.gen.activation((tokens, 1, cfg.vocab))
        self.train("output_layer", "ColumnParallelLinear",
                   entry([final.train], [logits, None], {"weight": self.weight("lm_head", (cfg.vocab, cfg.hidden))}))

    def layer(self, i: int, h: Pair) -> Pair:
        cfg = self.cfg
        t_path, r_path = f"decoder.layers.{i}", f"model.layers.{i}"

        ln1 = self.hidden(cfg.hidden)
        w_ln1 = self.norm_weight(f"{i}.ln1")
        self.pair((f"{t_path}.input_layernorm", "RMSNorm", entry([h.train], [ln1.train], {"weight": w_ln1})),
                  (f"{r_path}.input_layernorm", "RMSNorm", entry([h.rollout], [ln1.rollout], {"weight": w_ln1})))
        self.attention(i, ln1)

        residual = self.hidden(cfg.hidden)
        ln2 = self.hidden(cfg.hidden)
        w_ln2 = self.norm_weight(f"{i}.ln2")
        self.pair((f"{t_path}.pre_mlp_layernorm", "RMSNorm", entry([residual.train], [ln2.train], {"weight": w_ln2})),
                  (f"{r_path}.post_attention_layernorm", "RMSNorm",
                   entry([residual.rollout], [ln2.rollout], {"weight": w_ln2})))
        self.moe(i, ln2)

        out = self.hidden(cfg.hidden)
        self.pair((t_path, "TransformerLayer",
                   entry([h.train], [out.train, None],
                         kwargs={"attention_mask": None, "rotary_pos_emb": self._rope, "inference_params": None})),
                  (r_path, "Qwen2MoeDecoderLayer",
                   entry([h.rollout], [out.rollout, residual.rollout],
                         kwargs={"positions": self._positions, "residual": None})))
        return out

    def attention(self, i: int, ln1: Pair) -> None:
        cfg = self.cfg
        t_path, r_path = f"decoder.layers.{i}.self_attention", f"model.layers.{i}.self_attn"
        tokens = self._tokens
        widths = {"q": cfg.heads * cfg.head_dim, "k": cfg.kv_heads * cfg.head_dim, "v": cfg.kv_heads * cfg.head_dim}
        fused_width = sum(widths.values())
        outs = {name: self.gen.activation((tokens, w)) for name, w in widths.items()}
        weights = {name: self.weight(f"{i}.{name}", (w, cfg.hidden)) for name, w in widths.items()}
        biases = {name: self.weight(f"{i}.{name}.bias", (w,)) for name, w in widths.items()}
        qkv = concat(list(outs.values()), (tokens, fused_width))
        qkv_train = replace(qkv, shape=(tokens, 1, fused_width))
        if self._diverged:
            qkv_train = self.gen.diverged(qkv_train)
        fused_params: dict[str, Json] = {"weight": concat(list(weights.values()), (fused_width, cfg.hidden)),
                                         "bias": concat(list(biases.values()), (fused_width,))}
        t_qkv = self.train(f"{t_path}.linear_qkv", "ColumnParallelLinear",
                           entry([ln1.train], [qkv_train, None], fused_params))
        if cfg.qkv == "fused":
            self.mapping[t_qkv] = self.rollout(f"{r_path}.qkv_proj", "QKVParallelLinear",
                                               entry([ln1.rollout], [qkv, None], fused_params))
        else:
            self.mapping[t_qkv] = [
                self.rollout(f"{r_path}.{name}_proj", "Linear",
                             entry([ln1.rollout], [outs[name]], {"weight": weights[name], "bias": biases[name]}))
                for name in widths]

        context = self.act((tokens, widths["q"]), (tokens, 1, widths["q"]))
        heads = {"q": cfg.heads, "k": cfg.kv_heads, "v": cfg.kv_heads}
        core_inputs: list[Json] = [self.gen.activation((tokens, 1, n, cfg.head_dim)) for n in heads.values()]
        self.train(f"{t_path}.core_attention", "DotProductAttention",
                   entry(core_inputs, [context.train], kwargs={"attention_mask": None, "attn_mask_type": None}))

        fault_here = cfg.fault == "param" and i == cfg.fault_layer
        w_proj = self.weight(f"{i}.proj", (cfg.hidden, widths["q"]))
        w_proj_rollout = self.param(f"{i}.proj.stale", lambda: self.gen.diverged(w_proj)) if fault_here else w_proj
        self._diverged = self._diverged or fault_here
        out = self.hidden(cfg.hidden)
        self.pair((f"{t_path}.linear_proj", "RowParallelLinear",
                   entry([context.train], [out.train, None], {"weight": w_proj})),
                  (f"{r_path}.o_proj", "RowParallelLinear",
                   entry([context.rollout], [out.rollout, None], {"weight": w_proj_rollout})))
        self.pair((t_path, "SelfAttention",
                   entry([ln1.train], [out.train, None],
                         kwargs={"attention_mask": None, "rotary_pos_emb": self._rope, "packed_seq_params": None})),
                  (r_path, "Qwen2MoeAttention",
                   entry([ln1.rollout], [out.rollout], kwargs={"positions": self._positions})))

    def moe(self, i: int, ln2: Pair) -> None:
        cfg = self.cfg
        t_path, r_path = f"decoder.layers.{i}.mlp", f"model.layers.{i}.mlp"
        tokens = self._tokens
        logits = self.act((tokens, cfg.experts), (tokens, 1, cfg.experts), F32)
        indices = self.gen.integers((tokens, cfg.topk), cfg.experts)
        w_router = self.weight(f"{i}.router", (cfg.experts, cfg.hidden), F32)
        self.pair((f"{t_path}.router", "TopKRouter",
                   entry([ln2.train], [logits.train, indices], {"weight": w_router})),
                  (f"{r_path}.gate", "ReplicatedLinear",
                   entry([ln2.rollout], [logits.rollout, None], {"weight": w_router})))

        fault_here = cfg.fault == "act" and i == cfg.fault_layer
        overflow = cfg.nan and i == cfg.layers - 1 and self._call == cfg.calls - 1
        routed = self.gen.split_tokens(tokens * cfg.topk, cfg.experts)
        for e, n in enumerate(routed):
            self.expert(i, e, n, diverge_after_fc1=fault_here, overflow=overflow and e < 3)
        self._diverged = self._diverged or fault_here

        permuted, combined = (self.gen.activation((sum(routed), cfg.hidden)) for _ in range(2))
        self.train(f"{t_path}.experts", "SequentialMLP",
                   entry([permuted, self.gen.integers((cfg.experts,), tokens)], [combined, None]))
        out = self.hidden(cfg.hidden)
        self.pair((t_path, "MoELayer", entry([ln2.train], [out.train, None])),
                  (r_path, "Qwen2MoeSparseMoeBlock", entry([ln2.rollout], [out.rollout])))

    def expert(self, i: int, e: int, n_tokens: int, diverge_after_fc1: bool, overflow: bool) -> None:
        cfg = self.cfg
        t_path, r_path = f"decoder.layers.{i}.mlp.experts.local_experts.{e}", f"model.layers.{i}.mlp.experts.{e}"
        diverged = self._diverged or diverge_after_fc1
        x = self.act((n_tokens, cfg.hidden))
        gate_up = self.act((n_tokens, 2 * cfg.ffn))
        activated = self.act((n_tokens, cfg.ffn), diverged=diverged)
        out = self.act((n_tokens, cfg.hidden), diverged=diverged)
        if overflow:
            out = Pair(out.train, overflowed(out.rollout))
        w_fc1 = self.weight(f"{i}.{e}.fc1", (2 * cfg.ffn, cfg.hidden))
        w_fc2 = self.weight(f"{i}.{e}.fc2", (cfg.hidden, cfg.ffn))

        t_fc1 = self.train(f"{t_path}.linear_fc1", "ColumnParallelLinear",
                           entry([x.train], [gate_up.train, None], {"weight": w_fc1}))
        self.mapping[t_fc1] = self.rollout(f"{r_path}.gate_up_proj", "MergedColumnParallelLinear",
                                           entry([x.rollout], [gate_up.rollout, None], {"weight": w_fc1}))
        self.rollout(f"{r_path}.act_fn", "SiluAndMul", entry([gate_up.rollout], [activated.rollout]))
        self.pair((f"{t_path}.linear_fc2", "RowParallelLinear",
                   entry([activated.train], [out.train, None], {"weight": w_fc2})),
                  (f"{r_path}.down_proj", "RowParallelLinear",
                   entry([activated.rollout], [out.rollout, None], {"weight": w_fc2})))
        self.pair((t_path, "MLP", entry([x.train], [out.train, None])),
                  (r_path, "Qwen2MoeMLP", entry([x.rollout], [out.rollout])))


# ----------------------------------------------------------------------------------------------------------


def generate(cfg: Config, out_dir: Path) -> dict[str, int]:
    """Write both dumps and the mapping-key file; return key counts."""
    paths = dataset_paths(out_dir)
    train, rollout = DumpWriter(paths.train_dump), DumpWriter(paths.rollout_dump)
    synth = Synth(cfg, train, rollout)
    try:
        synth.run()
    finally:
        train.close()
        rollout.close()
    paths.mapping_key.write_bytes(orjson.dumps(synth.mapping, option=orjson.OPT_INDENT_2))
    return {"train keys": train.count, "rollout keys": rollout.count, "mapping entries": len(synth.mapping),
            "1:N entries": sum(isinstance(v, list) for v in synth.mapping.values())}


def parse_args(argv: list[str]) -> tuple[Config, Path]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    defaults = Config()
    parser.add_argument("--out-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--layers", type=int, default=defaults.layers)
    parser.add_argument("--experts", type=int, default=defaults.experts)
    parser.add_argument("--calls", type=int, default=defaults.calls, help="forward calls (.forward.0 .. .forward.N-1)")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--fault", choices=("act", "param", "none"), default=defaults.fault)
    parser.add_argument("--qkv", choices=("split", "fused"), default=defaults.qkv,
                        help="rollout attention projections: q/k/v split (1:N mapping) or fused qkv_proj (1:1)")
    parser.add_argument("--nan", action="store_true", help="write NaN/Infinity literals into the rollout dump")
    args = parser.parse_args(argv)
    cfg = Config(layers=args.layers, experts=args.experts, calls=args.calls, seed=args.seed, fault=args.fault,
                 nan=args.nan, qkv=args.qkv)
    return cfg, args.out_dir


def main(argv: list[str]) -> int:
    cfg, out_dir = parse_args(argv)
    start = time.perf_counter()
    counts = generate(cfg, out_dir)
    elapsed = time.perf_counter() - start
    for path in dataset_paths(out_dir).all():
        print(f"{path}: {mib(path.stat().st_size)}")
    print(", ".join(f"{name}: {n}" for name, n in counts.items()))
    fault = "none" if cfg.fault == "none" else f"{cfg.fault} at layer {cfg.fault_layer}"
    print(f"fault: {fault}; NaN/Infinity literals: {'yes' if cfg.nan else 'no'}; generated in {elapsed:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
