"""Progress of a long `analyze` on stderr, as pip and msprobe show theirs: the phases, the files and their sizes,
the time so far. Only when stderr is a terminal: piped or redirected, nothing is written (logs and scripts read
stdout's summary and stderr's errors alone)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Iterable, Sequence, TextIO

from rca_lsp.dumps.sources import DumpSource


class Progress:
    """One line per phase, `rca-lsp: [12.3s] <what>`, on `stream` when it is a terminal."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream if stream is not None else sys.stderr
        self.enabled = self._stream.isatty()
        self._start = time.monotonic()

    def say(self, text: str) -> None:
        if self.enabled:
            print(f"rca-lsp: [{time.monotonic() - self._start:.1f}s] {text}", file=self._stream, flush=True)

    def reading(self, side: str, source: DumpSource) -> None:
        count = len(source.files)
        files = f"{count} dump files" if count > 1 else "1 dump file"
        self.say(f"reading the {side} dump: {source.label}, {files}, {_size(source.files)}")

    def wrote(self, paths: Iterable[Path]) -> None:
        written = list(paths)
        self.say(f"wrote {len(written)} files, {_size(written)}")

    def wrote_part(self, paths: Sequence[Path]) -> None:
        """Files of one output as they are written: named, with their size."""
        if paths:
            self.say(f"wrote {', '.join(path.name for path in paths)} ({_size(paths)})")


def _size(paths: Iterable[Path]) -> str:
    total = 0
    for path in paths:
        try:
            total += path.stat().st_size
        except OSError:  # gone or unreadable: the reader says so in its own words
            pass
    return f"{total / 2**20:.1f} MiB"
