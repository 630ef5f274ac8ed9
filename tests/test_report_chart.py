"""The chart in the report: output_5_root_cause_report.html (self-contained), the PNG embedded in the Markdown
(matplotlib, the optional `chart` extra), and the Markdown's words when matplotlib is missing."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import msgspec
import pytest
from builders import entry, write_dump, write_mapping
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


def png_size(image: bytes) -> tuple[int, int]:
    """Width and height from the PNG's IHDR chunk."""
    assert image.startswith(b"\x89PNG\r\n\x1a\n") and image[12:16] == b"IHDR"
    return int.from_bytes(image[16:20], "big"), int.from_bytes(image[20:24], "big")


def rollouts_call_by_call(tmp_path: Path) -> Path:
    """Two real decoding HF rollouts compared call by call (engine against engine): decode_healthy's (fp32 KV cache)
    as the reference, decode_kv_bf16's (bf16 KV cache: the prefill attends over fresh fp32 keys, the decode calls
    read the rounded cache) against it; every module's call N paired with its call N."""
    explicit = json.loads((FIXTURES / "decode_kv_bf16" / "mapping_key_explicit.json").read_text())
    keys = [k for v in explicit.values() for k in (v if isinstance(v, list) else [v])]
    mapping = tmp_path / "mapping_key.json"
    mapping.write_text(json.dumps({key: key for key in keys}))
    return mapping


@pytest.mark.skipif(not report_png.matplotlib_available(), reason="the chart extra (matplotlib) is not installed")
def test_a_decode_only_fault_s_call_is_in_the_image_beside_the_clean_prefill(tmp_path: Path) -> None:
    mapping = rollouts_call_by_call(tmp_path)
    analysis = analyze_paths(FIXTURES / "decode_healthy" / "rollout", FIXTURES / "decode_kv_bf16" / "rollout", mapping)
    chart = chart_data(analysis)
    named = root_cause_report(analysis)["first_divergence"]
    assert named["call_index"] == 1  # the first decode call: the prefill agrees exactly
    panels = report_png.image_panels(chart)
    assert [chart.calls[p.call].call_index for p in panels] == [0, 1]
    reference, diverging = (chart.calls[p.call] for p in panels)
    assert reference.first_divergence is None and "reference" in panels[0].title
    assert diverging.first_divergence is not None and diverging.first_divergence.train_key == named["train_key"]
    assert panels[1].title == "call forward.1: first divergence: self_attn.o_proj (layer 0)"
    two = report_png.render_png(chart)
    assert two is not None
    # one panel per call: the same width, a panel's height more than the single-call image of the same analysis
    one = report_png.render_png(msgspec.structs.replace(chart, calls=[diverging], default_call=0))
    assert one is not None
    (width, height), (width_one, height_one) = png_size(two), png_size(one)
    assert width == width_one and height - height_one == pytest.approx(report_png._PANEL_HEIGHT * 110, abs=2)
    write_outputs(analysis, tmp_path / "o")
    markdown = (tmp_path / "o" / MD).read_text()
    assert f"The image shows {panels[0].title}; {panels[1].title}." in markdown


@pytest.mark.parametrize("variant", ["decode_missing_activation", "decode_kv_bf16"])
def test_a_rollout_s_decode_steps_joined_into_a_call_are_named_in_its_panel(variant: str) -> None:
    folder = FIXTURES / variant
    analysis = analyze_paths(folder / "train", folder / "rollout", folder / "mapping_key.json")
    chart = chart_data(analysis)
    (panel,) = report_png.image_panels(chart)  # the train recomputes the sequence in one call
    call = chart.calls[panel.call]
    named = root_cause_report(analysis)["first_divergence"]
    assert call.first_divergence is not None and call.first_divergence.train_key == named["train_key"]
    label = chart.strings[call.modules.label[call.first_divergence.index]]
    assert panel.title == (
        f"call forward.0 (rollout: 5 calls: prefill of 12 tokens + 4 decode steps): first divergence: {label} (layer 0)"
    )


def test_micro_batches_show_the_clean_one_beside_the_diverging_one() -> None:
    folder = FIXTURES / "microbatch_fault"
    chart = chart_data(analyze_paths(folder / "train", folder / "rollout", folder / "mapping_key.json"))
    panels = report_png.image_panels(chart)
    assert [chart.calls[p.call].label for p in panels] == ["forward.0", "forward.1"]
    assert panels[1].call == chart.default_call and "first divergence" in panels[1].title


@pytest.mark.skipif(not report_png.matplotlib_available(), reason="the chart extra (matplotlib) is not installed")
def test_keys_with_dollar_signs_and_markup_are_drawn_and_named_as_they_are(tmp_path: Path, analysis) -> None:
    """matplotlib reads `$...$` as mathematics (an odd `$` fails the drawing); the caption is Markdown text."""
    chart = chart_data(analysis)
    call = chart.calls[chart.default_call]
    assert call.first_divergence is not None
    label = call.modules.label[call.first_divergence.index]
    chart.strings[label] = "odd $x_1 *module* `$"
    assert report_png.render_png(chart) is not None
    caption = report_png.image_caption(chart)
    assert "odd $x_1 *module* `$" in caption
    from rca_lsp.report.markdown import render_markdown

    markdown = render_markdown(analysis, None, PNG, True, None, caption)
    assert "odd \\$x_1 \\*module\\* \\`\\$" in markdown


def test_an_error_beyond_the_range_of_an_integer_is_drawn(tmp_path: Path) -> None:
    """Outputs 1e50 times apart (an overflowing train side against tiny rollout values): the image's axis once came
    out as a Python integer of 52 digits, which matplotlib refused, and the run stopped before its tables."""
    big, tiny = [1e30, 2e30, 3e30], [1e-20, 2e-20, 3e-20]
    write_dump(tmp_path / "train/step0/rank0/dump.json", {"Module.model.norm.RMSNorm.forward.0": entry([1.0] * 3, big)})
    write_dump(
        tmp_path / "rollout/step0/rank0/dump.json", {"Module.model.norm.RMSNorm.forward.0": entry([1.0] * 3, tiny)}
    )
    write_mapping(
        tmp_path / "mapping_key.json", {"Module.model.norm.RMSNorm.forward.0": "Module.model.norm.RMSNorm.forward.0"}
    )
    analysis = analyze_paths(tmp_path / "train", tmp_path / "rollout", tmp_path / "mapping_key.json")
    assert analysis.records[0].comparison.output_error > 1e40  # type: ignore[operator]
    written = write_outputs(analysis, tmp_path / "out", chart=True)
    assert tmp_path / "out" / PNG in written
