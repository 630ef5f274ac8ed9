"""Mapping-key parsing: every problem located, the rest of a broken file still read."""

from __future__ import annotations

import json
import random

import pytest

from rca_lsp.mapping.jsonfile import edited_region
from rca_lsp.mapping.model import ParsedMapping
from rca_lsp.mapping.parse import parse_mapping


def codes_by_line(text: str) -> list[tuple[int, str]]:
    parsed = parse_mapping("m.json", text)
    return [(parsed.line_of(i.span), i.code) for i in parsed.issues]


def test_valid_file_has_entries_with_positions() -> None:
    text = json.dumps({"a": "x", "b": ["y", "z"]}, indent=2)
    parsed = parse_mapping("m.json", text)
    assert parsed.syntax_ok and not parsed.issues
    assert [(e.train_key, e.rollout_keys, e.is_list) for e in parsed.entries] == [
        ("a", ("x",), False),
        ("b", ("y", "z"), True),
    ]
    b = parsed.entries[1]
    spans = parsed.spans(b)
    assert text[spans.key.start : spans.key.end] == '"b"'
    assert [text[s.start : s.end] for s in spans.values] == ['"y"', '"z"']
    assert parsed.entry_at(spans.values[1].start + 2) == (b, 1)


def test_each_problem_has_its_line_and_code() -> None:
    text = '{\n "a": "x",\n "b": ["y", 3],\n "e": [],\n "a": "z",\n "f": 5,\n "g": {"x": "y"}\n}'
    assert codes_by_line(text) == [
        (3, "invalid-value"),
        (4, "invalid-value"),
        (5, "duplicate-key"),
        (6, "invalid-value"),
        (7, "invalid-value"),
    ]


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


@pytest.mark.parametrize("comment", ["// my run's mapping", "/* block */", "# notes"])
@pytest.mark.parametrize("at_the_top", [True, False])
def test_a_comment_is_said_to_be_no_json_where_it_is(comment: str, at_the_top: bool) -> None:
    """Not "a mapping-key file is a JSON object" (it is one, after the comment), nor "expected a string key"."""
    body = '{\n  "a": "x",\n  "b": "y"\n}\n'
    text = f"{comment}\n{body}" if at_the_top else body.replace('  "b"', f'  {comment}\n  "b"')
    parsed = parse_mapping("m.json", text)
    (issue,) = [i for i in parsed.issues if i.code in ("json-syntax", "invalid-value")]
    assert issue.code == "json-syntax" and issue.message == "JSON syntax error: comments are not allowed in JSON"
    assert parsed.line_of(issue.span) == (1 if at_the_top else 3)


def test_escaped_quotes_in_keys() -> None:
    text = '{"a\\"q": "x", "b": "y"}'
    parsed = parse_mapping("m.json", text)
    assert [e.train_key for e in parsed.entries] == ['a"q', "b"] and parsed.syntax_ok


def _layout(parsed: ParsedMapping) -> list[tuple[object, ...]]:
    """Everything a parse says about the text, positions included."""
    entries = [(e.train_key, e.rollout_keys, e.is_list, parsed.spans(e)) for e in parsed.entries]
    effective = {k: parsed.spans(e) for k, e in parsed.effective().items()}
    return [
        parsed.syntax_ok,
        entries,
        [(i.code, i.span, i.message) for i in parsed.issues],
        [parsed.lines.position(o) for o in range(0, len(parsed.text) + 1, 7)],
        effective,
    ]


BASE = {f"t.{i}": (f"r.{i}" if i % 3 else [f"r.{i}.a", f"r.{i}.b"]) for i in range(12)}
EDITS = [
    ("change a value", lambda t: t.replace('"r.4"', '"r.44"')),
    ("change a key", lambda t: t.replace('"t.5"', '"t.55"')),
    ("edit the first entry", lambda t: t.replace('"t.0"', '"t.00"')),
    ("edit the last entry", lambda t: t.replace('"r.11"', '"r.x"')),
    ("add an entry", lambda t: t.replace('"r.7",', '"r.7",\n  "t.new": "r.new",')),
    ("add a last entry", lambda t: t.replace('"r.11"\n', '"r.11",\n  "t.z": ["r.z"]\n')),
    ("delete an entry", lambda t: t.replace('  "t.8": "r.8",\n', "")),
    ("delete the first entry", lambda t: t.replace('  "t.0": [\n    "r.0.a",\n    "r.0.b"\n  ],\n', "")),
    ("make a duplicate", lambda t: t.replace('"t.2"', '"t.1"')),
    ("1:1 to a list", lambda t: t.replace('"r.2"', '["r.2", "r.2b"]')),
    ("a list to 1:1", lambda t: t.replace('[\n    "r.3.a",\n    "r.3.b"\n  ]', '"r.3"')),
    ("an escaped quote", lambda t: t.replace('"r.5"', '"r.\\"5"')),
    ("break the syntax", lambda t: t.replace('"r.4",', '"r.4"')),
    ("an unclosed string", lambda t: t.replace('"r.4"', '"r.4')),
    ("a key turned into a value", lambda t: t.replace('"t.6": ', "")),
    ("whitespace only", lambda t: t.replace('"t.6": ', '"t.6":    ')),
    ("a wrong value type", lambda t: t.replace('"r.7"', "7")),
    ("replace everything", lambda t: '{"a": "b"}'),
    ("no change", lambda t: t),
]


@pytest.mark.parametrize("edit", [e for _, e in EDITS], ids=[name for name, _ in EDITS])
def test_parse_after_an_edit_equals_a_fresh_parse(edit) -> None:
    text = json.dumps(BASE, indent=2)
    previous = parse_mapping("m.json", text)
    edited = edit(text)
    reused = parse_mapping("m.json", edited, previous)
    assert _layout(reused) == _layout(parse_mapping("m.json", edited))


def test_entries_outside_an_edit_are_reused() -> None:
    text = json.dumps(BASE, indent=2)
    previous = parse_mapping("m.json", text)
    reused = parse_mapping("m.json", text.replace('"r.5"', '"r.55"'), previous)
    same = [a is b for a, b in zip(previous.entries, reused.entries)]
    assert same == [i != 5 for i in range(12)]


def test_random_edits_parse_like_fresh_files() -> None:
    rng = random.Random(7)
    text = json.dumps(BASE, indent=2)
    previous = parse_mapping("m.json", text)
    alphabet = ['"', ",", ":", " ", "\n", "[", "]", "r", ".", "1", "\\", "{", "}"]
    for _ in range(400):
        start = rng.randrange(len(text) + 1)
        end = min(len(text), start + rng.choice([0, 1, 2, 5, 20]))
        edited = text[:start] + "".join(rng.choices(alphabet, k=rng.choice([0, 1, 3]))) + text[end:]
        reused = parse_mapping("m.json", edited, previous)
        assert _layout(reused) == _layout(parse_mapping("m.json", edited)), edited
        if reused.syntax_ok:
            text, previous = edited, reused


@pytest.mark.parametrize(
    "old,new",
    [
        ("abcdef", "abXdef"),
        ("abc", "abcd"),
        ("abcd", "abc"),
        ("aaaa", "aa"),
        ("", "x"),
        ("x" * 10000 + "y", "x" * 10000 + "z"),
        ("same", "same"),
    ],
)
def test_edited_region(old: str, new: str) -> None:
    start, old_end, new_end = edited_region(old, new)
    assert new == old[:start] + new[start:new_end] + old[old_end:]
    assert old_end - start == len(old) - len(new) + (new_end - start) and start <= old_end and start <= new_end


@pytest.mark.parametrize("shadowed", ['["x", 1]', '[["x"]]', '{"x": "y"}', "[]"])
def test_a_bad_value_shadowed_by_a_later_definition_is_still_reported(shadowed: str) -> None:
    text = '{\n "a": ' + shadowed + ',\n "b": "z",\n "a": "y"\n}'
    assert (2, "invalid-value") in codes_by_line(text)


def test_typing_inside_a_valid_file_reuses_the_entries_around_the_error() -> None:
    text = json.dumps(BASE, indent=2)
    previous = parse_mapping("m.json", text)
    broken = parse_mapping("m.json", text.replace('"r.5"', '"r.5'), previous)
    assert not broken.syntax_ok and any(i.code == "json-syntax" for i in broken.issues)
    assert len({id(e) for e in previous.entries} & {id(e) for e in broken.entries}) == len(BASE) - 1


def test_a_nested_list_is_named_not_called_empty() -> None:
    parsed = parse_mapping("m.json", '{"a": ' + "[" * 2000 + "]" * 2000 + "}")
    messages = [i.message for i in parsed.issues if i.code == "invalid-value"]
    assert messages and "(a nested list)" in messages[0] and not any("empty list" in m for m in messages)


def test_positions_are_the_same_counted_or_indexed() -> None:
    from rca_lsp.mapping.model import FEW_LOOKUPS, LineIndex

    text = "a\nbb\n\nccc\n" * 50
    counted, indexed = LineIndex(text), LineIndex(text)
    for offset in range(0, len(text), 7):
        for _ in range(FEW_LOOKUPS + 1):  # the second index builds its table after a few lookups
            indexed.position(offset)
        assert LineIndex(text).position(offset) == counted.position(offset) == indexed.position(offset)
    assert parse_mapping("m.json", "\n" * 100_000).issues[0].message.startswith("a mapping-key file is a JSON object")


def test_a_text_starting_with_a_byte_order_mark_reads_as_without_it_at_the_same_places() -> None:
    """An editor may send the BOM of a UTF-8 file as the text's first character: read as the file on disk reads (the
    disk reader drops it), the offsets still those of the text as sent, so that a client's positions count it."""
    text = "\ufeff" + json.dumps(BASE, indent=2)
    parsed = parse_mapping("m.json", text)
    assert parsed.syntax_ok and not parsed.issues and parsed.text == text
    assert [e.train_key for e in parsed.entries] == list(BASE)
    spans = parsed.spans(parsed.entries[0])
    assert text[spans.key.start : spans.key.end] == json.dumps(list(BASE)[0])
    edited = text.replace(json.dumps(list(BASE)[0]), '"typed"')
    assert _layout(parse_mapping("m.json", edited, parsed)) == _layout(parse_mapping("m.json", edited))
    broken = "\ufeff" + '{"a": "x", "b": 5, "c": ["y"'
    issues = [(i.code, broken[i.span.start : i.span.end]) for i in parse_mapping("m.json", broken).issues]
    assert ("invalid-value", "5") in issues and not [m for m in issues if m[0] == "invalid-value" and m[1] != "5"]
