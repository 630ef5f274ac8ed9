"""Small msprobe-format dumps built from real value lists, for tests of the analysis logic."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Sequence

TRAIN = "Module.module.module.decoder.layers"
ROLLOUT = "Module.model.layers"


def tensor(values: Sequence[float], dtype: str = "torch.float32", shape: Sequence[int] | None = None) -> dict[str, Any]:
    """A tensor node whose statistics are computed from the values, as msprobe does."""
    return {
        "type": "torch.Tensor",
        "dtype": dtype,
        "shape": list(shape or [len(values)]),
        "Max": max(values),
        "Min": min(values),
        "Mean": sum(values) / len(values),
        "Norm": math.sqrt(sum(v * v for v in values)),
        "requires_grad": False,
    }


def entry(
    inp: Sequence[float] | None,
    out: Sequence[float] | None,
    weight: Sequence[float] | None = None,
    dtype: str = "torch.float32",
) -> dict[str, Any]:
    node: dict[str, Any] = {
        "input_args": [tensor(inp, dtype)] if inp is not None else [],
        "input_kwargs": {},
        "output": [tensor(out, dtype), None] if out is not None else [],
    }
    node["parameters"] = {"weight": tensor(weight, dtype)} if weight is not None else {}
    return node


def write_dump(path: Path, data: dict[str, Any], literals: bool = False) -> Path:
    """Write like msprobe (Python json, which emits NaN/Infinity literals when values are non-finite)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {"task": "statistics", "level": "L0", "framework": "pytorch", "dump_data_dir": None, "data": data}
    path.write_text(json.dumps(document, indent=1, allow_nan=True))
    return path


def write_mapping(path: Path, mapping: dict[str, Any]) -> Path:
    path.write_text(json.dumps(mapping, indent=2))
    return path


def mlp_layer(
    prefix: str,
    layer: int,
    names: dict[str, str],
    x: list[float],
    gate: list[float],
    up: list[float],
    act: list[float],
    down_out: list[float],
    call: int = 0,
    act_module: bool = False,
    fused_fc1: bool = True,
) -> dict[str, Any]:
    """One MLP block: fc1 (fused or split gate/up), optional explicit activation module, fc2, the container."""
    data: dict[str, Any] = {}
    base = f"{prefix}.{layer}.mlp"
    if fused_fc1:
        data[f"{base}.{names['fc1']}.ColumnParallelLinear.forward.{call}"] = entry(
            x, gate + up, [0.5, -0.25, 0.125, 1.0]
        )
    else:
        data[f"{base}.gate_proj.Linear.forward.{call}"] = entry(x, gate, [0.5, -0.25])
        data[f"{base}.up_proj.Linear.forward.{call}"] = entry(x, up, [0.125, 1.0])
    if act_module:
        data[f"{base}.act_fn.SiLUActivation.forward.{call}"] = entry(
            gate, [a / u if u else 0.0 for a, u in zip(act, up)]
        )
    data[f"{base}.{names['fc2']}.Linear.forward.{call}"] = entry(act, down_out, [0.3, 0.7])
    data[f"{base}.MLP.forward.{call}"] = entry(x, down_out)
    return data
