"""Reading the three input files and running one analysis: what the CLI does, and the tests call."""

from __future__ import annotations

import os
from contextlib import nullcontext
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import ContextManager, Protocol

from rca_lsp.base.errors import InputError
from rca_lsp.base.forkpart import can_fork
from rca_lsp.base.inputfile import read_text_file
from rca_lsp.compare.datagroups import DataGroupChoice, choose_data_group
from rca_lsp.compare.records import Comparator
from rca_lsp.diagnose.analysis import Analysis, OnCompared, analyze
from rca_lsp.dumps.dump import Dump
from rca_lsp.dumps.forkload import BackgroundDump, BackgroundRanks, files_bytes, worth_loading_apart
from rca_lsp.dumps.load import DumpCache
from rca_lsp.dumps.ranks.merge import load_ranks
from rca_lsp.dumps.sources import DumpSource, ParallelLayout, StepChoice, resolve_dump_source
from rca_lsp.mapping.model import ParsedMapping
from rca_lsp.mapping.parse import parse_mapping
from rca_lsp.model.tolerance import Tolerances

BLOCKING_CODES = ("json-syntax", "yaml-syntax", "invalid-value")  # mapping problems a command cannot go on with


def raise_if_unusable(parsed: ParsedMapping) -> None:
    """The first problem that stops a command (a syntax error, a value that is not a key or a list of keys), as one
    line naming the file, line and column."""
    blocking = [issue for issue in parsed.issues if issue.code in BLOCKING_CODES]
    if blocking:
        issue = blocking[0]
        line, column = parsed.lines.position(issue.span.start)
        raise InputError(parsed.path, f"{issue.code}: {issue.message}", line + 1, column + 1, issue.key)


def read_mapping_file(path: str | os.PathLike[str]) -> ParsedMapping:
    return parse_mapping(str(path), read_text_file(path, "mapping-key file"))


@dataclass(frozen=True)
class SideOptions:
    """What selects one side's logical dump in a directory of several steps or ranks."""

    step: StepChoice = None  # one step, or a span of steps joined as successive calls
    layout: ParallelLayout | None = None
    step_if_several: StepChoice = None  # the other side's step, used when this side holds several
    data_rank: int | None = None  # analyse the data-parallel group of this rank (--train-rank): no choice by data

    def resolve(self, path: str | os.PathLike[str]) -> DumpSource:
        source = resolve_dump_source(path, self.step, self.layout, self.step_if_several)
        return source if self.data_rank is None else replace(source, data_rank=self.data_rank)


def with_data_group(
    cache: DumpCache, source: DumpSource, train: Dump, rollout: Dump
) -> tuple[Dump, DataGroupChoice | None]:
    """The train dump merged from the data-parallel group to compare with the rollout (compare.datagroups: the
    group whose model input equals the rollout's, or the one asked for), and the choice; `train` is the source's
    dump as loaded (its first group, or the one asked for)."""
    choice = choose_data_group(train, rollout, source.data_rank)
    if choice is not None and train.parallel is not None and choice.group != train.parallel.analysed_group:
        train = cache.get(replace(source, data_rank=choice.rank))
    return train, choice


def analyze_paths(
    train: str | os.PathLike[str],
    rollout: str | os.PathLike[str],
    mapping: str | os.PathLike[str],
    tolerances: Tolerances | None = None,
    cache: DumpCache | None = None,
    fork: bool = False,
    train_options: SideOptions = SideOptions(),
    rollout_options: SideOptions = SideOptions(),
    progress: RunProgress | None = None,
    on_compared: OnCompared | None = None,
) -> Analysis:
    """With `fork` (single-threaded callers only), the rollout dump is loaded by a child process meanwhile, unless
    the train dump and the mapping are too small for that to pay (forkload.worth_loading_apart); `progress` is told
    each phase as it starts; `on_compared`: see analyze."""
    cache = cache or DumpCache()
    with (
        _background_load(
            rollout, rollout_options if fork else None, _own_bytes(train, train_options, mapping) if fork else None
        ) as background,
        _background_ranks(train, train_options if fork else None) as ranks,
    ):
        parsed = read_mapping_file(mapping)
        train_source = train_options.resolve(train)
        if progress is not None:
            progress.reading("train", train_source)
        train_dump = cache.get(
            train_source,
            (lambda source: load_ranks(source, ranks.load)) if ranks and not train_source.joined_steps else None,
        )
        rollout_source = rollout_options.resolve(rollout)
        if progress is not None:
            progress.reading("rollout", rollout_source)
        if background:  # what the comparison reads of the train dump, gathered while the child works
            rollout_dump = cache.get(rollout_source, partial(background.load, meanwhile=lambda: train_dump.columns))
        else:
            rollout_dump = cache.get(rollout_source)
        train_dump, choice = with_data_group(cache, train_source, train_dump, rollout_dump)
        comparator = Comparator(train_dump, rollout_dump, tolerances or Tolerances(), data_choice=choice)
        if progress is not None:
            progress.say(
                f"comparing {len(parsed.entries)} mapping entries over {len(train_dump.keys)} train and "
                f"{len(rollout_dump.keys)} rollout module calls"
            )
        return analyze(parsed, comparator, on_compared=on_compared)  # the child sends the rollout's columns meanwhile


class RunProgress(Protocol):
    """What analyze_paths tells of its phases (the CLI shows them on a terminal)."""

    def reading(self, side: str, source: DumpSource) -> None: ...

    def say(self, text: str) -> None: ...


def _background_load(
    path: str | os.PathLike[str], options: SideOptions | None, own_bytes: int | None
) -> ContextManager[BackgroundDump | None]:
    """The rollout dump loaded by a child while this process reads `own_bytes` of files itself (the mapping and the
    train dump; None: unknown, taken for enough), when that is worth the transfer."""
    if options is None or not can_fork():
        return nullcontext()
    try:
        source = options.resolve(path)
    except InputError:  # reported by the usual load, after any problem with the mapping or the train dump
        return nullcontext()
    if own_bytes is not None and not worth_loading_apart(own_bytes, files_bytes(source.files)):
        return nullcontext()  # e.g. a small train dump against a rollout of hundreds of decode steps
    return BackgroundDump(source)


def _own_bytes(train: str | os.PathLike[str], options: SideOptions, mapping: str | os.PathLike[str]) -> int | None:
    """The bytes of the mapping and train dump files, which this process reads itself (None when the train side
    cannot be resolved: the usual load reports why)."""
    try:
        files = options.resolve(train).files
    except InputError:
        return None
    return files_bytes((*files, Path(mapping)))


def _background_ranks(
    path: str | os.PathLike[str], options: SideOptions | None
) -> ContextManager[BackgroundRanks | None]:
    """The train side's later ranks compared in a child from the start (while the mapping is parsed), when the
    side has several."""
    if options is None or not can_fork():
        return nullcontext()
    try:
        source = options.resolve(path)
    except InputError:  # reported by the usual load, after any problem with the mapping
        return nullcontext()
    # joined steps are several dumps of their own, not ranks of one: loaded the usual way
    return BackgroundRanks(source.files) if len(source.files) > 1 and not source.joined_steps else nullcontext()
