"""Output floor: what writing an `analyze` run's files costs by itself, against the parse floor.

A lower bound on a whole run's work beside parsing, whatever the analysis: the files' bytes written from memory
(page-cache writes, no fsync), and the tables encoded again from ready Python rows by orjson (JSON row objects,
and the CSV's rows as JSON arrays, which become CSV lines by replacing their brackets), without building any row. Each as CPU seconds
(user + system) and as a ratio to the parse floor's CPU, measured alternately in one run, median of --repeat.

    .venv/bin/python benchmarks/output_floor.py --data-dir benchmarks/data/e64c8 --repeat 3

With two cores, a run that parses (1x), analyses and writes cannot finish in less wall time than half of all that
CPU, so when the outputs alone cost 2x the floor's CPU, 1.5x the floor in wall time is out of reach."""

from __future__ import annotations

import csv
import io
import resource
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
from bench_analyze import analyze_argv, ensure_dataset, floor_argv, warm_caches
from bench_common import LARGE, benchmark_parser

_TABLES = ("output_1_key_mapping", "output_2_mapping", "output_3_value_compare", "output_4_module_analysis")


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _self_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def floor_cpu(argv: list[str]) -> float:
    before = _children_cpu()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return _children_cpu() - before


def write_cpu(files: dict[str, bytes]) -> float:
    """CPU to write every file's bytes into a fresh directory."""
    with tempfile.TemporaryDirectory(dir=".") as scratch:
        before = _self_cpu()
        for name, data in files.items():
            (Path(scratch) / name).write_bytes(data)
        return _self_cpu() - before


Table = tuple[Any, list[list[Any]]]  # a table's JSON document, and its CSV rows' cells


def _table(document: Any, csv_text: bytes) -> Table:
    """A table's JSON document, and its CSV rows' cells: from its row objects (list cells joined by '|', as the
    CSV writes them), or read from the CSV when the JSON is a plain mapping (output_1, the seed's shape)."""
    rows = next((value for key, value in document.items() if key != "meta"), None) if "meta" in document else None
    if rows is None:
        return document, list(csv.reader(io.StringIO(csv_text.decode())))[1:]
    cells = [["|".join(map(str, cell)) if type(cell) is list else cell for cell in row.values()] for row in rows]
    return document, cells


def encode_cpu(tables: list[Table]) -> float:
    """CPU to encode every table as JSON and as CSV text, by orjson from the ready rows."""
    before = _self_cpu()
    for document, cells in tables:
        orjson.dumps(document)
        orjson.dumps(cells).replace(b"],[", b"\n")
    return _self_cpu() - before


def main() -> None:
    parser = benchmark_parser(__doc__, "synthetic data set (default: benchmarks/data/large)", LARGE)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    paths = ensure_dataset(args.data_dir)
    warm_caches(paths)
    with tempfile.TemporaryDirectory() as out_dir:
        subprocess.run(analyze_argv(paths, Path(out_dir)), check=True, stdout=subprocess.DEVNULL)
        files = {path.name: path.read_bytes() for path in Path(out_dir).iterdir() if path.is_file()}
    tables = [
        _table(orjson.loads(files[f"{stem}.json"]), files[f"{stem}.csv"]) for stem in _TABLES if f"{stem}.json" in files
    ]
    floors, writes, encodes = [], [], []
    for _ in range(args.repeat):
        floors.append(floor_cpu(floor_argv(paths)))
        writes.append(write_cpu(files))
        time.sleep(0.5)
        encodes.append(encode_cpu(tables))
    floor, write, encode = map(statistics.median, (floors, writes, encodes))
    size = sum(map(len, files.values())) / 2**20
    print(f"outputs: {len(files)} files, {size:.1f} MiB; parse floor CPU {floor:.2f} s")
    print(f"write from memory: {write:.2f} s CPU = {write / floor:.2f}x the floor")
    print(f"encode the tables from ready rows: {encode:.2f} s CPU = {encode / floor:.2f}x the floor")
    print(f"together: {(write + encode) / floor:.2f}x the floor's CPU")


if __name__ == "__main__":
    main()
