"""Benchmark a cold `python -m rca_lsp analyze` on the synthetic decode set, per MiB of dump, next to the large pair.

Decode set (make_synthetic.py --decode-steps 256 --layers 24 --experts 64): the rollout records a prefill and 256
one-token decode calls (`.forward.0` .. `.forward.256` of every module; a decode step calls only its routed
experts), the train ONE forward over all those tokens; mapping values name all calls of a rollout module
(`....forward.*`), so every train entry is compared with an aggregate of up to 257 rollout calls.
Reference: the default large pair (make_synthetic.py defaults), where each train call maps to one rollout call.
Per set, as in bench_analyze.py: the parse floor and a cold analyze (fresh processes, median of --repeat), and
their wall and cpu seconds per MiB of dump input (train + rollout dump files; the mapping file is not counted).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from bench_analyze import (
    Outcome,
    add_run_options,
    cell,
    ensure_dataset,
    measure,
    ratio_cell,
    report_inputs,
    warm_caches,
)
from bench_common import DECODE, LARGE, DataSet, DatasetPaths, benchmark_parser


@dataclass(frozen=True)
class SetResult:
    label: str
    paths: DatasetPaths
    floor: Outcome
    analyze: Outcome

    @property
    def dump_mib(self) -> float:
        return self.paths.dump_bytes() / 2**20


def per_mib(outcome: Outcome, field: str, size_mib: float) -> str:
    return "n/a" if isinstance(outcome, str) else f"{getattr(outcome, field) / size_mib:.3f}"


def run_set(label: str, data_dir: Path, dataset: DataSet, repeat: int, timeout_s: float) -> SetResult:
    paths = ensure_dataset(data_dir, dataset)
    warm_caches(paths)
    print(f"{label}: {data_dir}", flush=True)
    floor, analyze = measure(paths, data_dir, repeat, timeout_s)
    return SetResult(label, paths, floor, analyze)


def report(results: list[SetResult], repeat: int) -> None:
    for result in results:
        report_inputs(result.paths.mapping_key.parent, result.paths)
    print(f"median of {repeat} run(s), each a fresh process, page cache warm; s/MiB = seconds per MiB of dumps\n")
    columns = ("dumps", "wall", "cpu", "peak RSS", "wall s/MiB", "cpu s/MiB", "/floor wall", "/floor RSS")
    print(f"{'':<22}" + "".join(f"{c:>12}" for c in columns))
    for r in results:
        for name, outcome in (("floor", r.floor), ("analyze", r.analyze)):
            ratios = (
                tuple(ratio_cell(outcome, r.floor, f).split()[0] for f in ("wall_s", "peak_rss"))
                if name == "analyze"
                else ("", "")
            )
            cells = (
                f"{r.dump_mib:.1f} MiB",
                cell(outcome, "wall_s"),
                cell(outcome, "cpu_s"),
                cell(outcome, "peak_rss"),
                per_mib(outcome, "wall_s", r.dump_mib),
                per_mib(outcome, "cpu_s", r.dump_mib),
                *ratios,
            )
            print(f"{r.label + ' ' + name:<22}" + "".join(f"{c:>12}" for c in cells))
    decode, reference = results
    if not isinstance(decode.analyze, str) and not isinstance(reference.analyze, str):
        ratios = [
            (getattr(decode.analyze, f) / decode.dump_mib) / (getattr(reference.analyze, f) / reference.dump_mib)
            for f in ("wall_s", "cpu_s")
        ]
        print(
            f"\nanalyze per dump MiB, {decode.label} / {reference.label}: wall {ratios[0]:.2f}x, cpu {ratios[1]:.2f}x"
        )
    for r in results:
        for name, outcome in (("parse floor", r.floor), ("analyze", r.analyze)):
            if isinstance(outcome, str):
                print(f"\n{r.label} {name}: {outcome}")


def main(argv: list[str]) -> int:
    parser = benchmark_parser(
        __doc__,
        f"decode data set (generated with make_synthetic.py {' '.join(DECODE.options)} if missing)",
        DECODE.default_dir,
    )
    parser.add_argument(
        "--reference-dir",
        type=Path,
        default=LARGE.default_dir,
        help="single-call pair (make_synthetic.py defaults, generated if missing)",
    )
    add_run_options(parser)
    args = parser.parse_args(argv)
    repeat = max(args.repeat, 1)
    results = [
        run_set("decode", args.data_dir.resolve(), DECODE, repeat, args.timeout),
        run_set("single-call", args.reference_dir.resolve(), LARGE, repeat, args.timeout),
    ]
    report(results, repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
