"""What decoding one dump costs by each route that could feed a columnar analysis, against the parse floor's
orjson.loads, in one process, alternating, medians of --repeat:

- `orjson`: the parse floor's route (parse_floor.py), plain dicts and lists;
- `rca_lsp`: the analysis' own decoder (dumps.dump.decode_dump: msgspec into TensorStats, whose __post_init__
  derives numel and observable, converts odd statistics and interns dtypes and shapes, in Python per tensor);
- `no per-tensor Python`: the same msgspec schema with a statistics struct that runs no Python per tensor (what
  the decode would cost if msgspec alone could build what the analysis needs);
- `polars lines`: msprobe writes one field per line (indent=1); polars reads the lines as one string column and
  extracts each field's name and value with its string kernels (what a columnar decoder from a library's kernels
  does before any structure is rebuilt). Only when polars is installed: it is not a dependency of rca_lsp.

Usage: decode_routes.py DUMP.json [--repeat N]"""

from __future__ import annotations

import argparse
import gc
import resource
import statistics
import time
from pathlib import Path
from typing import Any, Callable, Union

import msgspec
import orjson

from rca_lsp.dumps.dump import decode_dump


class _Stats(msgspec.Struct, gc=False):  # TensorStats' fields as msprobe names them, and no __post_init__
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


class _Document(msgspec.Struct, gc=False):
    data: dict[str, Union[_Entry, list[Any], int, float, str, bool, None]]


def _polars_lines(path: Path) -> Callable[[bytes], Any] | None:
    try:
        import polars as pl
    except ImportError:
        return None

    def decode(_: bytes) -> Any:
        lines = pl.read_csv(
            path,
            has_header=False,
            separator="\x01",
            quote_char=None,
            new_columns=["line"],
            schema_overrides=[pl.String],
        )
        line = pl.col("line")
        return lines.select(
            name=line.str.extract(r'^\s*"([^"]*)":', 1), value=line.str.extract(r":\s*(.*?),?$", 1)
        ).filter(pl.col("name").is_in(["Max", "Min", "Mean", "Norm"]))

    return decode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dump", type=Path)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    data = args.dump.read_bytes()
    routes: dict[str, Callable[[bytes], Any]] = {
        "orjson": orjson.loads,
        "rca_lsp": lambda raw: decode_dump(raw, str(args.dump)),
        "no per-tensor Python": msgspec.json.Decoder(_Document).decode,
    }
    polars = _polars_lines(args.dump)
    if polars is not None:
        routes["polars lines"] = polars
    times: dict[str, list[tuple[float, float, float]]] = {name: [] for name in routes}
    gc.disable()  # as the floor and the analysis decode: no collections among millions of new objects
    for _ in range(max(args.repeat, 1)):
        for name, decode in routes.items():
            before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
            result = decode(data)
            wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF)
            times[name].append((wall, after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime))
            del result
    floor = statistics.median(wall for wall, _, _ in times["orjson"])
    print(f"{args.dump} ({len(data) / 2**20:.1f} MiB), medians of {args.repeat} (wall; user and system CPU):")
    for name, measured in times.items():
        wall, user, system = (statistics.median(column) for column in zip(*measured))
        print(f"  {name:22s} {wall:6.2f} s  {wall / floor:5.2f}x orjson  (user {user:.2f} s, system {system:.2f} s)")
    if polars is None:
        print("  polars lines: polars is not installed (pip install polars to measure it)")


if __name__ == "__main__":
    main()
