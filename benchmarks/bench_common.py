"""Helpers shared by the benchmark scripts: where a synthetic data set lives and how sizes print."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
DEFAULT_DATA_DIR = BENCH_DIR / "data" / "large"
EXIT_NOT_STRICT_JSON = 3  # parse_floor.py: orjson rejected a dump (NaN/Infinity literals)


def benchmark_parser(description: str | None, data_dir_help: str) -> argparse.ArgumentParser:
    """A benchmark's command line: its docstring as help, and --data-dir."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR, help=data_dir_help)
    return parser


@dataclass(frozen=True)
class DatasetPaths:
    """The three input files of one synthetic train/rollout comparison."""

    train_dump: Path
    rollout_dump: Path
    mapping_key: Path

    def all(self) -> tuple[Path, Path, Path]:
        return (self.train_dump, self.rollout_dump, self.mapping_key)

    def exist(self) -> bool:
        return all(path.is_file() for path in self.all())


def dataset_paths(data_dir: Path) -> DatasetPaths:
    """Layout written by make_synthetic.py: msprobe's `step<N>/rank<R>/dump.json` per side."""
    return DatasetPaths(
        train_dump=data_dir / "train" / "step0" / "rank0" / "dump.json",
        rollout_dump=data_dir / "rollout" / "step0" / "rank0" / "dump.json",
        mapping_key=data_dir / "mapping_key.json",
    )


def mib(n_bytes: float) -> str:
    return f"{n_bytes / 2**20:.1f} MiB"
