"""What decoding one dump costs by each route that could feed a columnar analysis, against the parse floor's
orjson.loads, in one process, alternating, medians of --repeat:

- `orjson`: the parse floor's route (parse_floor.py), plain dicts and lists;
- `rca_lsp`: the analysis' own decoder (dumps.dump.decode_dump: msgspec into TensorStats, whose __post_init__
  derives numel and observable, converts odd statistics and interns dtypes and shapes, in Python per tensor);
- `no per-tensor Python`: the same msgspec schema with a statistics struct that runs no Python per tensor
  (dumps.tensorfile's, which the element-wise pass reads tensor nodes with): what the decode would cost if msgspec
  alone built what the analysis needs;
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
from typing import Any, Callable

import orjson

from rca_lsp.dumps.dump import decode_dump
from rca_lsp.dumps.tensorfile import entry_nodes


def _polars_lines() -> Callable[[Path], Any] | None:
    try:
        import polars as pl
    except ImportError:
        return None

    def decode(path: Path) -> Any:
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
    routes: dict[str, Callable[[Path], Any]] = {  # each reads the file (from the page cache: warmed below) first
        "orjson": lambda path: orjson.loads(path.read_bytes()),
        "rca_lsp": lambda path: decode_dump(path.read_bytes(), str(path)),
        "no per-tensor Python": lambda path: entry_nodes(str(path)),
    }
    polars = _polars_lines()
    if polars is not None:
        routes["polars lines"] = polars
    size = len(args.dump.read_bytes())
    times: dict[str, list[tuple[float, float, float]]] = {name: [] for name in routes}
    gc.disable()  # as the floor and the analysis decode: no collections among millions of new objects
    for _ in range(max(args.repeat, 1)):
        for name, decode in routes.items():
            before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
            result = decode(args.dump)
            wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF)
            times[name].append((wall, after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime))
            del result
    floor = statistics.median(wall for wall, _, _ in times["orjson"])
    print(f"{args.dump} ({size / 2**20:.1f} MiB), medians of {args.repeat} (wall; user and system CPU):")
    for name, measured in times.items():
        wall, user, system = (statistics.median(column) for column in zip(*measured))
        print(f"  {name:22s} {wall:6.2f} s  {wall / floor:5.2f}x orjson  (user {user:.2f} s, system {system:.2f} s)")
    if polars is None:
        print("  polars lines: polars is not installed (pip install polars to measure it)")


if __name__ == "__main__":
    main()
