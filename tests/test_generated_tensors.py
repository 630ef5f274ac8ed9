"""Any small tensor-mode (or md5-mode) dump pair is analysed and its every output written without an exception:
the tensor files hold the other side's tensor, a reordering of it (flipped, transposed, rolled), a scaled copy,
another shape or dtype, non-finite or no elements, an unreadable file, a pickled non-tensor, or none at all."""

from __future__ import annotations

import json
import math
import tempfile
import zlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_generated_runs import analyse_and_write, write_documents

torch = pytest.importorskip("torch")

SHAPES = [(4, 8), (1, 4, 8), (8,), (0, 8), (2, 4)]
MODULES = ["model.layers.0.mlp.up_proj", "model.layers.0.mlp.down_proj", "model.norm"]


def _summary(tensor: Any) -> dict[str, Any]:
    """The node msprobe writes for a tensor: its statistics (null where it has none)."""
    node: dict[str, Any] = {"type": "torch.Tensor", "dtype": str(tensor.dtype), "shape": list(tensor.shape)}
    values = tensor.double() if tensor.numel() else None
    node.update(
        {
            "Max": values.max().item() if values is not None else None,
            "Min": values.min().item() if values is not None else None,
            "Mean": values.mean().item() if values is not None and tensor.is_floating_point() else None,
            "Norm": values.norm().item() if values is not None and tensor.is_floating_point() else None,
            "requires_grad": False,
        }
    )
    return node


@st.composite
def base_tensor(draw: st.DrawFn) -> Any:
    shape = draw(st.sampled_from(SHAPES))
    generator = torch.Generator().manual_seed(draw(st.integers(0, 1000)))
    kind = draw(st.sampled_from(["float32", "bfloat16", "int64", "bool"]))
    if kind in ("int64", "bool"):
        tensor = torch.randint(0, 2 if kind == "bool" else 50, shape, generator=generator)
        return tensor.bool() if kind == "bool" else tensor
    tensor = torch.randn(shape, generator=generator).to(getattr(torch, kind))
    if tensor.numel() and draw(st.integers(0, 5)) == 0:
        tensor.view(-1)[0] = draw(st.sampled_from([math.nan, math.inf, -math.inf]))
    return tensor


@st.composite
def counterpart(draw: st.DrawFn, tensor: Any) -> Any:
    """The other side's tensor: the same, reordered, scaled, or of another shape or dtype."""
    kind = draw(st.integers(0, 6))
    if kind == 0 or tensor.dim() == 0:
        return tensor.clone()
    if kind == 1:
        return torch.flip(tensor, dims=[tensor.dim() - 1])
    if kind == 2 and tensor.dim() >= 2:
        return tensor.transpose(-1, -2).contiguous()
    if kind == 3:
        return torch.roll(tensor, 1, dims=0)
    if kind == 4 and tensor.is_floating_point():
        return tensor * 1.5
    if kind == 5:
        return draw(base_tensor())
    return tensor.float() if not tensor.is_floating_point() else tensor.to(torch.float16)


@st.composite
def tensor_run(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any], str]:
    """Per side, each module's tensors (slot -> tensor, or a marker for a broken file), and the mode."""
    mode = draw(st.sampled_from(["tensor", "md5"]))
    train: dict[str, Any] = {}
    rollout: dict[str, Any] = {}
    for path in draw(st.lists(st.sampled_from(MODULES), min_size=1, max_size=3, unique=True)):
        key = f"Module.{path}.Linear.forward.0"
        train[key], rollout[key] = {}, {}
        for slot in ("input.0", "output.0", "parameters.weight"):
            tensor = draw(base_tensor())
            train[key][slot] = tensor
            other = draw(st.one_of(counterpart(tensor), st.sampled_from(["missing", "garbage", "pickled"])))
            rollout[key][slot] = other
    return train, rollout, mode


def _write_side(folder: Path, modules: dict[str, Any], mode: str) -> None:
    rank = folder / "step0" / "rank0"
    files = rank / "dump_tensor_data"
    files.mkdir(parents=True)
    data: dict[str, Any] = {}
    for key, slots in modules.items():
        entry: dict[str, Any] = {"input_args": [], "input_kwargs": {}, "output": [], "parameters": {}}
        for slot, tensor in slots.items():
            name = f"{key}.{slot}.pt"
            if isinstance(tensor, str):  # a broken file: its node is the statistics of a plain tensor
                node = _summary(torch.zeros(4, 8))
                if tensor == "garbage":
                    (files / name).write_bytes(b"not a tensor file")
                elif tensor == "pickled":
                    torch.save({"weights": torch.zeros(2)}, files / name)
            else:
                node = _summary(tensor)
                torch.save(tensor, files / name)
                if mode == "md5":
                    node["md5"] = (
                        f"{zlib.crc32(tensor.contiguous().view(-1).numpy().tobytes()):08x}"
                        if tensor.dtype != torch.bfloat16
                        else "00000000"
                    )
            if mode == "tensor":
                node["data_name"] = name
            if slot == "input.0":
                entry["input_args"].append(node)
            elif slot == "output.0":
                entry["output"].append(node)
            else:
                entry["parameters"]["weight"] = node
        data[key] = entry
    document = {"task": mode, "level": "L0", "framework": "pytorch", "dump_data_dir": None, "data": data}
    (rank / "dump.json").write_text(json.dumps(document, indent=1, allow_nan=True))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(tensor_run())
def test_any_tensor_run_is_analysed_and_written(generated: tuple[dict[str, Any], dict[str, Any], str]) -> None:
    train, rollout, mode = generated
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        _write_side(folder / "train", train, mode)
        _write_side(folder / "rollout", rollout, mode)
        write_documents(folder, {}, {key: key for key in train})
        analyse_and_write(folder)
