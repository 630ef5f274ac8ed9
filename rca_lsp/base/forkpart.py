"""One piece of work done by a forked child while this process does the rest: the CLI's root-cause report with its
divergence chart (seconds on 10^5 modules, in one process) is written on the second core while the tables are.

The work returns the paths it wrote (each written atomically); the child sends them back. If the child fails for
any reason (an exception, a kill), nothing is sent and the work is done here instead, so its errors read exactly as
usual. Single-threaded callers only: the child is forked.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Callable

import msgspec

Work = Callable[[], list[Path]]

_PATHS = msgspec.json.Decoder(list[str])


class BackgroundWork:
    """Starts `work` in a forked child at once; `result()` waits for its paths (or does the work here)."""

    def __init__(self, work: Work) -> None:
        self._work = work
        context = multiprocessing.get_context("fork")
        self._receiver, sender = context.Pipe(duplex=False)
        # not a daemon: the work may start a BackgroundWork of its own (multiprocessing's daemons cannot); close()
        # ends the child in any case
        self._child = context.Process(target=_work_and_send, args=(work, sender, self._receiver, os.getpid()))
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})  # a Ctrl-C during the fork reaches
        try:  # the parent, which kills the child
            self._child.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        sender.close()

    def result(self) -> list[Path]:
        try:
            data = self._receiver.recv_bytes()
        except (EOFError, OSError):
            data = b""
        finally:
            self.close()
        if not data:  # the child failed: the work is done here, which reports the problem
            return self._work()
        return [Path(path) for path in _PATHS.decode(data)]

    def close(self) -> None:
        self._receiver.close()
        if self._child.exitcode is None:
            self._child.kill()
        self._child.join()

    def __enter__(self) -> "BackgroundWork":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _work_and_send(work: Work, sender: Connection, inherited: Connection, parent: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    _end_with_parent(parent)
    inherited.close()  # the parent's end: held here too, a dead parent's pipe would never break (EPIPE)
    try:
        paths = work()
        sender.send_bytes(msgspec.json.encode([str(path) for path in paths]))
    except Exception:  # nothing sent: the parent does the work itself and reports the problem
        pass
    finally:
        sender.close()


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
