"""Generate a large, deterministic synthetic train/rollout msprobe dump pair and its mapping-key file.

Train side: Megatron-core MoE GPT (keys `Module.module.module.decoder.layers.<i>...`).
Rollout side: vLLM-like Qwen2-MoE (keys `Module.model.layers.<i>...`), q/k/v split (1:N) or fused qkv_proj.
Mapped modules carry identical statistics on both sides (split q/k/v parts combine exactly into the
train's fused linear_qkv), except for an optional injected fault from the middle layer on:
  --fault act    train skips the expert activation: linear_fc2 inputs diverge while linear_fc1 still
                 matches, and everything downstream diverges (rollout-only act_fn sits in between);
  --fault param  the rollout's o_proj weight is stale: o_proj/linear_proj output diverges, then downstream.
--nan writes a few NaN/Infinity literals into the rollout dump (non-standard JSON, like overflowing runs).
--tp N writes the train side as N tensor-parallel ranks (train/step0/rank<R>/dump.json, same keys on every
       rank, Megatron's sharding; experts replicated); the rollout records the shards' exact aggregates.
--decode-steps N makes the rollout decode: forward.0 = prefill, forward.1..N = one token each, against ONE
       train forward over all those tokens (the exact aggregate); mapping values end in `.forward.*`.
--check reads the written files back and verifies that merged ranks / aggregated calls match (check_synthetic.py).

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
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Literal, Sequence, TextIO, Union

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
    tp: int = 1  # train tensor-parallel ranks
    decode_steps: int = 0  # > 0: rollout decode calls (1 token each) after the prefill, against one train forward
    float_dtype: str = BF16  # of activations and weights; float32 makes calibration tighten (see --dtype)

    def __post_init__(self) -> None:
        if self.tp > 1 and self.decode_steps:
            raise ValueError("--tp and --decode-steps are separate data sets: give one of them")
        for name in ("heads", "kv_heads", "vocab"):  # Megatron: query groups and vocabulary divide over TP ranks
            if getattr(self, name) % self.tp:
                raise ValueError(f"{name} = {getattr(self, name)} is not divisible by tp = {self.tp}")

    @property
    def fault_layer(self) -> int:
        return self.layers // 2

    @property
    def rollout_calls(self) -> int:
        return 1 + self.decode_steps if self.decode_steps else self.calls

    def tokens(self, call: int) -> int:
        if call == 0:
            return self.prefill_tokens
        return 1 if self.decode_steps else self.decode_tokens


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
    tokenwise: bool = field(default=True, compare=False)  # False: one value per expert etc., not per token


def shard_shape(shape: tuple[int, ...], dim: int, ranks: int) -> tuple[int, ...]:
    dim %= len(shape)
    return shape[:dim] + (shape[dim] // ranks,) + shape[dim + 1 :]


@dataclass(frozen=True)
class Sharded:
    """A train tensor split over TP ranks along `dim` (counted from the end): rank r records `parts[r]`.
    `full` is the logical tensor, the exact aggregate of the parts; a single-rank dump (the rollout) records it."""

    parts: tuple[Tensor, ...]
    dim: int
    full: Tensor

    @classmethod
    def of(cls, parts: Sequence[Tensor], dim: int, shape: tuple[int, ...]) -> Sharded:
        return cls(tuple(parts), dim, concat(list(parts), shape, exact=True))

    def reshaped(self, shape: tuple[int, ...]) -> Sharded:
        part = shard_shape(shape, self.dim, len(self.parts))
        return Sharded(tuple(replace(p, shape=part) for p in self.parts), self.dim, replace(self.full, shape=shape))


Node = Union[Tensor, Sharded]


def reshaped(t: Node, shape: tuple[int, ...]) -> Node:
    return t.reshaped(shape) if isinstance(t, Sharded) else replace(t, shape=shape)


@dataclass(frozen=True)
class Pair:
    """One logical tensor as each side records it (shapes may differ, e.g. [T, 1, H] vs [T, H])."""

    train: Node
    rollout: Node


def numel(shape: tuple[int, ...]) -> int:
    return math.prod(shape)


def to_f32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", x))[0]


def to_bf16(x: float) -> float:
    mantissa, exponent = math.frexp(x)
    return math.ldexp(round(mantissa * 256) / 256, exponent)


def concat(parts: list[Tensor], shape: tuple[int, ...], exact: bool = False) -> Tensor:
    """Statistics of the concatenation of `parts`: what a fused module records for split modules (float32), or
    with `exact` the unrounded aggregate that a merge of the parts (ranks, calls) computes in float64."""
    sizes = [numel(p.shape) for p in parts]
    mean = sum(n * p.mean for n, p in zip(sizes, parts)) / sum(sizes)
    norm = math.sqrt(sum(p.norm**2 for p in parts))
    rounded = float if exact else to_f32
    return Tensor(
        parts[0].dtype, shape, max(p.max for p in parts), min(p.min for p in parts), rounded(mean), rounded(norm)
    )


def fuse(parts: list[Node], shape: tuple[int, ...]) -> Node:
    """A fused module's tensor from its split parts; sharded parts fuse rank by rank (Megatron's linear_qkv
    rank r holds its query groups' q, k and v rows)."""
    if not isinstance(parts[0], Sharded):
        return concat(parts, shape)  # type: ignore[arg-type]
    first = parts[0]
    rank_shape = shard_shape(shape, first.dim, len(first.parts))
    return Sharded.of(
        [concat([p.parts[r] for p in parts], rank_shape) for r in range(len(first.parts))],  # type: ignore[union-attr]
        first.dim,
        shape,
    )


def overflowed(t: Tensor) -> Tensor:
    return replace(t, max=math.inf, min=-math.inf, mean=math.nan, norm=math.inf)


class StatGen:
    """Seeded source of plausible statistics: bf16-exact Max/Min, float32 Mean/Norm (`float_dtype` names them)."""

    def __init__(self, seed: int, float_dtype: str = BF16) -> None:
        self._rng = random.Random(seed)
        self._float_dtype = float_dtype

    def float_tensor(self, shape: tuple[int, ...], std: float, dtype: str | None = None, offset: float = 0.0) -> Tensor:
        dtype = dtype or self._float_dtype
        rng = self._rng
        mean = offset + std * rng.gauss(0.0, 0.02)
        norm = math.sqrt(numel(shape) * (std**2 + mean**2)) * rng.uniform(0.97, 1.03)
        top = to_bf16(offset + std * rng.uniform(3.0, 8.0))
        bottom = to_bf16(offset - std * rng.uniform(3.0, 8.0))
        return Tensor(dtype, shape, top, bottom, to_f32(mean), to_f32(norm))

    def activation(self, shape: tuple[int, ...], dtype: str | None = None) -> Tensor:
        return self.float_tensor(shape, std=self._rng.lognormvariate(0.0, 0.8), dtype=dtype)

    def weight(self, shape: tuple[int, ...], dtype: str | None = None) -> Tensor:
        return self.float_tensor(shape, std=self._rng.uniform(0.01, 0.03), dtype=dtype)

    def norm_weight(self, shape: tuple[int, ...]) -> Tensor:
        return self.float_tensor(shape, std=0.05, offset=self._rng.uniform(0.8, 1.2))

    def integers(self, shape: tuple[int, ...], high: int) -> Tensor:
        return Tensor(I64, shape, self._rng.randrange(high // 2, high), 0, None, None)

    def diverged(self, t: Node) -> Node:
        """The same tensor after a numerical divergence: every statistic off by 5-40 % (per shard)."""
        if isinstance(t, Sharded):
            return Sharded.of([self.diverged(p) for p in t.parts], t.dim, t.full.shape)  # type: ignore[misc]
        if t.mean is None or t.norm is None:
            return t
        factor = 1.0 + self._rng.choice((-1.0, 1.0)) * self._rng.uniform(0.05, 0.4)
        return Tensor(
            t.dtype,
            t.shape,
            to_bf16(t.max * factor),
            to_bf16(t.min * factor),
            to_f32(t.mean * factor),
            to_f32(t.norm * abs(factor)),
        )

    def split_tokens(self, total: int, parts: int) -> list[int]:
        """Routed tokens per expert: every expert gets at least one, so every expert module is called; with
        fewer routed tokens than experts (a decode step), `total` distinct experts get one each."""
        if total < parts:
            chosen = set(self._rng.sample(range(parts), total))
            return [int(e in chosen) for e in range(parts)]
        weights = [self._rng.expovariate(1.0) for _ in range(parts)]
        scale = max(total - parts, 0) / sum(weights)
        return [1 + int(w * scale) for w in weights]


# ----------------------------------------------------------------------------------------------------------
# msprobe-compatible JSON text (json.dumps(..., indent=1) byte for byte, NaN/Infinity as bare literals)

Json = Union[Tensor, Sharded, None, bool, int, float, str, list["Json"], dict[str, "Json"]]


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
    return (
        f'{{{pad}"type": "torch.Tensor",{pad}"dtype": "{t.dtype}",{pad}"shape": {shape},'
        f'{pad}"Max": {number_text(t.max)},{pad}"Min": {number_text(t.min)},'
        f'{pad}"Mean": {number_text(t.mean)},{pad}"Norm": {number_text(t.norm)},'
        f'{pad}"requires_grad": false\n{" " * depth}}}'
    )


def json_text(value: Json, depth: int, rank: int | None = None) -> str:
    """`rank`: which part of a Sharded tensor to write (None: a single-rank dump, which records the whole)."""
    if isinstance(value, Sharded):
        value = value.full if rank is None else value.parts[rank]
    if isinstance(value, Tensor):
        return tensor_text(value, depth)
    pad = "\n" + " " * (depth + 1)
    end = "\n" + " " * depth
    if isinstance(value, dict):
        items = ",".join(f"{pad}{orjson.dumps(k).decode()}: {json_text(v, depth + 1, rank)}" for k, v in value.items())
        return f"{{{items}{end}}}" if value else "{}"
    if isinstance(value, list):
        items = ",".join(f"{pad}{json_text(v, depth + 1, rank)}" for v in value)
        return f"[{items}{end}]" if value else "[]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return orjson.dumps(value).decode()
    return number_text(value)


def has_shards(value: Json) -> bool:
    if isinstance(value, dict):
        return any(has_shards(v) for v in value.values())
    if isinstance(value, list):
        return any(has_shards(v) for v in value)
    return isinstance(value, Sharded)


class DumpWriter:
    """Streams a statistics-level dump.json, one `data` entry at a time, in execution order; given several paths,
    one dump per TP rank (same keys; rank r writes part r of every Sharded tensor)."""

    def __init__(self, *paths: Path) -> None:
        self.count = 0
        self._files: list[TextIO] = []
        for path in paths:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._files.append(path.open("w", encoding="utf-8", buffering=1 << 20))
        for file in self._files:
            file.write(
                '{\n "task": "statistics",\n "level": "L0",\n "framework": "pytorch",\n'
                ' "dump_data_dir": null,\n "data": {'
            )

    def add(self, key: str, entry: dict[str, Json]) -> None:
        head = f'{"," if self.count else ""}\n  "{key}": '
        if len(self._files) == 1 or not has_shards(entry):
            text = head + json_text(entry, 2)
            for file in self._files:
                file.write(text)
        else:
            for rank, file in enumerate(self._files):
                file.write(head + json_text(entry, 2, rank))
        self.count += 1

    def close(self) -> None:
        for file in self._files:
            file.write("\n }\n}")
            file.close()


class TokenSum:
    """Running aggregate of one tensor slot over calls: concatenated along the token dim (the dim in which the
    shapes differ, else 0), or for a tensor that is not token-wise the same shape with Max/Min of all calls.
    Sums run in call order, so the result equals concat(all calls, exact=True) bit for bit."""

    def __init__(self, t: Tensor) -> None:
        self.first = t
        self.shape = list(t.shape)
        self.max, self.min = t.max, t.min
        self.size = numel(t.shape)
        self.weighted = None if t.mean is None else self.size * t.mean
        self.squares = None if t.norm is None else t.norm**2

    def add(self, t: Tensor) -> None:
        if self.first.tokenwise:
            differ = [d for d, (a, b) in enumerate(zip(self.shape, t.shape)) if a != b]
            if len(differ) > 1 or len(self.shape) != len(t.shape):
                raise ValueError(f"cannot aggregate shapes {self.shape} and {list(t.shape)} over tokens")
            self.shape[differ[0] if differ else 0] += t.shape[differ[0] if differ else 0]
        self.max, self.min = max(self.max, t.max), min(self.min, t.min)
        n = numel(t.shape)
        self.size += n
        if self.weighted is not None and t.mean is not None:
            self.weighted += n * t.mean
        if self.squares is not None and t.norm is not None:
            self.squares += t.norm**2

    def tensor(self) -> Tensor:
        if not self.first.tokenwise:
            return replace(self.first, max=self.max, min=self.min)
        mean = None if self.weighted is None else self.weighted / self.size
        norm = None if self.squares is None else math.sqrt(self.squares)
        return Tensor(self.first.dtype, tuple(self.shape), self.max, self.min, mean, norm)


Accumulated = Union[Tensor, TokenSum, None, bool, int, float, str, list["Accumulated"], dict[str, "Accumulated"]]


def accumulate(total: Accumulated, value: Json) -> Accumulated:
    """Fold one more call's entry (or node) into the running aggregate of the earlier calls."""
    if isinstance(total, dict) and isinstance(value, dict):
        return {k: accumulate(total[k], v) for k, v in value.items()}
    if isinstance(total, list) and isinstance(value, list):
        return [accumulate(a, v) for a, v in zip(total, value)]
    if total is value or not isinstance(value, Tensor):  # the same parameter in every call, a null, a flag
        return total
    running = total if isinstance(total, TokenSum) else TokenSum(total)  # type: ignore[arg-type]
    running.add(value)
    return running


def finished(total: Accumulated) -> Json:
    if isinstance(total, TokenSum):
        return total.tensor()
    if isinstance(total, dict):
        return {k: finished(v) for k, v in total.items()}
    if isinstance(total, list):
        return [finished(v) for v in total]
    return total


class CallAggregator:
    """A train dump of ONE forward over the tokens of several calls: each key's entries are aggregated over the
    calls (token-wise tensors concatenated, parameters kept) and written on close, in first-call order."""

    def __init__(self, dump: DumpWriter) -> None:
        self._dump = dump
        self._entries: dict[str, Accumulated] = {}

    @property
    def count(self) -> int:
        return len(self._entries)

    def add(self, key: str, entry: dict[str, Json]) -> None:
        total = self._entries.get(key)
        self._entries[key] = entry if total is None else accumulate(total, entry)  # type: ignore[assignment]

    def close(self) -> None:
        try:
            for key, total in self._entries.items():
                self._dump.add(key, finished(total))  # type: ignore[arg-type]
        finally:
            self._dump.close()


def entry(
    inputs: list[Json],
    outputs: list[Json],
    params: dict[str, Json] | None = None,
    kwargs: dict[str, Json] | None = None,
) -> dict[str, Json]:
    """A module forward entry; modules without own parameters have no `parameters` field."""
    fields: dict[str, Json] = {"input_args": inputs, "input_kwargs": kwargs or {}, "output": outputs}
    if params is not None:
        fields["parameters"] = params
    return fields


# ----------------------------------------------------------------------------------------------------------
# The two models


class Synth:
    """Walks both models call by call, layer by layer, writing each side's entries in its own dump order."""

    def __init__(self, cfg: Config, train: DumpWriter | CallAggregator, rollout: DumpWriter) -> None:
        self.cfg = cfg
        self.gen = StatGen(cfg.seed, cfg.float_dtype)
        self.train_dump = train
        self.rollout_dump = rollout
        self.mapping: dict[str, str | list[str]] = {}
        self._params: dict[str, Node] = {}
        self._rollout_calls: Counter[str] = Counter()  # per module: a decode step calls only the routed experts
        # Per forward call, set by run():
        self._call = 0
        self._tokens = 0
        self._diverged = False
        self._positions = Tensor(I64, (0,), 0, 0, None, None)
        self._rope = self._positions

    # --- keys and entries ---

    def train(self, path: str, cls: str, fields: dict[str, Json]) -> str:
        """A train entry: its call's `.forward.<n>`, or with decode steps the one train forward's `.forward.0`."""
        key = f"{TRAIN_PREFIX}{path}.{cls}.forward.{0 if self.cfg.decode_steps else self._call}"
        self.train_dump.add(key, fields)
        return key

    def rollout(self, path: str, cls: str, fields: dict[str, Json]) -> str:
        module = f"{ROLLOUT_PREFIX}{path}.{cls}"
        key = f"{module}.forward.{self._rollout_calls[module]}"
        self._rollout_calls[module] += 1
        self.rollout_dump.add(key, fields)
        return key

    def map(self, train_key: str, rollout_keys: str | list[str]) -> None:
        """A mapping entry; with decode steps the values name all calls of the rollout module (`.forward.*`)."""
        if self.cfg.decode_steps:
            rollout_keys = (
                [k.rsplit(".", 1)[0] + ".*" for k in rollout_keys]
                if isinstance(rollout_keys, list)
                else rollout_keys.rsplit(".", 1)[0] + ".*"
            )
        self.mapping[train_key] = rollout_keys

    def pair(self, train: tuple[str, str, dict[str, Json]], rollout: tuple[str, str, dict[str, Json]]) -> None:
        self.map(self.train(*train), self.rollout(*rollout))

    # --- tensors ---

    def tensor(self, make: Callable[[tuple[int, ...]], Tensor], shape: tuple[int, ...], split: int | None) -> Node:
        """A tensor of logical `shape`; with TP and a `split` dim, every rank's shard is drawn and the whole is
        their exact aggregate (Sharded), else one tensor (replicated on all ranks)."""
        if split is None or self.cfg.tp == 1:
            return make(shape)
        part = shard_shape(shape, split, self.cfg.tp)
        return Sharded.of([make(part) for _ in range(self.cfg.tp)], split, shape)

    def param(self, name: str, make: Callable[[], Node]) -> Node:
        """Parameters keep their statistics across calls."""
        if name not in self._params:
            self._params[name] = make()
        return self._params[name]

    def weight(self, name: str, shape: tuple[int, ...], dtype: str | None = None, split: int | None = None) -> Node:
        return self.param(name, lambda: self.tensor(lambda s: self.gen.weight(s, dtype), shape, split))

    def norm_weight(self, name: str) -> Node:
        return self.param(name, lambda: self.gen.norm_weight((self.cfg.hidden,)))

    def act(
        self,
        rollout_shape: tuple[int, ...],
        train_shape: tuple[int, ...] | None = None,
        dtype: str | None = None,
        diverged: bool | None = None,
        split: int | None = None,
    ) -> Pair:
        """A fresh activation; the train side diverges after a fault unless `diverged` says otherwise.
        `split`: the dim the train side shards over TP ranks (None: replicated)."""
        rollout = self.tensor(lambda s: self.gen.activation(s, dtype), rollout_shape, split)
        train = reshaped(rollout, train_shape or rollout_shape)
        if self._diverged if diverged is None else diverged:
            train = self.gen.diverged(train)
        return Pair(train, rollout)

    def hidden(self, width: int) -> Pair:
        """Token-major activation: Megatron records [s, b, h], vLLM [num_tokens, h]."""
        return self.act((self._tokens, width), (self._tokens, 1, width))

    # --- model walk ---

    def run(self) -> None:
        for call in range(self.cfg.rollout_calls):
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
        w_emb = self.weight("embed", (cfg.vocab, cfg.hidden), split=0)
        self.pair(
            ("embedding.word_embeddings", "VocabParallelEmbedding", entry([ids_train], [emb.train], {"weight": w_emb})),
            ("model.embed_tokens", "VocabParallelEmbedding", entry([ids_rollout], [emb.rollout], {"weight": w_emb})),
        )
        h = Pair(replace(emb.train, shape=(tokens, 1, cfg.hidden)), emb.rollout)
        self.train(
            "embedding",
            "LanguageModelEmbedding",
            entry([ids_train, positions], [h.train], kwargs={"tokentype_ids": None}),
        )
        block_input = h
        for layer in range(cfg.layers):
            h = self.layer(layer, h)
        final = self.hidden(cfg.hidden)
        w_final = self.norm_weight("final_norm")
        self.pair(
            ("decoder.final_layernorm", "RMSNorm", entry([h.train], [final.train], {"weight": w_final})),
            ("model.norm", "RMSNorm", entry([h.rollout], [final.rollout], {"weight": w_final})),
        )
        self.train(
            "decoder",
            "TransformerBlock",
            entry([block_input.train], [final.train], kwargs={"attention_mask": None, "rotary_pos_emb": self._rope}),
        )
        self.rollout("model", "Qwen2MoeModel", entry([ids_rollout, positions], [final.rollout]))
        logits = self.tensor(self.gen.activation, (tokens, 1, cfg.vocab), -1)
        w_head = self.weight("lm_head", (cfg.vocab, cfg.hidden), split=0)
        self.train("output_layer", "ColumnParallelLinear", entry([final.train], [logits, None], {"weight": w_head}))

    def layer(self, i: int, h: Pair) -> Pair:
        cfg = self.cfg
        t_path, r_path = f"decoder.layers.{i}", f"model.layers.{i}"

        ln1 = self.hidden(cfg.hidden)
        w_ln1 = self.norm_weight(f"{i}.ln1")
        self.pair(
            (f"{t_path}.input_layernorm", "RMSNorm", entry([h.train], [ln1.train], {"weight": w_ln1})),
            (f"{r_path}.input_layernorm", "RMSNorm", entry([h.rollout], [ln1.rollout], {"weight": w_ln1})),
        )
        self.attention(i, ln1)

        residual = self.hidden(cfg.hidden)
        ln2 = self.hidden(cfg.hidden)
        w_ln2 = self.norm_weight(f"{i}.ln2")
        self.pair(
            (f"{t_path}.pre_mlp_layernorm", "RMSNorm", entry([residual.train], [ln2.train], {"weight": w_ln2})),
            (
                f"{r_path}.post_attention_layernorm",
                "RMSNorm",
                entry([residual.rollout], [ln2.rollout], {"weight": w_ln2}),
            ),
        )
        self.moe(i, ln2)

        out = self.hidden(cfg.hidden)
        self.pair(
            (
                t_path,
                "TransformerLayer",
                entry(
                    [h.train],
                    [out.train, None],
                    kwargs={"attention_mask": None, "rotary_pos_emb": self._rope, "inference_params": None},
                ),
            ),
            (
                r_path,
                "Qwen2MoeDecoderLayer",
                entry(
                    [h.rollout],
                    [out.rollout, residual.rollout],
                    kwargs={"positions": self._positions, "residual": None},
                ),
            ),
        )
        return out

    def attention(self, i: int, ln1: Pair) -> None:
        cfg = self.cfg
        t_path, r_path = f"decoder.layers.{i}.self_attention", f"model.layers.{i}.self_attn"
        tokens = self._tokens
        widths = {"q": cfg.heads * cfg.head_dim, "k": cfg.kv_heads * cfg.head_dim, "v": cfg.kv_heads * cfg.head_dim}
        fused_width = sum(widths.values())
        outs = {name: self.tensor(self.gen.activation, (tokens, w), -1) for name, w in widths.items()}
        weights = {name: self.weight(f"{i}.{name}", (w, cfg.hidden), split=0) for name, w in widths.items()}
        biases = {name: self.weight(f"{i}.{name}.bias", (w,), split=0) for name, w in widths.items()}
        qkv = fuse(list(outs.values()), (tokens, fused_width))
        qkv_train = reshaped(qkv, (tokens, 1, fused_width))
        if self._diverged:
            qkv_train = self.gen.diverged(qkv_train)
        fused_params: dict[str, Json] = {
            "weight": self.param(f"{i}.qkv", lambda: fuse(list(weights.values()), (fused_width, cfg.hidden))),
            "bias": self.param(f"{i}.qkv.bias", lambda: fuse(list(biases.values()), (fused_width,))),
        }
        t_qkv = self.train(
            f"{t_path}.linear_qkv", "ColumnParallelLinear", entry([ln1.train], [qkv_train, None], fused_params)
        )
        if cfg.qkv == "fused":
            self.map(
                t_qkv,
                self.rollout(
                    f"{r_path}.qkv_proj", "QKVParallelLinear", entry([ln1.rollout], [qkv, None], fused_params)
                ),
            )
        else:
            self.map(
                t_qkv,
                [
                    self.rollout(
                        f"{r_path}.{name}_proj",
                        "Linear",
                        entry([ln1.rollout], [outs[name]], {"weight": weights[name], "bias": biases[name]}),
                    )
                    for name in widths
                ],
            )

        context = self.act((tokens, widths["q"]), (tokens, 1, widths["q"]), split=-1)
        heads = {"q": cfg.heads, "k": cfg.kv_heads, "v": cfg.kv_heads}
        core_inputs: list[Json] = [
            self.tensor(self.gen.activation, (tokens, 1, n, cfg.head_dim), -2) for n in heads.values()
        ]
        self.train(
            f"{t_path}.core_attention",
            "DotProductAttention",
            entry(core_inputs, [context.train], kwargs={"attention_mask": None, "attn_mask_type": None}),
        )

        fault_here = cfg.fault == "param" and i == cfg.fault_layer
        w_proj = self.weight(f"{i}.proj", (cfg.hidden, widths["q"]), split=-1)
        w_proj_rollout = self.param(f"{i}.proj.stale", lambda: self.gen.diverged(w_proj)) if fault_here else w_proj
        self._diverged = self._diverged or fault_here
        out = self.hidden(cfg.hidden)
        self.pair(
            (
                f"{t_path}.linear_proj",
                "RowParallelLinear",
                entry([context.train], [out.train, None], {"weight": w_proj}),
            ),
            (
                f"{r_path}.o_proj",
                "RowParallelLinear",
                entry([context.rollout], [out.rollout, None], {"weight": w_proj_rollout}),
            ),
        )
        self.pair(
            (
                t_path,
                "SelfAttention",
                entry(
                    [ln1.train],
                    [out.train, None],
                    kwargs={"attention_mask": None, "rotary_pos_emb": self._rope, "packed_seq_params": None},
                ),
            ),
            (r_path, "Qwen2MoeAttention", entry([ln1.rollout], [out.rollout], kwargs={"positions": self._positions})),
        )

    def moe(self, i: int, ln2: Pair) -> None:
        cfg = self.cfg
        t_path, r_path = f"decoder.layers.{i}.mlp", f"model.layers.{i}.mlp"
        tokens = self._tokens
        logits = self.act((tokens, cfg.experts), (tokens, 1, cfg.experts), F32)
        indices = self.gen.integers((tokens, cfg.topk), cfg.experts)
        w_router = self.weight(f"{i}.router", (cfg.experts, cfg.hidden), F32)
        self.pair(
            (f"{t_path}.router", "TopKRouter", entry([ln2.train], [logits.train, indices], {"weight": w_router})),
            (f"{r_path}.gate", "ReplicatedLinear", entry([ln2.rollout], [logits.rollout, None], {"weight": w_router})),
        )

        fault_here = cfg.fault == "act" and i == cfg.fault_layer
        overflow = cfg.nan and i == cfg.layers - 1 and self._call == cfg.rollout_calls - 1
        routed = self.gen.split_tokens(tokens * cfg.topk, cfg.experts)
        called = [(e, n) for e, n in enumerate(routed) if n]  # an expert without tokens is not called
        for rank, (e, n) in enumerate(called):
            self.expert(i, e, n, diverge_after_fc1=fault_here, overflow=overflow and rank < 3)
        self._diverged = self._diverged or fault_here

        permuted, combined = (self.gen.activation((sum(routed), cfg.hidden)) for _ in range(2))
        tokens_per_expert = replace(self.gen.integers((cfg.experts,), tokens), tokenwise=False)
        self.train(f"{t_path}.experts", "SequentialMLP", entry([permuted, tokens_per_expert], [combined, None]))
        out = self.hidden(cfg.hidden)
        self.pair(
            (t_path, "MoELayer", entry([ln2.train], [out.train, None])),
            (r_path, "Qwen2MoeSparseMoeBlock", entry([ln2.rollout], [out.rollout])),
        )

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

        t_fc1 = self.train(
            f"{t_path}.linear_fc1", "ColumnParallelLinear", entry([x.train], [gate_up.train, None], {"weight": w_fc1})
        )
        self.map(
            t_fc1,
            self.rollout(
                f"{r_path}.gate_up_proj",
                "MergedColumnParallelLinear",
                entry([x.rollout], [gate_up.rollout, None], {"weight": w_fc1}),
            ),
        )
        self.rollout(f"{r_path}.act_fn", "SiluAndMul", entry([gate_up.rollout], [activated.rollout]))
        self.pair(
            (
                f"{t_path}.linear_fc2",
                "RowParallelLinear",
                entry([activated.train], [out.train, None], {"weight": w_fc2}),
            ),
            (
                f"{r_path}.down_proj",
                "RowParallelLinear",
                entry([activated.rollout], [out.rollout, None], {"weight": w_fc2}),
            ),
        )
        self.pair(
            (t_path, "MLP", entry([x.train], [out.train, None])),
            (r_path, "Qwen2MoeMLP", entry([x.rollout], [out.rollout])),
        )


# ----------------------------------------------------------------------------------------------------------


def generate(cfg: Config, out_dir: Path) -> dict[str, int]:
    """Write both dumps (the train one per TP rank) and the mapping-key file; return key counts."""
    paths = dataset_paths(out_dir, cfg.tp)
    train_dumps = paths.dumps()[:-1]
    for stale in sorted((out_dir / "train").glob("step*/rank*/dump.json")):  # e.g. more ranks from an earlier run
        if stale not in train_dumps:
            stale.unlink()
    train_ranks = DumpWriter(*train_dumps)
    train = CallAggregator(train_ranks) if cfg.decode_steps else train_ranks
    rollout = DumpWriter(paths.rollout_dump)
    synth = Synth(cfg, train, rollout)
    try:
        synth.run()
    finally:
        train.close()
        rollout.close()
    paths.mapping_key.write_bytes(orjson.dumps(synth.mapping, option=orjson.OPT_INDENT_2))
    return {
        "train keys": train.count,
        "rollout keys": rollout.count,
        "mapping entries": len(synth.mapping),
        "1:N entries": sum(isinstance(v, list) for v in synth.mapping.values()),
    }


def parse_args(argv: list[str]) -> tuple[Config, Path, bool]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    defaults = Config()
    parser.add_argument("--out-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--layers", type=int, default=defaults.layers)
    parser.add_argument("--experts", type=int, default=defaults.experts)
    parser.add_argument("--calls", type=int, default=defaults.calls, help="forward calls (.forward.0 .. .forward.N-1)")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--fault", choices=("act", "param", "none"), default=defaults.fault)
    parser.add_argument(
        "--qkv",
        choices=("split", "fused"),
        default=defaults.qkv,
        help="rollout attention projections: q/k/v split (1:N mapping) or fused qkv_proj (1:1)",
    )
    parser.add_argument("--nan", action="store_true", help="write NaN/Infinity literals into the rollout dump")
    parser.add_argument(
        "--tp",
        type=int,
        default=defaults.tp,
        help="train tensor-parallel ranks, one dump each (query groups become max(4, tp))",
    )
    parser.add_argument(
        "--decode-steps",
        type=int,
        default=defaults.decode_steps,
        help="rollout decode calls after the prefill (replaces --calls), against one train forward",
    )
    parser.add_argument(
        "--dtype",
        choices=("bfloat16", "float32"),
        default=defaults.float_dtype.rpartition(".")[2],
        help="activations' and weights' dtype: float32 statistics calibrate below the fixed tolerance (as CPU dumps "
        "do), so the analysis judges every group again; bfloat16's never do",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="read the files back and check merged ranks / aggregated calls against the other side",
    )
    args = parser.parse_args(argv)
    try:
        cfg = Config(
            layers=args.layers,
            experts=args.experts,
            calls=args.calls,
            seed=args.seed,
            fault=args.fault,
            nan=args.nan,
            qkv=args.qkv,
            tp=args.tp,
            decode_steps=args.decode_steps,
            float_dtype=f"torch.{args.dtype}",
            kv_heads=max(defaults.kv_heads, args.tp),
        )
    except ValueError as error:
        parser.error(str(error))
    return cfg, args.out_dir, args.check


def main(argv: list[str]) -> int:
    cfg, out_dir, check = parse_args(argv)
    start = time.perf_counter()
    counts = generate(cfg, out_dir)
    elapsed = time.perf_counter() - start
    paths = dataset_paths(out_dir, cfg.tp)
    for path in paths.all():
        print(f"{path}: {mib(path.stat().st_size)}")
    if cfg.tp > 1:
        print(f"train, {cfg.tp} ranks: {mib(sum(path.stat().st_size for path in paths.dumps()[:-1]))}")
    print(", ".join(f"{name}: {n}" for name, n in counts.items()))
    fault = "none" if cfg.fault == "none" else f"{cfg.fault} at layer {cfg.fault_layer}"
    calls = (
        f"prefill + {cfg.decode_steps} decode calls vs one train forward" if cfg.decode_steps else f"{cfg.calls} calls"
    )
    print(
        f"fault: {fault}; NaN/Infinity literals: {'yes' if cfg.nan else 'no'}; train TP ranks: {cfg.tp}; {calls}; "
        f"generated in {elapsed:.1f} s"
    )
    if check:
        from check_synthetic import check_dataset  # reads everything back: only on request

        return check_dataset(paths, expect_fault_layer=None if cfg.fault == "none" else cfg.fault_layer)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
