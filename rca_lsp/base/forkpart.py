"""Work done by forked children while this process does the rest, and the pipes that bring their results back.

BackgroundWork: the CLI's output_1, 2 and 4 are written on the second core while the analysis goes on, and the
chart's image is drawn while its page is written. The work returns the paths it wrote (each written atomically); the
child sends them back. If the child fails for any reason (an exception, a kill), nothing is sent and the work is done
here instead, so its errors read exactly as usual. Single-threaded callers only: the child is forked.

ForkedBytes: the language server's chart data (seconds of Python on 10^5 modules) is computed and encoded in a child,
so that the server's event loop keeps answering meanwhile; the encoded bytes come back. The server has threads: the
child has only the one that forked, and a lock another thread held at that moment stays held in the child, so the work
must take no lock other threads hold for long (base.gcpause, whose lock any thread takes briefly, resets it in a
child).

Channel: every child's result comes back through one, and a read of it never waits forever: a child that is stopped
(SIGSTOP, a debugger) is given up as a failed one is (see Channel).
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import os
import select
import signal
import struct
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, NoReturn

import msgspec

Work = Callable[[], list[Path]]

_PATHS = msgspec.json.Decoder(list[str])

_LOOK_EVERY_MS = 200  # while a child's pipe is silent, how often the child is looked at
_STOPPED_LOOKS = 5  # looks in a row that find the child stopped (1 s of this process running) before giving it up
_STUCK_LOOKS = 25  # looks in a row that find the child asleep, no CPU time used since the last (5 s): stuck
_LENGTH = struct.Struct("!Q")


class Channel:
    """A one-way pipe from a child process to this one, carrying messages framed by their length.

    Reading never waits forever on the child. One that runs is waited for however long it takes (it does the work
    this process would do otherwise). One that is stopped (SIGSTOP, a debugger: Linux's /proc/<pid>/stat says `T`)
    sends nothing, and Python's Connection.recv_bytes would wait for it forever, even with half a message read: while
    the pipe is silent the child is looked at every 0.2 s, and once it has been found stopped 5 looks in a row (1 s
    of this process running) the read gives up (None), as for a child that failed: the caller ends it and does its
    work here. A Ctrl-Z stops this process with the child and `fg` resumes both, so it never looks that long. Without
    /proc (not Linux) a child is never taken for stopped: the reads wait as before.

    A child forked from a process with threads (`stuck` reads) may also wait forever without being stopped: on a
    lock that another thread of the parent held at the fork, which no thread of the child will release. Such a child
    sleeps and uses no CPU: found so 25 looks in a row (5 s), it is given up as a stopped one is. (Not for children
    that may wait on their own children, as BackgroundWork's report child waits on its image's: they sleep so too.)"""

    def __init__(self) -> None:
        self._reading: int | None
        self._writing: int | None
        self._reading, self._writing = os.pipe()

    def fileno(self) -> int:
        """The reading end (for select)."""
        assert self._reading is not None
        return self._reading

    def writing_end(self) -> int:
        """The writing end, e.g. for a child process's stdout (closed here once it has started)."""
        assert self._writing is not None
        return self._writing

    def close_reading(self) -> None:
        if self._reading is not None:
            os.close(self._reading)
            self._reading = None

    def close_writing(self) -> None:
        if self._writing is not None:
            os.close(self._writing)
            self._writing = None

    def send(self, data: bytes) -> None:
        """In the child: one message (OSError, e.g. a broken pipe, when this process stopped reading)."""
        assert self._writing is not None
        for part in (_LENGTH.pack(len(data)), data):
            view = memoryview(part)
            while view:
                view = view[os.write(self._writing, view) :]

    def receive(self, child: int, stuck: bool = False) -> bytearray | None:
        """The next message of the child whose pid is `child`; None when the pipe ends first (the child failed) or
        the child is stopped, or with `stuck` stuck (see the class)."""
        length = self._read(_LENGTH.size, child, stuck=stuck)
        if length is None:
            return None
        return self._read(_LENGTH.unpack(length)[0], child, stuck=stuck)

    def receive_all(self, child: int) -> bytearray | None:
        """Everything the child writes until it closes the pipe (a child process's stdout); None if it is stopped."""
        received = bytearray()
        while (chunk := self._read(1 << 20, child, partial=True)) is not None:
            if not chunk:
                return received
            received += chunk
        return None

    def _read(self, size: int, child: int, partial: bool = False, stuck: bool = False) -> bytearray | None:
        """`size` bytes (`partial`: what is there, up to `size`; empty at the end); None at the end of the pipe
        before `size` bytes, or when the child is stopped (or `stuck`, stuck)."""
        assert self._reading is not None
        buffer = bytearray(size)
        done = 0
        looks = _Looks(child, stuck)
        poll = select.poll()
        poll.register(self._reading, select.POLLIN)
        with memoryview(buffer) as view:
            while done < size:
                if not poll.poll(_LOOK_EVERY_MS):
                    if looks.given_up():
                        return None
                    continue
                looks = _Looks(child, stuck)
                count = os.readv(self._reading, [view[done:]])
                done += count
                if count == 0 or partial:  # the end of the pipe, or what there is
                    break
        if done < size and not partial:
            return None
        del buffer[done:]
        return buffer


class _Looks:
    """The looks at a child whose pipe stays silent, in a row: whether to give it up (see Channel)."""

    def __init__(self, pid: int, stuck: bool) -> None:
        self._pid, self._stuck = pid, stuck
        self._stopped = self._asleep = 0
        self._cpu: int | None = None

    def given_up(self) -> bool:
        state, cpu = _process_state(self._pid)
        self._stopped = self._stopped + 1 if state in (b"T", b"t") else 0
        if self._stuck:
            idle = state == b"S" and cpu is not None and cpu == self._cpu
            self._asleep = self._asleep + 1 if idle else 0
            self._cpu = cpu
        return self._stopped >= _STOPPED_LOOKS or self._asleep >= _STUCK_LOOKS


def _process_state(pid: int) -> tuple[bytes, int | None]:
    """Process `pid`'s state letter (`T`: stopped by a signal, `t` by a tracer, `S` asleep) and the CPU time it has
    used (clock ticks), as /proc says; (b"", None) when it cannot tell."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            text = stat.read()
    except OSError:
        return b"", None
    fields = text[text.rfind(b")") + 2 :].split()  # after the command, which may hold spaces and parentheses
    try:
        return fields[0], int(fields[11]) + int(fields[12])  # state, then utime and stime (fields 14 and 15)
    except (IndexError, ValueError):
        return fields[0] if fields else b"", None


@contextmanager
def interrupts_held() -> Iterator[None]:
    """A Ctrl-C during the block (a fork) reaches this process after it, where it raises KeyboardInterrupt (or does
    what SIGINT's handler does), not inside fork's after-in-parent callbacks, where Python ignores exceptions and the
    run would go on. Blocking the signal is not enough: it blocks it for this thread only, and the kernel hands a
    process-directed SIGINT to any thread that does not block it, whose Python handler then runs in the main thread
    at once. So on the main thread the handler is also replaced for the block by one that notes the signal."""
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    # a handler not set from Python (getsignal: None) could not be put back: left alone, the mask alone holds
    previous = signal.getsignal(signal.SIGINT) if threading.current_thread() is threading.main_thread() else None
    noted: list[int] = []
    if previous is not None:
        signal.signal(signal.SIGINT, lambda signum, frame: noted.append(signum))
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)  # one held back by the mask is delivered now...
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    if noted:  # ... and one that reached another thread, to the handler of the process
        signal.raise_signal(signal.SIGINT)


def can_fork() -> bool:
    """Whether this platform forks (not Windows): else every part is done in this process."""
    return "fork" in multiprocessing.get_all_start_methods()


def yield_to_the_parent() -> None:
    """A child whose work is not what the parent waits for first runs at a lower priority: with more work than
    cores, the parent's (the chart, on the way to the exit) gets a core of its own."""
    try:
        os.nice(BACKGROUND_NICENESS)
    except OSError:  # not allowed here: it only shares the cores evenly
        pass


BACKGROUND_NICENESS = 5


class BackgroundWork:
    """Starts `work` in a forked child at once; `result()` waits for its paths (or does the work here). `background`:
    the child yields to this process (see yield_to_the_parent)."""

    def __init__(self, work: Work, background: bool = False) -> None:
        self._work = work
        context = multiprocessing.get_context("fork")
        self._channel = Channel()
        # not a daemon: the work may start a BackgroundWork of its own (multiprocessing's daemons cannot); close()
        # ends the child in any case
        self._child = context.Process(target=_work_and_send, args=(work, self._channel, os.getpid(), background))
        with interrupts_held():  # a Ctrl-C during the fork reaches the parent, which kills the child
            self._child.start()
        self._channel.close_writing()

    def result(self) -> list[Path]:
        try:
            assert self._child.pid is not None
            data = self._channel.receive(self._child.pid)
        finally:
            self.close()
        if not data:  # the child failed (or is stopped): the work is done here, which reports the problem
            return self._work()
        return [Path(path) for path in _PATHS.decode(data)]

    def close(self) -> None:
        self._channel.close_reading()
        if self._child.exitcode is None:
            self._child.kill()
        self._child.join()

    def __enter__(self) -> BackgroundWork:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class ForkedBytes:
    """Starts `work` in a forked child at once, for a process that must stay responsive meanwhile: Python work in one
    of its threads would hold the interpreter lock (and a C call holds it throughout). `result()` waits for the bytes
    the work returns, None when the child failed or got stuck on a lock it inherited (see Channel; the caller then
    does the work itself, which reports the problem).

    A plain fork, not multiprocessing's: its child closes sys.stdin first, which waits forever for the lock a thread
    of a language server holds while it reads its input. The child writes nothing where this process writes (a
    language server's protocol stream is its stdout): its descriptor 1 is /dev/null, and it ends with os._exit,
    flushing no buffer it inherited."""

    def __init__(self, work: Callable[[], bytes], then: Callable[[], bytes] | None = None) -> None:
        """`then`: more work the child does once it has sent `work`'s bytes, its bytes read by `later()` (the caller
        goes on with the first meanwhile)."""
        self._channel = Channel()
        self._then = then is not None
        parent = os.getpid()
        with interrupts_held():  # as BackgroundWork
            self._pid: int | None = os.fork()
            if self._pid == 0:
                _bytes_and_exit(work, then, self._channel, parent)
        self._channel.close_writing()

    @property
    def pid(self) -> int | None:
        """The child's process id (None once it is done with)."""
        return self._pid

    def fileno(self) -> int:
        """The end its bytes are read from (for select)."""
        return self._channel.fileno()

    def result(self) -> bytes | None:
        """`work`'s bytes (the child is done with then, unless `later()` is to come)."""
        return self._received(closing=not self._then)

    def later(self) -> bytes | None:
        """`then`'s bytes; the child is done with."""
        return self._received(closing=True)

    def _received(self, closing: bool) -> bytes | None:
        data = None
        try:
            if self._pid is not None:
                data = self._channel.receive(self._pid, stuck=True)  # forked from a process with threads
        finally:
            if closing or data is None:
                self.close()
        return None if data is None else bytes(data)

    def close(self) -> None:
        self._channel.close_reading()
        if self._pid is not None:
            try:
                os.kill(self._pid, signal.SIGKILL)  # done or not: it has nothing more to give
            except ProcessLookupError:
                pass
            os.waitpid(self._pid, 0)
            self._pid = None

    def __enter__(self) -> ForkedBytes:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _work_and_send(work: Work, channel: Channel, parent: int, background: bool) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    if background:
        yield_to_the_parent()
    _end_with_parent(parent)
    channel.close_reading()  # the parent's end: held here too, a dead parent's pipe would never break (EPIPE)
    try:
        channel.send(msgspec.json.encode([str(path) for path in work()]))
    except Exception:  # nothing sent: the parent does the work itself and reports the problem
        pass
    finally:
        channel.close_writing()


def _bytes_and_exit(
    work: Callable[[], bytes], then: Callable[[], bytes] | None, channel: Channel, parent: int
) -> NoReturn:
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
        # another thread may have held the lock of a stream (or of a log handler's) at the fork: none is used here
        sys.stdout = sys.stderr = open(os.devnull, "w")
        logging.disable(logging.CRITICAL)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        _end_with_parent(parent)
        channel.close_reading()
        channel.send(work())
        if then is not None:
            channel.send(then())
    except BaseException:  # nothing (more) sent: the parent does the work itself and reports the problem
        pass
    finally:
        os._exit(0)


def _end_with_parent(parent: int) -> None:
    """Have Linux kill this child when its parent ends: a parent killed in turn (a Ctrl-C in the CLI kills the
    report's child, whose own child draws the image) must not leave work going on that writes files later."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the parent's close() ends its own child only
        return
    if os.getppid() != parent:  # the parent ended before the request took effect
        os._exit(1)


_PR_SET_PDEATHSIG = 1
