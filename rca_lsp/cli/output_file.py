"""The file a command's `-o` names: checked before any work, written atomically, every problem one line."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from rca_lsp.base.atomicfile import (
    FileStamp,
    TargetChanged,
    UnwritableTarget,
    remove_stale_temporaries,
    writable_target,
    write_atomically,
)
from rca_lsp.base.errors import InputError
from rca_lsp.base.inputfile import file_kind


def output_target(given: str, what: str) -> Path:
    """The file a write to `given` replaces (a symlink's target; see writable_target), checked before the command
    does its work: InputError when it names no file, something other than a regular file, or a missing folder."""
    if not given:
        raise InputError("''", f"cannot write {what}: an empty file name")
    path = Path(given)
    try:
        target = writable_target(path)
    except UnwritableTarget as error:
        raise InputError(given or "''", f"cannot write {what}: {error.strerror}") from None
    if not target.parent.is_dir():  # a mistyped folder is an error, not created
        raise InputError(given, f"cannot write {what}: no folder {target.parent}")
    return target


def output_folder(given: str) -> Path:
    """The folder `analyze --out-dir` names (created when missing), checked before the analysis, which may take
    minutes: InputError when it names nothing, or something that is not a folder (a file, a link to nothing)."""
    if not given:
        raise InputError("--out-dir", "an empty folder name")
    path = Path(given)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        if path.is_symlink():
            raise InputError(given, f"cannot write the output files: a symbolic link to nothing ({os.readlink(path)})")
        return path
    except OSError as error:
        raise InputError(given, f"cannot write the output files: {error.strerror or error}") from None
    if not stat.S_ISDIR(mode):
        kind = "a file" if stat.S_ISREG(mode) else file_kind(mode)
        raise InputError(given, f"cannot write the output files: {kind}, not a folder")
    return path


def through_symlink(given: str, target: Path) -> str:
    """How the summary names the file written: `given`, and the file it was written through to."""
    return given if target == Path(given) else f"{given} (a symlink: written through to {target})"


def write_output(given: str, data: bytes, what: str, expect: FileStamp | None = None) -> None:
    """Write `data` to `given` atomically, after removing the temporaries killed runs left beside it; `expect`:
    the stamp the file had when the command read it (TargetChanged, not an InputError, when it changed since)."""
    path = Path(given)
    try:
        remove_stale_temporaries(writable_target(path).parent)
        write_atomically(path, data, expect)
    except TargetChanged:
        raise
    except OSError as error:
        raise InputError(given or "''", f"cannot write {what}: {error.strerror or error}") from None
