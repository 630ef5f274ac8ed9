"""One entry of a rank file read on demand, without parsing the file: what a merge or a hover needs of a key
beyond the logical dump (e.g. every positional input of a module, or each rank's own copy of an entry)."""

from __future__ import annotations

import bisect
import json
import mmap
from pathlib import Path
from typing import Any, Sequence

from rca_lsp.base.errors import InputError
from rca_lsp.base.inputfile import open_regular_file
from rca_lsp.dumps.keylines import quoted_key

_WINDOW = 1 << 20  # bytes read after the key: an entry is a few KB, a module with many kwargs some 100 KB


def read_raw_entry(path: Path, key: str) -> dict[str, Any] | None:
    """The JSON object msprobe wrote for `key` in the dump file; None when absent, unreadable or cut by the window."""
    return read_raw_entries(path, [key])[key]


def read_raw_entries(path: Path, keys: Sequence[str]) -> dict[str, dict[str, Any] | None]:
    """`read_raw_entry` of several keys with one mapping of the file; keys in dump order are found in one pass (each
    search starts where the previous entry was found)."""
    found: dict[str, dict[str, Any] | None] = dict.fromkeys(keys)
    try:
        with open_regular_file(path, "dump") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            starts: dict[str, int] = {}
            position = 0
            for key in found:
                start = _find(data, quoted_key(key), position)
                if start >= 0:
                    position = starts[key] = start
            ordered = sorted(starts.values())
            for key, start in starts.items():
                # an entry ends before the next key found starts: read up to there (many keys read cost about the
                # file, not a window each), and the whole window when that does not hold the entry
                after = bisect.bisect_right(ordered, start)
                end = ordered[after] if after < len(ordered) else len(data)
                for stop in dict.fromkeys((min(end, start + _WINDOW), start + _WINDOW)):
                    found[key] = _entry(data[start:stop].decode("utf-8", errors="replace"), key)
                    if found[key] is not None:
                        break
    except (OSError, ValueError, InputError):  # a FIFO put in its place is not opened: its read would never end
        pass
    return found


def _find(data: mmap.mmap, quoted: bytes, position: int) -> int:
    """Where the key's entry starts: after `position` if it is there, else anywhere (a key out of order)."""
    for needle in (quoted + b":", quoted):
        start = data.find(needle, position)
        if start < 0 and position:
            start = data.find(needle)
        if start >= 0:
            return start
    return -1


def _entry(window: str, key: str) -> dict[str, Any] | None:
    value_start = window.index(":", len(key) + 2) + 1
    while value_start < len(window) and window[value_start] in " \t\r\n":
        value_start += 1
    try:
        value, _ = json.JSONDecoder().raw_decode(window, value_start)  # stops at the entry's end
    except (ValueError, RecursionError):  # cut by the window, broken, or nested too deep: nothing to show
        return None
    return value if isinstance(value, dict) else None
