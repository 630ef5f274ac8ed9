"""Which files make up one logical dump: a dump.json, or the rank folders of one step of an msprobe dump directory.

msprobe writes `<dump_path>/step<N>/rank<R>/dump.json` per rank (`proc<pid>/` without a rank). A directory with
several ranks of one step is one logical dump (the ranks are merged, see dumps/ranks); several steps need a choice:
one step, or a span of steps joined as successive calls (see stepjoin) when each step is one engine step of a
decoding rollout (msprobe's vLLM integration dumps every `execute_model` as its own step). Joined steps must hold
the same ranks (a tensor-parallel engine: one rank folder per worker in every step).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, replace
from pathlib import Path

from rca_lsp.base.digits import is_ascii_digits
from rca_lsp.base.errors import InputError
from rca_lsp.base.inputfile import file_kind

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


def _ascii_number(text: str) -> int | None:
    """A whole number written in ASCII digits (surrounding blanks allowed); None for anything else."""
    text = text.strip()
    return int(text) if is_ascii_digits(text) else None


def is_step_number(value: object) -> bool:
    """A step number given as a value (settings, rca-lsp.toml): an int >= 0; TOML's and JSON's true/false are not."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def parse_step_number(text: str, where: str = "--step", what: str = "step") -> int:
    """`3` -> 3: one step (or rank, as `what` says), as --step (--train-rank) takes it."""
    number = _ascii_number(text)
    if number is None:
        raise InputError(where, f"expected a {what} number (0, 1, ... in ASCII digits), got {text!r}")
    return number


def parse_step(text: str | int | None, where: str = "--step") -> StepChoice:
    """`3` -> 3; `all` -> every step; `2-6`, `2-`, `-6` -> a span of steps joined as calls; None or "" -> None."""
    if text is None or isinstance(text, int):
        return text
    cleaned = text.strip().lower()
    if not cleaned:
        return None
    if (number := _ascii_number(cleaned)) is not None:
        return number
    if cleaned == "all":
        return StepSpan()
    first, dash, last = (part.strip() for part in cleaned.partition("-"))
    bounds = [_ascii_number(first) if first else None, _ascii_number(last) if last else None]
    if dash and all(bound is not None or not part for bound, part in zip(bounds, (first, last))):
        span = StepSpan(*bounds)
        if span.first is not None and span.last is not None and span.first > span.last:
            raise InputError(where, f"the step span {text!r} ends before it starts")
        return span
    raise InputError(where, f"expected a step number, `all`, or a span such as `0-4` (ASCII digits); got {text!r}")


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
        if name in values:  # `tp=2,tp=4`: which one was meant?
            raise InputError(where, f"{name} given twice in {text!r}")
        value = _ascii_number(number)
        if value is None or value < 1:
            raise InputError(
                where, f"{name} must be a positive integer in ASCII digits, got {number.strip()!r} in {text!r}"
            )
        values[name] = value
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
    # the folder holds a second layout beside the one read (step folders and rank folders, or a dump.json and
    # either): which is read and that the other is ignored, to be said to the user (None: nothing left unread)
    ignored_note: str | None = None

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


def _listing(folder: Path) -> list[os.DirEntry[str]]:
    """The entries of a folder; InputError naming it when it cannot be listed (no read permission, ...)."""
    try:
        with os.scandir(folder) as entries:
            return list(entries)
    except OSError as error:
        raise InputError(str(folder), f"cannot list the folder: {error.strerror or error}") from None


def _is_folder(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()
    except OSError:  # cannot be looked at: not taken for a folder, as a name that does not match
        return False


def _numbered(folder: Path, kind: str) -> dict[int, Path]:
    """The `<kind><N>` folders (`rank3`, `step0`) of `folder` by N, in order. N must be in ASCII digits: int() also
    reads Arabic-Indic or fullwidth digits, and str.isdigit() passes superscripts, which int() refuses. A name with
    other digits is an error naming it, and so are two names of one number (`rank1` beside `rank01`), which msprobe
    never writes: merged as two ranks, or one of them dropped, they would give a wrong diagnosis."""
    found: dict[int, Path] = {}
    for entry in sorted(_listing(folder), key=lambda entry: entry.name):
        digits = entry.name[len(kind) :] if entry.name.startswith(kind) else ""
        if not digits.isdigit() or not _is_folder(entry):
            continue
        if not digits.isascii():
            raise InputError(
                entry.path,
                f"a {kind} folder must be numbered in ASCII digits ({kind}0, {kind}1, ... as msprobe names them)",
            )
        number = int(digits)
        if number in found:
            raise InputError(
                str(folder),
                f"{found[number].name} and {entry.name} are both {kind} {number}: keep one of them",
            )
        found[number] = Path(entry.path)
    return dict(sorted(found.items()))


def _has_dump(folder: Path) -> bool:
    """Whether `folder` holds a dump.json: a regular file (or a link to one). Absent: False. Anything else there (a
    directory, a link to nothing, a device, a file that cannot be looked at) is an InputError naming it: a rank
    left out silently would be merged from the others into a wrong diagnosis."""
    path = folder / "dump.json"
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        if os.path.lexists(path):
            raise InputError(
                str(path), f"cannot read dump: a symbolic link to a missing file ({os.readlink(path)})"
            ) from None
        return False
    except PermissionError as error:  # stat needs search permission on the folder only
        raise InputError(str(folder), f"cannot look into the folder: {error.strerror or error}") from None
    except OSError as error:
        raise InputError(str(path), f"cannot read dump: {error.strerror or error}") from None
    if not stat.S_ISREG(mode):
        raise InputError(str(path), f"cannot read dump: {file_kind(mode)}, not a regular file")
    return True


def _rank_folders(folder: Path) -> list[tuple[int, Path]]:
    found = []
    for rank, child in _numbered(folder, "rank").items():
        if not _has_dump(child):
            raise InputError(
                str(child / "dump.json"),
                "no dump.json in this rank folder (a rank that did not dump, or is being rewritten?)",
            )
        found.append((rank, child / "dump.json"))
    return found


def _proc_folders(folder: Path) -> list[Path]:
    procs = [Path(entry.path) for entry in _listing(folder) if entry.name.startswith("proc") and _is_folder(entry)]
    return sorted(proc / "dump.json" for proc in procs if _has_dump(proc))


def _spans(numbers: list[int]) -> list[tuple[int, int]]:
    """Sorted distinct numbers as runs (first, last) of successive ones."""
    runs: list[tuple[int, int]] = []
    for number in numbers:
        if runs and number == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], number)
        else:
            runs.append((number, number))
    return runs


def _spans_text(runs: list[tuple[int, int]], most: int = 8) -> str:
    """`0-3, 5, 7-9`: at most `most` runs, then how many more."""
    text = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs[:most])
    return text + (f" and {len(runs) - most} more" if len(runs) > most else "")


def _gaps(numbers: list[int]) -> list[tuple[int, int]]:
    """The runs of numbers missing from 0 to the last of sorted distinct `numbers` (computed from the runs present,
    never listed one by one: a folder rank99999999999 must not build a range up to it)."""
    gaps, expected = [], 0
    for first, last in _spans(numbers):
        if first > expected:
            gaps.append((expected, first - 1))
        expected = last + 1
    return gaps


def _ranks_in(folder: Path, label: str) -> tuple[list[tuple[int, Path]], str | None]:
    """Rank dumps of one step folder (or of a folder of rank folders); an error text when there are none."""
    ranks = _rank_folders(folder)
    if ranks:
        numbers = [r for r, _ in ranks]
        missing = _gaps(numbers)
        if missing:
            several = len(missing) > 1 or missing[0][0] != missing[0][1]
            raise InputError(
                label,
                f"rank folders {_spans_text(_spans(numbers))} found, but rank{'s' if several else ''} "
                f"{_spans_text(missing)} {'are' if several else 'is'} missing (a rank that did not dump?)",
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
    try:
        mode = candidate.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        raise InputError(str(candidate), "no such dump file or directory") from None
    except OSError as error:
        raise InputError(str(candidate), f"cannot read the dump: {error.strerror or error}") from None
    if stat.S_ISREG(mode):
        return DumpSource(candidate.resolve(), (candidate.resolve(),), (0,), None, layout)
    if not stat.S_ISDIR(mode):
        raise InputError(str(candidate), f"not a dump file or directory: {file_kind(mode)}")
    root = candidate.resolve()
    if _has_dump(root):
        beside = [
            f"{kind} folders {_spans_text(_spans(numbers))}"
            for kind in ("step", "rank")
            if (numbers := _numbers_of(root, kind))
        ]
        ignored = f"{root} holds a dump.json and {' and '.join(beside)}: its dump.json is read, the folders ignored"
        return DumpSource(root, (root / "dump.json",), (0,), None, layout, ignored_note=ignored if beside else None)
    steps = _numbered(root, "step")
    if steps:
        source = _step_source(root, steps, step, layout, step_if_several)
        ranks_beside = _numbers_of(root, "rank")
        if not ranks_beside:
            return source
        joined = source.joined_steps
        read = f"steps {joined[0]}-{joined[-1]} are" if joined else f"step{source.step} is"
        ignored = (
            f"{root} holds step folders and rank folders {_spans_text(_spans(ranks_beside))} beside them: {read} read, "
            "the rank folders ignored"
        )
        return replace(source, ignored_note=ignored)
    ranks, problem = _ranks_in(root, str(root))
    if problem:
        raise InputError(
            str(root),
            "no dump.json found (looked for dump.json, step*/rank*/dump.json, step*/proc*/dump.json, rank*/dump.json)",
        )
    return DumpSource(
        root, tuple(p for _, p in ranks), tuple(r for r, _ in ranks), step if isinstance(step, int) else None, layout
    )


def _step_source(
    root: Path, steps: dict[int, Path], step: StepChoice, layout: ParallelLayout | None, step_if_several: StepChoice
) -> DumpSource:
    """The step (or steps joined) of a folder of step folders that `step` (else `step_if_several`) chooses."""
    if step is None and len(steps) > 1 and (step_if_several in steps or isinstance(step_if_several, StepSpan)):
        step = step_if_several
    if isinstance(step, StepSpan):
        chosen = [n for n in steps if step.holds(n)]
        if not chosen:
            raise InputError(str(root), f"no step in {step} here (steps: {', '.join(f'step{n}' for n in steps)})")
        if len(chosen) > 1:
            _refuse_gaps(root, chosen, step)
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


def _numbers_of(folder: Path, kind: str) -> list[int]:
    """The N of the `<kind><N>` folders of `folder`, in order: a look at what is left unread beside what is read,
    never an error (what is read says its own)."""
    try:
        entries = _listing(folder)
    except InputError:
        return []
    numbers = {entry.name[len(kind) :] for entry in entries if entry.name.startswith(kind) and _is_folder(entry)}
    return sorted({int(digits) for digits in numbers if is_ascii_digits(digits)})


def _refuse_gaps(root: Path, chosen: list[int], span: StepSpan) -> None:
    """Steps joined as successive calls must follow each other: a step missing between two (not dumped, or deleted)
    would join calls that did not follow each other, as a gap in the ranks would merge ranks that are not the run's.
    An error naming the first missing step and the runs without a gap, any of which can be joined."""
    runs = _spans(chosen)
    if len(runs) > 1:
        first, last = runs[0][1] + 1, runs[1][0] - 1
        missing = f"step{first}" if first == last else f"steps {first}-{last}"
        raise InputError(
            str(root),
            f"{missing} {'is' if first == last else 'are'} missing between step{first - 1} and step{last + 1}: "
            f"steps joined as successive calls ({span}) must follow each other; join a span without a gap "
            f"({_spans_text(runs)})",
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
    procs = len(_proc_folders(folder))
    return f"{procs} proc folder{'s' if procs > 1 else ''}" if procs else "no dump.json"


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
