"""The report written by a forked child while the tables are (forkpart): the same files as one process writes, and
the work done here when the child fails."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest
from conftest import FIXTURES

from rca_lsp.base.forkpart import BackgroundWork, ForkedBytes
from rca_lsp.diagnose.run import analyze_paths
from rca_lsp.report.outputs import write_outputs


def _written_by(pid_file: Path, fail_in_child: str) -> list[Path]:
    """Work that records which process did it; in a child it fails as `fail_in_child` says."""
    if os.getpid() != int(pid_file.read_text()):
        if fail_in_child == "raise":
            raise OSError("no space left on device")
        if fail_in_child == "exit":
            os._exit(3)
    done = pid_file.with_suffix(f".{os.getpid()}")
    done.write_text("done")
    return [done]


@pytest.mark.parametrize("fail_in_child", ["no", "raise", "exit"])
def test_the_work_is_done_once_in_the_child_or_here_when_the_child_fails(tmp_path: Path, fail_in_child: str) -> None:
    pid_file = tmp_path / "parent.pid"
    pid_file.write_text(str(os.getpid()))
    with BackgroundWork(lambda: _written_by(pid_file, fail_in_child)) as background:
        (done,) = background.result()
    assert done.read_text() == "done"
    by_parent = done.suffix == f".{os.getpid()}"
    assert by_parent == (fail_in_child != "no")
    assert sorted(tmp_path.glob("parent.*")) == sorted([pid_file, done])  # the work ran once


def test_the_work_may_hand_part_of_itself_to_a_child_of_its_own(tmp_path: Path) -> None:
    def inner() -> list[Path]:
        done = tmp_path / f"inner.{os.getpid()}"
        done.write_text("done")
        return [done]

    def outer() -> list[Path]:
        with BackgroundWork(inner) as background:
            return [tmp_path / f"outer.{os.getpid()}", *background.result()]

    with BackgroundWork(outer) as background:
        outer_path, inner_path = background.result()
    pids = {int(outer_path.suffix[1:]), int(inner_path.suffix[1:]), os.getpid()}
    assert len(pids) == 3  # each part in a process of its own: none fell back to its parent


def test_a_child_killed_meanwhile_takes_its_own_child_with_it(tmp_path: Path) -> None:
    """A Ctrl-C kills the CLI's report child while its image child draws: nothing may be written afterwards."""
    import time

    started, late = tmp_path / "inner-started", tmp_path / "written-late"

    def inner() -> list[Path]:
        started.write_text("")
        time.sleep(1.5)
        late.write_text("late")
        return [late]

    def outer() -> list[Path]:
        with BackgroundWork(inner) as background:
            return background.result()

    background = BackgroundWork(outer)
    deadline = time.monotonic() + 10
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert started.exists()
    background.close()  # kills the outer child, as the CLI's Ctrl-C handling does
    time.sleep(2.5)
    assert not late.exists()


def _without_run_id(path: Path, run_id: str) -> bytes:
    return path.read_bytes().replace(run_id.encode(), b"RUN")


@pytest.mark.parametrize("variant", ["tp2_sp_replica_desync", "healthy_fp32"])
def test_the_forked_report_is_what_one_process_writes(tmp_path: Path, variant: str) -> None:
    import json

    folder = FIXTURES / variant
    analysis = analyze_paths(folder / "train", folder / "rollout", folder / "mapping_key.json")
    outputs = {}
    for fork in (False, True):
        out = tmp_path / f"fork_{fork}"
        written = write_outputs(analysis, out, fork=fork)
        run_id = json.loads((out / "output_manifest.json").read_bytes())["run_id"]
        outputs[fork] = (sorted(p.name for p in written), {p.name: _without_run_id(p, run_id) for p in written})
    (names, files), (forked_names, forked_files) = outputs[False], outputs[True]
    assert forked_names == names and "output_5_root_cause_report.html" in names
    for name in ("output_5_root_cause_report.json", "output_5_root_cause_report.md", "output_3_value_compare.csv"):
        assert forked_files[name] == files[name], name


def test_forked_bytes_come_from_a_child_and_none_when_it_fails() -> None:
    with ForkedBytes(lambda: str(os.getpid()).encode()) as child:
        pid = child.result()
    assert pid is not None and int(pid) != os.getpid()

    def fails() -> bytes:
        raise OSError("a rank file went away")

    with ForkedBytes(fails) as child:
        assert child.result() is None


def test_forked_bytes_then_more_work_whose_bytes_come_later() -> None:
    """The child sends the first bytes, then does its second piece of work (in the same process: what the first
    left is there) while the caller reads them; a second piece that fails gives None, the first still read."""
    left: list[int] = []

    def first() -> bytes:
        left.append(os.getpid())
        return b"first"

    with ForkedBytes(first, lambda: str(left[0]).encode()) as child:
        assert child.result() == b"first"
        pid = child.later()
        assert pid is not None and int(pid) != os.getpid()
        assert child.pid is None  # done with

    def fails() -> bytes:
        raise OSError("the dump went away")

    with ForkedBytes(lambda: b"first", fails) as child:
        assert child.result() == b"first" and child.later() is None


def test_a_child_stuck_on_a_lock_it_inherited_is_given_up() -> None:
    """Forked while another thread held a lock its work takes: the child sleeps forever, using no CPU. It is given
    up after 5 s of that (the caller does the work itself); a child that works, or sleeps less, is waited for."""
    lock, held, release = threading.Lock(), threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            held.set()
            release.wait()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(10)
        with ForkedBytes(lambda: b"took it" if lock.acquire() else b"") as child:
            answer: list[bytes | None] = []
            reader = threading.Thread(target=lambda: answer.append(child.result()), daemon=True)
            reader.start()
            reader.join(30)
            if reader.is_alive():
                assert child.pid is not None
                os.kill(child.pid, signal.SIGKILL)  # frees the reader
                reader.join()
                pytest.fail("a child stuck on a lock it inherited is waited for forever")
        assert answer == [None]
    finally:
        release.set()
        holder.join()
    with ForkedBytes(lambda: b"took it" if lock.acquire() else b"") as child:  # released: the work is done
        assert child.result() == b"took it"
    with ForkedBytes(lambda: time.sleep(2) or b"slept") as child:
        assert child.result() == b"slept"


# A language server: one thread blocked reading its input (holding the stdin buffer's lock), a log handler on
# stderr, stdout carrying the protocol. The chart's child must neither wait for that lock nor write to stdout.
SERVER_LIKE = """
import logging, sys, threading
from rca_lsp.base.forkpart import ForkedBytes
logging.basicConfig(stream=sys.stderr)
threading.Thread(target=sys.stdin.buffer.read, daemon=True).start()
def work():
    print("from the child")
    logging.getLogger("chart").error("from the child")
    return b"chart"
import time; time.sleep(0.2)  # the reader is blocked in read()
with ForkedBytes(work) as child:
    sys.stdout.write(child.result().decode())
sys.stdout.flush()
import os; os._exit(0)  # as the server does: the reading thread never lets go of stdin
"""


def test_forked_bytes_in_a_process_whose_thread_reads_stdin_and_whose_stdout_is_a_protocol() -> None:
    import subprocess
    import sys

    reader, writer = os.pipe()  # stdin stays open and silent: the reading thread blocks
    try:
        done = subprocess.run(
            [sys.executable, "-c", SERVER_LIKE], stdin=reader, capture_output=True, text=True, timeout=60
        )
    finally:
        os.close(reader)
        os.close(writer)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "chart"  # nothing the child printed or logged reached this process's streams
    assert "from the child" not in done.stderr
