"""How far a parameter's Mean and Norm differ between train and rollout when it holds the same values on both sides.

    .venv/bin/python benchmarks/parameter_sums.py FOLDER ... [--healthy] [--tsv FILE]

A FOLDER is a variant (train/, rollout/, mapping_key.json, as fixtures/ and the audit generators write them) or a
folder of such variants. Each is analysed as accuracy_audit.py analyses it, and every mapped parameter pair of one
dtype and size on both sides (model.stats.exact_extremes) with its four statistics finite is measured: the relative
Norm difference and the Mean difference against the tensor's scale, as statistics.assess measures them, and their
ratio to the rule's bound (model.stats.parameter_sum_tolerance). A variant is healthy when its truth.json's truth is
null or its expected.json says clean (`--healthy`: every variant without either, e.g. a user's healthy run); a
variant whose truth is a parameter_or_checkpoint_issue gives the most different pair of the truth's module as its
fault (a module is found when one of its parameters is); the others are left out (their weights may be changed in
ways the truth does not name). A parameter is measured once, in the first record holding it (the calls of a module
hold the same weight).

Prints, per kind, dtype and how the sides were combined (1:1, fused parts 1:N / N:1, merged TP shards, joined
calls, fused experts), the pairs, those with equal sums, the largest Norm and Mean differences and the largest ratio
to the bound; then every healthy pair beyond the bound (the rule would call it a mismatch) and every fault whose
extremes are equal and sums within the bound (the rule cannot see it). `--tsv` also writes one row per pair.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from accuracy_audit import module_call, rollout_options, truth_module

from rca_lsp.compare.module import ALL_PARAMETERS, ModuleComparison
from rca_lsp.diagnose.run import analyze_paths
from rca_lsp.dumps.dump import Dump
from rca_lsp.model.stats import comparison_scale, exact_extremes, parameter_sum_tolerance, stat_error
from rca_lsp.model.tolerance import Tolerances, normalise_dtype

PARAMETER_FAULT = "parameter_or_checkpoint_issue"
COLUMNS = (
    "variant",
    "kind",
    "dtype",
    "combined",
    "numel",
    "extremes_equal",
    "norm_diff",
    "mean_diff",
    "bound",
    "parameter",
)


@dataclass(frozen=True)
class Pair:
    variant: str
    kind: str  # healthy | fault
    dtype: str
    combined: str
    numel: int
    extremes_equal: bool
    norm_diff: float
    mean_diff: float  # against the tensor's scale
    bound: float  # parameter_sum_tolerance under the default tolerances
    parameter: str  # train module path : parameter name

    @property
    def ratio(self) -> float:
        return max(self.norm_diff, self.mean_diff) / self.bound


def variant_folders(folders: list[Path]) -> list[Path]:
    found = []
    for folder in folders:
        found += (
            [folder]
            if (folder / "mapping_key.json").is_file()
            else sorted(p.parent for p in folder.glob("*/mapping_key.json"))
        )
    return found


def fault_module(folder: Path, healthy_default: bool) -> str | None:
    """'' for a healthy variant, the train module path of a parameter fault, None for a variant left out."""
    truth_file, expected_file = folder / "truth.json", folder / "expected.json"
    if truth_file.is_file():
        truth = json.loads(truth_file.read_text())["truth"]
        if truth is None:
            return ""
        return truth_module(truth[0])[0] if truth[1] == PARAMETER_FAULT else None
    if expected_file.is_file():
        expected = json.loads(expected_file.read_text())
        if expected["clean"]:
            return ""
        cause = expected["root_cause"]
        where = module_call(cause["train_key"])
        return where[0] if cause["classification"] == PARAMETER_FAULT and where else None
    return "" if healthy_default else None


def combined(comparison: ModuleComparison, name: str, train: Dump, rollout: Dump) -> str:
    """How the two sides' parameter was put together."""
    kinds = ["fused experts"] if name == ALL_PARAMETERS else []
    if comparison.aggregated:
        kinds.append(f"{comparison.cardinality} parts")
    slot = f"parameters.{name}"
    for dump, keys in ((train, comparison.train_keys), (rollout, comparison.rollout_keys)):
        if dump.parallel is not None and any(f"{slot} sharded" in dump.parallel.merges.get(k, "") for k in keys):
            kinds.append("TP shards")
            break
    if comparison.joins_calls:
        kinds.append("calls")
    return " + ".join(kinds) or "1:1"


def measure(folder: Path, fault: str) -> list[Pair]:
    analysis = analyze_paths(
        folder / "train", folder / "rollout", folder / "mapping_key.json", rollout_options=rollout_options(folder)
    )
    train, rollout = analysis.comparator.train, analysis.comparator.rollout
    pairs: list[Pair] = []
    seen: set[tuple[tuple[str, ...], tuple[str, ...], str]] = set()
    for record in analysis.records:
        comparison = record.comparison
        for target, _, _, t, r, _ in comparison.spec_tuples():
            name = target.removeprefix("parameters.")
            if name == target or t is None or r is None or not exact_extremes(t, r):
                continue
            stats = (t.max, t.min, t.mean, t.norm, r.max, r.min, r.mean, r.norm)
            if not all(v is not None and math.isfinite(v) for v in stats):
                continue
            if (record.train_paths, record.rollout_paths, name) in seen:
                continue
            seen.add((record.train_paths, record.rollout_paths, name))
            in_fault = bool(fault) and any(p == fault or p.endswith(f".{fault}") for p in record.train_paths)
            if fault and not in_fault:
                continue  # a faulty variant's other weights: not what its truth names
            dtype = normalise_dtype(t.dtype) or "?"
            scale = comparison_scale(t, r, "match")
            pairs.append(
                Pair(
                    folder.name,
                    "fault" if in_fault else "healthy",
                    dtype,
                    combined(comparison, name, train, rollout),
                    t.numel or 0,
                    (t.max, t.min) == (r.max, r.min),
                    stat_error("Norm", t.norm, r.norm, scale),  # type: ignore[arg-type]
                    stat_error("Mean", t.mean, r.mean, scale),  # type: ignore[arg-type]
                    parameter_sum_tolerance(t.dtype, Tolerances().for_dtypes(t.dtype)),
                    f"{record.train_paths[0]}:{name}",
                )
            )
    faults = [p for p in pairs if p.kind == "fault"]
    return [p for p in pairs if p.kind == "healthy"] + ([max(faults, key=lambda p: p.ratio)] if faults else [])


def summary(pairs: list[Pair]) -> None:
    groups: dict[tuple[str, str, str], list[Pair]] = defaultdict(list)
    for pair in pairs:
        groups[(pair.kind, pair.dtype, pair.combined)].append(pair)
    print(
        f"{'kind':<8} {'dtype':<9} {'combined':<34} {'pairs':>6} {'equal':>6} {'max Norm':>9} {'max Mean':>9} {'/bound':>7}"
    )
    for (kind, dtype, how), found in sorted(groups.items()):
        equal = sum(p.norm_diff == p.mean_diff == 0.0 for p in found)
        norm, mean = max(p.norm_diff for p in found), max(p.mean_diff for p in found)
        ratio = max(p.ratio for p in found)
        print(f"{kind:<8} {dtype:<9} {how:<34} {len(found):>6} {equal:>6} {norm:>9.3g} {mean:>9.3g} {ratio:>7.3g}")
    beyond = [p for p in pairs if p.kind == "healthy" and p.ratio > 1.0]
    print(f"\nhealthy pairs beyond the bound: {len(beyond)}")
    for p in beyond:
        print(f"  {p.variant} {p.parameter} ({p.dtype}, {p.combined}): {p.ratio:.3g} x the bound")
    hidden = [p for p in pairs if p.kind == "fault" and p.extremes_equal and p.ratio <= 1.0]
    print(f"faults with equal extremes and sums within the bound: {len(hidden)}")
    for p in hidden:
        print(
            f"  {p.variant} {p.parameter} ({p.dtype}, {p.combined}): Norm {p.norm_diff:.3g}, {p.ratio:.3g} x the bound"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folders", nargs="+", type=Path, help="variant folders, or folders of variant folders")
    parser.add_argument(
        "--healthy", action="store_true", help="a variant without truth.json or expected.json is healthy"
    )
    parser.add_argument("--tsv", type=Path, help="also write one row per pair to this tab-separated file")
    args = parser.parse_args()
    pairs: list[Pair] = []
    for folder in variant_folders(args.folders):
        fault = fault_module(folder, args.healthy)
        if fault is not None:
            pairs += measure(folder, fault)
    summary(pairs)
    if args.tsv:
        with args.tsv.open("w", newline="") as f:
            writer = csv.writer(f, delimiter="\t", lineterminator="\n")
            writer.writerow(COLUMNS)
            writer.writerows([getattr(p, c) for c in COLUMNS] for p in pairs)


if __name__ == "__main__":
    main()
