"""Benchmark a cold `python -m rca_lsp analyze` on the synthetic TP=8 set against the parse floor.

The train side is 8 tensor-parallel rank dumps (`train/step0/rank0..7/dump.json`, passed as `--train <data>/train`),
the rollout one unsharded dump; the mapping is the unsharded, logical one (make_synthetic.py --tp 8 --experts 64).
The floor orjson-parses all nine dumps one after another in one process, holding them all. Targets of the
multi-rank issue: analyze wall time and peak RSS <= 1.5x the floor's. Measurement as in bench_analyze.py.
"""

from __future__ import annotations

import sys

from bench_analyze import run_benchmark
from bench_common import TP8

TARGET_RATIO = 1.5


if __name__ == "__main__":
    sys.exit(run_benchmark(sys.argv[1:], __doc__, TP8, TARGET_RATIO))
