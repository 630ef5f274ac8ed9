"""The chart in the report: output_5_root_cause_report.html (self-contained), the PNG embedded in the Markdown
(matplotlib, the optional `chart` extra), and the Markdown's words when matplotlib is missing."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from conftest import FIXTURES

from rca_lsp.diagnose.run import analyze_paths
from rca_lsp.report import png as report_png
from rca_lsp.report.chart import chart_data
from rca_lsp.report.chart_schema import encode_chart
from rca_lsp.report.html import chart_bundle, chart_from_page
from rca_lsp.report.manifest import MANIFEST_NAME
from rca_lsp.report.outputs import write_outputs
from rca_lsp.report.root_cause import root_cause_report

SOURCE = FIXTURES / "missing_activation"
HTML = "output_5_root_cause_report.html"
PNG = "output_5_root_cause_report.png"
MD = "output_5_root_cause_report.md"


@pytest.fixture(scope="module")
def analysis():
    return analyze_paths(SOURCE / "train", SOURCE / "rollout", SOURCE / "mapping_key.json")


def inlined_data(page: str) -> dict:
    return chart_from_page(page)


def listed(out: Path) -> list[str]:
    return [f["name"] for f in json.loads((out / MANIFEST_NAME).read_text())["files"]]


def test_the_html_report_inlines_the_bundle_and_the_chart_data(tmp_path: Path, analysis) -> None:
    write_outputs(analysis, tmp_path)
    page = (tmp_path / HTML).read_text()
    data = inlined_data(page)
    assert data == json.loads(encode_chart(chart_data(analysis, data["run_id"])))
    assert (
        data["calls"][0]["first_divergence"]["train_key"]
        == root_cause_report(analysis)["first_divergence"]["train_key"]
    )
    assert chart_bundle() in page.replace("<\\/", "</") and "RcaChart.mountFromPage()" in page
    # nothing is loaded from elsewhere: no script/link/img sources, and the CSP forbids any
    assert " src=" not in page and "<link" not in page and "default-src 'none'" in page
    assert HTML in listed(tmp_path) and PNG in listed(tmp_path)
    mode = stat.S_IMODE((tmp_path / HTML).stat().st_mode)
    umask = os.umask(0)
    os.umask(umask)
    assert mode == 0o666 & ~umask


def test_a_key_that_would_end_the_script_element_is_escaped(tmp_path: Path, analysis) -> None:
    chart = chart_data(analysis)
    label = chart.calls[0].modules.label[0]
    chart.strings[label] = "</script><script>alert(1)</script>"
    from rca_lsp.report.html import render_html

    page = render_html(chart)
    assert page.count("</script>") == 4  # the two data blocks, the bundle and the bootstrap end where they should
    assert "alert(1)" not in page  # the data is packed: no markup of it reaches the page
    assert inlined_data(page)["strings"][label] == "</script><script>alert(1)</script>"


@pytest.mark.skipif(not report_png.matplotlib_available(), reason="the chart extra (matplotlib) is not installed")
def test_the_markdown_embeds_the_image_written_next_to_it(tmp_path: Path, analysis) -> None:
    write_outputs(analysis, tmp_path)
    image = (tmp_path / PNG).read_bytes()
    assert image.startswith(b"\x89PNG\r\n\x1a\n") and len(image) > 10_000
    markdown = (tmp_path / MD).read_text()
    assert f"![Relative error of each mapped module along execution order]({PNG})" in markdown
    assert f"]({HTML})" in markdown


def test_without_matplotlib_the_markdown_says_how_to_get_the_image(
    tmp_path: Path, analysis, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / PNG).write_bytes(b"an image of an earlier run")
    monkeypatch.setattr(report_png, "matplotlib_available", lambda: False)
    write_outputs(analysis, tmp_path)
    assert not (tmp_path / PNG).exists() and PNG not in listed(tmp_path)
    markdown = (tmp_path / MD).read_text()
    assert "pip install 'rca-lsp[chart]'" in markdown and "![" not in markdown
    assert (tmp_path / HTML).exists()


def test_an_empty_mapping_gets_a_page_saying_so_and_no_image(tmp_path: Path) -> None:
    (tmp_path / "mapping_key.json").write_text("{}")
    empty = analyze_paths(SOURCE / "train", SOURCE / "rollout", tmp_path / "mapping_key.json")
    write_outputs(empty, tmp_path / "o")
    assert inlined_data((tmp_path / "o" / HTML).read_text())["calls"] == []
    assert not (tmp_path / "o" / PNG).exists()
    assert "Divergence chart" not in (tmp_path / "o" / MD).read_text()


def test_a_run_without_the_chart_leaves_no_chart_of_an_earlier_run(tmp_path: Path, analysis) -> None:
    write_outputs(analysis, tmp_path)
    assert (tmp_path / "output_5_root_cause_report.html").is_file()
    written = write_outputs(analysis, tmp_path, chart=False)
    names = {p.name for p in tmp_path.iterdir()}
    assert "output_5_root_cause_report.html" not in names and "output_5_root_cause_report.png" not in names
    assert {p.name for p in written} <= names and "output_5_root_cause_report.md" in names
    manifest = json.loads((tmp_path / MANIFEST_NAME).read_text())
    assert "output_5_root_cause_report.html" not in json.dumps(manifest)
    markdown = (tmp_path / "output_5_root_cause_report.md").read_text()
    assert "Not drawn in this run (`--no-chart`)" in markdown and "](output_5_root_cause_report.png)" not in markdown
