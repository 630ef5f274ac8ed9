"""Benchmark the mapping matcher on the large synthetic dump pair (make_synthetic.py) against the orjson parse floor.

Prints, in one run: the parse floor (read + orjson-parse both dumps), the dump loading time, the time to suggest a
mapping (index build + suggestion) and its ratio to the floor (target <= 2x, judged on CPU time, which a busy
machine disturbs less than wall time), the interactive ranking latencies, and the suggestion's agreement with the
generator's mapping-key file.
"""

from __future__ import annotations

import gc
import random
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, TypeVar

import orjson
from bench_common import REPO_ROOT, benchmark_parser, dataset_paths, mib

sys.path.insert(0, str(REPO_ROOT))

from rca_lsp.base.jsonload import loads_lenient  # noqa: E402
from rca_lsp.dumps.load import DumpCache
from rca_lsp.suggest import Candidate, Matcher  # noqa: E402
from rca_lsp.suggest.agreement import compare_mappings  # noqa: E402
from rca_lsp.suggest.result import mapping_keys  # noqa: E402

TARGET_RATIO = 2.0
RANK_SAMPLES = 200
T = TypeVar("T")


@dataclass(frozen=True)
class Cost:
    wall: float
    cpu: float

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.wall + other.wall, self.cpu + other.cpu)

    def __str__(self) -> str:
        return f"{self.wall:6.2f} s wall, {self.cpu:6.2f} s cpu"

    def ratio(self, floor: Cost) -> str:
        return f"{self.wall / floor.wall:.2f}x floor wall, {self.cpu / floor.cpu:.2f}x floor cpu"


def timed(action: Callable[[], T]) -> tuple[T, Cost]:
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    value = action()
    return value, Cost(time.perf_counter() - wall, time.process_time() - cpu)


def parse_floor(paths: list[Path]) -> Cost:
    def parse() -> int:
        return len([loads_lenient(path.read_bytes(), str(path)) for path in paths])

    return timed(parse)[1]


def main(argv: list[str]) -> int:
    parser = benchmark_parser(__doc__, "dataset written by make_synthetic.py (run it first)")
    args = parser.parse_args(argv)
    paths = dataset_paths(args.data_dir)
    if not paths.exist():
        print(f"no synthetic pair in {args.data_dir}: run benchmarks/make_synthetic.py first", file=sys.stderr)
        return 2
    dumps = [paths.train_dump, paths.rollout_dump]
    print(f"pair: {', '.join(f'{path} ({mib(path.stat().st_size)})' for path in dumps)}")

    floor = parse_floor(dumps)
    cache = DumpCache()
    (train, rollout), load = timed(lambda: (cache.get(dumps[0]), cache.get(dumps[1])))
    print(f"keys: {len(train.keys)} train, {len(rollout.keys)} rollout")
    matcher, index = timed(lambda: Matcher(train, rollout))
    result, suggest = timed(matcher.suggest)
    total = index + suggest
    verdict = "OK" if total.cpu <= TARGET_RATIO * floor.cpu else "OVER TARGET"
    print(f"parse floor (read + orjson, both dumps): {floor}")
    print(f"dump loading (DumpCache, both dumps):    {load} = {load.ratio(floor)}")
    print(f"matcher index build:                     {index}")
    print(f"suggestion:                              {suggest}")
    print(
        f"suggest-mapping (index + suggestion):    {total} = {total.ratio(floor)} "
        f"(target <= {TARGET_RATIO:.0f}x): {verdict}"
    )
    print(f"end to end (loading + suggest-mapping):  {load + total} = {(load + total).ratio(floor)}")

    reference = orjson.loads(paths.mapping_key.read_bytes())
    print(f"agreement with {paths.mapping_key.name}: {compare_mappings(result.mapping, reference).summary()}")
    print(f"low-confidence suggestions: {len(result.low_confidence)}; groups: {len(result.groups)}")

    sample = random.Random(0).sample(sorted(reference), min(RANK_SAMPLES, len(reference)))

    def counterpart(key: str) -> list[str]:
        return mapping_keys(reference[key])

    cases: list[tuple[str, Callable[[str], list[Candidate]], Callable[[str], list[str]]]] = [
        ("rank_rollout_candidates (add missing mapping)", matcher.rank_rollout_candidates, counterpart),
        (
            "... with a misspelt rollout key (fix unknown key)",
            lambda key: matcher.rank_rollout_candidates(key, text_hint=_misspell(counterpart(key)[0])),
            counterpart,
        ),
        (
            "... with a typed prefix (completion)",
            lambda key: matcher.rank_rollout_candidates(key, 10, counterpart(key)[0][:40]),
            counterpart,
        ),
        (
            "rank_train_candidates with a misspelt train key",
            lambda key: matcher.rank_train_candidates(_misspell(key)),
            lambda key: [key],
        ),
    ]
    for what, call, expected in cases:
        milliseconds, right = _measure(call, expected, sample)
        print(f"{what + ':':52} median {milliseconds:6.2f} ms, right answer first for {right}/{len(sample)} keys")
    return 0


def _measure(
    call: Callable[[str], list[Candidate]], expected: Callable[[str], list[str]], keys: list[str]
) -> tuple[float, int]:
    """Median latency of `call` over `keys`, and how often its first candidate is the expected one."""
    durations, right = [], 0
    for key in keys:
        start = time.perf_counter()
        candidates = call(key)
        durations.append(time.perf_counter() - start)
        right += bool(candidates) and candidates[0].keys == expected(key)
    return statistics.median(durations) * 1000, right


def _misspell(key: str) -> str:
    """The key with one letter dropped from the last name (not number) of its module path, as a typo would."""
    head, _, call = key.rpartition(".forward.")
    segments = head.split(".")
    named = max(index for index, segment in enumerate(segments[:-1]) if not segment.isdigit())
    cut = len(segments[named]) // 2
    segments[named] = segments[named][:cut] + segments[named][cut + 1 :]
    return f"{'.'.join(segments)}.forward.{call}"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
