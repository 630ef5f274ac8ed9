"""The mapping-key file, read error-tolerantly with positions, so a file mid-edit is still checked.

Valid files (the common case) take the fast path: orjson gives the structure, one split of the text on
quotes gives every string's offset. Files with errors go through a token reader over the flat object that
locates each problem and keeps going after a broken entry. (tree-sitter-json was measured first: 2.4 s for
60k entries, and it recovered no entries after an error; a regex tokenizer alone took 0.6 s.)
"""

from __future__ import annotations

import itertools
import re
from typing import TYPE_CHECKING, Callable

import numpy as np
import orjson

from rca_lsp.base.inputfile import BOM
from rca_lsp.base.jsonload import loads_or_error
from rca_lsp.mapping.model import EntryList, LineIndex, MappingEdit, MappingEntry, MappingIssue, ParsedMapping, Span

if TYPE_CHECKING:
    pass

_COMMENT_STARTS = ("//", "/*", "#")
_TOKEN_RE = re.compile(r'"[^"\\\n]*(?:\\.[^"\\\n]*)*"?|[{}\[\]:,]|[^\s{}\[\]:,"]+')


def _unquote(token: str) -> str:
    if "\\" not in token:
        return token[1:-1] if token.endswith('"') and len(token) > 1 else token[1:]
    try:
        return str(orjson.loads(token))
    except orjson.JSONDecodeError:
        return token[1:-1]


class _Reader:
    """Walks the tokens of `{ "key": "value" | ["value", ...], ... }`, recovering at the next key on errors."""

    def __init__(self, text: str) -> None:
        self.tokens = [(m.group(), m.start(), m.end()) for m in _TOKEN_RE.finditer(text)]
        self.i = 0
        self.entries = EntryList()
        self.issues: list[MappingIssue] = []

    def _issue(self, code: str, message: str, start: int, end: int, key: str | None = None) -> None:
        self.issues.append(MappingIssue(code, message, Span(start, end), key))

    def _peek(self, ahead: int = 0) -> tuple[str, int, int] | None:
        j = self.i + ahead
        return self.tokens[j] if j < len(self.tokens) else None

    def _at_key(self) -> bool:
        """Whether the next tokens are a quoted key and its ':'."""
        token, following = self._peek(), self._peek(1)
        return token is not None and token[0].startswith('"') and following is not None and following[0] == ":"

    def _skip_value(self) -> None:
        """Skip one value, balancing brackets."""
        depth = 0
        while (tok := self._peek()) is not None:
            if tok[0] in "{[":
                depth += 1
            elif tok[0] in "}]":
                if depth == 0:
                    return
                depth -= 1
            elif tok[0] == "," and depth == 0:
                return
            self.i += 1
            if depth == 0:
                return

    def read(self) -> None:
        first = self._peek()
        if first is None or first[0] != "{":
            where = first or ("", 0, 0)
            if where[0].startswith(_COMMENT_STARTS):  # an object after a comment: a syntax error, said as such
                self._issue("json-syntax", "comments are not allowed in JSON", where[1], where[2])
                return
            self._issue(
                "invalid-value", "a mapping-key file is a JSON object: {train key: rollout key(s)}", where[1], where[2]
            )
            return
        self.i = 1
        while (tok := self._peek()) is not None:
            text, start, end = tok
            if text == "}":
                self.i += 1
                return
            if text == ",":
                self.i += 1
                continue
            if self._at_key():
                self.i += 2
                self._read_value(_unquote(text), Span(start, end))
                after = self._peek()
                if after is not None and after[0] not in ",}":
                    self._issue("json-syntax", "missing ',' between entries", after[1], after[2])
                continue
            self._issue("json-syntax", f"expected a quoted train key followed by ':', found {text[:40]!r}", start, end)
            self.i += 1
            if not self._at_key():  # `/* note */ "b": ...`: the junk ends where the next entry starts
                self._skip_value()

    def _read_value(self, key: str, key_span: Span) -> None:
        tok = self._peek()
        if tok is None or tok[0] in ",}":
            at = tok or (None, key_span.end, key_span.end)
            self._issue("json-syntax", "missing value after ':'", key_span.start, at[2], key)
            return
        text, start, end = tok
        if text.startswith('"'):
            self.i += 1
            span = Span(start, end)
            self.entries.add(key, key_span, (_unquote(text),), (span,), span, False)
        elif text == "[":
            self._read_list(key, key_span, start)
        else:
            kind = "object" if text == "{" else text[:20]
            self._skip_value()
            last = self.tokens[min(self.i, len(self.tokens)) - 1]
            self._issue(
                "invalid-value",
                f"value must be a rollout key string or a list of them, not {kind}",
                start,
                max(end, last[2]),
                key,
            )

    def _read_list(self, key: str, key_span: Span, open_at: int) -> None:
        self.i += 1
        values: list[str] = []
        spans: list[Span] = []
        other_items = False  # items that are not strings: reported each, so the list is not "empty"
        while (tok := self._peek()) is not None and tok[0] != "]":
            text, start, end = tok
            following = self._peek(1)
            if text == "}" or (text.startswith('"') and following is not None and following[0] == ":"):
                self._issue("json-syntax", "list not closed with ']'", open_at, open_at + 1, key)
                break  # let the object reader resume at the next key
            if text == ",":
                self.i += 1
            elif text.startswith('"'):
                values.append(_unquote(text))
                spans.append(Span(start, end))
                self.i += 1
            else:
                self._skip_value()
                other_items = True
                self._issue(
                    "invalid-value",
                    f"list items must be rollout key strings, not {text[:20]!r}"
                    + (" (a nested list)" if text == "[" else ""),
                    start,
                    end,
                    key,
                )
        close = self._peek()
        close_at = close[2] if close is not None and close[0] == "]" else (spans[-1].end if spans else open_at + 1)
        if close is not None and close[0] == "]":
            self.i += 1
        if not values:
            if not other_items:
                self._issue(
                    "invalid-value", "empty list: map the train key to at least one rollout key", open_at, close_at, key
                )
            return
        self.entries.add(key, key_span, tuple(values), tuple(spans), Span(open_at, close_at), True)


def _bom_as_space(text: str) -> str:
    """The text to read: a leading BOM (an editor's text may keep it) read as the space it stands for, so that every
    offset found in the text read is the same offset in `text`."""
    return " " + text[1:] if text.startswith(BOM) else text


def _read_tolerantly(text: str, error: orjson.JSONDecodeError | None) -> tuple[EntryList, list[MappingIssue]]:
    """What the error-tolerant reader finds, plus the JSON parser's own first error (`error`, already raised)."""
    reader = _Reader(text)
    reader.read()
    if error is None:
        return reader.entries, reader.issues
    offset = min(error.pos, len(text))
    # "unexpected character, expected a string key" at a `//` line: JSON has no comments, which the user may not know
    said = "comments are not allowed in JSON" if text.startswith(_COMMENT_STARTS, offset) else error.msg
    return reader.entries, reader.issues + [
        MappingIssue("json-syntax", f"JSON syntax error: {said}", Span(offset, min(offset + 1, len(text))))
    ]


def _is_flat_mapping(document: object) -> bool:
    return isinstance(document, dict) and all(
        type(v) is str or (type(v) is list and v and all(type(x) is str for x in v)) for v in document.values()
    )


def _entries_from_quotes(text: str, document: dict[str, str | list[str]]) -> EntryList | None:
    """Entries of a valid flat mapping, with offsets from splitting the text on quotes; None if unsure."""
    pieces = text.split('"')
    if '\\"' in text:
        for i in range(len(pieces) - 1, 0, -1):  # rejoin quotes that were escaped inside a string
            piece = pieces[i - 1]
            if piece.endswith("\\") and (len(piece) - len(piece.rstrip("\\"))) % 2 == 1:
                pieces[i - 1 : i + 1] = [piece + '"' + pieces[i]]
    if len(pieces) % 2 == 0:
        return None
    # string i is pieces[2i + 1]: its opening quote is at bounds[2i + 1] - 1, its closing quote ends at bounds[2i + 2]
    bounds = list(itertools.accumulate(map((1).__add__, map(len, pieces)), initial=0))
    raw, following = pieces[1::2], pieces[2::2]
    if not _only_flat_punctuation(pieces[0], following):
        return None
    strings = [_unquote('"' + r + '"') if "\\" in r else r for r in raw] if "\\" in text else raw
    keys = [i for i, after in enumerate(following) if after.lstrip()[:1] == ":"]
    found = EntryList()
    entries, starts = found.entries, found.starts
    for number, key in enumerate(keys):
        end = keys[number + 1] if number + 1 < len(keys) else len(raw)
        if end == key + 1:
            return None
        start = bounds[2 * key + 1] - 1
        bracket = following[key].find("[")
        if bracket < 0 and end == key + 2:  # "key": "value", most entries: its one span without a generator
            value = (bounds[2 * key + 3] - 1 - start, bounds[2 * key + 4] - start)
            entries.append(
                MappingEntry(strings[key], (strings[key + 1],), False, bounds[2 * key + 2] - start, (value,), value)
            )
            starts.append(start)
            continue
        values = tuple((bounds[2 * v + 1] - 1 - start, bounds[2 * v + 2] - start) for v in range(key + 1, end))
        if bracket < 0:
            extent = values[0]
        else:  # the value spans its brackets, so that an edit of one of them is an edit of this entry
            extent = (bounds[2 * key + 2] + bracket - start, text.find("]", values[-1][1] + start) + 1 - start)
        entries.append(
            MappingEntry(
                strings[key], tuple(strings[key + 1 : end]), bracket >= 0, bounds[2 * key + 2] - start, values, extent
            )
        )
        starts.append(start)
    if not _agrees(entries, document):
        return None
    return found


_WHITESPACE = str.maketrans("", "", " \t\r\n")
_FLAT_SEPARATORS = {":", ":[", ",", "],", "}", "]}"}  # between the strings of a flat mapping, whitespace removed


def _only_flat_punctuation(opening: str, separators: list[str]) -> bool:
    """Whether nothing but the punctuation of a flat mapping lies between its strings (orjson accepted the text,
    but a number, a nested list or an object in a shadowed duplicate entry would slip past the comparison)."""
    compact = "\x00".join(separators).translate(_WHITESPACE).split("\x00")
    return opening.translate(_WHITESPACE) == "{" and _FLAT_SEPARATORS.issuperset(compact)


def _agrees(entries: list[MappingEntry], document: dict[str, str | list[str]]) -> bool:
    """Whether the entries read from the text say what the JSON parser read (the last definition of each key)."""
    if len(entries) == len(document):  # no duplicates: compare in order
        return [e.train_key for e in entries] == list(document) and [
            list(e.rollout_keys) if e.is_list else e.rollout_keys[0] for e in entries
        ] == list(document.values())
    last = {e.train_key: e for e in entries}
    return last.keys() == document.keys() and all(
        e.is_list == (type(document[k]) is list)
        and list(e.rollout_keys) == ([document[k]] if type(document[k]) is str else document[k])
        for k, e in last.items()
    )


def parse_json_mapping(path: str, text: str, previous: ParsedMapping | None = None) -> ParsedMapping:
    """A mapping-key JSON file; with `previous` (a parse of an earlier version of the same file), entries outside the
    edited region are reused."""
    reused = _reparse_edit(previous, path, text) if previous is not None else None
    return reused if reused is not None else _parse_mapping(path, text)


def _parse_mapping(path: str, text: str) -> ParsedMapping:
    lines = LineIndex(text)
    read_text = _bom_as_space(text)
    document, error = loads_or_error(read_text)
    if _is_flat_mapping(document):
        found = _entries_from_quotes(read_text, document)  # type: ignore[arg-type]
        if found is not None:
            return _valid_mapping(path, text, found.entries, found.starts, lines)
    read, issues = _read_tolerantly(read_text, error)
    issues = _located(issues, lines)
    parsed = ParsedMapping(path, text, read.entries, read.starts, issues, error is None, lines)
    parsed.issues = sorted(issues + _duplicate_issues(parsed), key=lambda i: i.span.start)
    return parsed


def _valid_mapping(
    path: str, text: str, entries: list[MappingEntry], starts: list[int], lines: LineIndex
) -> ParsedMapping:
    parsed = ParsedMapping(path, text, entries, starts, [], True, lines)
    parsed.issues = _duplicate_issues(parsed)
    return parsed


def _duplicate_issues(parsed: ParsedMapping) -> list[MappingIssue]:
    if len(parsed.effective()) == len(parsed.entries):
        return []
    issues: list[MappingIssue] = []
    first_seen: dict[str, MappingEntry] = {}
    for entry in parsed.entries:
        earlier = first_seen.setdefault(entry.train_key, entry)
        if earlier is not entry:
            issues.append(
                MappingIssue(
                    "duplicate-key",
                    f"duplicate key: also defined at line {parsed.line_of(parsed.spans(earlier).key)}; "
                    "the last definition is the one used",
                    parsed.spans(entry).key,
                    entry.train_key,
                )
            )
    return issues


# Stand-ins for the unchanged entries on either side of an edited region, so that the region parses as an object.
_BEFORE, _AFTER = '{"\\u0000":""', '"\\u0001":""}'


def _reparse_edit(previous: ParsedMapping, path: str, text: str) -> ParsedMapping | None:
    """The new parse from the previous one when the file was valid before and after a local edit: only the entries
    the edit touches are parsed again; None when that cannot be decided locally (then the caller parses it all)."""
    if not previous.reusable or not previous.entries or path != previous.path:
        return None
    old = previous.text
    if text == old:
        return previous
    start, old_end, new_end = edited_region(old, text)
    entries, starts = previous.entries, np.asarray(previous.key_starts)
    first = int(np.searchsorted(starts, start, "right")) - 1  # entries before `first` end before the edit
    if first < 0 or int(starts[first]) + entries[first].value_extent[1] > start:
        first = max(first, 0)
    else:
        first += 1
    stop = max(first, int(np.searchsorted(starts, old_end, "left")))  # entries from `stop` on start after the edit
    if first == 0 and stop == len(entries):
        return None
    left = int(starts[first - 1]) + entries[first - 1].value_extent[1] if first > 0 else 0
    right = int(starts[stop]) + (new_end - old_end) if stop < len(entries) else len(text)
    before, after = (_BEFORE if first > 0 else ""), (_AFTER if stop < len(entries) else "")
    region = before + text[left:right] + after
    local = _region_entries(region, len(before), len(region) - len(after))
    if local is None:
        return None
    found, issues, syntax_ok = local
    middle, middle_starts = found.entries, found.starts
    if before:
        middle, middle_starts = middle[1:], middle_starts[1:]
    if after:
        middle, middle_starts = middle[:-1], middle_starts[:-1]
    shift, delta = left - len(before), new_end - old_end
    lines = previous.lines.after_edit(text, start, old_end, new_end)
    next_key_end = right + entries[stop].key_length if stop < len(entries) else right

    def located(issue: MappingIssue) -> MappingIssue:
        start, end = issue.span.start + shift, issue.span.end + shift
        if start == right and end > right + 1:  # drawn on the right stand-in's key: on the next entry's key instead
            end = next_key_end
        return MappingIssue(issue.code, issue.message, Span(start, end), issue.key, issue.suggestions)

    issues = [located(i) for i in issues]
    parsed = ParsedMapping(
        path,
        text,
        entries[:first] + middle + entries[stop:],
        np.concatenate([starts[:first], np.array(middle_starts, dtype=np.int64) + shift, starts[stop:] + delta]),
        [],
        syntax_ok,
        lines,
        MappingEdit(previous.token, entries[first:stop], middle),
    )
    parsed.derive_index(previous)
    if len(previous.effective()) == len(previous.entries):  # no duplicates before: update the lookup
        effective = previous.effective().copy()  # .copy(): dict() is slow once a key was deleted
        for entry in entries[first:stop]:
            del effective[entry.train_key]
        effective.update((entry.train_key, entry) for entry in middle)
        if len(effective) == len(parsed.entries):
            parsed._effective = effective
    parsed.issues = _located(issues, lines) + _duplicate_issues(parsed) if issues else _duplicate_issues(parsed)
    if issues:
        parsed.issues.sort(key=lambda i: i.span.start)
    return parsed


def _region_entries(region: str, low: int, high: int) -> tuple[EntryList, list[MappingIssue], bool] | None:
    """Entries, issues and JSON validity of the edited region region[low:high], framed by stand-ins as an object;
    None when what it says could depend on the rest of the file (a problem reaching into the stand-ins)."""
    region = _bom_as_space(region)
    document, error = loads_or_error(region)
    if _is_flat_mapping(document):
        found = _entries_from_quotes(region, document)  # type: ignore[arg-type]
        return None if found is None else (found, [], True)
    read, issues = _read_tolerantly(region, error)
    if any(i.span.start < low or i.span.start > high for i in issues):
        return None
    stand_ins = [(e.train_key, start) for e, start in zip(read.entries, read.starts) if start < low or start >= high]
    expected = ([("\x00", 1)] if low else []) + ([("\x01", high)] if high < len(region) else [])
    return (read, issues, error is None) if stand_ins == expected else None


def _located(issues: list[MappingIssue], lines: LineIndex) -> list[MappingIssue]:
    """A JSON parser's syntax error replaces the reader's syntax issues on its line (they say the same, less well)."""
    error = next((i for i in issues if i.code == "json-syntax" and i.message.startswith("JSON syntax error")), None)
    if error is None:
        return list(issues)
    error_line = lines.position(error.span.start)[0]
    return [i for i in issues if i is error or i.code != "json-syntax" or lines.position(i.span.start)[0] != error_line]


def edited_region(old: str, new: str) -> tuple[int, int, int]:
    """(start, old_end, new_end) such that new == old[:start] + new[start:new_end] + old[old_end:]."""
    limit = min(len(old), len(new))
    start = _common_length(lambda i, j: old[i:j] == new[i:j], limit)
    end = _common_length(
        lambda i, j: old[len(old) - j : len(old) - i] == new[len(new) - j : len(new) - i], limit - start
    )
    return start, len(old) - end, len(new) - end


def _common_length(same: Callable[[int, int], bool], limit: int) -> int:
    """Largest n <= limit with same(0, n), probing growing chunks then bisecting the first differing one."""
    low, step = 0, 4096
    while low < limit:
        high = min(limit, low + step)
        if not same(low, high):
            while high - low > 1:
                middle = (low + high) // 2
                if same(low, middle):
                    low = middle
                else:
                    high = middle
            return low
        low, step = high, step * 2
    return limit
