"""Accuracy audit: diagnose every variant fixtures/generate_audit.py wrote and compare the top suspect to its truth.

    .venv/bin/python benchmarks/accuracy_audit.py [--data-dir benchmarks/data/audit] [--only NAME ...] [--tsv FILE]

Each variant folder (one holding ``truth.json``: fixtures/generate_audit.py's and generate_audit_layouts.py's) is
analysed through the library as the CLI's ``analyze`` does (``analyze_paths`` over its train/, rollout/ and
mapping_key.json; a train/ of several ranks is merged as analyze merges it; the rollout read with the
``rollout_step`` of the folder's rca-lsp.toml when it has one, as the server pairs it). One row per variant, in name
order:

    variant  truth  top suspect  credible origins/suspects  RIGHT|WRONG|ERROR  max logits |diff|  seconds

A healthy variant (truth null) is RIGHT when there are no suspects at all. A faulty one is RIGHT when the first
suspect's train module path and classification are the truth's. A truth path ending in ``@N`` names call N only
(``decoder.layers.3.mlp.linear_fc2@1``: key ``...linear_fc2.RowParallelLinear.forward.1``); without it any call
counts (those faults are in every call). A mapping issue (an entry naming keys the dumps lack) makes a row WRONG.
A variant that fails to analyse prints its error in its row (ERROR, counted as not right) and the audit goes on.
Totals at the end: right of all, healthy variants clean, faults found.
"""

from __future__ import annotations

import csv
import json
import re
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

from bench_common import BENCH_DIR, benchmark_parser

from rca_lsp.diagnose.run import SideOptions, analyze_paths
from rca_lsp.dumps.sources import parse_step

AUDIT_DIR = BENCH_DIR / "data" / "audit"
# A train key: Module.<wrapper "module." prefixes><module path>.<class>.forward.<call>
TRAIN_KEY = re.compile(r"^Module\.(?:module\.)*(?P<path>.+)\.(?P<cls>[A-Za-z0-9_]+)\.forward\.(?P<call>\d+)$")
COLUMNS = ("variant", "truth", "top_suspect", "credible", "verdict", "logits_diff", "seconds")


@dataclass(frozen=True)
class Row:
    variant: str
    truth: str  # "clean" or "<path>[@call] <classification>"
    top: str  # "(none)", "<path>@<call> <classification>", or the error
    credible: str  # credible origins / suspects
    verdict: str  # RIGHT, WRONG or ERROR
    logits_diff: float | None  # the truth's final-logits max |diff| over calls
    seconds: float
    healthy: bool

    def cells(self) -> tuple[str, ...]:
        diff = "-" if self.logits_diff is None else f"{self.logits_diff:.2g}"
        return (self.variant, self.truth, self.top, self.credible, self.verdict, diff, f"{self.seconds:.2f}")


def module_call(train_key: str) -> tuple[str, int] | None:
    """(module path without wrappers, call index) of a train forward key; None for any other key."""
    match = TRAIN_KEY.match(train_key)
    return (match["path"], int(match["call"])) if match else None


def truth_module(path: str) -> tuple[str, int | None]:
    """A truth module path and the call it names: 'a.b@1' -> ('a.b', 1); 'a.b' -> ('a.b', None) (any call)."""
    module, at, call = path.partition("@")
    return (module, int(call)) if at else (module, None)


def is_right(truth: list[str] | None, top: tuple[str, int, str] | None) -> bool:
    """truth: [path[@call], classification] or None (healthy); top: the first suspect's (path, call, class)."""
    if truth is None or top is None:
        return truth is None and top is None
    module, call = truth_module(truth[0])
    return top[0] == module and (call is None or top[1] == call) and top[2] == truth[1]


def rollout_options(folder: Path) -> SideOptions:
    """How a variant's rollout is read: the `rollout_step` of its rca-lsp.toml (generate_audit_layouts.py writes
    `"all"` for a rollout dumped one msprobe step per forward), as tests/conftest.py reads a fixture's; else the
    defaults."""
    config = folder / "rca-lsp.toml"
    if not config.is_file():
        return SideOptions()
    (pair,) = tomllib.loads(config.read_text())["pair"]
    return SideOptions(parse_step(pair.get("rollout_step")))


def audit_one(folder: Path) -> Row:
    truth_file = json.loads((folder / "truth.json").read_text())
    truth = truth_file["truth"]
    diffs = truth_file.get("final_logits_max_abs_diff") or []
    start = time.perf_counter()
    common = dict(
        variant=folder.name,
        truth="clean" if truth is None else f"{truth[0]} {truth[1]}",
        logits_diff=max(diffs) if diffs else None,
        healthy=truth is None,
    )
    try:
        analysis = analyze_paths(
            folder / "train", folder / "rollout", folder / "mapping_key.json", rollout_options=rollout_options(folder)
        )
    except Exception as error:  # noqa: BLE001 - one variant's failure is reported in its row
        message = f"{type(error).__name__}: {error}".replace("\n", " ")
        return Row(top=message, credible="-", verdict="ERROR", seconds=time.perf_counter() - start, **common)
    suspects = analysis.suspects
    credible = sum(s.credible_origin for s in suspects)
    top = None
    if suspects:
        first = suspects[0]
        where = module_call(first.train_key)
        top = (*where, first.classification) if where else (first.train_key, -1, first.classification)
    shown = "(none)" if top is None else (f"{top[0]}@{top[1]} {top[2]}" if top[1] >= 0 else f"{top[0]} {top[2]}")
    if analysis.issues:
        shown += f" [{len(analysis.issues)} mapping issues]"
    return Row(
        top=shown,
        credible=f"{credible}/{len(suspects)}",
        verdict="RIGHT" if is_right(truth, top) and not analysis.issues else "WRONG",
        seconds=time.perf_counter() - start,
        **common,
    )


def print_row(cells: tuple[str, ...]) -> None:
    name, truth, top, credible, verdict, diff, seconds = cells
    print(f"{name:<34} {truth:<76} {top:<78} {credible:>6} {verdict:<6} {diff:>8} {seconds:>6}", flush=True)


def main() -> None:
    parser = benchmark_parser(__doc__, "folder of generated audit variants (default: benchmarks/data/audit)", AUDIT_DIR)
    parser.add_argument("--only", nargs="+", metavar="NAME", help="only these variants (folder names)")
    parser.add_argument("--tsv", type=Path, help="also write the rows (and no totals) to this tab-separated file")
    args = parser.parse_args()
    folders = sorted(p.parent for p in args.data_dir.glob("*/truth.json"))
    if args.only:
        missing = sorted(set(args.only) - {f.name for f in folders})
        if missing:
            sys.exit(f"no variant folder with a truth.json under {args.data_dir}: {', '.join(missing)}")
        folders = [f for f in folders if f.name in args.only]
    if not folders:
        sys.exit(f"no variant folders (*/truth.json) under {args.data_dir}: run fixtures/generate_audit.py first")

    print_row(("variant", "truth", "top suspect (module@call classification)", "cred", "verdict", "logits", "s"))
    rows = []
    for folder in folders:
        row = audit_one(folder)
        rows.append(row)
        print_row(row.cells())

    right = {r.variant for r in rows if r.verdict == "RIGHT"}
    healthy = [r for r in rows if r.healthy]
    faults = [r for r in rows if not r.healthy]
    errors = [r for r in rows if r.verdict == "ERROR"]
    print()
    print(f"right: {len(right)}/{len(rows)}")
    print(f"healthy clean: {sum(r.variant in right for r in healthy)}/{len(healthy)}")
    print(f"faults found: {sum(r.variant in right for r in faults)}/{len(faults)}")
    if errors:
        print(f"errors: {len(errors)} ({', '.join(r.variant for r in errors)})")
    wrong = [r.variant for r in rows if r.verdict == "WRONG"]
    if wrong:
        print(f"wrong: {', '.join(wrong)}")
    if args.tsv:
        with args.tsv.open("w", newline="") as f:
            writer = csv.writer(f, delimiter="\t", lineterminator="\n")
            writer.writerow(COLUMNS)
            writer.writerows(r.cells() for r in rows)


if __name__ == "__main__":
    main()
