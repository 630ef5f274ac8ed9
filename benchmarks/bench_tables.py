"""CPU time of encoding the seed's tables from one analysis: output_1, output_3 in both column styles and output_4
chunk by chunk as the writer does (`encode_chunk`: JSON and CSV), and output_2's CSV (`csv_table`).

    .venv/bin/python benchmarks/bench_tables.py [--data-dir D] [--repeat 5]

The data set is make_synthetic.py's `--layers 12 --experts 32` (generated into benchmarks/data/tables when missing:
~5 MiB per dump, 5000 mapping entries, ~27k output_3 rows). The analysis runs once; each table is then encoded
`--repeat` times and the median printed. Run it on two checkouts (PYTHONPATH=<checkout>) for a before/after ratio.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from bench_common import BENCH_DIR, benchmark_parser

from rca_lsp.diagnose.run import analyze_paths
from rca_lsp.report import outputs
from rca_lsp.report.tables.cells import csv_table
from rca_lsp.report.tables.values import TargetChunks, compare_columns, styled
from rca_lsp.report.tables.writer import CHUNK, encode_chunk

TABLES = BENCH_DIR / "data" / "tables"


def _ensure(data_dir: Path) -> None:
    if (data_dir / "mapping_key.json").is_file():
        return
    command = [sys.executable, str(BENCH_DIR / "make_synthetic.py"), "--layers", "12", "--experts", "32"]
    subprocess.run([*command, "--out-dir", str(data_dir)], check=True)


def _median_ms(work: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.process_time()
        work()
        times.append(time.process_time() - start)
    return statistics.median(times) * 1000


def main() -> None:
    parser = benchmark_parser(__doc__, "synthetic data set (default: benchmarks/data/tables)", TABLES)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    _ensure(args.data_dir)
    data = args.data_dir
    analysis = analyze_paths(data / "train", data / "rollout", data / "mapping_key.json")
    chunks = TargetChunks(analysis)
    compare = [row for index in range(chunks.count) for row in chunks.rows(index)]
    tables: dict[str, tuple[Sequence[str], Sequence[int], list[Sequence[Any]]]] = {
        "output_1": (outputs.MAPPING_COLUMNS, (1,), outputs._mapping_rows(analysis)),
        "output_3 rca": (*compare_columns("rca", False), compare),
        "output_3 msprobe": (*compare_columns("msprobe", False), list(styled(compare, "msprobe"))),
        "output_4": (outputs.MODULE_COLUMNS, (2, 3), [outputs._module_row(r) for r in analysis.records]),
    }
    print(f"{'table':<18} {'rows':>7} {'cpu ms':>9} {'csv MiB':>8}")
    for name, (columns, list_columns, rows) in tables.items():
        chunks = [rows[start : start + CHUNK] for start in range(0, len(rows), CHUNK)]
        milliseconds = _median_ms(
            lambda: [encode_chunk(i, c, columns, list_columns) for i, c in enumerate(chunks)], args.repeat
        )
        size = sum(len(encode_chunk(i, c, columns, list_columns)[1]) for i, c in enumerate(chunks)) / 2**20
        print(f"{name:<18} {len(rows):>7} {milliseconds:>9.1f} {size:>8.1f}")
    matched = [(r.train_key, r.rollout_keys) for r in analysis.rows if r.rollout_keys]
    milliseconds = _median_ms(lambda: csv_table(("train_key", "rollout_keys"), matched, (1,)), args.repeat)
    print(f"{'output_2 csv':<18} {len(matched):>7} {milliseconds:>9.1f}")


if __name__ == "__main__":
    main()
