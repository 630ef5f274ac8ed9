"""Mapping-key parsing: every problem located, the rest of a broken file still read."""

from __future__ import annotations

import json

from rca_lsp.core.mapping import parse_mapping


def codes_by_line(text: str) -> list[tuple[int, str]]:
    parsed = parse_mapping("m.json", text)
    return [(parsed.line_of(i.span), i.code) for i in parsed.issues]


def test_valid_file_has_entries_with_positions() -> None:
    text = json.dumps({"a": "x", "b": ["y", "z"]}, indent=2)
    parsed = parse_mapping("m.json", text)
    assert parsed.syntax_ok and not parsed.issues
    assert [(e.train_key, e.rollout_keys, e.is_list) for e in parsed.entries] == [("a", ("x",), False), ("b", ("y", "z"), True)]
    b = parsed.entries[1]
    assert text[b.key_span.start:b.key_span.end] == '"b"'
    assert [text[s.start:s.end] for s in b.value_spans] == ['"y"', '"z"']
    assert parsed.entry_at(b.value_spans[1].start + 2) == (b, 1)


def test_each_problem_has_its_line_and_code() -> None:
    text = '{\n "a": "x",\n "b": ["y", 3],\n "e": [],\n "a": "z",\n "f": 5,\n "g": {"x": "y"}\n}'
    assert codes_by_line(text) == [(3, "invalid-value"), (4, "invalid-value"), (5, "duplicate-key"),
                                   (6, "invalid-value"), (7, "invalid-value")]


def test_syntax_error_mid_edit_keeps_the_rest_of_the_file() -> None:
    text = '{\n "a": "x",\n "b" "y",\n "c": "z",\n "d": ["p", "q"]\n "e": "w"\n}'
    parsed = parse_mapping("m.json", text)
    assert not parsed.syntax_ok
    assert {e.train_key for e in parsed.entries} == {"a", "c", "d", "e"}
    assert (3, "json-syntax") in codes_by_line(text) and (6, "json-syntax") in codes_by_line(text)


def test_unclosed_list_and_truncated_file() -> None:
    text = '{\n "a": ["x", "y",\n "b": "z",\n "c": "'
    parsed = parse_mapping("m.json", text)
    keys = {e.train_key: e.rollout_keys for e in parsed.entries}
    assert keys["a"] == ("x", "y") and keys["b"] == ("z",)
    assert any(i.code == "json-syntax" for i in parsed.issues)


def test_not_an_object() -> None:
    assert codes_by_line('["a", "b"]') == [(1, "invalid-value")]


def test_escaped_quotes_in_keys() -> None:
    text = '{"a\\"q": "x", "b": "y"}'
    parsed = parse_mapping("m.json", text)
    assert [e.train_key for e in parsed.entries] == ['a"q', "b"] and parsed.syntax_ok
