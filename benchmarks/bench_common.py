"""Helpers shared by the benchmark scripts: where a synthetic data set lives and how sizes print."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
EXIT_NOT_STRICT_JSON = 3  # parse_floor.py: orjson rejected a dump (NaN/Infinity literals)


@dataclass(frozen=True)
class DataSet:
    """A synthetic data set: make_synthetic.py's options for it and the number of train ranks they give."""

    name: str  # default folder: benchmarks/data/<name>
    options: tuple[str, ...] = ()
    train_ranks: int = 1

    @property
    def default_dir(self) -> Path:
        return BENCH_DIR / "data" / self.name


LARGE = DataSet("large")  # make_synthetic.py's defaults: 60 layers, 256 experts, 4 calls


def tensor_parallel_set(ranks: int) -> DataSet:
    """`--tp <ranks> --experts 64`: the train side as that many tensor-parallel rank dumps."""
    return DataSet(f"tp{ranks}", ("--tp", str(ranks), "--experts", "64"), train_ranks=ranks)


TP8 = tensor_parallel_set(8)
DECODE = DataSet("decode", ("--decode-steps", "256", "--layers", "24", "--experts", "64"))
DEFAULT_DATA_DIR = LARGE.default_dir


def benchmark_parser(
    description: str | None, data_dir_help: str, default_dir: Path = DEFAULT_DATA_DIR
) -> argparse.ArgumentParser:
    """A benchmark's command line: its docstring as help, and --data-dir."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=default_dir, help=data_dir_help)
    return parser


@dataclass(frozen=True)
class DatasetPaths:
    """The input files of one synthetic train/rollout comparison."""

    train_dump: Path  # what --train gets: the dump.json, or with several ranks the msprobe dump directory
    rollout_dump: Path
    mapping_key: Path
    train_ranks: int = 1

    def dumps(self) -> tuple[Path, ...]:
        """Every dump.json file: each train rank's, then the rollout's."""
        if self.train_ranks == 1:
            return (self.train_dump, self.rollout_dump)
        return (*(rank_dump(self.train_dump, r) for r in range(self.train_ranks)), self.rollout_dump)

    def all(self) -> tuple[Path, ...]:
        return (*self.dumps(), self.mapping_key)

    def exist(self) -> bool:
        return all(path.is_file() for path in self.all())

    def dump_bytes(self) -> int:
        return sum(path.stat().st_size for path in self.dumps())


def rank_dump(dump_dir: Path, rank: int) -> Path:
    """msprobe's layout of one rank's dump of step 0 under a dump directory."""
    return dump_dir / "step0" / f"rank{rank}" / "dump.json"


def dataset_paths(data_dir: Path, train_ranks: int = 1) -> DatasetPaths:
    """Layout written by make_synthetic.py: msprobe's `step<N>/rank<R>/dump.json` per side; with several train
    ranks the train side is passed as its dump directory (`train/`, holding step0/rank0..)."""
    train = data_dir / "train"
    return DatasetPaths(
        train_dump=rank_dump(train, 0) if train_ranks == 1 else train,
        rollout_dump=rank_dump(data_dir / "rollout", 0),
        mapping_key=data_dir / "mapping_key.json",
        train_ranks=train_ranks,
    )


def mib(n_bytes: float) -> str:
    return f"{n_bytes / 2**20:.1f} MiB"
