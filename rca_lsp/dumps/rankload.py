"""The rank files of one logical dump, read against the first: most of a rank's entries are byte for byte the first
rank's (tensor-parallel replicas), so only the entries whose JSON text differs are decoded.

The first file is loaded as usual; every later file is scanned into its entries' raw JSON text (msgspec.Raw: the text
is checked, nothing is built), ~7x faster than decoding it, and so is the first. A later rank's entry whose text
equals the first rank's decodes to the same statistics, so it is the first rank's ModuleEntry object itself (the
merge then sees replicas by identity); the others are decoded alone. A file that does not scan (NaN literals, broken
JSON, not a dump) or whose differing entries do not decode is loaded as usual, which accepts it or reports the
problem as for any dump.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import msgspec

from rca_lsp.base.cached import cached_property
from rca_lsp.base.gcpause import paused_gc
from rca_lsp.base.inputfile import read_regular_file
from rca_lsp.base.jsonload import first_invalid_utf8
from rca_lsp.dumps.dump import Dump, ModuleEntry, RawValue, index_entries, load_dump_file


class _ScannedDump(msgspec.Struct, gc=False):
    data: dict[str, msgspec.Raw]
    task: Any = None
    level: Any = None
    framework: Any = None


class Differences(msgspec.Struct, array_like=True, gc=False):
    """A later rank's file against the first rank's: its keys in order, each with its text where it differs."""

    task: Any
    level: Any
    framework: Any
    keys: list[str] | None  # None: the first rank's keys, in its order (the common case)
    changed: dict[str, bytes]  # the keys whose text is not the first rank's, with their text


_SCANNER = msgspec.json.Decoder(_ScannedDump)
_VALUE_DECODER = msgspec.json.Decoder(RawValue)


class RankTexts:
    """One rank file's entries as raw JSON text, by key (empty when the file does not scan)."""

    def __init__(self, data: bytes) -> None:
        scanned = _scanned(data)
        self.texts: dict[str, msgspec.Raw] = scanned.data if scanned is not None else {}

    def differences(self, data: bytes) -> Differences | None:
        """Another rank file's entries against these; None when either file does not scan."""
        scanned = _scanned(data) if self.texts else None
        if scanned is None:
            return None
        texts = self.texts
        changed = {key: bytes(text) for key, text in scanned.data.items() if texts.get(key) != text}
        keys = list(scanned.data)
        same_keys = len(keys) == len(texts) and keys == list(texts)
        return Differences(scanned.task, scanned.level, scanned.framework, None if same_keys else keys, changed)


def _scanned(data: bytes) -> _ScannedDump | None:
    if first_invalid_utf8(data) is not None:  # the scan checks no entry's text: loaded as usual, which says where
        return None
    try:
        with paused_gc():
            return _SCANNER.decode(data)
    except (msgspec.DecodeError, RecursionError):  # ValidationError included; loaded as usual, which says why
        return None


class FirstRank:
    """The first rank's dump, and its texts (read when first needed): what the later ranks are read against."""

    def __init__(self, dump: Dump, path: Path) -> None:
        self.dump = dump
        self._path = path

    @cached_property
    def reference(self) -> RankTexts:
        return RankTexts(read_regular_file(self._path, "dump"))

    def peer(self, path: Path) -> Dump:
        """Another rank's dump, read here."""
        return self.peer_from(path, self.reference.differences(read_regular_file(path, "dump")))

    def peer_from(self, path: Path, differences: Differences | None) -> Dump:
        """Another rank's dump from its differences (computed here or by another process); loaded as usual when
        there are none."""
        if differences is None:
            return load_dump_file(path)
        keys, changed, entries = differences.keys, differences.changed, self.dump.entries
        with paused_gc():
            values: dict[str, RawValue | ModuleEntry | None]
            if keys is None and not self.dump.skipped_keys:  # the first rank's keys, every one indexed
                values = dict(entries)
            else:
                keys = keys if keys is not None else list(self.reference.texts)
                values = dict(zip(keys, map(entries.get, keys)))
            if not values:  # no keys (or the first file changed meanwhile): as usual, which says what is wrong
                return load_dump_file(path)
            # keys with the first rank's text that it did not index (null, backward, ...): decoded from that text
            unindexed = [key for key, value in values.items() if value is None and key not in changed]
            texts = self.reference.texts if unindexed else {}
            if any(key not in texts for key in unindexed):  # the first file changed meanwhile
                return load_dump_file(path)
            try:
                for key in unindexed:
                    values[key] = _VALUE_DECODER.decode(texts[key])
                for key, text in changed.items():
                    values[key] = _VALUE_DECODER.decode(text)
                return index_entries(str(path), values, differences.task, differences.level, differences.framework)
            except (msgspec.DecodeError, RecursionError):  # a number beyond a double, an entry nested ~1000 levels
                return load_dump_file(path)  # deep: located as for any dump


def load_rank_files(paths: Sequence[Path]) -> list[Dump]:
    """The dumps of `paths` (rank order), each as load_dump_file gives it, the same errors included."""
    if len(paths) < 2:
        return [load_dump_file(path) for path in paths]
    first = FirstRank(load_dump_file(paths[0]), paths[0])
    return [first.dump] + [first.peer(path) for path in paths[1:]]
