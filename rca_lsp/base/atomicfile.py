"""Files written atomically: a temporary file beside the target, renamed over it once complete.

Temporaries are named `.rca-tmp.<host>.<pid>.<target name>.<random>.tmp`: a later run recognises the ones a
killed run left behind (its process is gone) and removes them, without touching those of a run still writing
or anybody else's files.
"""

from __future__ import annotations

import os
import re
import secrets
import socket
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Iterable, Iterator

_PREFIX = ".rca-tmp."
_TEMPORARY_RE = re.compile(r"\.rca-tmp\.(?P<host>[A-Za-z0-9-]+)\.(?P<pid>\d+)\..+\.[0-9a-f]{8}\.tmp\Z", re.DOTALL)
# Before this naming, tempfile.mkstemp(prefix=f".{target name}.") in the target's folder: 8 characters of this set.
_MKSTEMP_SUFFIX_RE = re.compile(r"[a-z0-9_]{8}\Z")


def host_label() -> str:
    """This machine in the names of our temporary files (a killed run's are removed only by a run on the same host)."""
    return re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname())[:40] or "host"


def create_temporary(path: Path) -> tuple[int, Path]:
    """A new temporary file beside `path`, open for writing: its descriptor and name. Created with mode 0o666 so
    the umask applies as for `open(path, "w")` (tempfile.mkstemp makes every file 0o600)."""
    stem = f"{_PREFIX}{host_label()}.{os.getpid()}.{path.name}"
    while True:
        temporary = path.with_name(f"{stem}.{secrets.token_hex(4)}.tmp")
        try:
            return os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), temporary
        except FileExistsError:
            continue


@contextmanager
def atomic_stream(path: Path) -> Iterator[BinaryIO]:
    """A stream on a temporary file, renamed over `path` once the block ends: never a half-written file.
    Creates the folder when missing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = create_temporary(path)
    try:
        with os.fdopen(handle, "wb") as stream:
            yield stream
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def write_atomically(path: Path, data: bytes) -> None:
    with atomic_stream(path) as stream:
        stream.write(data)


def _is_running(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    except OSError:
        return True  # cannot tell: keep its files
    return True


def is_stale_temporary(name: str, legacy_targets: Iterable[str] = ()) -> bool:
    """Whether `name` is a temporary of ours whose writer is gone: one of this naming made on this host by a
    process no longer running, or one of the earlier mkstemp naming for one of `legacy_targets`."""
    match = _TEMPORARY_RE.match(name)
    if match is not None:
        return match["host"] == host_label() and not _is_running(int(match["pid"]))
    return any(
        name.startswith(f".{target}.")
        and len(name) == len(target) + 10
        and _MKSTEMP_SUFFIX_RE.match(name, len(target) + 2) is not None
        for target in legacy_targets
    )


def remove_stale_temporaries(folder: Path, legacy_targets: Iterable[str] = ()) -> list[Path]:
    """Remove the temporaries killed runs left in `folder` (see is_stale_temporary); the paths removed."""
    legacy = tuple(legacy_targets)
    removed = []
    try:
        names = [entry.name for entry in os.scandir(folder) if entry.name.startswith(".")]
    except OSError:
        return []
    for name in names:
        if is_stale_temporary(name, legacy):
            try:
                (folder / name).unlink()
            except OSError:
                continue  # removed by another run meanwhile, or not a file
            removed.append(folder / name)
    return removed
