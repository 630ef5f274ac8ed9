"""Where keys' entries lie in a dump file: dumps carry no positions, so the server's locations (diagnostics on dump
keys, go-to-definition) are found by searching the file's text.

The file is read in chunks into one buffer, not whole: a dump of hundreds of MB read at once added its size to the
language server's peak memory (and its pages to fault in) each time the findings' locations were looked up."""

from __future__ import annotations

from io import FileIO

from rca_lsp.base.errors import InputError
from rca_lsp.base.inputfile import open_regular_file

_CHUNK = 1 << 22


def find_lines(path: str, keys: list[str]) -> list[int | None]:
    """The 0-based line of each key's `"key":` in the file, searched in the given (dump) order: from where the key
    before it was found, else in the whole file (a key out of dump order); None where absent."""
    try:
        with open_regular_file(path, "dump") as file:  # not a FIFO put in its place meanwhile: that read never ends
            scanner = _Scanner(file)
            lines: list[int | None] = []
            for key in keys:
                needle = quoted_key(key)
                after = scanner.place()
                line = scanner.find(needle)
                if line is None:  # not where dump order says: the whole file, once
                    scanner.seek(0, 0)
                    line = scanner.find(needle)
                    if line is None:
                        scanner.seek(*after)
                lines.append(line)
            return lines
    except (OSError, InputError):
        return [None] * len(keys)


def quoted_key(key: str) -> bytes:
    return b'"' + key.encode() + b'"'


class _Scanner:
    """A position in a file (its byte offset and line) that moves forward to the next occurrence of a text."""

    def __init__(self, file: FileIO) -> None:
        self._file = file
        self._buffer = bytearray(_CHUNK)
        self.seek(0, 0)

    def place(self) -> tuple[int, int]:
        """The position's offset and line (for seek)."""
        return self._base + self._at, self._line

    def seek(self, offset: int, line: int) -> None:
        self._file.seek(offset)
        self._base, self._at, self._end, self._line = offset, 0, 0, line  # the buffer holds [base, base + end)

    def find(self, needle: bytes) -> int | None:
        """The line of the next occurrence of `needle` at or after the position, which moves there; None (the
        position then at the end of the file) when there is none."""
        buffer = self._buffer
        while True:
            found = buffer.find(needle, self._at, self._end)
            if found >= 0:
                self._line += buffer.count(b"\n", self._at, found)
                self._at = found
                return self._line
            # keep the end that may hold the needle's start, read more after it
            keep = min(len(needle) - 1, self._end - self._at)
            self._line += buffer.count(b"\n", self._at, self._end - keep)
            buffer[:keep] = buffer[self._end - keep : self._end]
            self._base += self._end - keep
            if keep * 2 > len(buffer):  # a needle as long as the buffer: room for it and more
                buffer.extend(bytes(len(buffer)))
            with memoryview(buffer) as view:
                read = self._file.readinto(view[keep:])
            self._at, self._end = 0, keep + (read or 0)
            if not read:
                return None
