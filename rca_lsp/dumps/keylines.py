"""Where keys' entries lie in a dump file: dumps carry no positions, so the server's locations (diagnostics on dump
keys, go-to-definition) are found by searching the file's text."""

from __future__ import annotations

from pathlib import Path


def find_lines(path: str, keys: list[str]) -> list[int | None]:
    """The 0-based line of each key's `"key":` in the file, searched in the given (dump) order; None where absent."""
    try:
        data = Path(path).read_bytes()
    except OSError:
        return [None] * len(keys)
    lines: list[int | None] = []
    offset = line = 0
    for key in keys:
        found = data.find(quoted_key(key), offset)
        if found < 0:
            found = data.find(quoted_key(key))  # not where dump order says: search the whole file once
            if found < 0:
                lines.append(None)
                continue
            offset = line = 0
        line += data.count(b"\n", offset, found)
        offset = found
        lines.append(line)
    return lines


def quoted_key(key: str) -> bytes:
    return b'"' + key.encode() + b'"'
