"""Are this tree's outputs the same as another tree's on a synthetic data set? Runs `python -m rca_lsp analyze` with
each tree's code (PYTHONPATH) on the same inputs and compares every output file, the run id set aside (the chart
page by the chart data its packed blocks decode to; the PNG and the manifest are left out, as in
tests/test_outputs_unchanged.py, which does the same on every fixture).

    git worktree add /tmp/before <commit>
    .venv/bin/python benchmarks/check_outputs.py --reference /tmp/before --data-dir benchmarks/data/e64
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import orjson
from bench_analyze import analyze_argv, ensure_dataset
from bench_common import LARGE, REPO_ROOT, DataSet, benchmark_parser

LEFT_OUT = {"output_5_root_cause_report.png", "output_manifest.json"}
_PACKED_BLOCK = re.compile(r'(<script id="[^"]+" type="application/gzip;base64">)[^<]*(</script>)')


def _normalised(path: Path, run_id: bytes) -> bytes:
    data = path.read_bytes().replace(run_id, b"<run id>")
    if path.suffix == ".html":
        sys.path.insert(0, str(REPO_ROOT))
        from rca_lsp.report.html import chart_from_page

        page = data.decode()
        chart = chart_from_page(page)
        chart.pop("run_id", None)
        data = _PACKED_BLOCK.sub(r"\1\2", page).encode() + orjson.dumps(chart, option=orjson.OPT_SORT_KEYS)
    return data


def run(tree: Path, argv: list[str]) -> None:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    subprocess.run(argv, check=True, env=env, stdout=subprocess.DEVNULL, cwd=tree)


def main(argv: list[str]) -> int:
    parser = benchmark_parser(__doc__, "data set to analyse with both trees")
    parser.add_argument("--reference", type=Path, required=True, help="the other tree (a git worktree)")
    parser.add_argument("--train-ranks", type=int, default=1, help="train rank folders of the data set")
    parser.add_argument("--columns", default="rca", help="output_3's column style (rca or msprobe)")
    args = parser.parse_args(argv)
    data_dir = args.data_dir.resolve()
    paths = ensure_dataset(
        data_dir, DataSet(data_dir.name, train_ranks=args.train_ranks) if args.train_ranks > 1 else LARGE
    )
    outs = {}
    for name, tree in (("reference", args.reference.resolve()), ("this", REPO_ROOT)):
        out_dir = outs[name] = data_dir / f"check_{name}"
        subprocess.run(["rm", "-rf", str(out_dir)], check=True)
        run(tree, analyze_argv(paths, out_dir) + ["--columns", args.columns])
    differ = []
    names = sorted({p.name for d in outs.values() for p in d.iterdir()} - LEFT_OUT)
    run_ids = {
        key: orjson.loads((d / "output_5_root_cause_report.json").read_bytes())["run_id"].encode()
        for key, d in outs.items()
    }
    for name in names:
        a, b = (outs[key] / name for key in ("reference", "this"))
        if not (a.is_file() and b.is_file()) or _normalised(a, run_ids["reference"]) != _normalised(b, run_ids["this"]):
            differ.append(name)
        print(f"{'differs' if name in differ else 'same':8} {name}")
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
