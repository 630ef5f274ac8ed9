"""Reading the three input files and running one analysis: what the CLI does, and the tests call."""

from __future__ import annotations

import multiprocessing
import os
from contextlib import nullcontext
from pathlib import Path
from typing import ContextManager

from rca_lsp.core.analysis import Analysis, analyze
from rca_lsp.core.dump import DumpCache, resolve_dump_path
from rca_lsp.core.errors import InputError
from rca_lsp.core.forkload import BackgroundDump
from rca_lsp.core.mapping import ParsedMapping, parse_mapping
from rca_lsp.core.records import Comparator
from rca_lsp.core.tolerance import Tolerances


def read_mapping_file(path: str | os.PathLike[str]) -> ParsedMapping:
    try:
        text = Path(path).read_bytes().decode("utf-8-sig")
    except OSError as error:
        raise InputError(str(path), f"cannot read mapping-key file: {error.strerror}") from None
    except UnicodeDecodeError as error:
        raise InputError(str(path), f"mapping-key file is not UTF-8 (byte {error.start})") from None
    return parse_mapping(str(path), text)


def analyze_paths(train: str | os.PathLike[str], rollout: str | os.PathLike[str],
                  mapping: str | os.PathLike[str], tolerances: Tolerances | None = None,
                  cache: DumpCache | None = None, fork: bool = False) -> Analysis:
    """With `fork` (single-threaded callers only), the rollout dump is loaded by a child process meanwhile."""
    cache = cache or DumpCache()
    with _background_load(rollout if fork else None) as background:
        parsed = read_mapping_file(mapping)
        train_dump = cache.get(train)
        rollout_dump = cache.get(rollout, background.load) if background else cache.get(rollout)
    comparator = Comparator(train_dump, rollout_dump, tolerances or Tolerances())
    return analyze(parsed, comparator)


def _background_load(path: str | os.PathLike[str] | None) -> ContextManager[BackgroundDump | None]:
    if path is None or "fork" not in multiprocessing.get_all_start_methods():
        return nullcontext()
    try:
        return BackgroundDump(resolve_dump_path(path).resolve())
    except InputError:  # reported by the usual load, after any problem with the mapping or the train dump
        return nullcontext()
