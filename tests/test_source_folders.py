"""Rank and step folders as a careless or hostile user leaves them: each is one line naming the folder or file
(InputError; the CLI's exit status 2), never a traceback, never ranks or steps dropped or merged silently."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES
from test_cli import analyze_args

from rca_lsp.base.errors import InputError
from rca_lsp.cli.main import main
from rca_lsp.dumps.sources import StepSpan, resolve_dump_source


def _copy(variant: str, into: Path) -> Path:
    shutil.copytree(FIXTURES / variant, into / variant)
    return into / variant


def _one_line_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The CLI's stderr for a run that must fail with exit status 2 and one line."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def _suggest(folder: Path, out: Path) -> list[str]:
    return ["suggest-mapping", "--train", str(folder / "train"), "--rollout", str(folder / "rollout"), "-o", str(out)]


# --- defect 5: a rank's dump.json that is not a regular file -------------------------------------------------------


def _break_dump(path: Path, kind: str) -> None:
    path.unlink()
    if kind == "directory":
        path.mkdir()
    elif kind == "dangling symlink":
        path.symlink_to(path.parent / "gone.json")
    elif kind == "device":
        path.symlink_to("/dev/null")
    else:
        raise AssertionError(kind)


@pytest.mark.parametrize(
    ("kind", "said"),
    [
        ("directory", "a directory"),
        ("dangling symlink", "a symbolic link to a missing file"),
        ("device", "a character device"),
    ],
)
def test_a_rank_dump_that_is_not_a_regular_file_is_an_error_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, said: str
) -> None:
    folder = _copy("tp2_healthy", tmp_path)
    broken = folder / "train" / "step0" / "rank1" / "dump.json"
    _break_dump(broken, kind)
    with pytest.raises(InputError) as raised:
        resolve_dump_source(folder / "train")
    assert raised.value.path == str(broken) and said in raised.value.message
    err = _one_line_error(list(analyze_args(folder, tmp_path / "out")), capsys)
    assert str(broken) in err and said in err
    err = _one_line_error(_suggest(folder, tmp_path / "m.json"), capsys)
    assert str(broken) in err and said in err
    assert not (tmp_path / "out").exists() and not (tmp_path / "m.json").exists()  # nothing from rank 0 alone


def test_a_rank_folder_without_a_dump_is_an_error_naming_it(tmp_path: Path) -> None:
    folder = _copy("tp2_healthy", tmp_path)
    (folder / "train" / "step0" / "rank1" / "dump.json").unlink()
    with pytest.raises(InputError, match=r"rank1/dump.json: no dump.json in this rank folder"):
        resolve_dump_source(folder / "train")


def test_a_lone_dump_json_that_is_a_directory_is_named(tmp_path: Path) -> None:
    (tmp_path / "dump.json").mkdir()
    with pytest.raises(InputError, match=r"dump.json: cannot read dump: a directory"):
        resolve_dump_source(tmp_path)


# --- defect 7: two folders of one number ---------------------------------------------------------------------------


def test_two_rank_folders_of_one_number_are_an_error_naming_both(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _copy("tp2_healthy", tmp_path)
    step = folder / "train" / "step0"
    shutil.copytree(step / "rank1", step / "rank01")
    with pytest.raises(InputError) as raised:
        resolve_dump_source(folder / "train")
    assert raised.value.path == str(step) and "rank01 and rank1 are both rank 1" in raised.value.message
    for argv in (list(analyze_args(folder, tmp_path / "out")), _suggest(folder, tmp_path / "m.json")):
        assert "rank01 and rank1" in _one_line_error(argv, capsys)


def test_two_step_folders_of_one_number_are_an_error_naming_both(tmp_path: Path) -> None:
    rollout = _copy("decode_steps_healthy", tmp_path) / "rollout"
    shutil.copytree(rollout / "step2", rollout / "step02")
    for step in (StepSpan(), 2, None):
        with pytest.raises(InputError, match="step02 and step2 are both step 2"):
            resolve_dump_source(rollout, step)  # type: ignore[arg-type]


# --- defect 3 (folder names): ASCII digits only ----------------------------------------------------------------------


@pytest.mark.parametrize("digit", ["\u0661", "\u00b2", "\uff11"])  # Arabic-Indic one, superscript two, fullwidth one
def test_a_rank_or_step_folder_numbered_in_other_digits_is_an_error_naming_it(tmp_path: Path, digit: str) -> None:
    folder = _copy("tp2_healthy", tmp_path)
    step = folder / "train" / "step0"
    shutil.copytree(step / "rank1", step / f"rank{digit}")
    with pytest.raises(InputError) as raised:
        resolve_dump_source(folder / "train")
    assert raised.value.path == str(step / f"rank{digit}") and "ASCII digits" in raised.value.message
    shutil.rmtree(step / f"rank{digit}")
    shutil.copytree(step, folder / "train" / f"step{digit}")
    with pytest.raises(InputError, match="ASCII digits"):
        resolve_dump_source(folder / "train")


# --- defect 2: a huge rank number ----------------------------------------------------------------------------------


@pytest.mark.parametrize("number", ["99999999999", "9" * 200])
def test_a_huge_rank_number_is_a_gap_said_at_once(tmp_path: Path, number: str) -> None:
    """The ranks missing are counted, not listed: the merge never builds a range up to the number."""
    folder = _copy("tp2_healthy", tmp_path)
    step = folder / "train" / "step0"
    (step / "rank1").rename(step / f"rank{number}")
    with pytest.raises(InputError) as raised:
        resolve_dump_source(folder / "train")
    message = raised.value.message
    assert f"rank folders 0, {number} found, but ranks 1-{int(number) - 1} are missing" in message
    assert len(message) < 1000


def test_gaps_are_listed_as_spans(tmp_path: Path) -> None:
    folder = _copy("tp2_healthy", tmp_path)
    step = folder / "train" / "step0"
    for number in (3, 4, 7):
        shutil.copytree(step / "rank1", step / f"rank{number}")
    with pytest.raises(InputError, match=r"rank folders 0-1, 3-4, 7 found, but ranks 2, 5-6 are missing"):
        resolve_dump_source(folder / "train")


# --- defect 8: a gap in the steps joined --------------------------------------------------------------------------


def test_a_gap_in_the_steps_joined_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _copy("decode_steps_healthy", tmp_path)
    shutil.rmtree(folder / "rollout" / "step2")
    with pytest.raises(InputError) as raised:
        resolve_dump_source(folder / "rollout", StepSpan())
    assert raised.value.path == str(folder / "rollout")
    assert "step2 is missing between step1 and step3" in raised.value.message
    for span in ("all", "0-4", "1-3", "-3"):
        err = _one_line_error([*analyze_args(folder, tmp_path / "out"), "--rollout-step", span], capsys)
        assert "step2 is missing" in err
    assert resolve_dump_source(folder / "rollout", StepSpan(3, 4)).joined_steps == (3, 4)  # a span without the gap


# --- defect 4: a folder that cannot be listed ----------------------------------------------------------------------


def _without_permission_override() -> None:
    """In the child before exec: as root, give up the capabilities that bypass file permissions (they leave the
    bounding set, so the exec'd program never has them), so a mode 000 folder is as unreadable as for any user."""
    if os.geteuid() == 0:
        libc = ctypes.CDLL(None, use_errno=True)
        for capability in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
            if libc.prctl(24, capability, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
                raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def _run_restricted(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            [sys.executable, "-m", "rca_lsp", *args],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=120,
            preexec_fn=_without_permission_override,
        )
    except subprocess.SubprocessError as error:  # no CAP_SETPCAP to give them up: permissions cannot be tested
        pytest.skip(f"cannot run without the permission override: {error}")


@pytest.mark.parametrize(
    ("locked", "named"),
    [
        ("train/step0/rank1", "train/step0/rank1"),  # no search permission: its dump.json cannot be seen
        ("train/step0", "train/step0"),  # the step folder cannot be listed
        ("train", "train"),  # nor the train folder
        ("rollout/step3", "rollout/step3"),  # a step among steps joined
    ],
)
def test_a_folder_that_cannot_be_listed_is_one_line_naming_it(tmp_path: Path, locked: str, named: str) -> None:
    folder = _copy("decode_steps_healthy", tmp_path)
    shutil.copytree(FIXTURES / "tp2_healthy" / "train", folder / "train", dirs_exist_ok=True)
    shutil.copytree(folder / "train" / "step0" / "rank0", folder / "train" / "step0" / "rank1", dirs_exist_ok=True)
    (folder / locked).chmod(0)
    try:
        run = _run_restricted([*analyze_args(folder, tmp_path / "out"), "--rollout-step", "all"], tmp_path)
    finally:
        (folder / locked).chmod(0o755)
    assert run.returncode == 2, run.stderr
    assert run.stderr.count("\n") == 1 and "Traceback" not in run.stderr, run.stderr
    assert f"{folder / named}: " in run.stderr and "Permission denied" in run.stderr


def test_an_unlistable_folder_is_an_input_error_in_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same through the core function, whoever runs the tests: listing the step folder fails as it does
    without read permission."""
    folder = _copy("tp2_healthy", tmp_path)
    locked = str(folder / "train" / "step0")
    real_scandir, real_listdir = os.scandir, os.listdir

    def refuse(real):  # type: ignore[no-untyped-def]
        def listing(path="."):  # type: ignore[no-untyped-def]
            if os.fspath(path) == locked:
                raise PermissionError(13, "Permission denied", locked)
            return real(path)

        return listing

    monkeypatch.setattr(os, "scandir", refuse(real_scandir))
    monkeypatch.setattr(os, "listdir", refuse(real_listdir))
    with pytest.raises(InputError, match=f"{locked}: cannot list the folder: Permission denied"):
        resolve_dump_source(folder / "train")


# --- a dump folder holding two layouts: what is read is said, and what is not ---------------------------------------


def _warnings(argv: list[str], capsys: pytest.CaptureFixture[str]) -> list[str]:
    assert main(argv) == 0
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning: ")]


def test_step_folders_beside_rank_folders_read_the_steps_and_say_the_ranks_are_ignored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Step folders won over rank folders at the top without a word: the user may have meant those."""
    folder = _copy("tp2_healthy", tmp_path)
    shutil.copytree(folder / "train" / "step0" / "rank0", folder / "train" / "rank0")
    source = resolve_dump_source(folder / "train")
    assert source.step == 0 and source.ignored_note is not None
    assert "step0 is read" in source.ignored_note and "rank folders 0" in source.ignored_note
    for argv in (list(analyze_args(folder, tmp_path / "out")), _suggest(folder, tmp_path / "m.json")):
        (warning,) = _warnings(argv, capsys)
        assert warning == f"warning: {source.ignored_note}" and str(folder / "train") in warning
    assert resolve_dump_source(folder / "rollout").ignored_note is None


def test_a_dump_json_beside_step_folders_is_read_and_the_steps_said_to_be_ignored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _copy("missing_activation", tmp_path)
    shutil.copy(folder / "rollout" / "step0" / "rank0" / "dump.json", folder / "rollout" / "dump.json")
    (folder / "rollout" / "step1").mkdir()
    source = resolve_dump_source(folder / "rollout")
    assert source.files == (folder.resolve() / "rollout" / "dump.json",)
    note = source.ignored_note
    assert note is not None and "its dump.json is read" in note and "step folders 0-1" in note and "ignored" in note
    (warning,) = _warnings(list(analyze_args(folder, tmp_path / "out")), capsys)
    assert warning == f"warning: {note}"
