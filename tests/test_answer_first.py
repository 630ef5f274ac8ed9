"""The answer first (issue 22): output_5's report is on disk, and the CLI's summary printed, before the tables;
progress on stderr only when it is a terminal."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rca_lsp.diagnose.run import analyze_paths
from rca_lsp.report.outputs import BackgroundTables, _chunk_progress, _Quiet, write_outputs
from tests.conftest import FIXTURES
from tests.test_cli import analyze_args, rca

REPORT = "output_5_root_cause_report"


@pytest.mark.parametrize("fork", [False, True])
@pytest.mark.parametrize("chart", [False, True])
def test_the_report_is_written_before_the_tables_and_the_chart(tmp_path: Path, fork: bool, chart: bool) -> None:
    variant = FIXTURES / "missing_activation"
    analysis = analyze_paths(variant / "train", variant / "rollout", variant / "mapping_key.json")
    seen: list[tuple[dict, list[str]]] = []

    def answer(report: dict) -> None:
        seen.append((report, sorted(p.name for p in tmp_path.iterdir())))

    written = write_outputs(analysis, tmp_path, fork=fork, chart=chart, on_answer=answer)
    ((report, present),) = seen
    files = [name for name in present if not name.startswith(".")]  # not the temporaries of a file being written
    if fork:  # output_1, 2 and 4 are written by a child meanwhile (see BackgroundTables): maybe already there
        early = {
            f"{stem}.{ext}"
            for stem in ("output_1_key_mapping", "output_2_mapping", "output_4_module_analysis")
            for ext in ("json", "csv")
        }
        files = [name for name in files if name not in early]
    assert files == [f"{REPORT}.json", f"{REPORT}.md"]
    assert report["top_hypothesis"] and report["run_id"] in (tmp_path / f"{REPORT}.json").read_text()
    assert {p.name for p in written} >= {"output_3_value_compare.json", f"{REPORT}.md"}
    assert (f"{REPORT}.html" in {p.name for p in written}) == chart


def test_the_markdown_links_the_image_only_when_it_was_drawn(tmp_path: Path, monkeypatch) -> None:
    """The Markdown, written before the image, is rewritten when the image it expected does not come."""
    from rca_lsp.report import answer

    variant = FIXTURES / "missing_activation"
    analysis = analyze_paths(variant / "train", variant / "rollout", variant / "mapping_key.json")
    monkeypatch.setattr(answer, "render_png", lambda data: None)  # matplotlib found but drawing nothing
    write_outputs(analysis, tmp_path)
    assert not (tmp_path / f"{REPORT}.png").exists()
    assert f"{REPORT}.png" not in (tmp_path / f"{REPORT}.md").read_text()


def _run_on_a_terminal(args: tuple[str, ...], cwd: Path) -> tuple[str, str]:
    """Runs the CLI with stderr on a pseudo-terminal: (stdout, what the terminal showed)."""
    terminal, child_end = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "rca_lsp", *args], cwd=cwd, stdout=subprocess.PIPE, stderr=child_end, text=True
    )
    os.close(child_end)
    shown = b""
    while True:
        try:
            data = os.read(terminal, 4096)
        except OSError:  # EIO: the child closed its end
            break
        if not data:
            break
        shown += data
    stdout, _ = process.communicate(timeout=120)
    os.close(terminal)
    assert process.returncode == 0
    return stdout, shown.decode()


TABLE_STEMS = ("output_1_key_mapping", "output_2_mapping", "output_3_value_compare", "output_4_module_analysis")


def test_the_value_table_is_told_by_tenths_each_once() -> None:
    said: list[str] = []

    class Told:
        def wrote_part(self, paths: object) -> None:
            raise AssertionError("not a part")

        def say(self, text: str) -> None:
            said.append(text)

    on_chunk = _chunk_progress(Told(), "output_3_value_compare")
    for done in (1, 2, 3, 9, 10, 11, 27, 28, 29, 30):  # the parent's chunks, the child's taken in between
        on_chunk(done, 30)
    assert said == [f"output_3_value_compare: {p}% of 30 chunks of rows" for p in (10, 30, 90, 100)]


def test_progress_is_shown_on_a_terminal_and_not_when_piped(tmp_path: Path) -> None:
    args = analyze_args(FIXTURES / "tp2_healthy", tmp_path / "out")
    stdout, shown = _run_on_a_terminal(args, tmp_path)
    lines = shown.splitlines()
    assert any("reading the train dump" in line and "2 dump files" in line and "MiB" in line for line in lines)
    assert any("reading the rollout dump" in line for line in lines)
    assert any(line.startswith("rca-lsp: [") and "wrote 13 files" in line for line in lines), shown
    # after the answer, each output file is named once as it is written (the tables take seconds on 10^5 modules)
    parts = [line for line in lines if "] wrote output_" in line]
    named = [name for line in parts for name in line.split("] wrote ")[1].split(" (")[0].split(", ")]
    tables = [f"{stem}.{ext}" for stem in TABLE_STEMS for ext in ("json", "csv")]
    assert sorted(named) == sorted(tables + [f"{REPORT}.html", f"{REPORT}.png"]), parts
    assert all(line.endswith(" MiB)") for line in parts), parts
    assert "Root Cause Evidence Summary" in stdout and "rca-lsp: [" not in stdout
    piped = rca(*args, cwd=tmp_path)
    assert piped.returncode == 0 and piped.stderr == ""


def test_background_tables_are_written_while_the_evidence_is_derived(tmp_path: Path) -> None:
    """Started when the groups are compared (the CLI's path), the child writes output_1, 2 and 4 before
    write_outputs is called, under the run id the report then carries."""
    variant = FIXTURES / "missing_activation"
    out = tmp_path / "out"
    with BackgroundTables(out, _Quiet()) as tables:
        analysis = analyze_paths(
            variant / "train", variant / "rollout", variant / "mapping_key.json", on_compared=tables.start
        )
        early = out / "output_4_module_analysis.json"
        deadline = time.monotonic() + 60
        while not early.exists() and time.monotonic() < deadline:  # written by the child alone
            time.sleep(0.05)
        assert early.exists()
        assert not (out / "output_3_value_compare.json").exists()  # written once the answer is
        written = write_outputs(analysis, out, fork=True, tables=tables)
    run_id = json.loads((out / f"{REPORT}.json").read_text())["run_id"]
    names = {p.name for p in written}
    for stem in ("output_1_key_mapping", "output_2_mapping", "output_4_module_analysis", "output_3_value_compare"):
        assert {f"{stem}.csv"} <= names
    assert json.loads(early.read_text())["meta"]["run_id"] == run_id
    assert json.loads((out / "output_manifest.json").read_text())["run_id"] == run_id


def test_a_mapping_the_cli_cannot_use_starts_no_tables(tmp_path: Path) -> None:
    """The check that stops the run comes before the tables' child starts: nothing is written."""
    variant = FIXTURES / "missing_activation"
    broken = tmp_path / "mapping_key.json"
    broken.write_text((variant / "mapping_key.json").read_text()[:-3])  # cut before its closing brace
    out = tmp_path / "out"
    args = ("analyze", "--train", str(variant / "train"), "--rollout", str(variant / "rollout"))
    result = rca(*args, "--mapping-key", str(broken), "--out-dir", str(out), cwd=tmp_path)
    assert result.returncode == 2 and "json-syntax" in result.stderr
    assert not out.exists() or not any(out.iterdir())


def test_without_fork_the_cli_writes_every_table_itself(tmp_path: Path, monkeypatch) -> None:
    """A platform that cannot fork (Windows): no background tables, the same files, one process."""
    from rca_lsp.base import forkpart
    from rca_lsp.cli import main as cli
    from rca_lsp.report import outputs

    started: list[object] = []
    monkeypatch.setattr(cli, "can_fork", lambda: False)
    monkeypatch.setattr(outputs, "can_fork", lambda: False)
    monkeypatch.setattr(forkpart.BackgroundWork, "__init__", lambda *args, **kwargs: started.append(args))
    variant = FIXTURES / "missing_activation"
    assert cli.main(list(analyze_args(variant, tmp_path / "out"))) == 0
    assert not started
    manifest = json.loads((tmp_path / "out" / "output_manifest.json").read_text())
    assert {f["name"] for f in manifest["files"]} >= {
        f"{stem}.{ext}"
        for stem in ("output_1_key_mapping", "output_2_mapping", "output_3_value_compare", "output_4_module_analysis")
        for ext in ("json", "csv")
    }
