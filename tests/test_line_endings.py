"""Lines end at `\\r\\n`, `\\r` or `\\n`, as LSP defines (and nowhere else: not at U+2028 or a form feed): a mapping
problem is reported at the same line:column whichever the file uses, by the CLI (JSON and msprobe YAML) and in the
server's ranges; an edit keeps the line index what a fresh one would be."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES
from hypothesis import given, settings
from hypothesis import strategies as st
from lsprotocol import types
from pygls.workspace import PositionCodec

from rca_lsp.base.jsonload import text_position
from rca_lsp.diagnose.run import analyze_paths
from rca_lsp.mapping.model import LineIndex, line_starts
from rca_lsp.mapping.parse import parse_mapping
from rca_lsp.server.positions import OpenText, Positions

SOURCE = FIXTURES / "missing_activation"
ENDINGS = {"LF": "\n", "CRLF": "\r\n", "CR": "\r"}
LSP_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def line_ends(text: str) -> list[int]:
    """The offset after each line break as LSP ends lines: the reference the server's line indexes are checked by."""
    return [found.end() for found in LSP_LINE_BREAK.finditer(text)]


def split_lines(text: str) -> list[str]:
    """The lines with their line breaks, as LSP ends lines."""
    starts = [0, *line_ends(text)]
    return [text[start:end] for start, end in zip(starts, starts[1:] + [len(text)]) if start < len(text)]


def rca(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rca_lsp", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def with_ending(text: str, ending: str) -> str:
    return text.replace("\n", ending)


def mapping_text(bad_key: str) -> str:
    """The fixture's mapping, its third entry's key `bad_key` (on line 4, after the 2-line first entries and `{`),
    with a non-ASCII key on line 2 so that client columns (UTF-16) are converted."""
    items = list(json.loads((SOURCE / "mapping_key.json").read_text()).items())
    items[2] = (bad_key, items[2][1])
    return "{\n" + ",\n".join(f"  {json.dumps(k, ensure_ascii=False)}: {json.dumps(v)}" for k, v in items) + "\n}\n"


@pytest.mark.parametrize("ending", ENDINGS)
def test_json_errors_and_warnings_are_at_the_same_line_and_column(tmp_path: Path, ending: str) -> None:
    dumps = ("--train", str(SOURCE / "train"), "--rollout", str(SOURCE / "rollout"), "--no-chart")
    unknown = tmp_path / "unknown.json"
    unknown.write_bytes(with_ending(mapping_text("Module.bogus.forward.0"), ENDINGS[ending]).encode())
    result = rca("analyze", *dumps, "--mapping-key", str(unknown), "--out-dir", "out", cwd=tmp_path)
    assert result.returncode == 0 and f"{unknown}:4: unknown-train-key" in result.stderr, result.stderr
    broken = tmp_path / "broken.json"
    text = mapping_text("Module.bogus.forward.0").replace('"Module.bogus.forward.0"', "Module.bogus")
    broken.write_bytes(with_ending(text, ENDINGS[ending]).encode())
    result = rca("analyze", *dumps, "--mapping-key", str(broken), "--out-dir", "out", cwd=tmp_path)
    assert result.returncode == 2 and f"{broken}:4:3: json-syntax" in result.stderr, result.stderr


@pytest.mark.parametrize("ending", ENDINGS)
def test_yaml_errors_and_warnings_are_at_the_same_line(tmp_path: Path, ending: str) -> None:
    rules = "# é\nmodel.missing.Linear: model.norm.Qwen2RMSNorm\nmodule.module.decoder.final_layernorm.RMSNorm: model.norm.Qwen2RMSNorm\n"
    mapping = tmp_path / "cell_mapping.yaml"
    mapping.write_bytes(with_ending(rules, ENDINGS[ending]).encode())
    analysis = analyze_paths(SOURCE / "train", SOURCE / "rollout", mapping)
    assert [analysis.mapping.line_of(i.span) for i in analysis.issues] == [2]
    mapping.write_bytes(with_ending(rules + "x.Linear: [a\n", ENDINGS[ending]).encode())
    result = rca("analyze", "--train", str(SOURCE / "train"), "--rollout", str(SOURCE / "rollout"), "--mapping-key",
                 str(mapping), "--no-chart", "--out-dir", "out", cwd=tmp_path)  # fmt: skip
    assert result.returncode == 2 and f"{mapping}:5:1: yaml-syntax: YAML syntax error" in result.stderr, result.stderr


@pytest.mark.parametrize("ending", ENDINGS)
def test_server_ranges_are_the_same_for_every_ending(ending: str) -> None:
    text = with_ending(mapping_text("Module.bogus.forward.0"), ENDINGS[ending])
    parsed = parse_mapping("mapping_key.json", text)
    entry = parsed.entries[2]
    for codec in (PositionCodec(), PositionCodec("utf-32")):  # UTF-16 (converted: line 2 is not ASCII), UTF-32
        positions = Positions(parsed, codec)
        key = positions.range(parsed.spans(entry).key)
        assert (key.start.line, key.start.character, key.end.line) == (3, 2, 3)
        assert positions.offset(key.start) == parsed.spans(entry).key.start


def test_only_lsp_line_breaks_end_lines() -> None:
    text = "a\u2028b\x0cc\x85d\re\r\nf\ng"
    index = LineIndex(text)
    assert [index.position(text.index(c)) for c in "abcdefg"] == [
        (0, 0), (0, 2), (0, 4), (0, 6), (1, 0), (2, 0), (3, 0)
    ]  # fmt: skip
    assert text_position(text.encode(), text.encode().index(b"g")) == (4, 1)
    assert text_position(b"x\ry\r\nz", 5) == (3, 1)


FRAGMENTS = st.lists(st.sampled_from(["\r", "\n", "\r\n", "a", "bc"]), max_size=12).map("".join)


@settings(max_examples=400, deadline=None)
@given(FRAGMENTS, FRAGMENTS, st.data())
def test_an_edit_keeps_the_line_index_a_fresh_one_would_be(old: str, inserted: str, data: st.DataObject) -> None:
    start = data.draw(st.integers(0, len(old)))
    old_end = data.draw(st.integers(start, len(old)))
    new = old[:start] + inserted + old[old_end:]
    edited = LineIndex(old).after_edit(new, start, old_end, start + len(inserted))
    fresh = LineIndex(new)
    assert [edited.position(i) for i in range(len(new) + 1)] == [fresh.position(i) for i in range(len(new) + 1)]


def test_a_yaml_error_after_a_yaml_only_line_break_is_on_its_lsp_line() -> None:
    """YAML also ends lines at U+2028 (here inside a quoted name); the error is still on LSP's line 2."""
    parsed = parse_mapping("cell_mapping.yaml", 'a.Linear: "b\u2028c.Linear"\nd.Linear: e: f\ng.Linear: h\n')
    (issue,) = parsed.issues
    assert parsed.line_of(issue.span) == 2


def _applied(text: str, start: tuple[int, int], end: tuple[int, int], new: str, encoding: str) -> str:
    """An incremental change applied as the client means it: lines as LSP ends them, columns in the client's code
    units, a column past a line's end at its end, a line past the last at the text's end."""
    lines = split_lines(text) or [""]

    def offset(line: int, units: int) -> int:
        if line >= len(lines):
            return len(text)
        content = lines[line].rstrip("\r\n")
        column = 0
        while column < len(content) and units > 0:
            units -= len(content[column].encode(encoding)) // (2 if encoding == "utf-16-le" else 1)
            column += 1
        return sum(len(earlier) for earlier in lines[:line]) + column

    low = offset(*start)
    return text[:low] + new + text[max(low, offset(*end)) :]


pieces = st.sampled_from(["a", "b", "\n", "\r", "\r\n", "\u2028", "\x0c", "é", "😋", '"key": "v",'])


@settings(max_examples=300, deadline=None)
@given(
    st.lists(pieces, max_size=30).map("".join),
    st.lists(
        st.tuples(
            st.integers(0, 8), st.integers(0, 6), st.integers(0, 8), st.integers(0, 6), st.lists(pieces, max_size=4)
        ),
        min_size=1,
        max_size=4,
    ),
)
def test_incremental_changes_land_where_the_client_means(text: str, changes: list) -> None:
    """The server applies each didChange range to its copy of the text as LSP counts lines and UTF-16 columns: at
    U+2028 or a form feed no line ends (pygls' own apply splits there, putting later edits on the wrong line)."""
    codec = PositionCodec(types.PositionEncodingKind.Utf16)
    opened, expected = OpenText(text), text
    for start_line, start_column, end_line, end_column, new in changes:
        start, end = sorted([(start_line, start_column), (end_line, end_column)])
        change = types.TextDocumentContentChangePartial(
            range=types.Range(start=types.Position(*start), end=types.Position(*end)), text="".join(new)
        )
        opened = opened.changed(change, codec)
        expected = _applied(expected, start, end, "".join(new), "utf-16-le")
        assert opened.text == expected
        assert [opened.lines.offset(line, 0) for line in range(8)] == [
            LineIndex(expected).offset(line, 0) for line in range(8)
        ]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["a", "\n", "\r", "\r\n", "\u2028", "\x0c", "\x85", "é", "😋", "\ud800"]), max_size=40))
def test_line_starts_as_an_array_are_where_lsp_lines_start(pieces: list[str]) -> None:
    text = "".join(pieces)
    assert line_starts(text).tolist() == [0, *line_ends(text)]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from(["a", '"', "\n", "\r", "\r\n", "\u2028", "\x0c", "é", "😋"]), max_size=40).map("".join),
    st.sampled_from(["utf-8", "utf-16", "utf-32"]),
)
def test_positions_in_a_text_not_ascii_are_the_codecs_over_its_lines(text: str, encoding: str) -> None:
    """Positions converts the columns of the one line a position is on (a split of the whole text per request took
    ~120 ms of the event loop for 10 MB): the same positions as pygls' codec over the text's lines, and back."""
    codec = PositionCodec(types.PositionEncodingKind(encoding))
    positions = Positions(parse_mapping("mapping_key.json", text), codec)
    lines, index = split_lines(text), LineIndex(text)
    for offset in range(len(text) + 1):
        expected = codec.position_to_client_units(lines, types.Position(*index.position(offset)))
        assert positions.position(offset) == expected
        if text[offset - 1 : offset + 1] != "\r\n":  # between the two characters of one line end: on its line end
            assert positions.offset(expected) == offset
