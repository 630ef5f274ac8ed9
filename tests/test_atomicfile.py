"""Atomic writes: the mode a plain open() gives, and the temporaries of killed runs cleared by the next run."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest
from conftest import FIXTURES

from rca_lsp.base.atomicfile import create_temporary, host_label, is_stale_temporary, write_atomically
from rca_lsp.diagnose.run import analyze_paths
from rca_lsp.report.outputs import write_outputs

SOURCE = FIXTURES / "missing_activation"


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def umask_027() -> Iterator[None]:
    previous = os.umask(0o027)
    try:
        yield
    finally:
        os.umask(previous)


def rca(*args: str, cwd: Path, umask: int = -1) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rca_lsp", *args], cwd=cwd, capture_output=True, text=True, timeout=120, umask=umask
    )


def finished_pid() -> int:
    """The pid of a process that has ended."""
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(child.stdout)


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_an_atomic_write_gets_the_mode_open_would_give(tmp_path: Path, umask: int) -> None:
    previous = os.umask(umask)
    try:
        write_atomically(tmp_path / "new.json", b"{}")
        write_atomically(tmp_path / "again.json", b"{}")
        write_atomically(tmp_path / "again.json", b"[]")  # replacing a file
        with open(tmp_path / "plain.json", "w"):
            pass
    finally:
        os.umask(previous)
    assert (
        mode(tmp_path / "new.json") == mode(tmp_path / "again.json") == mode(tmp_path / "plain.json") == 0o666 & ~umask
    )


@pytest.mark.parametrize("kept", [0o600, 0o640, 0o444])
def test_a_replaced_file_keeps_its_permissions(tmp_path: Path, kept: int) -> None:
    """As `open(path, "w")` keeps them: a mapping file the user made private is not made world-readable by
    suggest-mapping writing it again."""
    path = tmp_path / "mapping.json"
    path.write_text("{}")
    path.chmod(kept)
    link = tmp_path / "link.json"
    link.symlink_to(path)
    write_atomically(path, b"[]")
    assert mode(path) == kept and path.read_bytes() == b"[]"
    write_atomically(link, b"[1]")  # written through to the file, which keeps its mode
    assert mode(path) == kept and path.read_bytes() == b"[1]"


def test_suggest_mapping_keeps_the_permissions_of_the_file_it_replaces(tmp_path: Path) -> None:
    mapping = tmp_path / "mapping.json"
    mapping.write_text("{}")
    mapping.chmod(0o600)
    dumps = ("--train", str(SOURCE / "train"), "--rollout", str(SOURCE / "rollout"))
    result = rca("suggest-mapping", *dumps, "--existing", "mapping.json", "-o", "mapping.json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert mode(mapping) == 0o600 and mapping.read_text() != "{}"


@pytest.mark.parametrize("fork", [False, True])
def test_every_output_file_follows_the_umask(tmp_path: Path, umask_027: None, fork: bool) -> None:
    analysis = analyze_paths(SOURCE / "train", SOURCE / "rollout", SOURCE / "mapping_key.json")
    written = write_outputs(analysis, tmp_path / "out", fork=fork)
    assert written and {path.name: mode(path) for path in written} == {path.name: 0o640 for path in written}


def test_cli_outputs_and_suggested_mapping_follow_the_umask(tmp_path: Path) -> None:
    assert rca("analyze", "--out-dir", "out", cwd=tmp_path, umask=0o022).returncode == 0
    assert {p.name: mode(p) for p in (tmp_path / "out").iterdir()} == {
        p.name: 0o644 for p in (tmp_path / "out").iterdir()
    }
    result = rca(
        "suggest-mapping",
        "--train",
        str(SOURCE / "train"),
        "--rollout",
        str(SOURCE / "rollout"),
        "-o",
        "suggested.json",
        cwd=tmp_path,
        umask=0o002,
    )
    assert result.returncode == 0, result.stderr
    assert mode(tmp_path / "suggested.json") == 0o664


def test_temporary_names_say_whose_they_are(tmp_path: Path) -> None:
    handle, temporary = create_temporary(tmp_path / "output_3_value_compare.json")
    os.close(handle)
    assert temporary.name.startswith(".rca-tmp.") and ".output_3_value_compare.json." in temporary.name
    assert not is_stale_temporary(temporary.name)  # its writer (this process) is running
    dead = temporary.name.replace(f".{os.getpid()}.", f".{finished_pid()}.")
    assert is_stale_temporary(dead)
    assert not is_stale_temporary(dead.replace(host_label(), "another-host"))


def test_a_temporary_that_cannot_be_made_is_an_error_naming_the_file_asked_for(tmp_path: Path) -> None:
    """A folder the temporary cannot go in (as root too: beneath a regular file; for a user, one without write
    permission): the error names the output file, not the temporary's made-up name."""
    (tmp_path / "a_file").write_text("not a folder")
    target = tmp_path / "a_file" / "output_5_root_cause_report.json"
    with pytest.raises(OSError) as caught:
        create_temporary(target)
    assert isinstance(caught.value, NotADirectoryError) and caught.value.filename == str(target)


def test_a_later_run_removes_the_temporaries_of_a_killed_one_and_nothing_else(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    host, dead, alive = host_label(), finished_pid(), os.getpid()
    stale = [
        f".rca-tmp.{host}.{dead}.output_3_value_compare.json.0123abcd.tmp",
        f".rca-tmp.{host}.{dead}.output_1_key_mapping.csv.deadbeef.tmp",
        ".output_3_value_compare.csv.k2_x9abz",
    ]  # the earlier tempfile.mkstemp naming
    kept = [
        f".rca-tmp.{host}.{alive}.output_3_value_compare.json.0123abcd.tmp",  # a run still writing
        f".rca-tmp.elsewhere.{dead}.output_3_value_compare.json.0123abcd.tmp",  # another host's run
        ".output_3_value_compare.csv.notes",
        ".my_notes",
        ".output_9_mine.json.abcdefgh",
        "keep.txt",
    ]
    for name in stale + kept:
        (out / name).write_bytes(b"x" * 100)
    result = rca("analyze", "--out-dir", str(out), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    names = {p.name for p in out.iterdir()}
    assert not names & set(stale) and set(kept) <= names


def test_suggest_mapping_removes_its_own_stale_temporaries(tmp_path: Path) -> None:
    stale = tmp_path / f".rca-tmp.{host_label()}.{finished_pid()}.mapping.json.0123abcd.tmp"
    stale.write_bytes(b"{")
    (tmp_path / ".mapping.json.abcdefgh.tmp").write_bytes(b"{")  # not recognisably ours: kept
    result = rca(
        "suggest-mapping",
        "--train",
        str(SOURCE / "train"),
        "--rollout",
        str(SOURCE / "rollout"),
        "-o",
        "mapping.json",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert not stale.exists() and (tmp_path / ".mapping.json.abcdefgh.tmp").exists()
