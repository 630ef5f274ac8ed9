"""The Markdown report shows dump-derived text as text: rendered by GitHub's own renderer (cmark-gfm, raw HTML allowed),
a key holding backticks and HTML makes no element, and every key, path and sentence reads back as written (bidi and
control characters escaped). Hypothesis over arbitrary text for the two helpers; the real CLI on a fixture copy
whose diverging module's key is hostile."""

from __future__ import annotations

import html
import re
import subprocess
import sys
from pathlib import Path

import cmarkgfm
import pytest
from adversarial import BIDI, HTML, hostile_copy
from cmarkgfm.cmark import Options
from hypothesis import given, settings
from hypothesis import strategies as st

from rca_lsp.base.display import shown
from rca_lsp.report.mdtext import md_code, md_text

UNSAFE = Options.CMARK_OPT_UNSAFE  # raw HTML passed through, as renderers that allow HTML do


def render(markdown: str) -> str:
    return cmarkgfm.github_flavored_markdown_to_html(markdown, options=UNSAFE)


def tags(rendered: str) -> set[str]:
    return set(re.findall(r"<([a-zA-Z][a-zA-Z0-9]*)", rendered))


FRAGMENTS = ["`", "``", "<", ">", "&", "amp;", "*", "_", "[", "](", ")", "|", "~", "$", "\\", " ", "\n", "a", "é"]
TEXT = st.one_of(st.text(), st.lists(st.sampled_from(FRAGMENTS), max_size=10).map("".join))


@settings(max_examples=400, deadline=None)
@given(TEXT)
def test_a_code_span_shows_exactly_the_text(text: str) -> None:
    for in_table in (False, True):
        line = f"| a | b |\n|---|---|\n| {md_code(text, in_table=True)} | x |" if in_table else f"- {md_code(text)}"
        rendered = render(line)
        assert tags(rendered) <= {"ul", "li", "code", "table", "thead", "tr", "th", "tbody", "td"}
        (content,) = re.findall(r"<code>(.*?)</code>", rendered, re.DOTALL)
        assert html.unescape(content) == (shown(text) or " ")


@settings(max_examples=400, deadline=None)
@given(TEXT)
def test_free_text_shows_exactly_the_text(text: str) -> None:
    for in_table in (False, True):
        if in_table:
            rendered = render(f"| a | b |\n|---|---|\n| x {md_text(text, in_table=True)} x | x |")
            content = re.findall(r"<td>x (.*) x</td>", rendered, re.DOTALL)[0]
        else:
            content = re.findall(r"<li>x (.*) x</li>", render(f"- x {md_text(text)} x"), re.DOTALL)[0]
        assert tags(content) == set()
        assert html.unescape(content) == shown(text)


def rca(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rca_lsp", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("hostile", [HTML, BIDI, "\n<script>alert(1)</script>\n# heading"])
def test_a_hostile_key_makes_no_element_in_the_report(tmp_path: Path, hostile: str) -> None:
    """The diverging module's key is in the judgement, the calibration line, "diverges first", the evidence chain,
    the tables and the expert hypothesis: nowhere an element, everywhere its text."""
    folder = hostile_copy("missing_activation", tmp_path / "pair", "mlp.linear_fc2", f"mlp.linear{hostile}fc2")
    result = rca("analyze", "--train", "train", "--rollout", "rollout", "--mapping-key", "mapping_key.json",
                 "--out-dir", "out", "--no-chart", cwd=folder)  # fmt: skip
    assert result.returncode == 0, result.stderr
    markdown = (folder / "out" / "output_5_root_cause_report.md").read_text()
    rendered = render(markdown)
    assert tags(rendered) <= {
        "h1",
        "h2",
        "ul",
        "li",
        "code",
        "strong",
        "p",
        "table",
        "thead",
        "tr",
        "th",
        "tbody",
        "td",
    }
    shown_key = shown(f"mlp.linear{hostile}fc2")
    text = html.unescape(re.sub(r"<[^>]+>", "", rendered))
    assert text.count(shown_key) >= 10  # judgement, calibration, evidence, tables, excluded, expert ...
    assert "\u202e" not in markdown and "\u202e" not in result.stdout  # the CLI summary escapes it too
    calibration = next(line for line in markdown.splitlines() if line.startswith("- Calibration:"))
    assert shown_key in html.unescape(re.sub(r"<[^>]+>", "", render(calibration)))
