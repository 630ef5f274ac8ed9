"""One entry of a rank file read on demand, without parsing the file: what a merge or a hover needs of a key
beyond the logical dump (e.g. every positional input of a module, or each rank's own copy of an entry)."""

from __future__ import annotations

import json
import mmap
from pathlib import Path
from typing import Any

from rca_lsp.core.dump import quoted_key

_WINDOW = 1 << 20  # bytes read after the key: an entry is a few KB, a module with many kwargs some 100 KB


def read_raw_entry(path: Path, key: str) -> dict[str, Any] | None:
    """The JSON object msprobe wrote for `key` in the dump file; None when absent, unreadable or cut by the window."""
    try:
        with path.open("rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            start = data.find(quoted_key(key) + b":")
            if start < 0:
                start = data.find(quoted_key(key))
            if start < 0:
                return None
            window = data[start : start + _WINDOW].decode("utf-8", errors="replace")
    except (OSError, ValueError):
        return None
    value_start = window.index(":", len(key) + 2) + 1
    while value_start < len(window) and window[value_start] in " \t\r\n":
        value_start += 1
    try:
        value, _ = json.JSONDecoder().raw_decode(window, value_start)  # stops at the entry's end
    except ValueError:  # cut by the window, or broken: nothing to show
        return None
    return value if isinstance(value, dict) else None
