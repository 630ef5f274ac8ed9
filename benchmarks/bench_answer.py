"""Time to the answer: when `analyze` prints its summary (output_5 written) against when it exits and against the
parse floor (reading and orjson-parsing every dump once), in one run, alternating, median of --repeat.

The answer is what a user waits for; the tables after it are the bulk (hundreds of MB on 10^5 modules)."""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import time

from bench_analyze import analyze_argv, ensure_dataset, floor_argv, warm_caches
from bench_common import LARGE, benchmark_parser

SUMMARY = "Root Cause Evidence Summary"


def timed_analyze(argv: list[str]) -> tuple[float, float]:
    """(seconds to the summary line on stdout, seconds to exit)."""
    start = time.monotonic()
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert child.stdout is not None
    answer = None
    for line in child.stdout:
        if answer is None and line.startswith(SUMMARY):
            answer = time.monotonic() - start
    if child.wait() != 0 or answer is None:
        raise SystemExit(f"analyze failed (exit {child.returncode}): {' '.join(argv)}")
    return answer, time.monotonic() - start


def timed(argv: list[str]) -> float:
    start = time.monotonic()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - start


def main(argv: list[str]) -> int:
    parser = benchmark_parser(__doc__, "data set (make_synthetic.py defaults if missing)", LARGE.default_dir)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each; medians are reported")
    args = parser.parse_args(argv)
    data_dir = args.data_dir.resolve()
    paths = ensure_dataset(data_dir)
    warm_caches(paths)
    out_dir = data_dir / "answer_out"
    answers, totals, floors = [], [], []
    for i in range(max(args.repeat, 1)):
        floors.append(timed(floor_argv(paths)))
        shutil.rmtree(out_dir, ignore_errors=True)
        answer, total = timed_analyze(analyze_argv(paths, out_dir))
        answers.append(answer)
        totals.append(total)
        print(f"run {i + 1}: floor {floors[-1]:.2f} s, answer {answer:.2f} s, exit {total:.2f} s", flush=True)
    floor, answer, total = (statistics.median(x) for x in (floors, answers, totals))
    print(
        f"median: floor {floor:.2f} s, answer {answer:.2f} s ({answer / floor:.2f}x the floor), "
        f"exit {total:.2f} s ({total / floor:.2f}x); the answer comes at {answer / total:.0%} of the run"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
