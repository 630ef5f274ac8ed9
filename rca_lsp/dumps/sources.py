"""Which files make up one logical dump: a dump.json, or the rank folders of one step of an msprobe dump directory.

msprobe writes `<dump_path>/step<N>/rank<R>/dump.json` per rank (`proc<pid>/` without a rank). A directory with
several ranks of one step is one logical dump (the ranks are merged, see dumps/ranks); several steps need a choice:
one step, or a span of steps joined as successive calls (see stepjoin) when each step is one engine step of a
decoding rollout (msprobe's vLLM integration dumps every `execute_model` as its own step). Joined steps must hold
the same ranks (a tensor-parallel engine: one rank folder per worker in every step).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from rca_lsp.base.errors import InputError
from rca_lsp.base.inputfile import file_kind

_STEP_RE = re.compile(r"step(\d+)$")
_RANK_RE = re.compile(r"rank(\d+)$")
_LAYOUT_DIMS = ("tp", "pp", "ep", "dp")


@dataclass(frozen=True)
class ParallelLayout:
    """How the ranks of a run were laid out (Megatron's default rank order: tp fastest, then ep, dp, pp).

    Given by the user (`--parallel tp=2,pp=2`, `parallel = "tp=2"` in rca-lsp.toml) when the dumps alone cannot
    tell; a dimension left out is inferred from the dumps. `dp` counts the replicas of the whole model (tp x ep x dp
    ranks per stage); with ep, Megatron's data-parallel size of the dense layers (ep x that) is accepted too."""

    tp: int | None = None
    pp: int | None = None
    ep: int | None = None
    dp: int | None = None

    def __str__(self) -> str:
        return ",".join(f"{name}={value}" for name in _LAYOUT_DIMS if (value := getattr(self, name)) is not None)


@dataclass(frozen=True)
class StepSpan:
    """Steps `first`..`last` (both included; None: from the first, to the last) joined as successive calls."""

    first: int | None = None
    last: int | None = None

    def __str__(self) -> str:
        if self.first is None and self.last is None:
            return "all"
        return f"{'' if self.first is None else self.first}-{'' if self.last is None else self.last}"

    def holds(self, step: int) -> bool:
        return (self.first is None or step >= self.first) and (self.last is None or step <= self.last)


StepChoice = int | StepSpan | None


def parse_step(text: str | int | None, where: str = "--step") -> StepChoice:
    """`3` -> 3; `all` -> every step; `2-6`, `2-`, `-6` -> a span of steps joined as calls; None or "" -> None."""
    if text is None or isinstance(text, int):
        return text
    cleaned = text.strip().lower()
    if not cleaned:
        return None
    if cleaned.isdigit():
        return int(cleaned)
    if cleaned == "all":
        return StepSpan()
    first, dash, last = cleaned.partition("-")
    if dash and (first.strip().isdigit() or not first.strip()) and (last.strip().isdigit() or not last.strip()):
        span = StepSpan(int(first) if first.strip() else None, int(last) if last.strip() else None)
        if span.first is not None and span.last is not None and span.first > span.last:
            raise InputError(where, f"the step span {text!r} ends before it starts")
        return span
    raise InputError(where, f"expected a step number, `all`, or a span such as `0-4`; got {text!r}")


def parse_layout(text: str | None, where: str = "--parallel") -> ParallelLayout | None:
    """`tp=2,pp=2,ep=1,dp=1` (any subset, any order) -> ParallelLayout; None or "" -> None."""
    if not text or not text.strip():
        return None
    values: dict[str, int] = {}
    for part in text.split(","):
        name, _, number = part.strip().partition("=")
        name = name.strip().lower()
        if name not in _LAYOUT_DIMS:
            raise InputError(
                where, f"unknown parallel dimension {name!r} in {text!r} (expected {', '.join(_LAYOUT_DIMS)})"
            )
        if not number.strip().isdigit() or int(number) < 1:
            raise InputError(where, f"{name} must be a positive integer, got {number.strip()!r} in {text!r}")
        values[name] = int(number)
    return ParallelLayout(**values)


@dataclass(frozen=True)
class DumpSource:
    """The dump.json files of one logical dump, in rank order, and what was asked for."""

    root: Path  # what the user named, resolved (a file or a directory)
    files: tuple[Path, ...]
    ranks: tuple[int, ...]  # one per file; (0,) for a lone dump.json
    step: int | None
    layout: ParallelLayout | None = None
    # steps joined as successive calls, each holding the same ranks: files (and ranks) step by step, each step's
    # in rank order
    joined_steps: tuple[int, ...] = ()
    # the data-parallel group analysed is the one holding this rank (None: the first; the caller picks another when
    # the rollout read another group's data, see compare/datagroups.py)
    data_rank: int | None = None

    @property
    def label(self) -> str:
        """The name messages use: the file, or the directory with its step or steps."""
        if self.joined_steps:
            steps = len(self.joined_steps)
            ranks = f" of {len(self.files) // steps} ranks" if len(self.files) > steps else ""
            return f"{self.root} steps {self.joined_steps[0]}-{self.joined_steps[-1]} ({steps} steps{ranks} joined)"
        if len(self.files) == 1:
            return str(self.files[0])
        step = f" step{self.step}" if self.step is not None else ""
        return f"{self.root}{step} ({len(self.files)} ranks)"

    def rank_label(self, index: int) -> str:
        return f"rank {self.ranks[index]} ({self.files[index]})"

    def step_sources(self) -> tuple[DumpSource, ...]:
        """One source per joined step: that step's rank files."""
        per = len(self.files) // len(self.joined_steps)
        return tuple(
            DumpSource(
                self.root,
                self.files[i * per : (i + 1) * per],
                self.ranks[i * per : (i + 1) * per],
                n,
                self.layout,
                data_rank=self.data_rank,
            )
            for i, n in enumerate(self.joined_steps)
        )


def _rank_folders(folder: Path) -> list[tuple[int, Path]]:
    found = []
    for child in folder.iterdir() if folder.is_dir() else ():
        match = _RANK_RE.match(child.name)
        if match and (child / "dump.json").is_file():
            found.append((int(match.group(1)), child / "dump.json"))
    return sorted(found)


def _proc_folders(folder: Path) -> list[Path]:
    return sorted(p / "dump.json" for p in folder.glob("proc*") if (p / "dump.json").is_file())


def _steps(folder: Path) -> dict[int, Path]:
    steps = {}
    for child in folder.iterdir():
        match = _STEP_RE.match(child.name)
        if match and child.is_dir():
            steps[int(match.group(1))] = child
    return dict(sorted(steps.items()))


def _ranks_in(folder: Path, label: str) -> tuple[list[tuple[int, Path]], str | None]:
    """Rank dumps of one step folder (or of a folder of rank folders); an error text when there are none."""
    ranks = _rank_folders(folder)
    if ranks:
        numbers = [r for r, _ in ranks]
        missing = sorted(set(range(max(numbers) + 1)) - set(numbers))
        if missing:
            raise InputError(
                label,
                f"rank folders {', '.join(map(str, numbers))} found, but rank "
                f"{', '.join(map(str, missing))} is missing (a rank that did not dump?)",
            )
        return ranks, None
    procs = _proc_folders(folder)
    if len(procs) == 1:
        return [(0, procs[0])], None
    if len(procs) > 1:
        raise InputError(
            label,
            f"{len(procs)} proc* dumps found ({', '.join(p.parent.name for p in procs[:4])}): "
            "without rank folders the ranks cannot be told apart; pass one dump.json",
        )
    return [], "no dump.json found"


def resolve_dump_source(
    path: str | os.PathLike[str],
    step: StepChoice = None,
    layout: ParallelLayout | None = None,
    step_if_several: StepChoice = None,
) -> DumpSource:
    """A dump.json, an msprobe dump directory (`step*/rank*/dump.json`), a step folder or a rank folder.
    `step` must exist (a span: hold at least one step); `step_if_several` chooses only among several steps
    (`--step` given for the other side)."""
    candidate = Path(path)
    if candidate.is_file():
        return DumpSource(candidate.resolve(), (candidate.resolve(),), (0,), None, layout)
    if not candidate.is_dir():
        try:
            mode = candidate.stat().st_mode
        except OSError:
            raise InputError(str(candidate), "no such dump file or directory") from None
        raise InputError(str(candidate), f"not a dump file or directory: {file_kind(mode)}")
    root = candidate.resolve()
    if (root / "dump.json").is_file():
        return DumpSource(root, (root / "dump.json",), (0,), None, layout)
    steps = _steps(root)
    if steps:
        if step is None and len(steps) > 1 and (step_if_several in steps or isinstance(step_if_several, StepSpan)):
            step = step_if_several
        if isinstance(step, StepSpan):
            chosen = [n for n in steps if step.holds(n)]
            if not chosen:
                raise InputError(str(root), f"no step in {step} here (steps: {', '.join(f'step{n}' for n in steps)})")
            if len(chosen) > 1:
                return _joined_steps(root, {n: steps[n] for n in chosen}, layout)
            step = chosen[0]
        if step is None:
            if len(steps) > 1:
                listed = "; ".join(f"step{n} ({_describe_ranks(folder)})" for n, folder in steps.items())
                raise InputError(
                    str(root),
                    f"{len(steps)} steps found: {listed}; choose one with --step N (setting `step`), or join "
                    "a decoding rollout's engine steps as successive calls with --rollout-step all",
                )
            step = next(iter(steps))
        if step not in steps:
            raise InputError(str(root), f"no step{step} here (steps: {', '.join(f'step{n}' for n in steps)})")
        ranks, problem = _ranks_in(steps[step], f"{root}/step{step}")
        if problem:
            raise InputError(f"{root}/step{step}", f"{problem} (looked for rank*/dump.json, proc*/dump.json)")
        return DumpSource(root, tuple(p for _, p in ranks), tuple(r for r, _ in ranks), step, layout)
    ranks, problem = _ranks_in(root, str(root))
    if problem:
        raise InputError(
            str(root),
            "no dump.json found (looked for dump.json, step*/rank*/dump.json, step*/proc*/dump.json, rank*/dump.json)",
        )
    return DumpSource(
        root, tuple(p for _, p in ranks), tuple(r for r, _ in ranks), step if isinstance(step, int) else None, layout
    )


def _joined_steps(root: Path, steps: dict[int, Path], layout: ParallelLayout | None) -> DumpSource:
    """The steps' rank files, step by step; every step must hold the ranks of the first."""
    files: list[Path] = []
    ranks: list[int] = []
    first: list[int] | None = None
    for n in steps:
        found, problem = _ranks_in(steps[n], f"{root}/step{n}")
        if problem:
            raise InputError(f"{root}/step{n}", f"{problem} (looked for rank*/dump.json, proc*/dump.json)")
        numbers = [r for r, _ in found]
        if first is None:
            first = numbers
        elif numbers != first:
            raise InputError(
                f"{root}/step{n}",
                f"step{n} holds {_ranks_text(numbers)} but step{next(iter(steps))} holds {_ranks_text(first)}: "
                "steps joined as successive calls must hold the same ranks",
            )
        files.extend(p for _, p in found)
        ranks.extend(numbers)
    return DumpSource(root, tuple(files), tuple(ranks), None, layout, tuple(steps))


def _ranks_text(ranks: list[int]) -> str:
    """`rank 0`, `ranks 0-3` (a step's ranks have no gaps, see _ranks_in)."""
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {ranks[0]}-{ranks[-1]}"


def _describe_ranks(folder: Path) -> str:
    ranks = [r for r, _ in _rank_folders(folder)]
    if ranks:
        return _ranks_text(ranks)
    return f"{len(_proc_folders(folder))} proc"


def signatures(source: "DumpSource") -> tuple[tuple[int, int], ...]:
    return tuple(signature(path) for path in source.files)


def check_unchanged(source: "DumpSource", before: tuple[tuple[int, int], ...]) -> None:
    for path, was in zip(source.files, before):
        if signature(path) != was:
            raise InputError(str(path), "the dump changed while it was being read; it is probably being rewritten")


def signature(path: Path) -> tuple[int, int]:
    try:
        info = path.stat()
    except OSError as error:
        raise InputError(str(path), f"cannot read dump: {error.strerror}") from None
    return info.st_size, info.st_mtime_ns
