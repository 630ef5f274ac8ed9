"""Benchmark a cold `python -m rca_lsp analyze` on a synthetic tensor-parallel set against the parse floor.

The train side is N tensor-parallel rank dumps (`train/step0/rank0..N-1/dump.json`, passed as `--train <data>/train`),
the rollout one unsharded dump; the mapping is the unsharded, logical one (make_synthetic.py --tp N --experts 64;
N = --tp, default 8: the `tp8` set; --tp 4 is the `tp4` set). The floor orjson-parses all the dumps one after
another in one process, holding them all. Targets of the multi-rank issue: analyze wall time and peak RSS <= 1.5x
the floor's. Measurement as in bench_analyze.py.
"""

from __future__ import annotations

import sys

from bench_analyze import run_benchmark
from bench_common import tensor_parallel_set

TARGET_RATIO = 1.5


def main(argv: list[str]) -> int:
    ranks = 8
    if "--tp" in argv:
        at = argv.index("--tp")
        ranks = int(argv[at + 1])
        argv = argv[:at] + argv[at + 2 :]
    return run_benchmark(argv, __doc__, tensor_parallel_set(ranks), TARGET_RATIO)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
