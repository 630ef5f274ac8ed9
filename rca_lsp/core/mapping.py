"""The mapping-key file, read error-tolerantly with positions, so a file mid-edit is still checked.

Valid files (the common case) take the fast path: orjson gives the structure, one split of the text on
quotes gives every string's offset. Files with errors go through a token reader over the flat object that
locates each problem and keeps going after a broken entry. (tree-sitter-json was measured first: 2.4 s for
60k entries, and it recovered no entries after an error; a regex tokenizer alone took 0.6 s.)
"""

from __future__ import annotations

import bisect
import itertools
import re
from dataclasses import dataclass

import orjson

from rca_lsp.core.gcpause import paused_gc

_TOKEN_RE = re.compile(r'"[^"\\\n]*(?:\\.[^"\\\n]*)*"?|[{}\[\]:,]|[^\s{}\[\]:,"]+')


@dataclass(frozen=True, slots=True)
class Span:
    """Character offsets [start, end) into the file's text."""

    start: int
    end: int

    def contains(self, offset: int) -> bool:
        return self.start <= offset <= self.end


@dataclass(frozen=True, slots=True)
class MappingIssue:
    code: str  # json-syntax | invalid-value | duplicate-key | unknown-train-key | unknown-rollout-key
    message: str
    span: Span
    key: str | None = None
    suggestions: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class MappingEntry:
    train_key: str
    key_span: Span
    rollout_keys: tuple[str, ...]
    value_spans: tuple[Span, ...]  # one per rollout key
    value_span: Span  # the whole value (string or list)
    is_list: bool


class LineIndex:
    """Offset <-> (0-based line, column in characters)."""

    def __init__(self, text: str) -> None:
        self._starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def position(self, offset: int) -> tuple[int, int]:
        line = bisect.bisect_right(self._starts, offset) - 1
        return line, offset - self._starts[line]

    def offset(self, line: int, column: int) -> int:
        if line >= len(self._starts):
            return self._starts[-1]
        return self._starts[line] + column


@dataclass
class ParsedMapping:
    path: str
    text: str
    entries: list[MappingEntry]  # in file order, duplicates included
    issues: list[MappingIssue]
    syntax_ok: bool
    lines: LineIndex
    _starts_cache: list[int] | None = None

    def effective(self) -> dict[str, MappingEntry]:
        """Train key -> entry, the last definition winning (as every JSON reader does)."""
        return {entry.train_key: entry for entry in self.entries}

    def as_dict(self) -> dict[str, str | list[str]]:
        return {e.train_key: list(e.rollout_keys) if e.is_list else e.rollout_keys[0]
                for e in self.effective().values()}

    def entry_before(self, offset: int) -> MappingEntry | None:
        """The last entry whose key starts at or before an offset."""
        index = bisect.bisect_right(self._key_starts, offset) - 1
        return self.entries[index] if index >= 0 else None

    def entry_at(self, offset: int) -> tuple[MappingEntry, int | None] | None:
        """The entry under an offset, and which rollout value (None when on the key or between values)."""
        entry = self.entry_before(offset)
        if entry is None:
            return None
        if entry.key_span.contains(offset):
            return entry, None
        if entry.value_span.contains(offset):
            return entry, next((i for i, s in enumerate(entry.value_spans) if s.contains(offset)), None)
        return None

    def line_of(self, span: Span) -> int:
        return self.lines.position(span.start)[0] + 1

    @property
    def _key_starts(self) -> list[int]:
        if self._starts_cache is None:
            self._starts_cache = [e.key_span.start for e in self.entries]
        return self._starts_cache


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
        self.entries: list[MappingEntry] = []
        self.issues: list[MappingIssue] = []

    def _issue(self, code: str, message: str, start: int, end: int, key: str | None = None) -> None:
        self.issues.append(MappingIssue(code, message, Span(start, end), key))

    def _peek(self, ahead: int = 0) -> tuple[str, int, int] | None:
        j = self.i + ahead
        return self.tokens[j] if j < len(self.tokens) else None

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
            self._issue("invalid-value", "a mapping-key file is a JSON object: {train key: rollout key(s)}",
                        where[1], where[2])
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
            following = self._peek(1)
            if text.startswith('"') and following is not None and following[0] == ":":
                self.i += 2
                self._read_value(_unquote(text), Span(start, end))
                after = self._peek()
                if after is not None and after[0] not in ",}":
                    self._issue("json-syntax", "missing ',' between entries", after[1], after[2])
                continue
            self._issue("json-syntax", f"expected a quoted train key followed by ':', found {text[:40]!r}", start, end)
            self.i += 1
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
            self.entries.append(MappingEntry(key, key_span, (_unquote(text),), (span,), span, False))
        elif text == "[":
            self._read_list(key, key_span, start)
        else:
            kind = "object" if text == "{" else text[:20]
            self._skip_value()
            last = self.tokens[min(self.i, len(self.tokens)) - 1]
            self._issue("invalid-value", f"value must be a rollout key string or a list of them, not {kind}",
                        start, max(end, last[2]), key)

    def _read_list(self, key: str, key_span: Span, open_at: int) -> None:
        self.i += 1
        values: list[str] = []
        spans: list[Span] = []
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
                self._issue("invalid-value", f"list items must be rollout key strings, not {text[:20]!r}",
                            start, end, key)
        close = self._peek()
        close_at = close[2] if close is not None and close[0] == "]" else (spans[-1].end if spans else open_at + 1)
        if close is not None and close[0] == "]":
            self.i += 1
        if not values:
            self._issue("invalid-value", "empty list: map the train key to at least one rollout key",
                        open_at, close_at, key)
            return
        self.entries.append(MappingEntry(key, key_span, tuple(values), tuple(spans), Span(open_at, close_at), True))


def _orjson_error(text: str) -> MappingIssue | None:
    try:
        orjson.loads(text)
    except orjson.JSONDecodeError as error:
        offset = min(error.pos, len(text))
        return MappingIssue("json-syntax", f"JSON syntax error: {error.msg}", Span(offset, min(offset + 1, len(text))))
    return None


def _is_flat_mapping(document: object) -> bool:
    return isinstance(document, dict) and all(
        type(v) is str or (type(v) is list and v and all(type(x) is str for x in v)) for v in document.values())


def _entries_from_quotes(text: str, document: dict[str, str | list[str]]) -> list[MappingEntry] | None:
    """Entries of a valid flat mapping, with offsets from splitting the text on quotes; None if unsure."""
    pieces = text.split('"')
    for i in range(len(pieces) - 1, 0, -1):  # rejoin quotes that were escaped inside a string
        piece = pieces[i - 1]
        if piece.endswith("\\") and (len(piece) - len(piece.rstrip("\\"))) % 2 == 1:
            pieces[i - 1 : i + 1] = [piece + '"' + pieces[i]]
    offsets = list(itertools.accumulate((len(p) + 1 for p in pieces), initial=0))
    entries: list[MappingEntry] = []
    key: str | None = None
    key_span = Span(0, 0)
    values: list[str] = []
    spans: list[Span] = []

    def close() -> None:
        if key is not None:
            expected = document.get(key)
            is_list = type(expected) is list
            entries.append(MappingEntry(key, key_span, tuple(values), tuple(spans),
                                        Span(spans[0].start, spans[-1].end) if spans else key_span, is_list))

    for i in range(1, len(pieces) - 1, 2):
        start = offsets[i] - 1
        span = Span(start, offsets[i + 1] - 1 + 1)
        raw = pieces[i]
        value = _unquote('"' + raw + '"') if "\\" in raw else raw
        if pieces[i + 1].lstrip()[:1] == ":":
            close()
            key, key_span, values, spans = value, span, [], []
        else:
            values.append(value)
            spans.append(span)
    close()
    if len(entries) < len(document) or any(not e.rollout_keys for e in entries):
        return None
    last = {e.train_key: e for e in entries}
    if last.keys() != document.keys() or any(
            list(e.rollout_keys) != ([document[k]] if type(document[k]) is str else document[k])
            for k, e in last.items()):
        return None
    return entries


def parse_mapping(path: str, text: str) -> ParsedMapping:
    """Entries with positions plus the issues visible without the dumps: syntax, value shape, duplicates."""
    with paused_gc():
        return _parse_mapping(path, text)


def _parse_mapping(path: str, text: str) -> ParsedMapping:
    lines = LineIndex(text)
    try:
        document = orjson.loads(text)
    except orjson.JSONDecodeError:
        document = None
    if _is_flat_mapping(document):
        entries = _entries_from_quotes(text, document)  # type: ignore[arg-type]
        if entries is not None:
            return ParsedMapping(path, text, entries, _duplicate_issues(entries, lines), True, lines)
    reader = _Reader(text)
    reader.read()
    syntax_error = _orjson_error(text)
    issues = reader.issues
    if syntax_error is not None:
        error_line = lines.position(syntax_error.span.start)[0]
        issues = [i for i in issues if i.code != "json-syntax" or lines.position(i.span.start)[0] != error_line]
        issues.append(syntax_error)
    issues = sorted(issues + _duplicate_issues(reader.entries, lines), key=lambda i: i.span.start)
    return ParsedMapping(path, text, reader.entries, issues, syntax_error is None, lines)


def _duplicate_issues(entries: list[MappingEntry], lines: LineIndex) -> list[MappingIssue]:
    issues: list[MappingIssue] = []
    first_seen: dict[str, MappingEntry] = {}
    for entry in entries:
        earlier = first_seen.setdefault(entry.train_key, entry)
        if earlier is not entry:
            issues.append(MappingIssue(
                "duplicate-key", f"duplicate key: also defined at line {lines.position(earlier.key_span.start)[0] + 1}; "
                "the last definition is the one used", entry.key_span, entry.train_key))
    return issues
