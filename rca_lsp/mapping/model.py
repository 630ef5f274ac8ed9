"""A parsed mapping-key file, whatever its format: entries (train key -> rollout keys) with the spans of their text,
the issues found without the dumps, and the line index that turns offsets into positions. The JSON reader
(jsonfile) and msprobe's YAML reader (msprobe_yaml) both produce a `ParsedMapping`."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple, Sequence

import numpy as np

from rca_lsp.base.cached import cached_property
from rca_lsp.base.lines import line_and_column

if TYPE_CHECKING:
    from rca_lsp.dumps.dump import Dump


MSPROBE_SUFFIXES = (".yaml", ".yml")  # msprobe's mapping files (data_mapping.yaml, cell_mapping.yaml)


@dataclass(frozen=True, slots=True)
class Span:
    """Character offsets [start, end) into the file's text."""

    start: int
    end: int

    def contains(self, offset: int) -> bool:
        return self.start <= offset <= self.end


@dataclass(frozen=True, slots=True)
class MappingIssue:
    code: str  # json-syntax | yaml-syntax | invalid-value | duplicate-key | unknown-train-key | unknown-rollout-key
    # | not-dumped
    message: str
    span: Span
    key: str | None = None
    suggestions: tuple[str, ...] = ()


class MappingEntry:
    """One `"train key": value` pair. Offsets are relative to the key's opening quote, so an entry outside an
    edited region is reused as is by the next parse; `ParsedMapping.spans` gives its place in one text.
    Compared by identity: two definitions of the same key are two entries."""

    __slots__ = ("train_key", "rollout_keys", "is_list", "key_length", "value_offsets", "value_extent")

    def __init__(
        self,
        train_key: str,
        rollout_keys: tuple[str, ...],
        is_list: bool,
        key_length: int,
        value_offsets: tuple[tuple[int, int], ...],
        value_extent: tuple[int, int],
    ) -> None:
        self.train_key = train_key
        self.rollout_keys = rollout_keys
        self.is_list = is_list
        self.key_length = key_length
        self.value_offsets = value_offsets  # each rollout key string
        self.value_extent = value_extent  # the whole value (string or list)

    def __repr__(self) -> str:
        return f"MappingEntry({self.train_key!r}: {self.rollout_keys!r})"


class EntrySpans(NamedTuple):
    key: Span
    values: tuple[Span, ...]  # one per rollout key
    value: Span  # the whole value

    @property
    def whole(self) -> Span:
        return Span(self.key.start, self.value.end)


class EntryList:
    """Entries with the absolute offset of each key, built from absolute spans."""

    def __init__(self) -> None:
        self.entries: list[MappingEntry] = []
        self.starts: list[int] = []

    def add(
        self,
        key: str,
        key_span: Span,
        values: tuple[str, ...],
        spans: tuple[Span, ...],
        value_span: Span,
        is_list: bool,
    ) -> None:
        start = key_span.start
        self.entries.append(
            MappingEntry(
                key,
                values,
                is_list,
                key_span.end - start,
                tuple((s.start - start, s.end - start) for s in spans),
                (value_span.start - start, value_span.end - start),
            )
        )
        self.starts.append(start)


@dataclass(frozen=True)
class MappingEdit:
    """How a parse differs from the earlier parse it was derived from (by its token): entries replaced."""

    base: int
    removed: list[MappingEntry]
    added: list[MappingEntry]

    def derives(self, earlier: ParsedMapping) -> bool:
        return self.base == earlier.token


_TOKENS = itertools.count()


# positions found by counting before the line index is built (an error in a huge file needs one): each count reads
# the text three times, about what building the index costs
FEW_LOOKUPS = 2


def line_starts(text: str) -> np.ndarray:
    """Where each line starts (0 first), lines ending at `\r\n`, `\r` or `\n` (base.lines), found in the text's code
    points as an array: ~10 ms for 10 MB, where a regex match per line takes ~100 ms."""
    if not text:
        return np.zeros(1, dtype=np.int64)
    if text.isascii():
        codes = np.frombuffer(text.encode("ascii"), dtype=np.uint8)
    else:  # one code point per item, so that offsets are character offsets
        codes = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    ends = codes == 10
    if "\r" in text:  # (found at memory speed; most texts have none, and their line feeds alone end lines)
        carriage_return = codes == 13
        ends[:-1] |= carriage_return[:-1] & ~ends[1:]  # a \r ends a line unless a \n follows (then that one does)
        ends[-1] |= carriage_return[-1]
    return np.concatenate([np.zeros(1, dtype=np.int64), np.flatnonzero(ends) + 1])


class LineIndex:
    """Offset <-> (0-based line, column in characters), lines ending at `\r\n`, `\r` or `\n` as LSP counts them
    (base.lines). The index of line starts (an array: 8 bytes a line) is built on demand: a file of millions of lines
    that only needs the position of its one error never builds it; an edit shifts the starts after it as an array."""

    def __init__(self, text: str, starts: np.ndarray | None = None) -> None:
        self._text = text
        self._built = starts
        self._counted = 0

    @property
    def _starts(self) -> np.ndarray:
        self.build()
        assert self._built is not None
        return self._built

    def build(self) -> None:
        """Build the index now (in a worker thread, before an event loop looks positions up in it)."""
        if self._built is None:
            self._built = line_starts(self._text)

    def after_edit(self, text: str, start: int, old_end: int, new_end: int) -> LineIndex:
        """The index of `text`, made from the old text's by replacing old[start:old_end] with text[start:new_end].
        Whether offset p starts a line depends on the characters at p - 1 and p (`\r` then `\n` is one line
        end): the starts from `start` to `new_end` are found again, the others kept (those after the edit moved)."""
        starts = self._starts
        kept = max(int(np.searchsorted(starts, start, "left")), 1)  # lines starting before the edit (and line 0)
        moved = int(np.searchsorted(starts, old_end, "right"))  # lines starting after the edit's last character
        around = max(start - 1, 0)  # a character either side: a `\r\n` across the edit's bounds is one line end
        ends = line_starts(text[around : new_end + 1])[1:] + around
        inside = ends[(start <= ends) & (ends <= new_end)]
        return LineIndex(text, np.concatenate([starts[:kept], inside, starts[moved:] + (new_end - old_end)]))

    def position(self, offset: int) -> tuple[int, int]:
        if self._built is None and self._counted < FEW_LOOKUPS:
            self._counted += 1
            return line_and_column(self._text, offset)
        line = int(self._starts.searchsorted(offset, "right")) - 1
        return line, offset - int(self._starts[line])

    def line_span(self, line: int) -> tuple[int, int]:
        """Where a line starts and where its text ends (before its line break); past the last line: the text's end."""
        starts = self._starts
        if line >= len(starts):
            return len(self._text), len(self._text)
        start = int(starts[line])
        end = int(starts[line + 1]) if line + 1 < len(starts) else len(self._text)
        while end > start and self._text[end - 1] in "\r\n":
            end -= 1
        return start, end

    def offset(self, line: int, column: int) -> int:
        starts = self._starts
        if line >= len(starts):
            return int(starts[-1])
        return int(starts[line]) + column


@dataclass
class ParsedMapping:
    path: str
    text: str
    entries: list[MappingEntry]  # in file order, duplicates included
    key_starts: np.ndarray | Sequence[int]  # offset of each entry's key, ascending (kept as an int64 array)
    issues: list[MappingIssue]
    syntax_ok: bool
    lines: LineIndex
    edit: MappingEdit | None = None  # set when this parse was derived from an earlier one
    token: int = field(default_factory=lambda: next(_TOKENS))  # identifies this parse in a later one's `edit`
    _effective: dict[str, MappingEntry] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.key_starts = np.asarray(self.key_starts, dtype=np.int64)  # shifted as a whole by an edit

    def effective(self) -> dict[str, MappingEntry]:
        """Train key -> entry, the last definition winning (as every JSON reader does)."""
        if self._effective is None:
            self._effective = {entry.train_key: entry for entry in self.entries}
        return self._effective

    @cached_property
    def _index(self) -> dict[MappingEntry, int]:
        """Where each entry is in file order; an edit that keeps the number of entries derives it from the earlier
        parse's (see derive_index)."""
        return dict(zip(self.entries, range(len(self.entries))))

    def derive_index(self, earlier: ParsedMapping) -> None:
        """This parse's entry index from an earlier parse's, when that one is built and this parse replaced some of its
        entries in place (one dict copy instead of 10^5 insertions)."""
        edit = self.edit
        if edit is None or "_index" not in earlier.__dict__ or len(edit.removed) != len(edit.added):
            return
        index = earlier._index.copy()  # .copy(): dict() is slow once a key was deleted
        at = [index.pop(entry) for entry in edit.removed]
        index.update(zip(edit.added, at))
        self.__dict__["_index"] = index

    @property
    def reusable(self) -> bool:
        """Whether a parse of an edited version can start from this one (valid, every value well formed)."""
        return self.syntax_ok and all(i.code == "duplicate-key" for i in self.issues)

    def index_of(self, entry: MappingEntry) -> int | None:
        """Where an entry is in this parse's file order, None if it is not one of this parse's entries."""
        return self._index.get(entry)

    def entries_not_in(self, other: ParsedMapping) -> list[MappingEntry]:
        """This parse's entries that are not (the very same objects) in another parse."""
        known = other._index
        return [e for e in self.entries if e not in known]

    def key_span(self, entry: MappingEntry) -> tuple[int, int]:
        """Where an entry's key (with its quotes) is in this parse's text."""
        start = int(self.key_starts[self._index[entry]])
        return start, start + entry.key_length

    def spans(self, entry: MappingEntry) -> EntrySpans:
        """Where an entry of this parse sits in its text."""
        start = int(self.key_starts[self._index[entry]])
        return EntrySpans(
            Span(start, start + entry.key_length),
            tuple(Span(start + a, start + b) for a, b in entry.value_offsets),
            Span(start + entry.value_extent[0], start + entry.value_extent[1]),
        )

    def as_dict(self) -> dict[str, str | list[str]]:
        return {
            e.train_key: list(e.rollout_keys) if e.is_list else e.rollout_keys[0] for e in self.effective().values()
        }

    def entry_before(self, offset: int) -> MappingEntry | None:
        """The last entry whose key starts at or before an offset."""
        index = int(np.asarray(self.key_starts).searchsorted(offset, "right")) - 1
        return self.entries[index] if index >= 0 else None

    def entry_at(self, offset: int) -> tuple[MappingEntry, int | None] | None:
        """The entry under an offset, and which rollout value (None when on the key or between values)."""
        entry = self.entry_before(offset)
        if entry is None:
            return None
        spans = self.spans(entry)
        if spans.key.contains(offset):
            return entry, None
        if spans.value.contains(offset):
            return entry, next((i for i, s in enumerate(spans.values) if s.contains(offset)), None)
        return None

    def line_of(self, span: Span) -> int:
        return self.lines.position(span.start)[0] + 1

    def for_dumps(self, train: Dump, rollout: Dump) -> ParsedMapping:
        """The mapping an analysis of these dumps reads: this one, whose entries name their keys (msprobe's YAML
        mappings are resolved against the dumps, see msprobe_mapping)."""
        return self
