"""Where one `analyze` run spends its time, stage by stage, in this process: the CLI's own run (`--no-chart` unless
`--chart`), each stage's function timed where it is called (seconds, and when it first started since the start).

The whole-run rows (bench_answer.py, bench_parallel.py, bench_decode.py) say how far a run is from the floor; this
says which stage to work on. Stages run inside a forked child (the rollout's load, the tables) are not seen here.

    .venv/bin/python benchmarks/answer_stages.py --data-dir benchmarks/data/e64c8
"""

from __future__ import annotations

import argparse
import importlib
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

# (module, object holding the function, function, label), in the order a run calls them
STAGES = [
    ("rca_lsp.diagnose.run", None, "read_mapping_file", "mapping"),
    ("rca_lsp.dumps.load", "DumpCache", "get", "dumps (loaded or awaited)"),
    ("rca_lsp.diagnose.analysis", None, "_usable_mapping", "usable mapping"),
    ("rca_lsp.diagnose.analysis", None, "build_groups", "groups"),
    ("rca_lsp.compare.records", "Comparator", "records", "records"),
    ("rca_lsp.compare.records", "Comparator", "_compare_plain", "  of which plain pairs"),
    ("rca_lsp.diagnose.analysis", None, "_calibrated", "calibration"),
    ("rca_lsp.diagnose.rootcause", "RootCauseAnalysis", "call_evidence", "root-cause evidence"),
    ("rca_lsp.report.outputs", None, "write_outputs", "outputs"),
    ("rca_lsp.report.answer", None, "chart_data", "  of which chart data"),
]


def _timed(owner: Any, name: str, label: str, start: float, spent: dict[str, list[float]]) -> None:
    inner: Callable[..., Any] = getattr(owner, name)

    def timed(*args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            entry = spent.setdefault(label, [0.0, began - start])
            entry[0] += time.perf_counter() - began

    setattr(owner, name, timed)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, required=True, help="train/, rollout/ and mapping_key.json")
    parser.add_argument("--chart", action="store_true", help="draw the chart as well")
    args = parser.parse_args()
    start = time.perf_counter()
    spent: dict[str, list[float]] = {}
    for module_name, holder, name, label in STAGES:
        module = importlib.import_module(module_name)
        owner = getattr(module, holder) if holder else module
        if hasattr(owner, name):  # a stage renamed or gone: not timed, said below
            _timed(owner, name, label, start, spent)
    from rca_lsp.cli.main import main as cli

    out_dir = Path(tempfile.mkdtemp(prefix="answer_stages_"))
    data = args.data_dir
    argv = ["analyze", "--train", str(data / "train"), "--rollout", str(data / "rollout")]
    argv += ["--mapping-key", str(data / "mapping_key.json"), "--out-dir", str(out_dir)]
    try:
        cli(argv + ([] if args.chart else ["--no-chart"]))
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
    total = time.perf_counter() - start
    print(f"{'stage':28s} {'seconds':>8s} {'from':>7s}")
    for _, _, _, label in STAGES:
        seconds, began = spent.get(label, (float("nan"), float("nan")))
        print(f"{label:28s} {seconds:8.2f} {began:7.2f}")
    print(f"{'whole run (in process)':28s} {total:8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
