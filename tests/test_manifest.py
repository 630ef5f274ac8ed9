"""The out-dir manifest: written last, listing every file of the run, whose JSON files carry its run id."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import FIXTURES

from rca_lsp.base.cancel import Cancelled
from rca_lsp.diagnose.run import analyze_paths
from rca_lsp.report.html import chart_from_page
from rca_lsp.report.manifest import MANIFEST_NAME
from rca_lsp.report.outputs import write_outputs

SOURCE = FIXTURES / "missing_activation"


@pytest.fixture(scope="module")
def analysis():
    return analyze_paths(SOURCE / "train", SOURCE / "rollout", SOURCE / "mapping_key.json")


def run_ids(out: Path) -> dict[str, str | None]:
    """The run id each output file carries (None for the formats without room for one)."""
    found: dict[str, str | None] = {}
    for path in sorted(out.iterdir()):
        if path.name == MANIFEST_NAME:
            continue
        if path.name.endswith(".md"):
            found[path.name] = path.read_text().split("- Run: `")[1].split("`")[0]
        elif path.name.endswith(".html"):
            found[path.name] = chart_from_page(path.read_text())["run_id"]
        elif path.name.endswith(".json") and not path.name.startswith("output_2"):
            document = json.loads(path.read_text())
            found[path.name] = document["meta"]["run_id"] if "meta" in document else document["run_id"]
        else:
            found[path.name] = None  # CSV, and output_2_mapping.json (a mapping-key file)
    return found


@pytest.mark.parametrize("fork", [False, True])
def test_the_manifest_lists_every_file_written_and_comes_last(tmp_path: Path, analysis, fork: bool) -> None:
    written = write_outputs(analysis, tmp_path, fork=fork)
    manifest_path = written[-1]
    assert manifest_path == tmp_path / MANIFEST_NAME
    manifest = json.loads(manifest_path.read_text())
    files = written[:-1]
    assert len(files) == 12 and {p.name for p in tmp_path.iterdir()} == {p.name for p in written}
    assert manifest["files"] == [{"name": p.name, "bytes": p.stat().st_size} for p in files]
    assert manifest["complete"] is True and manifest["tool"] == "rca-lsp"
    assert all(manifest_path.stat().st_mtime_ns >= p.stat().st_mtime_ns for p in files)
    carried = run_ids(tmp_path)
    assert {name for name, run in carried.items() if run is not None} == {
        "output_1_key_mapping.json",
        "output_3_value_compare.json",
        "output_4_module_analysis.json",
        "output_5_root_cause_report.json",
        "output_5_root_cause_report.html",
        "output_5_root_cause_report.md",
    }
    assert {run for run in carried.values() if run is not None} == {manifest["run_id"]}


def test_each_run_has_its_own_id_and_an_interrupted_run_leaves_no_manifest(tmp_path: Path, analysis) -> None:
    write_outputs(analysis, tmp_path)
    first = json.loads((tmp_path / MANIFEST_NAME).read_text())["run_id"]
    write_outputs(analysis, tmp_path)
    second = json.loads((tmp_path / MANIFEST_NAME).read_text())["run_id"]
    assert first != second
    calls = []

    def stop_at_the_value_compare() -> bool:  # output_1 and output_2 rewritten, then the run stops
        calls.append(1)
        return len(calls) > 2

    with pytest.raises(Cancelled):
        write_outputs(analysis, tmp_path, should_stop=stop_at_the_value_compare)
    assert not (tmp_path / MANIFEST_NAME).exists()
    carried = run_ids(tmp_path)
    assert carried["output_1_key_mapping.json"] not in (None, second)  # new
    assert carried["output_3_value_compare.json"] == second  # left by the previous run: the mix is visible


def test_the_cli_writes_the_manifest(tmp_path: Path) -> None:
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "rca_lsp", "analyze", "--out-dir", "out"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    manifest = json.loads((tmp_path / "out" / MANIFEST_NAME).read_text())
    assert sorted(f["name"] for f in manifest["files"]) == sorted(
        p.name for p in (tmp_path / "out").iterdir() if p.name != MANIFEST_NAME
    )
