"""One large JSON+CSV table written by two processes at once, byte for byte what one process would write.

The table is a sequence of chunks. A forked child encodes chunks from the first on, straight into the target's
temporary files; the parent, once its own work is done, encodes chunks from the last one backwards into spool
files. The two meet wherever the work balances (a shared counter hands out chunks), then the parent appends its
chunks in order and renames both files into place, so a reader never sees a half-written table.
"""

from __future__ import annotations

import errno
import itertools
import multiprocessing
import os
import signal
import tempfile
from multiprocessing.sharedctypes import SynchronizedArray
from pathlib import Path
from typing import BinaryIO, Callable, TypeVar

from rca_lsp.base.atomicfile import create_temporary, replace_checked, writable_target
from rca_lsp.base.forkpart import interrupts_held, yield_to_the_parent
from rca_lsp.base.gcpause import paused_gc

EncodeChunk = Callable[[int], tuple[bytes, bytes]]  # chunk index -> (its JSON text, its CSV text)
T = TypeVar("T")


def write_split(
    paths: tuple[Path, Path],
    heads: tuple[bytes, bytes],
    json_tail: bytes,
    chunks: int,
    encode: EncodeChunk,
    parent_work: Callable[[], T],
    on_chunk: Callable[[int, int], None] | None = None,
) -> T:
    """Write the JSON and CSV files (head, every chunk in order, tail for the JSON) while running `parent_work`,
    and return its result; `on_chunk(done, chunks)` is told, in this process, how many chunks the two processes
    have taken so far each time this one is done with one of its own. Single-threaded callers only: the child is
    forked."""
    context = multiprocessing.get_context("fork")
    temporaries: list[Path] = []
    fds: list[int] = []
    child = None
    try:
        targets = [writable_target(path) for path in paths]
        for target, head in zip(targets, heads):
            fd, temporary = create_temporary(target)
            temporaries.append(temporary)
            fds.append(fd)
            os.write(fd, head)
        # [next chunk from the front, end of the unclaimed chunks, errno of the child's failure or 0]
        bounds = context.Array("q", [0, chunks, 0])
        child = context.Process(target=_write_front, args=(bounds, fds, encode))
        with interrupts_held():  # a Ctrl-C during the fork reaches the parent once it is done
            child.start()
        result = parent_work()
        with (
            tempfile.TemporaryFile(dir=paths[0].parent) as json_spool,
            tempfile.TemporaryFile(dir=paths[0].parent) as csv_spool,
        ):
            sizes = _write_back(bounds, chunks, encode, json_spool, csv_spool, on_chunk)
            child.join()
            if bounds[2]:
                raise OSError(bounds[2], os.strerror(bounds[2]))
            if child.exitcode != 0:
                raise OSError(f"writing {paths[0].name} failed in the child process (exit code {child.exitcode})")
            with os.fdopen(fds[0], "ab", closefd=False) as json_out, os.fdopen(fds[1], "ab", closefd=False) as csv_out:
                _append_reversed(json_spool, json_out, [size for size, _ in sizes])
                _append_reversed(csv_spool, csv_out, [size for _, size in sizes])
                json_out.write(json_tail)
        for temporary, path, target in zip(temporaries, paths, targets):
            replace_checked(temporary, path, target)
        temporaries.clear()
        return result
    finally:
        if child is not None and child.exitcode is None:
            child.kill()
            child.join()
        for fd in fds:
            os.close(fd)
        for temporary in temporaries:
            temporary.unlink(missing_ok=True)


def _claim(bounds: SynchronizedArray, from_front: bool) -> int | None:
    with bounds.get_lock():
        if bounds[0] >= bounds[1]:
            return None
        if from_front:
            bounds[0] += 1
            return bounds[0] - 1
        bounds[1] -= 1
        return bounds[1]


def _write_front(bounds: SynchronizedArray, fds: list[int], encode: EncodeChunk) -> None:
    """The child's part. Ctrl-C is the parent's to handle (it kills the child); a failed write (a full disk) is
    handed to the parent as its errno, to be reported in one line there, not as the child's traceback."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    yield_to_the_parent()  # the parent's work (the chart) is what the run waits for
    try:
        with (
            paused_gc(),
            os.fdopen(fds[0], "wb", closefd=False) as json_out,
            os.fdopen(fds[1], "wb", closefd=False) as csv_out,
        ):
            while (index := _claim(bounds, from_front=True)) is not None:
                json_text, csv_text = encode(index)
                json_out.write(json_text)
                csv_out.write(csv_text)
    except OSError as error:
        bounds[2] = error.errno or errno.EIO
        os._exit(1)


def _write_back(
    bounds: SynchronizedArray,
    chunks: int,
    encode: EncodeChunk,
    json_spool: BinaryIO,
    csv_spool: BinaryIO,
    on_chunk: Callable[[int, int], None] | None,
) -> list[tuple[int, int]]:
    """Chunks from the back, spooled in the order encoded (last chunk first); their sizes."""
    sizes = []
    with paused_gc():
        while (index := _claim(bounds, from_front=False)) is not None:
            json_text, csv_text = encode(index)
            json_spool.write(json_text)
            csv_spool.write(csv_text)
            sizes.append((len(json_text), len(csv_text)))
            if on_chunk is not None:
                with bounds.get_lock():
                    done = bounds[0] + chunks - bounds[1]  # taken from the front by the child, from the back here
                on_chunk(done, chunks)
    return sizes


def _append_reversed(spool: BinaryIO, out: BinaryIO, sizes: list[int]) -> None:
    """Copy the spooled segments to `out`, last one first."""
    offsets = list(itertools.accumulate(sizes, initial=0))
    for index in reversed(range(len(sizes))):
        spool.seek(offsets[index])
        out.write(spool.read(sizes[index]))
