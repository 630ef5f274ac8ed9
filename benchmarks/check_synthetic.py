"""Check a synthetic data set written by make_synthetic.py the way a correct merge would read it.

For every mapping entry: the train entry merged over its TP ranks (identical statistics on every rank: a
replicated tensor; else shards, aggregated), the rollout entries aggregated over the calls a `.forward.*` value
names and, for a list value, over its modules; then slot by slot (input_args, output, parameters, by position or
name) numel, Max and Min must be equal and Mean and Norm equal to float32 rounding (a Mean relative to the
tensor's RMS, Norm / sqrt(numel): means of parts with opposite signs cancel, their rounding does not). A pair matches when all its
slots do. With a fault, the first mismatching pair (in train dump order) must be in the fault layer; without,
there must be none. Also checked: every rank holds the same keys in the same order.

    .venv/bin/python benchmarks/check_synthetic.py --data-dir benchmarks/data/tp8 --train-ranks 8 --fault-layer 30
"""

from __future__ import annotations

import json
import math
import re
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import orjson
from bench_common import DatasetPaths, benchmark_parser, dataset_paths

REL_TOLERANCE = 1e-6  # Mean/Norm: parts rounded to float32 (fused q/k/v) vs the exact aggregate
SLOT_FIELDS = ("input_args", "output", "parameters")
LAYER = re.compile(r"\.layers\.(\d+)\.")


@dataclass(frozen=True)
class Stat:
    numel: int
    max: float
    min: float
    mean: float | None
    norm: float | None


def load_data(path: Path) -> dict[str, Any]:
    raw = path.read_bytes()
    try:
        return orjson.loads(raw)["data"]
    except orjson.JSONDecodeError:  # NaN/Infinity literals
        return json.loads(raw)["data"]


def stat(node: Any) -> Stat | None:
    if not (isinstance(node, dict) and node.get("type") == "torch.Tensor"):
        return None
    return Stat(math.prod(node["shape"]), node["Max"], node["Min"], node["Mean"], node["Norm"])


def aggregate(stats: list[Stat]) -> Stat:
    """One tensor from several records of it: all identical = replicated (or a parameter seen in every call),
    else parts of one tensor (shards, calls, split modules): max of maxes, min of mins, numel-weighted mean,
    root of the summed squared norms."""
    if all(s == stats[0] for s in stats[1:]):
        return stats[0]
    size = sum(s.numel for s in stats)
    means, norms = [s.mean for s in stats], [s.norm for s in stats]
    mean = None if None in means else sum(s.numel * m for s, m in zip(stats, means)) / size  # type: ignore[operator]
    norm = None if None in norms else math.sqrt(sum(n**2 for n in norms))  # type: ignore[operator]
    return Stat(size, max(s.max for s in stats), min(s.min for s in stats), mean, norm)


def slots(entry: dict[str, Any]) -> dict[tuple[str, Any], Stat]:
    found = {}
    for name in SLOT_FIELDS:
        value = entry.get(name) or ()
        for slot, node in value.items() if isinstance(value, dict) else enumerate(value):
            if (s := stat(node)) is not None:
                found[(name, slot)] = s
    return found


def merged(entries: list[dict[str, Any]]) -> dict[tuple[str, Any], Stat]:
    per_entry = [slots(e) for e in entries]
    return {slot: aggregate([p[slot] for p in per_entry]) for slot in per_entry[0]}


def same(a: float | None, b: float | None, exact: bool, scale: float = 0.0) -> tuple[bool, float]:
    """Whether two statistics agree, and their difference relative to the larger of them and `scale`."""
    if a is None or b is None:
        return a is b, 0.0
    if math.isnan(a) or math.isnan(b) or math.isinf(a) or math.isinf(b):
        return (math.isnan(a) and math.isnan(b)) or a == b, 0.0
    rel = abs(a - b) / max(abs(a), abs(b), scale, 1e-30)
    return (a == b if exact else rel <= REL_TOLERANCE), rel


def compare(train: dict[tuple[str, Any], Stat], rollout: dict[tuple[str, Any], Stat]) -> tuple[bool, float]:
    ok, worst = True, 0.0
    for slot in train.keys() & rollout.keys():
        t, r = train[slot], rollout[slot]
        rms = 0.0 if r.norm is None or math.isinf(r.norm) or math.isnan(r.norm) else r.norm / math.sqrt(r.numel or 1)
        results = [
            same(t.max, r.max, True),
            same(t.min, r.min, True),
            same(t.mean, r.mean, False, rms),
            same(t.norm, r.norm, False),
        ]
        ok = ok and t.numel == r.numel and all(agree for agree, _ in results)
        worst = max([worst] + [rel for _, rel in results])
    return ok, worst


def calls_of(keys: Iterable[str]) -> dict[str, list[str]]:
    """`<module>.forward` -> its keys in call order."""
    by_module: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for key in keys:
        module, _, n = key.rpartition(".")
        if n.isdigit():
            by_module[module].append((int(n), key))
    return {module: [key for _, key in sorted(calls)] for module, calls in by_module.items()}


def rollout_side(
    value: str | list[str], data: dict[str, Any], calls: dict[str, list[str]]
) -> dict[tuple[str, Any], Stat]:
    """Aggregate over the calls of each named module (`.forward.*`), then over the modules (1:N)."""
    per_module = []
    for key in [value] if isinstance(value, str) else value:
        keys = calls[key[:-2]] if key.endswith(".*") else [key]
        per_module.append(merged([data[k] for k in keys]))
    return {
        slot: aggregate([m[slot] for m in per_module])
        for slot in per_module[0].keys()
        if all(slot in m for m in per_module)
    }


def sharding_summary(ranks: list[dict[str, Any]]) -> Counter[str]:
    """`<class> <field>: sharded|replicated` counts over the first call's entries (how the ranks differ)."""
    summary: Counter[str] = Counter()
    for key in ranks[0]:
        if not key.endswith(".forward.0"):
            continue
        per_rank = [slots(r[key]) for r in ranks]
        cls = key.rsplit(".", 3)[-3]
        for slot in per_rank[0]:
            kind = "replicated" if all(p[slot] == per_rank[0][slot] for p in per_rank) else "sharded"
            summary[f"{cls} {slot[0]}: {kind}"] += 1
    return summary


def check_dataset(paths: DatasetPaths, expect_fault_layer: int | None) -> int:
    start = time.perf_counter()
    ranks = [load_data(path) for path in paths.dumps()[:-1]]
    rollout = load_data(paths.rollout_dump)
    mapping: dict[str, str | list[str]] = orjson.loads(paths.mapping_key.read_bytes())
    problems = [f"rank {r} keys differ from rank 0's" for r, d in enumerate(ranks) if list(d) != list(ranks[0])]
    calls = calls_of(rollout)
    worst = {"1:1": 0.0, "1:N": 0.0}
    mismatches: list[str] = []
    for train_key, value in mapping.items():
        ok, rel = compare(merged([r[train_key] for r in ranks]), rollout_side(value, rollout, calls))
        kind = "1:N" if isinstance(value, list) else "1:1"
        if ok:
            worst[kind] = max(worst[kind], rel)
        else:
            mismatches.append(train_key)
    if len(ranks) > 1:
        print("train slots by module class (first call):")
        for line, n in sorted(sharding_summary(ranks).items()):
            print(f"  {line}: {n}")
    print(
        f"{len(mapping)} mapping entries: {len(mapping) - len(mismatches)} match, {len(mismatches)} mismatch; "
        f"largest relative Mean/Norm difference of matching pairs: 1:1 {worst['1:1']:.2g}, 1:N {worst['1:N']:.2g}"
    )
    first_layer = next((int(m.group(1)) for key in mismatches[:1] if (m := LAYER.search(key))), None)
    if mismatches:
        print(f"first mismatch: {mismatches[0]}")
    if expect_fault_layer is None and mismatches:
        problems.append("mismatches without a fault")
    if expect_fault_layer is not None and first_layer != expect_fault_layer:
        problems.append(f"first mismatch should be in layer {expect_fault_layer} (the fault), is in {first_layer}")
    for problem in problems:
        print(f"CHECK FAILED: {problem}")
    print(f"check {'failed' if problems else 'passed'} in {time.perf_counter() - start:.1f} s")
    return 1 if problems else 0


def main(argv: list[str]) -> int:
    parser = benchmark_parser(__doc__, "data set to check")
    parser.add_argument("--train-ranks", type=int, default=1)
    parser.add_argument("--fault-layer", type=int, default=None, help="the injected fault's layer (none if omitted)")
    args = parser.parse_args(argv)
    return check_dataset(dataset_paths(args.data_dir, args.train_ranks), args.fault_layer)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
