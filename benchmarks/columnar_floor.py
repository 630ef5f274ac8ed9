"""What loading a dump into columns could cost at best with the granted means (msgspec, numpy), next to the parse
floor and to today's load: the figure that bounds issue 22's rows from below, whatever the analysis does after.

The columnar load here does the least any analysis needs and nothing more: msgspec decodes the JSON into Structs
without TensorStats' normalisation (no `__post_init__`: dtype and shape tables, numel, floats), one walk over the
entries picks each forward module's output, first input and parameters (no ModuleEntry, no residual streams, no
kwargs), and the four statistics of all of them are gathered into one float64 array. Today's load is
`load_dump_file` then `Dump.columns`. Each measurement in this process, alternating, with the cyclic GC off; medians
of --repeat.

    .venv/bin/python benchmarks/columnar_floor.py benchmarks/data/decode/rollout/step0/rank0/dump.json
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from operator import attrgetter
from pathlib import Path
from typing import Any, Union

import msgspec
import numpy as np
import orjson

from rca_lsp.dumps.dump import load_dump_file
from rca_lsp.model.keys import split_module_key


class _Stats(msgspec.Struct, gc=False):
    dtype: Any = None
    shape: Any = None
    max: Any = msgspec.field(default=None, name="Max")
    min: Any = msgspec.field(default=None, name="Min")
    mean: Any = msgspec.field(default=None, name="Mean")
    norm: Any = msgspec.field(default=None, name="Norm")


_Item = Union[_Stats, list[Any], int, float, str, bool, None]
_Node = Union[list[_Item], _Stats, int, float, str, bool, None]
_NodeMap = Union[dict[str, _Node], list[Any], int, float, str, bool, None]


class _Entry(msgspec.Struct, gc=False):
    input_args: _Node = None
    input_kwargs: _NodeMap = None
    output: _Node = None
    parameters: _NodeMap = None


class _Dump(msgspec.Struct, gc=False):
    data: dict[str, Union[_Entry, list[Any], int, float, str, bool, None]]


_DECODER = msgspec.json.Decoder(_Dump)
_NUMBERS = attrgetter("max", "min", "mean", "norm")
_ROW = np.dtype([(name, np.float64) for name in ("max", "min", "mean", "norm")])


def _first_tensor(node: Any) -> _Stats | None:
    if type(node) is _Stats:
        return node
    if type(node) is list:
        for item in node:
            if type(item) is _Stats and item.dtype is not None:
                return item
    return None


def columnar_load(path: Path) -> tuple[float, float, float]:
    """Seconds to (read and decode, walk the entries, gather the statistics)."""
    start = time.perf_counter()
    document = _DECODER.decode(path.read_bytes())
    decoded = time.perf_counter()
    picked: list[_Stats | None] = []
    parameters: list[Any] = []
    for key, raw in document.data.items():
        parsed = split_module_key(key)
        if parsed is None or parsed.direction != "forward" or type(raw) is not _Entry:
            continue
        picked.append(_first_tensor(raw.output))
        picked.append(_first_tensor(raw.input_args))
        if type(raw.parameters) is dict:
            parameters.extend(raw.parameters.values())
    walked = time.perf_counter()
    tensors = [stats for stats in picked + parameters if type(stats) is _Stats]
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
