"""Cold `rca-lsp analyze` of a synthetic tensor-mode dump pair against the floor of loading every tensor file once.

Writes (once per size, under benchmarks/data/tensor_<hidden>x<layers>x<seq>/) a Megatron-style train dump and an
HF-style rollout dump in msprobe's tensor-mode layout - dump.json with the statistics of every tensor and its
`data_name`, the `.pt` files in dump_tensor_data/ - with the same values on both sides in each side's layout
(train `[s, 1, h]` activations and fused `linear_qkv` per query group / `linear_fc1 = cat(gate, up)`, rollout
`[1, s, h]` and split q/k/v, gate/up), and a mapping. Then times, each in a fresh process:

- `rca-lsp analyze --no-chart` (cold: interpreter, imports, statistics pass, element-wise pass, outputs);
- the floor: importing torch and `torch.load`-ing every tensor file of both sides once;

and prints both, their ratio and each one's peak RSS. Default size is small (seconds); the issue's target is a
pair of >= 2 GB per side, e.g. `--hidden 4096 --layers 8 --seq 4096` (~2.3 GB per side).

    .venv/bin/python benchmarks/bench_tensor.py [--hidden 256 --layers 4 --seq 128] [--repeat 1]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
HEADS_PER_GROUP = 2
HEAD_DIM = 64


def stats(tensor, name: str) -> dict:
    import torch

    t = tensor.to(torch.float64)
    return {
        "type": "torch.Tensor",
        "dtype": str(tensor.dtype),
        "shape": list(tensor.shape),
        "Max": float(t.max()),
        "Min": float(t.min()),
        "Mean": float(t.mean()),
        "Norm": float(torch.linalg.vector_norm(t)),
        "requires_grad": False,
        "data_name": name,
    }


class Side:
    def __init__(self, folder: Path) -> None:
        self.folder = folder / "step0" / "rank0"
        (self.folder / "dump_tensor_data").mkdir(parents=True)
        self.data: dict = {}

    def node(self, key: str, slot: str, tensor) -> dict:
        import torch

        name = f"{key}.{slot}.pt"
        torch.save(tensor.contiguous(), self.folder / "dump_tensor_data" / name)
        return stats(tensor, name)

    def module(self, key: str, inputs, output, parameters: dict) -> None:
        self.data[key] = {
            "input_args": [self.node(key, "input.0", inputs)],
            "input_kwargs": {},
            "output": [self.node(key, "output.0", output)],
            "parameters": {n: self.node(key, f"parameters.{n}", p) for n, p in parameters.items()},
        }

    def write(self) -> None:
        document = {"task": "tensor", "level": "L0", "framework": "pytorch", "dump_data_dir": None, "data": self.data}
        (self.folder / "dump.json").write_text(json.dumps(document, indent=1))


def make(out: Path, hidden: int, layers: int, seq: int) -> None:
    import torch

    g = torch.Generator().manual_seed(0)
    groups = max(1, hidden // (HEAD_DIM * HEADS_PER_GROUP))
    q_rows, kv_rows, inter = hidden, groups * HEAD_DIM, 2 * hidden
    train, rollout, mapping = Side(out / "train"), Side(out / "rollout"), {}
    x = torch.randn(seq, hidden, generator=g)

    def pair(t_path, t_cls, r_paths, r_cls, t_in, t_out, t_params, r_parts):
        t_key = f"Module.module.module.{t_path}.{t_cls}.forward.0"
        train.module(t_key, t_in.unsqueeze(1), t_out.unsqueeze(1), t_params)  # [s, 1, h]
        r_keys = []
        for r_path, (r_out, r_params) in zip(r_paths, r_parts):
            r_key = f"Module.{r_path}.{r_cls}.forward.0"
            rollout.module(r_key, t_in.unsqueeze(0), r_out.unsqueeze(0), r_params)  # [1, s, h]
            r_keys.append(r_key)
        mapping[t_key] = r_keys[0] if len(r_keys) == 1 else r_keys

    for i in range(layers):
        t, r = f"decoder.layers.{i}", f"model.layers.{i}"
        norm = 1 + 0.1 * torch.randn(hidden, generator=g)
        normed = x * norm
        pair(
            f"{t}.input_layernorm",
            "RMSNorm",
            [f"{r}.input_layernorm"],
            "Qwen2RMSNorm",
            x,
            normed,
            {"weight": norm},
            [(normed, {"weight": norm})],
        )
        q, k, v = (torch.randn(rows, hidden, generator=g) / hidden**0.5 for rows in (q_rows, kv_rows, kv_rows))
        per_group = torch.cat(
            [torch.cat([q.chunk(groups)[j], k.chunk(groups)[j], v.chunk(groups)[j]]) for j in range(groups)]
        )
        outs = [normed @ w.T for w in (q, k, v)]
        fused_out = normed @ per_group.T
        pair(
            f"{t}.self_attention.linear_qkv",
            "ColumnParallelLinear",
            [f"{r}.self_attn.{n}_proj" for n in "qkv"],
            "Linear",
            normed,
            fused_out,
            {"weight": per_group},
            [(o, {"weight": w}) for o, w in zip(outs, (q, k, v))],
        )
        o = torch.randn(hidden, q_rows, generator=g) / q_rows**0.5
        attn = outs[0]
        pair(
            f"{t}.self_attention.linear_proj",
            "RowParallelLinear",
            [f"{r}.self_attn.o_proj"],
            "Linear",
            attn,
            attn @ o.T,
            {"weight": o},
            [(attn @ o.T, {"weight": o})],
        )
        gate, up = (torch.randn(inter, hidden, generator=g) / hidden**0.5 for _ in range(2))
        fc1 = torch.cat([gate, up])
        pair(
            f"{t}.mlp.linear_fc1",
            "ColumnParallelLinear",
            [f"{r}.mlp.gate_proj", f"{r}.mlp.up_proj"],
            "Linear",
            normed,
            normed @ fc1.T,
            {"weight": fc1},
            [(normed @ gate.T, {"weight": gate}), (normed @ up.T, {"weight": up})],
        )
        down = torch.randn(hidden, inter, generator=g) / inter**0.5
        h = torch.nn.functional.silu(normed @ gate.T) * (normed @ up.T)
        x = x + h @ down.T
        pair(
            f"{t}.mlp.linear_fc2",
            "RowParallelLinear",
            [f"{r}.mlp.down_proj"],
            "Linear",
            h,
            h @ down.T,
            {"weight": down},
            [(h @ down.T, {"weight": down})],
        )
    train.write()
    rollout.write()
    (out / "mapping_key.json").write_text(json.dumps(mapping, indent=1))


LOAD_ALL = """
import sys, time, torch
from pathlib import Path
start = time.perf_counter()
for path in sorted(Path(sys.argv[1]).rglob("*.pt")):
    torch.load(path, map_location="cpu", weights_only=True)
print(time.perf_counter() - start)
"""


MEASURED = """
import resource, subprocess, sys, time
start = time.perf_counter()
subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL)
print(time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)
"""


def timed(command: list[str]) -> tuple[float, int]:
    """Wall seconds and peak RSS (MiB, its process tree's largest) of a fresh process."""
    done = subprocess.run([sys.executable, "-c", MEASURED, *command], check=True, capture_output=True, text=True)
    wall, peak = done.stdout.split()
    return float(wall), int(peak)


def statistics_twin(data: Path) -> Path:
    """The same dumps in statistics mode (no data_name, task statistics): what the run costs without tensors."""
    twin = data / "statistics"
    for side in ("train", "rollout"):
        target = twin / side / "step0" / "rank0" / "dump.json"
        if target.is_file():
            continue
        document = json.loads((data / side / "step0" / "rank0" / "dump.json").read_text())
        document["task"] = "statistics"
        for entry in document["data"].values():
            for slot in ("input_args", "output"):
                for node in entry[slot]:
                    node.pop("data_name", None)
            for node in entry["parameters"].values():
                node.pop("data_name", None)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(document, indent=1))
    return twin


def analyze_command(data: Path, mapping: Path, out: str) -> list[str]:
    command = [sys.executable, "-m", "rca_lsp", "analyze", "--no-chart", "--out-dir", out]
    return command + ["--train", str(data / "train"), "--rollout", str(data / "rollout"), "--mapping-key", str(mapping)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    data = HERE / "data" / f"tensor_{args.hidden}x{args.layers}x{args.seq}"
    if not (data / "mapping_key.json").is_file():
        shutil.rmtree(data, ignore_errors=True)
        make(data, args.hidden, args.layers, args.seq)
    sizes = [p.stat().st_size for p in data.rglob("*.pt")]
    largest = max(sizes) / 2**20
    print(f"data: {data} ({len(sizes)} tensor files, {sum(sizes) / 2**20:.1f} MiB over both sides)")
    twin = statistics_twin(data)
    for _ in range(args.repeat):
        floor, floor_rss = timed([sys.executable, "-c", LOAD_ALL, str(data)])
        with tempfile.TemporaryDirectory() as out:
            cold, cold_rss = timed(analyze_command(data, data / "mapping_key.json", out))
        with tempfile.TemporaryDirectory() as out:
            plain, plain_rss = timed(analyze_command(twin, data / "mapping_key.json", out))
        print(
            f"cold analyze {cold:.2f} s, peak RSS {cold_rss} MiB; torch.load of every file once {floor:.2f} s "
            f"(peak RSS {floor_rss} MiB): ratio {cold / floor:.2f}x\n"
            f"statistics mode {plain:.2f} s, peak RSS {plain_rss} MiB; largest tensor file {largest:.0f} MiB: "
            f"RSS budget (statistics + 4x the largest pair) {plain_rss + 8 * largest:.0f} MiB"
        )
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
