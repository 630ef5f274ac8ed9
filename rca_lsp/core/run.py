"""Reading the three input files and running one analysis: what the CLI does, and the tests call."""

from __future__ import annotations

import os
from pathlib import Path

from rca_lsp.core.analysis import Analysis, analyze
from rca_lsp.core.dump import DumpCache
from rca_lsp.core.errors import InputError
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
                  cache: DumpCache | None = None) -> Analysis:
    cache = cache or DumpCache()
    parsed = read_mapping_file(mapping)
    comparator = Comparator(cache.get(train), cache.get(rollout), tolerances or Tolerances())
    return analyze(parsed, comparator)
