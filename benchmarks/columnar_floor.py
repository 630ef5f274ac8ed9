"""What loading a dump into columns could cost at best with the granted means (msgspec, numpy), next to the parse
floor and to today's load: the figure that bounds issue 22's rows from below, whatever the analysis does after.

The columnar load here does the least any analysis needs and nothing more: msgspec decodes the JSON into Structs
without TensorStats' normalisation (the element-wise pass's lean `TensorNode`s: no `__post_init__` with its dtype
and shape tables, numel and float checks), one walk over the entries picks each forward module's output, first
input and parameters (no ModuleEntry, no residual streams, no kwargs), and the four statistics of all of them are
gathered into one float64 array. Today's load is `load_dump_file` then `Dump.columns`. Each measurement in this
process, alternating, with the cyclic GC off; medians of --repeat.

    .venv/bin/python benchmarks/columnar_floor.py benchmarks/data/decode/rollout/step0/rank0/dump.json
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from operator import attrgetter
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from rca_lsp.dumps.dump import load_dump_file
from rca_lsp.dumps.tensorfile import NodeEntry, TensorNode, entry_nodes
from rca_lsp.model.keys import split_module_key

_NUMBERS = attrgetter("max", "min", "mean", "norm")
_ROW = np.dtype([(name, np.float64) for name in ("max", "min", "mean", "norm")])


def _first_tensor(node: Any) -> TensorNode | None:
    if type(node) is TensorNode:
        return node
    if type(node) is list:
        for item in node:
            if type(item) is TensorNode and item.dtype is not None:
                return item
    return None


def columnar_load(path: Path) -> tuple[float, float, float]:
    """Seconds to (read and decode, walk the entries, gather the statistics)."""
    start = time.perf_counter()
    data = entry_nodes(str(path))
    decoded = time.perf_counter()
    picked: list[TensorNode | None] = []
    parameters: list[Any] = []
    for key, raw in data.items():
        parsed = split_module_key(key)
        if parsed is None or parsed.direction != "forward" or type(raw) is not NodeEntry:
            continue
        picked.append(_first_tensor(raw.output))
        picked.append(_first_tensor(raw.input_args))
        if type(raw.parameters) is dict:
            parameters.extend(raw.parameters.values())
    walked = time.perf_counter()
    tensors = [stats for stats in picked + parameters if type(stats) is TensorNode]
    try:
        np.fromiter(map(_NUMBERS, tensors), _ROW, len(tensors))
    except TypeError:  # a statistic msprobe wrote as null
        np.array(list(map(_NUMBERS, tensors)), dtype=np.float64)
    return decoded - start, walked - decoded, time.perf_counter() - walked


def timed(work: Any) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dumps", nargs="+", type=Path, help="dump.json files")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each; medians are reported")
    args = parser.parse_args()
    gc.disable()
    for path in args.dumps:
        floors, columnar, today = [], [], []
        for _ in range(max(args.repeat, 1)):
            floors.append(timed(lambda: orjson.loads(path.read_bytes())))
            columnar.append(columnar_load(path))
            today.append(timed(lambda: load_dump_file(path).columns))
        floor = statistics.median(floors)
        decode, walk, numbers = (statistics.median(parts) for parts in zip(*columnar))
        best, now = decode + walk + numbers, statistics.median(today)
        print(f"{path} ({path.stat().st_size / 2**20:.1f} MiB)")
        print(f"  parse floor (orjson)        {floor:6.3f} s")
        print(
            f"  columnar load               {best:6.3f} s = {best / floor:.2f}x the floor "
            f"(decode {decode:.3f}, walk {walk:.3f}, statistics {numbers:.3f})"
        )
        print(f"  today's load and columns    {now:6.3f} s = {now / floor:.2f}x the floor")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
