"""Glob patterns expanded within a bound, for patterns a user's configuration holds.

`glob.glob(recursive=True)` follows symlinks to folders under `**`: two self-links make it walk for ever (2^40
paths before the kernel's symlink limit). Here `**` descends only into real folders (a folder named through a
symlink by a plain or `*` part is still entered, once), and the walk stops with an InputError once it has seen
`limit` directory entries, so a pattern over a huge tree is reported instead of blocking its caller."""

from __future__ import annotations

import fnmatch
import glob
import os
from pathlib import PurePath

from rca_lsp.base.errors import InputError


class _Budget:
    def __init__(self, pattern: str, limit: int) -> None:
        self.pattern = pattern
        self.limit = limit
        self.seen = 0

    def listing(self, folder: str) -> list[os.DirEntry[str]]:
        """The folder's entries ([] when it cannot be listed), each counted against the bound."""
        entries = []
        try:
            with os.scandir(folder) as found:
                for entry in found:
                    self.seen += 1
                    if self.seen > self.limit:
                        raise InputError(
                            self.pattern,
                            f"the glob visits more than {self.limit} files and folders without finishing: name "
                            "the folder, or a pattern with fewer folders under its `**`",
                        )
                    entries.append(entry)
        except OSError:
            return []
        return entries


def _visible(name: str, part: str) -> bool:
    """A name starting with '.' is matched only by a pattern part starting with '.', as glob.glob does."""
    return not name.startswith(".") or part.startswith(".")


def _below(folder: str, budget: _Budget, with_files: bool) -> list[str]:
    """`**`: the folder and every real folder below it (also the files, as a last part), never through a symlink."""
    found, pending = [os.path.join(folder, "") if with_files else folder], [folder]  # "x/**" gives "x/", as glob
    while pending:
        for entry in budget.listing(pending.pop()):
            if not _visible(entry.name, "**"):
                continue
            if entry.is_dir(follow_symlinks=False):
                found.append(entry.path)
                pending.append(entry.path)
            elif with_files:
                found.append(entry.path)
    return found


def expand(pattern: str, limit: int) -> list[str]:
    """The existing paths `pattern` matches, sorted (glob's syntax: `*`, `?`, `[...]`, and `**` for any number of
    folders as a whole part). Raises InputError when the expansion would see more than `limit` entries."""
    if not glob.has_magic(pattern):
        return [pattern] if os.path.lexists(pattern) else []
    parts = PurePath(pattern).parts
    first = next(i for i, part in enumerate(parts) if glob.has_magic(part))
    budget = _Budget(pattern, limit)
    current = [str(PurePath(*parts[:first])) if first else os.curdir]
    rest = parts[first:]
    for index, part in enumerate(rest):
        last = index == len(rest) - 1
        if part == "**":
            current = [path for folder in current for path in _below(folder, budget, with_files=last)]
        elif glob.has_magic(part):
            current = [
                entry.path
                for folder in current
                for entry in budget.listing(folder)
                if _visible(entry.name, part) and fnmatch.fnmatch(entry.name, part) and (last or entry.is_dir())
            ]
        else:
            current = [os.path.join(folder, part) for folder in current]
            current = [path for path in current if os.path.isdir(path)] if not last else current
    found = sorted({path for path in current if os.path.lexists(path)})
    return [path.removeprefix(os.curdir + os.sep) for path in found] if not first else found
