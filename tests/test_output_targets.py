"""What `-o` and `--out-dir` may replace (the real CLI on a real fixture): a path naming no file is one line and exit
2; a FIFO, a device or a folder is refused and left as it was; a symlink is written through (the link stays, its
target gets the content, the summary says so); a file edited while suggest-mapping ran is not overwritten."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES

from rca_lsp.base.atomicfile import FileStamp, TargetChanged, UnwritableTarget, write_atomically
from rca_lsp.cli import suggest as suggest_cli
from rca_lsp.cli.main import main

SOURCE = FIXTURES / "missing_activation"
DUMPS = ("--train", str(SOURCE / "train"), "--rollout", str(SOURCE / "rollout"))
SUGGEST = ("suggest-mapping", *DUMPS)
EXPORT = ("export-mapping", *DUMPS, "--mapping-key", str(SOURCE / "mapping_key.json"))
ANALYZE = ("analyze", *DUMPS, "--mapping-key", str(SOURCE / "mapping_key.json"), "--no-chart")


def rca(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rca_lsp", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def one_line_error(result: subprocess.CompletedProcess[str], *words: str) -> str:
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert all(word in result.stderr for word in words), result.stderr
    return result.stderr


@pytest.mark.parametrize("command", [SUGGEST, EXPORT], ids=["suggest-mapping", "export-mapping"])
@pytest.mark.parametrize("output", ["", ".", "/", "sub/..", "sub"])
def test_an_output_naming_no_file_is_one_line_and_exit_2(tmp_path: Path, command: tuple[str, ...], output: str) -> None:
    (tmp_path / "sub").mkdir()
    one_line_error(rca(*command, "-o", output, cwd=tmp_path), "cannot write")
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["sub"]  # nothing written anywhere


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _char_device(path: Path) -> Path:
    """A copy of /dev/null's node (as root; the test is skipped otherwise): what `-o /dev/null` named."""
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("creating a device node needs root")
    return path


def _folder(path: Path) -> Path:
    path.mkdir()
    return path


KINDS = {"fifo": (_fifo, stat.S_ISFIFO), "char device": (_char_device, stat.S_ISCHR), "folder": (_folder, stat.S_ISDIR)}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("command", [SUGGEST, EXPORT], ids=["suggest-mapping", "export-mapping"])
def test_an_output_that_is_not_a_regular_file_is_refused_and_kept(
    tmp_path: Path, command: tuple[str, ...], kind: str
) -> None:
    make, is_kind = KINDS[kind]
    target = make(tmp_path / "out.json")
    one_line_error(rca(*command, "-o", str(target), cwd=tmp_path), str(target), "not a regular file")
    assert is_kind(os.lstat(target).st_mode)
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]  # no temporary left either


@pytest.mark.parametrize("kind", ["fifo", "char device"])
def test_analyze_refuses_an_output_file_that_is_not_a_regular_file(tmp_path: Path, kind: str) -> None:
    make, is_kind = KINDS[kind]
    out = tmp_path / "out"
    out.mkdir()
    target = make(out / "output_2_mapping.csv")
    one_line_error(rca(*ANALYZE, "--out-dir", str(out), cwd=tmp_path), str(target), "not a regular file")
    assert is_kind(os.lstat(target).st_mode) and not (out / "output_manifest.json").exists()


@pytest.mark.parametrize("through_a_link", [False, True])
def test_export_mapping_refuses_to_write_over_the_mapping_it_reads(tmp_path: Path, through_a_link: bool) -> None:
    """`-o` naming the --mapping-key file (a slip of the shell history): the user's mapping is kept, not replaced
    by the YAML."""
    mapping = tmp_path / "mapping_key.json"
    mapping.write_bytes((SOURCE / "mapping_key.json").read_bytes())
    output = tmp_path / "mapping.yaml" if through_a_link else mapping
    if through_a_link:
        output.symlink_to(mapping)
    result = rca("export-mapping", *DUMPS, "--mapping-key", str(mapping), "-o", str(output), cwd=tmp_path)
    one_line_error(result, str(output), "the mapping-key file read (--mapping-key) would be lost")
    assert mapping.read_bytes() == (SOURCE / "mapping_key.json").read_bytes()


@pytest.mark.parametrize("command", [SUGGEST, EXPORT], ids=["suggest-mapping", "export-mapping"])
def test_a_symlinked_output_is_written_through_and_the_summary_says_so(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    (tmp_path / "real").mkdir()
    real = tmp_path / "real" / "kept.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(Path("real") / "kept.json")
    result = rca(*command, "-o", "link.json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert link.is_symlink() and os.readlink(link) == str(Path("real") / "kept.json")
    assert real.read_text() != "old" and f"link.json (a symlink: written through to {real})" in result.stdout


@pytest.mark.parametrize("through_a_link", [False, True])
def test_analyze_refuses_a_mapping_key_file_that_is_one_of_its_outputs(tmp_path: Path, through_a_link: bool) -> None:
    """A previous run's output_2_mapping.json is a valid mapping: read from the folder the run writes to, it would
    be replaced by what the run keeps of it (its entries naming keys missing from the dumps lost). Refused before
    the analysis, with nothing in the folder touched."""
    out = tmp_path / "out"
    out.mkdir()
    kept = out / "output_2_mapping.json"
    mapping = json.loads((SOURCE / "mapping_key.json").read_text())
    mapping["Module.not.in.the.dumps.Linear.forward.0"] = "Module.nor.here.Linear.forward.0"
    kept.write_text(json.dumps(mapping))
    before = kept.read_bytes()
    given = tmp_path / "mapping_key.json" if through_a_link else kept
    if through_a_link:
        given.symlink_to(kept)
    result = rca("analyze", *DUMPS, "--mapping-key", str(given), "--out-dir", str(out), cwd=tmp_path)
    one_line_error(result, str(given), "output_2_mapping.json", "copy it elsewhere")
    assert kept.read_bytes() == before and sorted(p.name for p in out.iterdir()) == ["output_2_mapping.json"]


def test_write_outputs_refuses_to_replace_the_mapping_key_file_it_read(tmp_path: Path) -> None:
    """The server's write-outputs command with an output folder holding the mapping being edited: an error, and the
    document on disk kept."""
    from rca_lsp.base.errors import InputError
    from rca_lsp.diagnose.run import analyze_paths
    from rca_lsp.report.outputs import write_outputs

    out = tmp_path / "out"
    out.mkdir()
    mapping = out / "output_1_key_mapping.json"
    mapping.write_bytes((SOURCE / "mapping_key.json").read_bytes())
    analysis = analyze_paths(SOURCE / "train", SOURCE / "rollout", mapping)
    with pytest.raises(InputError, match="output_1_key_mapping.json in the output folder"):
        write_outputs(analysis, out, chart=False)
    assert mapping.read_bytes() == (SOURCE / "mapping_key.json").read_bytes()
    assert sorted(p.name for p in out.iterdir()) == ["output_1_key_mapping.json"]


def test_analyze_writes_through_a_symlinked_output_file(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    real = tmp_path / "elsewhere.json"
    real.write_text("old")
    (out / "output_2_mapping.json").symlink_to(real)
    assert rca(*ANALYZE, "--out-dir", str(out), cwd=tmp_path).returncode == 0
    assert (out / "output_2_mapping.json").is_symlink() and json.loads(real.read_text())


def test_a_target_replaced_while_written_is_left_alone(tmp_path: Path) -> None:
    from rca_lsp.base.atomicfile import atomic_stream

    target = tmp_path / "out.json"
    with pytest.raises(UnwritableTarget):
        with atomic_stream(target) as stream:
            stream.write(b"{}")
            os.mkfifo(target)  # appears while the file is written
    assert stat.S_ISFIFO(os.lstat(target).st_mode) and [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_a_stamp_tells_any_change_of_the_file(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_bytes(b'{"a": "b"}')
    stamp = FileStamp.of(path)
    assert stamp is not None and FileStamp.of(path) == stamp
    status = path.stat()
    path.write_bytes(b'{"a": "c"}')  # same size, mtime restored: only the content tells
    os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns))
    with pytest.raises(TargetChanged):
        write_atomically(path, b"{}", stamp)
    assert path.read_bytes() == b'{"a": "c"}'
    assert FileStamp.of(tmp_path / "missing.json") is None and FileStamp.of(_fifo(tmp_path / "fifo")) is None


def test_an_edit_saved_while_suggest_mapping_ran_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    mapping = tmp_path / "mapping_key.json"
    entries = json.loads((SOURCE / "mapping_key.json").read_text())
    first = dict(list(entries.items())[:3])
    mapping.write_text(json.dumps(first, indent=2))
    edited = {**first, "Module.edited.Linear.forward.0": "Module.edited.Linear.forward.0"}
    saves = iter([json.dumps(edited, indent=2), json.dumps(edited, indent=4)])
    suggest = suggest_cli.suggest_mapping

    def suggest_while_the_user_saves(*args, **kwargs):  # the user's editor saves the file while the matcher runs
        result = suggest(*args, **kwargs)
        mapping.write_text(next(saves))
        return result

    monkeypatch.setattr(suggest_cli, "suggest_mapping", suggest_while_the_user_saves)
    argv = [*SUGGEST, "--existing", str(mapping), "-o", str(mapping)]
    assert main(argv) == 0
    beside = tmp_path / "mapping_key.suggested.json"
    assert json.loads(mapping.read_text()) == edited and json.loads(beside.read_text()).items() >= first.items()
    printed = capsys.readouterr()
    assert f"to {beside}" in printed.out and "changed while suggest-mapping ran" in printed.err
    assert main(argv) == 0 and (tmp_path / "mapping_key.suggested-2.json").exists()  # never over an earlier one
    assert json.loads(beside.read_text()).items() >= first.items() and json.loads(mapping.read_text()) == edited
    monkeypatch.setattr(suggest_cli, "suggest_mapping", suggest)
    assert main(argv) == 0 and json.loads(mapping.read_text()).items() >= edited.items()  # not changed: replaced
