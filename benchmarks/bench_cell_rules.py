"""Resolving msprobe cell mappings (`-cm cell_mapping.yaml`) against a dump pair: one rule per train module, written
as whole cell names (`module.module.decoder.layers.0.mlp.linear_fc1.ColumnParallelLinear: ...`) and as substrings of
them (`decoder.layers.0.mlp.linear_fc1.ColumnParallelLinear: ...`, what msagent's mapper and hand-written files
hold). Whole names are looked up; every substring rule can apply to every module, in file order.

    .venv/bin/python benchmarks/bench_cell_rules.py [--data-dir D] [--repeat 3]

The data set is make_synthetic.py's `--layers 60 --experts 64 --calls 1` (generated into benchmarks/data/cells when
missing: ~12k train modules). Prints the CPU seconds of parsing and resolving each file (median of --repeat), after
the dumps are loaded. Run it on two checkouts (PYTHONPATH=<checkout>) for a before/after ratio.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench_common import BENCH_DIR, benchmark_parser

from rca_lsp.dumps.load import DumpCache
from rca_lsp.mapping.msprobe_names import cell_name
from rca_lsp.mapping.parse import parse_mapping

CELLS = BENCH_DIR / "data" / "cells"


def _ensure(data_dir: Path) -> None:
    if (data_dir / "mapping_key.json").is_file():
        return
    command = [sys.executable, str(BENCH_DIR / "make_synthetic.py"), "--layers", "60", "--experts", "64"]
    subprocess.run([*command, "--calls", "1", "--out-dir", str(data_dir)], check=True)


def main() -> None:
    parser = benchmark_parser(__doc__, "synthetic data set (default: benchmarks/data/cells)", CELLS)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    _ensure(args.data_dir)
    cache = DumpCache()
    train, rollout = cache.get(args.data_dir / "train"), cache.get(args.data_dir / "rollout")
    cells = list(dict.fromkeys(name for key in train.keys if (name := cell_name(key)) is not None))
    files = {
        "whole names": "".join(f"{cell}: renamed.{index}.Linear\n" for index, cell in enumerate(cells)),
        "substrings": "".join(f"{cell.split('.', 2)[-1]}: renamed.{index}\n" for index, cell in enumerate(cells)),
    }
    print(f"{len(cells)} train modules, {len(rollout.keys)} rollout keys")
    for name, text in files.items():
        times = []
        for _ in range(args.repeat):
            start = time.process_time()
            resolved = parse_mapping("cell_mapping.yaml", text).for_dumps(train, rollout)
            times.append(time.process_time() - start)
        print(f"{name:<12} {len(cells):>6} rules: {statistics.median(times):7.2f} s cpu, {len(resolved.issues)} issues")


if __name__ == "__main__":
    main()
