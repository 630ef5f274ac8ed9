"""A child process that is stopped (SIGSTOP, a debugger) never sends what it was forked for: the parent must not wait
for it forever. It gives up on a child seen stopped, ends it and does the work itself (the same result); a child
stopped while its message is half sent included. Each test stops a real child at a point of its work."""

from __future__ import annotations

import os
import select
import signal
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest
from conftest import FIXTURES

import rca_lsp.dumps.forkload as forkload
from rca_lsp.base.forkpart import BackgroundWork
from rca_lsp.dumps.columns import entry_columns
from rca_lsp.dumps.dump import load_dump_file
from rca_lsp.dumps.forkload import BackgroundDump, load_files_forked
from rca_lsp.dumps.sources import resolve_dump_source


class Hung(BaseException):
    """Raised in a wait that would never end (not an OSError, which the waits handle as a child's failure)."""


@pytest.fixture(autouse=True)
def no_endless_wait() -> Iterator[None]:
    """A wait that never ends fails the test (after far longer than the parent gives a stopped child)."""

    def hung(*_: object) -> None:
        raise Hung("waited 60 s for a stopped child")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def _stopping_in_child(real, parent: int):  # type: ignore[no-untyped-def]
    """`real`, which stops the process calling it when that is a child of `parent` (before it has sent anything)."""

    def call(*args, **kwargs):  # type: ignore[no-untyped-def]
        if os.getpid() != parent:
            os.kill(os.getpid(), signal.SIGSTOP)
        return real(*args, **kwargs)

    return call


def _same(loaded: list, paths: list[Path]) -> None:  # type: ignore[type-arg]
    direct = [load_dump_file(p) for p in paths]
    assert [d.keys for d in loaded] == [d.keys for d in direct]
    assert [d.entries for d in loaded] == [d.entries for d in direct]


def test_a_stopped_loader_child_is_given_up_and_the_dump_loaded_here(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(forkload, "load_source", _stopping_in_child(forkload.load_source, os.getpid()))
    path = (FIXTURES / "vllm_healthy" / "rollout" / "step0" / "rank0" / "dump.json").resolve()
    source = resolve_dump_source(path)
    with BackgroundDump(source) as background:
        _same([background.load(source)], [path])


def test_a_stopped_child_of_a_threaded_caller_is_given_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """The server's loader (a plain fork from a threaded process), stopped before it sends anything."""
    path = (FIXTURES / "vllm_healthy" / "rollout" / "step0" / "rank0" / "dump.json").resolve()
    source = resolve_dump_source(path)
    with BackgroundDump(source, threaded=True) as background:
        assert background.pid is not None
        os.kill(background.pid, signal.SIGSTOP)
        _same([background.load(source)], [path])


def test_a_stopped_rank_comparing_child_is_given_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(forkload, "read_regular_file", _stopping_in_child(forkload.read_regular_file, os.getpid()))
    paths = sorted((FIXTURES / "tp2_sp_healthy" / "train").glob("step0/rank*/dump.json"))
    _same(load_files_forked(paths), paths)


def test_a_child_stopped_halfway_through_its_message_is_given_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """The child has sent part of a message far larger than a pipe holds when it is stopped: the parent, reading,
    must not wait for the rest forever."""
    real_pack = forkload._pack
    monkeypatch.setattr(forkload, "_pack", lambda dump: real_pack(dump) + b"\0" * (8 << 20))  # 8 MB more to send
    path = (FIXTURES / "vllm_healthy" / "rollout" / "step0" / "rank0" / "dump.json").resolve()
    source = resolve_dump_source(path)
    with BackgroundDump(source) as background:
        assert background._child is not None and background._child.pid is not None
        readable, _, _ = select.select([background._receiver], [], [], 30)  # the child has begun to send ...
        assert readable
        os.kill(background._child.pid, signal.SIGSTOP)  # ... and cannot have sent 8 MB through a pipe unread
        _same([background.load(source)], [path])


def test_a_loader_stopped_before_it_sends_the_columns_is_given_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """The child sent the dump and is stopped gathering its columns: they are gathered here, the same."""
    monkeypatch.setattr(forkload, "packed_columns", _stopping_in_child(forkload.packed_columns, os.getpid()))
    path = (FIXTURES / "vllm_healthy" / "rollout" / "step0" / "rank0" / "dump.json").resolve()
    source = resolve_dump_source(path)
    with BackgroundDump(source) as background:
        loaded = background.load(source)
        columns = loaded.columns
    assert [id(s) for s in columns.stats.objects] == [
        id(s) for s in entry_columns(loaded.ordered_entries).stats.objects
    ]
    np.testing.assert_array_equal(columns.stats.values, entry_columns(loaded.ordered_entries).stats.values)


def test_stopped_background_work_is_done_here(tmp_path: Path) -> None:
    parent = os.getpid()

    def work() -> list[Path]:
        if os.getpid() != parent:
            os.kill(os.getpid(), signal.SIGSTOP)
        done = tmp_path / f"done.{os.getpid()}"
        done.write_text("done")
        return [done]

    with BackgroundWork(work) as background:
        (done,) = background.result()
    assert done.name == f"done.{parent}"
