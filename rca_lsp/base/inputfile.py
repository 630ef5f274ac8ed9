"""Input files read whole, regular files only: a named pipe given by mistake would block the read forever."""

from __future__ import annotations

import io
import os
import stat

from rca_lsp.base.errors import InputError
from rca_lsp.base.jsonload import text_position

BOM = "\ufeff"  # the byte-order mark some editors write at the start of a UTF-8 file, and hide

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def file_kind(mode: int) -> str:
    """What a non-regular file is, for messages."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def read_regular_file(path: str | os.PathLike[str], what: str) -> bytes:
    """The bytes of `path`; InputError "cannot read <what>: ..." when it cannot be read or is not a regular file."""
    with open_regular_file(path, what) as stream:
        try:
            return stream.read()
        except OSError as error:
            raise InputError(str(path), f"cannot read {what}: {error.strerror or error}") from None


def read_text_file(path: str | os.PathLike[str], what: str) -> str:
    """The UTF-8 text of `path` (read as read_regular_file reads), without a leading BOM: editors hide it, so that
    positions in the text are the ones they show. InputError at the first byte that is not UTF-8."""
    data = read_regular_file(path, what)
    try:
        return data.decode("utf-8").removeprefix(BOM)
    except UnicodeDecodeError as error:
        line, column = text_position(data, error.start)
        raise InputError(str(path), f"{what} is not UTF-8: byte 0x{data[error.start]:02x}", line, column) from None


def open_regular_file(path: str | os.PathLike[str], what: str) -> io.FileIO:
    """`path` opened for reading (unbuffered); InputError as read_regular_file's when it cannot be opened or is not a
    regular file."""
    try:
        # O_NONBLOCK: opening a FIFO waits for a writer without it; reads of a regular file ignore the flag.
        handle = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as error:
        raise InputError(str(path), f"cannot read {what}: {error.strerror or error}") from None
    mode = os.fstat(handle).st_mode
    if not stat.S_ISREG(mode):
        os.close(handle)
        raise InputError(str(path), f"cannot read {what}: {file_kind(mode)}, not a regular file")
    return io.FileIO(handle, "rb")
