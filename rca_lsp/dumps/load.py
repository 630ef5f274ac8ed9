"""A dump source loaded into its one logical dump (its one file, its ranks merged, or its steps joined), and the
cache that keeps logical dumps while their files are unchanged. The top of the reading stage."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Callable, Collection

from rca_lsp.base.errors import InputError
from rca_lsp.dumps.dump import Dump, load_dump_file
from rca_lsp.dumps.ranks.merge import load_ranks
from rca_lsp.dumps.sources import DumpSource, check_unchanged, resolve_dump_source, signatures
from rca_lsp.dumps.stepjoin import join_steps


class DumpCache:
    """Logical dumps by source, reused while every file's size and mtime are unchanged."""

    def __init__(self) -> None:
        self._dumps: dict[tuple[object, ...], tuple[tuple[tuple[int, int], ...], Dump]] = {}
        self._locks: dict[tuple[object, ...], threading.Lock] = {}
        self._guard = threading.Lock()

    def get(
        self, source: DumpSource | str | os.PathLike[str], load: Callable[[DumpSource], Dump] | None = None
    ) -> Dump:
        """`source` as resolved by resolve_dump_source, or a path (a file or a directory with one step)."""
        if not isinstance(source, DumpSource):
            source = resolve_dump_source(source)
        identity = _identity(source)
        with self._guard:
            lock = self._locks.setdefault(identity, threading.Lock())
        with lock:
            before = signatures(source)
            cached = self._dumps.get(identity)
            if cached is not None and cached[0] == before:
                return cached[1]
            try:
                dump = (load or load_source)(source)
            except InputError:  # a file read half rewritten: say it changed, not where its half stopped parsing
                check_unchanged(source, before)
                raise
            check_unchanged(source, before)
            self._dumps[identity] = (before, dump)
            return dump

    def keep_only(self, files: Collection[tuple[Path, ...]]) -> None:
        """Forget the dumps not made of one of these sets of files (in any layout, of any data-parallel rank): those
        no one reads any more, e.g. a step no longer chosen. Kept, each would stay in memory for good."""
        with self._guard:  # a load in another thread may add one meanwhile (under its own lock): a copy of the keys
            for identity in [identity for identity in list(self._dumps) if identity[0] not in files]:
                self._dumps.pop(identity, None)
                self._locks.pop(identity, None)

    def is_current(self, source: DumpSource) -> bool:
        cached = self._dumps.get(_identity(source))
        try:
            return cached is not None and cached[0] == signatures(source)
        except InputError:
            return False


def _identity(source: DumpSource) -> tuple[object, ...]:
    return (source.files, source.layout, source.data_rank)


def load_source(source: DumpSource) -> Dump:
    """The logical dump of a source: its one file, its ranks merged, or its steps joined."""
    if source.joined_steps:
        return join_steps([load_source(step) for step in source.step_sources()], source)
    if len(source.files) == 1:
        return load_dump_file(source.files[0])
    return load_ranks(source)
