"""Output floor: what writing an `analyze` run's files costs by itself, against the parse floor.

A lower bound on a whole run's work beside parsing, whatever the analysis: the files' bytes written (page-cache
writes, no fsync), and the tables encoded again from ready Python rows by orjson (JSON row objects, and the CSV's
rows as JSON arrays, which become CSV lines by replacing their brackets), without building any row. Each as CPU
seconds (user + system) and as a ratio to the parse floor's CPU, measured alternately in one run, median of
--repeat.

The files are written as a run writes them: a fresh process reads them, then writes them into a directory that did
not exist, --settle seconds after the last copy was deleted (a run writes its outputs seconds in). Written into
the pages a just-deleted copy freed, the same bytes cost a tenth of that; on a virtual machine that returns free
memory to its host (the development VM does), pages left free for a few seconds are new again, and the kernel's
copy into them costs ~15 us a page (2026-12-04: 600 MiB, 2.0-3.3 s of system time after 3-10 s, 0.16 s at once;
`perf` puts ~10% of an e64c8 run's CPU samples in that copy).

    .venv/bin/python benchmarks/output_floor.py --data-dir benchmarks/data/e64c8 --repeat 3

With two cores, a run that parses (1x), analyses and writes cannot finish in less wall time than half of all that
CPU, so when the outputs alone cost 2x the floor's CPU, 1.5x the floor in wall time is out of reach.

The same bytes are also written past the page cache (O_DIRECT, from one page-aligned buffer, each file's last
block padded and the file cut back to its size): what writing costs when no new page-cache page is needed, i.e.
how much of the first figure is this machine's cost of new pages rather than the writing."""

from __future__ import annotations

import csv
import io
import mmap
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
from bench_analyze import analyze_argv, ensure_dataset, floor_argv, warm_caches
from bench_common import LARGE, benchmark_parser, tensor_parallel_set

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


def _child_cpu(*argv: str) -> float:
    """The CPU seconds a fresh process of this script reports for its part (`--write-child`, `--encode-child`): the
    measured work runs in a small process, as it would in a run (on this VM a parse floor measured right after its
    parent had allocated gigabytes took up to 2x its usual CPU)."""
    done = subprocess.run([sys.executable, __file__, *argv], check=True, capture_output=True, text=True)
    return float(done.stdout)


def write_cpu(source: Path, settle: float, child: str = "--write-child") -> float:
    """CPU a fresh process spends writing the files of `source` into a new directory (as a run writes: see the
    module doc), `settle` seconds after the previous copy was deleted; `child`: --direct-child writes past the
    page cache."""
    with tempfile.TemporaryDirectory(dir=source.parent) as scratch:
        time.sleep(settle)
        return _child_cpu(child, str(source), str(Path(scratch) / "out"))


def _files(source: Path) -> dict[str, bytes]:
    """Every file of `source`, read, by name."""
    return {path.name: path.read_bytes() for path in sorted(source.iterdir()) if path.is_file()}


def _write_child(source: Path, target: Path) -> float:
    """Read every file of `source`; the CPU seconds of writing them all into `target` (new)."""
    files = _files(source)
    before = _self_cpu()
    target.mkdir()
    for name, data in files.items():
        (target / name).write_bytes(data)
    return _self_cpu() - before


_DIRECT_CHUNK = 8 << 20  # bytes per O_DIRECT write: a multiple of any block size
_BLOCK = 4096  # O_DIRECT writes whole blocks


def _direct_child(source: Path, target: Path) -> float:
    """_write_child past the page cache: each file written with O_DIRECT from one page-aligned buffer."""
    files = _files(source)
    buffer = mmap.mmap(-1, _DIRECT_CHUNK)  # anonymous mappings are page-aligned, as O_DIRECT needs
    before = _self_cpu()
    target.mkdir()
    for name, data in files.items():
        descriptor = os.open(target / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_DIRECT, 0o644)
        try:
            view = memoryview(data)
            for start in range(0, len(data), _DIRECT_CHUNK):
                piece = view[start : start + _DIRECT_CHUNK]
                buffer[: len(piece)] = piece
                os.write(descriptor, memoryview(buffer)[: -(-len(piece) // _BLOCK) * _BLOCK])
            os.ftruncate(descriptor, len(data))
        finally:
            os.close(descriptor)
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


def _encode_child(source: Path) -> float:
    """Read the tables of `source`; the CPU seconds of encoding each as JSON and as CSV text, by orjson from the
    ready rows."""
    tables = [
        _table(orjson.loads((source / f"{stem}.json").read_bytes()), (source / f"{stem}.csv").read_bytes())
        for stem in _TABLES
        if (source / f"{stem}.json").is_file()
    ]
    before = _self_cpu()
    for document, cells in tables:
        orjson.dumps(document)
        orjson.dumps(cells).replace(b"],[", b"\n")
    return _self_cpu() - before


_CHILDREN = {"--write-child": _write_child, "--direct-child": _direct_child, "--encode-child": _encode_child}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] in _CHILDREN:
        print(f"{_CHILDREN[sys.argv[1]](*map(Path, sys.argv[2:])):.4f}")  # type: ignore[operator]
        return
    parser = benchmark_parser(__doc__, "synthetic data set (default: benchmarks/data/large)", LARGE.default_dir)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--settle", type=float, default=5.0, help="seconds between deleting a copy and writing the next"
    )
    parser.add_argument("--tp", type=int, default=1, help="train ranks of a tensor-parallel set (bench_parallel.py's)")
    args = parser.parse_args()
    paths = ensure_dataset(args.data_dir, tensor_parallel_set(args.tp) if args.tp > 1 else LARGE)
    warm_caches(paths)
    with tempfile.TemporaryDirectory(dir=args.data_dir) as kept:
        out_dir = Path(kept) / "outputs"
        subprocess.run(analyze_argv(paths, out_dir), check=True, stdout=subprocess.DEVNULL)
        files = sorted(path for path in out_dir.iterdir() if path.is_file())
        size = sum(path.stat().st_size for path in files) / 2**20
        floors, writes, directs, encodes = [], [], [], []
        for _ in range(args.repeat):
            floors.append(floor_cpu(floor_argv(paths)))
            writes.append(write_cpu(out_dir, args.settle))
            directs.append(write_cpu(out_dir, args.settle, "--direct-child"))
            encodes.append(_child_cpu("--encode-child", str(out_dir)))
    floor, write, direct, encode = map(statistics.median, (floors, writes, directs, encodes))
    print(f"outputs: {len(files)} files, {size:.1f} MiB; parse floor CPU {floor:.2f} s")
    print(f"write as a run does (a fresh process, {args.settle:g} s on): {write:.2f} s CPU = {write / floor:.2f}x")
    print(f"the same past the page cache (O_DIRECT): {direct:.2f} s CPU = {direct / floor:.2f}x")
    print(f"encode the tables from ready rows: {encode:.2f} s CPU = {encode / floor:.2f}x the floor")
    print(f"together: {(write + encode) / floor:.2f}x the floor's CPU")


if __name__ == "__main__":
    main()
