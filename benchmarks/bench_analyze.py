"""Benchmark a cold `python -m rca_lsp analyze` against the parse floor on a large synthetic dump pair.

Each measurement is one fresh child process; its wall time and peak RSS (wait4 rusage) are recorded, and the
median of --repeat runs is reported. This process stays small on purpose: Linux counts the parent's RSS at
spawn time into a child's peak, so nothing heavy (orjson, generation) runs in it.
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Union

from bench_common import (
    BENCH_DIR,
    EXIT_NOT_STRICT_JSON,
    LARGE,
    REPO_ROOT,
    DataSet,
    DatasetPaths,
    benchmark_parser,
    dataset_paths,
    mib,
)

TARGET_RATIO = 1.3


@dataclass(frozen=True)
class Cost:
    wall_s: float
    cpu_s: float  # user + system
    peak_rss: int  # bytes


@dataclass(frozen=True)
class Run:
    cost: Cost
    exit_code: int
    timed_out: bool
    log: Path
    rejected: str | None = None  # why a run that exited 0 does not count (see mapping_problems)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and self.rejected is None


Outcome = Union[Cost, str]  # median cost of a measurement's runs, or why it failed
COLUMNS = (("wall", "wall_s"), ("peak RSS", "peak_rss"), ("cpu", "cpu_s"))


def kill_group(pgid: int, expired: threading.Event | None = None) -> None:
    if expired is not None:
        expired.set()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def run_child(argv: list[str], log: Path, timeout_s: float) -> Run:
    """Spawn argv in its own process group (stdout and stderr to log), wait for it, at most timeout_s,
    and return its wall time, CPU time and own peak RSS."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
    actions = [
        (os.POSIX_SPAWN_OPEN, 1, str(log), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644),
        (os.POSIX_SPAWN_DUP2, 1, 2),
    ]
    start = time.perf_counter()
    pid = os.posix_spawn(argv[0], argv, env, file_actions=actions, setpgroup=0)
    expired = threading.Event()
    timer = threading.Timer(timeout_s, kill_group, (pid, expired))
    timer.start()
    try:
        _, status, usage = os.wait4(pid, 0)
    except BaseException:  # e.g. Ctrl-C: the child's own process group does not get it
        kill_group(pid)
        os.waitpid(pid, 0)
        raise
    finally:
        timer.cancel()
    cost = Cost(time.perf_counter() - start, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024)
    return Run(cost, os.waitstatus_to_exitcode(status), expired.is_set(), log)


def last_line(log: Path) -> str:
    lines = log.read_text(errors="replace").strip().splitlines()
    return lines[-1] if lines else "(no output)"


MAPPING_WARNING = re.compile(r"^warning: .*?:\d+: ([a-z-]+): ", re.MULTILINE)
MORE_WARNINGS = re.compile(r"^warning: \.\.\. (\d+) more mapping problems", re.MULTILINE)


def mapping_problems(log: Path) -> str | None:
    """The synthetic mappings are complete and valid, so an analyze run that warns about mapping entries (e.g.
    unknown keys: dumps or key notation the CLI does not understand) compared next to nothing: not a measurement."""
    text = log.read_text(errors="replace")
    codes = MAPPING_WARNING.findall(text)
    if not codes:
        return None
    total = len(codes) + sum(int(n) for n in MORE_WARNINGS.findall(text))
    first = next(line for line in text.splitlines() if MAPPING_WARNING.match(line))
    return (
        f"exit status 0, but {total} mapping problems ({', '.join(sorted(set(codes)))}), so this is no "
        f"measurement of the data set; first: {first[:300]}{'...' if len(first) > 300 else ''}"
    )


def summarize(runs: list[Run], explain_failure: dict[int, str]) -> Outcome:
    for run in runs:
        if run.timed_out:
            return f"killed at the {run.cost.wall_s:.1f} s timeout (output so far: {run.log})"
        if run.rejected is not None:
            return f"{run.rejected}\n  (full output: {run.log})"
        if not run.ok:
            reason = explain_failure.get(run.exit_code, f"exit status {run.exit_code}")
            return f"{reason}: {last_line(run.log)}\n  (full output: {run.log})"
    costs = [run.cost for run in runs]
    return Cost(
        statistics.median(c.wall_s for c in costs),
        statistics.median(c.cpu_s for c in costs),
        int(statistics.median(c.peak_rss for c in costs)),
    )


def floor_argv(paths: DatasetPaths) -> list[str]:
    """Parse every dump file (each train rank's, then the rollout's) one after another, holding them all."""
    return [sys.executable, str(BENCH_DIR / "parse_floor.py"), *map(str, paths.dumps())]


def analyze_argv(paths: DatasetPaths, out_dir: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "rca_lsp",
        "analyze",
        "--train",
        str(paths.train_dump),
        "--rollout",
        str(paths.rollout_dump),
        "--mapping-key",
        str(paths.mapping_key),
        "--out-dir",
        str(out_dir),
    ]


def ensure_dataset(data_dir: Path, dataset: DataSet = LARGE) -> DatasetPaths:
    paths = dataset_paths(data_dir, dataset.train_ranks)
    if not paths.exist():
        options = " ".join(dataset.options) or "defaults"
        print(f"no dataset in {data_dir}: generating it with make_synthetic.py ({options})", flush=True)
        subprocess.run(
            [sys.executable, str(BENCH_DIR / "make_synthetic.py"), "--out-dir", str(data_dir), *dataset.options],
            check=True,
        )
    return paths


def warm_caches(paths: DatasetPaths) -> None:
    """Read every input once so that all measured runs see the same (warm) page cache; and compile rca_lsp's
    bytecode, as an installed package has it: where PYTHONDONTWRITEBYTECODE is set (this machine sets it), every
    run would otherwise compile the package again (~0.1 s of its imports)."""
    for path in paths.all():
        with path.open("rb") as f:
            while f.read(1 << 24):
                pass
    compileall.compile_dir(REPO_ROOT / "rca_lsp", quiet=1)


def measure(paths: DatasetPaths, data_dir: Path, repeat: int, timeout_s: float) -> tuple[Outcome, Outcome]:
    """Alternate floor and analyze runs so that both see the same machine conditions.
    A measurement that failed once is not run again."""
    out_dir = data_dir / "analyze_out"
    runs: dict[str, list[Run]] = {"floor": [], "analyze": []}
    argvs = {"floor": floor_argv(paths), "analyze": analyze_argv(paths, out_dir)}
    for i in range(repeat):
        for name, done in runs.items():
            if not all(run.ok for run in done):
                continue
            shutil.rmtree(out_dir, ignore_errors=True)
            run = run_child(argvs[name], data_dir / f"{name}.{i}.log", timeout_s)
            if name == "analyze" and run.exit_code == 0:
                run = replace(run, rejected=mapping_problems(run.log))
            done.append(run)
            status = "" if done[-1].ok else " (failed)"
            print(f"run {i + 1}/{repeat}: {name} {done[-1].cost.wall_s:.2f} s{status}", flush=True)
    floor = summarize(runs["floor"], {EXIT_NOT_STRICT_JSON: "orjson rejects a dump, floor n/a"})
    return floor, summarize(runs["analyze"], {})


def cell(outcome: Outcome, field: str) -> str:
    if isinstance(outcome, str):
        return "n/a"
    value = getattr(outcome, field)
    return mib(value) if field == "peak_rss" else f"{value:.2f} s"


def ratio_cell(analyze: Outcome, floor: Outcome, field: str, target: float = TARGET_RATIO) -> str:
    if isinstance(analyze, str) or isinstance(floor, str):
        return "n/a"
    ratio = getattr(analyze, field) / getattr(floor, field)
    return f"{ratio:.2f}x {'ok' if ratio <= target else 'OVER'}"


def report_inputs(data_dir: Path, paths: DatasetPaths) -> None:
    print(f"\ninputs in {data_dir}:")
    for path in paths.all():
        print(f"  {path.relative_to(data_dir)}: {mib(path.stat().st_size)}")
    if len(paths.dumps()) > 2:
        print(f"  all {len(paths.dumps())} dumps: {mib(paths.dump_bytes())}")


def report(
    data_dir: Path, paths: DatasetPaths, repeat: int, floor: Outcome, analyze: Outcome, target: float = TARGET_RATIO
) -> None:
    report_inputs(data_dir, paths)
    print(f"median of {repeat} run(s), each a fresh process, page cache warm\n")
    print(f"{'':<16}" + "".join(f"{title:>14}" for title, _ in COLUMNS))
    for name, outcome in (("parse floor", floor), ("analyze", analyze)):
        print(f"{name:<16}" + "".join(f"{cell(outcome, field):>14}" for _, field in COLUMNS))
    print(
        f"{'analyze/floor':<16}"
        + "".join(f"{ratio_cell(analyze, floor, field, target):>14}" for _, field in COLUMNS)
        + f"   (target: wall and RSS <= {target}x)"
    )
    for name, outcome in (("parse floor", floor), ("analyze", analyze)):
        if isinstance(outcome, str):
            print(f"\n{name}: {outcome}")


def add_run_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repeat", type=int, default=1, help="runs per measurement; the median is reported")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds before a run is killed (default 900)")


def run_benchmark(argv: list[str], description: str | None, dataset: DataSet, target: float) -> int:
    """The whole benchmark on one data set: generate it if missing, warm the page cache, measure, report."""
    parser = benchmark_parser(
        description,
        f"data set (generated with make_synthetic.py {' '.join(dataset.options) or '(defaults)'} if missing)",
        dataset.default_dir,
    )
    add_run_options(parser)
    args = parser.parse_args(argv)
    data_dir = args.data_dir.resolve()
    paths = ensure_dataset(data_dir, dataset)
    warm_caches(paths)
    repeat = max(args.repeat, 1)
    floor, analyze = measure(paths, data_dir, repeat, args.timeout)
    report(data_dir, paths, repeat, floor, analyze, target)
    return 0


def main(argv: list[str]) -> int:
    return run_benchmark(argv, __doc__, LARGE, TARGET_RATIO)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
