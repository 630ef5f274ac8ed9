"""Files written atomically: a temporary file beside the target, renamed over it once complete.

Only a regular file (or nothing) is replaced: renaming over a named pipe, a device or a socket would swap it for a
plain file (as root, `-o /dev/null` would have replaced the system's /dev/null), so such a target is refused
(UnwritableTarget). A symlink is written through: its target gets the new content and the link stays a link.
A writer that read the file it replaces can pass the FileStamp it took then: a file changed since (an edit saved
while the command ran) is not replaced (TargetChanged).

Temporaries are named `.rca-tmp.<host>.<pid>.<target name>.<random>.tmp`: a later run recognises the ones a
killed run left behind (its process is gone) and removes them, without touching those of a run still writing
or anybody else's files.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import secrets
import socket
import stat
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterable, Iterator

from rca_lsp.base.inputfile import file_kind

_PREFIX = ".rca-tmp."
_TEMPORARY_RE = re.compile(r"\.rca-tmp\.(?P<host>[A-Za-z0-9-]+)\.(?P<pid>\d+)\..+\.[0-9a-f]{8}\.tmp\Z", re.DOTALL)
# Before this naming, tempfile.mkstemp(prefix=f".{target name}.") in the target's folder: 8 characters of this set.
_MKSTEMP_SUFFIX_RE = re.compile(r"[a-z0-9_]{8}\Z")


def host_label() -> str:
    """This machine in the names of our temporary files (a killed run's are removed only by a run on the same host)."""
    return re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname())[:40] or "host"


def create_temporary(path: Path) -> tuple[int, Path]:
    """A new temporary file beside `path`, open for writing: its descriptor and name. It gets the mode
    `open(path, "w")` gives: the permissions of the file at `path` when there is one (a file the user made private
    stays private once replaced), else 0o666 less the umask (tempfile.mkstemp makes every file 0o600). An error
    names `path`, the file the user asked for (a folder without write permission), not the temporary."""
    stem = f"{_PREFIX}{host_label()}.{os.getpid()}.{path.name}"
    while True:
        temporary = path.with_name(f"{stem}.{secrets.token_hex(4)}.tmp")
        try:
            handle = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            continue
        except OSError as error:
            raise OSError(error.errno, error.strerror, str(path)) from None
        try:
            os.fchmod(handle, stat.S_IMODE(os.stat(path).st_mode) & 0o777)
        except OSError:  # no file there yet (or one whose mode cannot be given): the umask's mode
            pass
        return handle, temporary


class UnwritableTarget(OSError):
    """An output path that names no file, or a file that is not a regular one: never replaced. Its strerror says
    why, in words for a one-line message; its filename is the path as given."""


class TargetChanged(OSError):
    """The file to replace changed after the writer read it (see FileStamp): left as it is."""


@dataclass(frozen=True)
class FileStamp:
    """What a file was when read: size, modification time and a hash of its bytes (a save within the clock's
    resolution, or one restoring the mtime, still changes the hash)."""

    size: int
    mtime_ns: int
    sha256: bytes

    @classmethod
    def of(cls, path: Path) -> FileStamp | None:
        """The file's stamp now; None when there is no regular file to read there."""
        try:
            handle = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO: no wait for a writer
        except OSError:
            return None
        with os.fdopen(handle, "rb") as stream:
            status = os.fstat(handle)
            if not stat.S_ISREG(status.st_mode):
                return None
            try:
                digest = hashlib.file_digest(stream, "sha256").digest()
            except OSError:
                return None
        return cls(status.st_size, status.st_mtime_ns, digest)


def writable_target(path: Path) -> Path:
    """The file a write to `path` replaces: `path`, or for a symlink the file it resolves to (written through, the
    link kept). UnwritableTarget for a path that names no file (`''`, `.`, `/`) or names something other than a
    regular file (a folder, a FIFO, a device, a socket, a symlink loop)."""
    if path.name in ("", ".", ".."):
        raise UnwritableTarget(errno.EISDIR, "names a folder, not a file to write", str(path))
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        return target
    except OSError as error:
        raise UnwritableTarget(error.errno, error.strerror or str(error), str(path)) from None
    if not stat.S_ISREG(mode):
        raise UnwritableTarget(errno.EEXIST, f"{file_kind(mode)}, not a regular file: not replaced", str(path))
    return target


def same_file(first: str | Path, second: str | Path) -> bool:
    """Whether the two paths name one file (through links); False when either is missing."""
    try:
        return os.path.samefile(first, second)
    except OSError:
        return False


def replace_checked(temporary: Path, path: Path, target: Path, expect: FileStamp | None = None) -> None:
    """Rename the finished `temporary` over `target` (writable_target of `path`), checking `path` once more
    just before: what it names may have changed while the file was written."""
    if writable_target(path) != target:
        raise UnwritableTarget(errno.EEXIST, "was replaced by another file while this one was written", str(path))
    if expect is not None and FileStamp.of(target) != expect:
        raise TargetChanged(errno.EEXIST, "changed since it was read: not replaced", str(path))
    os.replace(temporary, target)


@contextmanager
def atomic_stream(path: Path, expect: FileStamp | None = None) -> Iterator[BinaryIO]:
    """A stream on a temporary file, renamed over `path` once the block ends: never a half-written file.
    Creates the folder when missing. `path` is checked as writable_target says; `expect`: the stamp the file
    had when read, replaced only if it still has it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    target = writable_target(path)
    handle, temporary = create_temporary(target)
    try:
        with os.fdopen(handle, "wb") as stream:
            yield stream
        replace_checked(temporary, path, target, expect)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def write_atomically(path: Path, data: bytes, expect: FileStamp | None = None) -> None:
    with atomic_stream(path, expect) as stream:
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
