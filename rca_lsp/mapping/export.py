"""A mapping written as msprobe's `data_mapping.yaml` (tensor to tensor, for `msprobe compare -dm`) or
`cell_mapping.yaml` (module to module, `<path>.<Class>`, for `-cm`), train on the left (`-tp`), rollout on the
right (`-gp`).

msprobe maps one name to one name: a 1:N group (fused against split modules), N:1 groups (several train modules,
or calls, against one rollout module) and entries whose keys are not in the dumps have no equivalent there. They
are written as comments naming them, never dropped. A data mapping also pairs calls one by one, so an entry
against all calls of a decoding rollout (`forward.*`) is such a group too; a cell mapping names modules, whose
calls are paired as msprobe_mapping.call_pairs reads them back. What the written file means is checked by reading
it back against the same dumps: entries it would pair otherwise are listed in a closing comment.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import yaml

from rca_lsp.base.display import shown
from rca_lsp.dumps.dump import Dump, entries_with_slots
from rca_lsp.mapping.model import MappingEntry
from rca_lsp.mapping.msprobe_names import cell_name, tensor_names
from rca_lsp.mapping.msprobe_yaml import CELL, DATA, parse_msprobe_mapping

FORMATS = (DATA, CELL)
_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-/]*")
_RESOLVER = yaml.resolver.Resolver()


@dataclass
class Exported:
    kind: str
    lines: list[str] = field(default_factory=list)  # `left: right`
    comments: list[str] = field(default_factory=list)  # one per group left out, naming it and why
    pairs: int = 0  # module pairs written
    read_back: list[str] = field(default_factory=list)  # train keys the file pairs otherwise than the mapping
    local_names: bool = False  # a merged dump renamed keys (pipeline stages, experts): msprobe reads rank files

    def text(self, source: str) -> str:
        """The file. Comments name keys and paths as `shown` writes them: a line break in one cannot end its
        comment (and turn the rest into a rule)."""
        option = "-dm" if self.kind == DATA else "-cm"
        head = [
            f"# msprobe {self.kind}_mapping written by rca-lsp export-mapping from {shown(source)}",
            f"# msprobe compare -tp <train dump> -gp <rollout dump> {option} <this file>: left train, right rollout",
        ]
        if self.local_names:
            head.append(
                "# keys are the merged ranks' logical names (global layer and expert indices); msprobe compares "
                "rank by rank, under each rank's own names"
            )
        if self.comments:
            head.append(f"# {len(self.comments)} entries have no msprobe equivalent and are left as comments:")
            head += [f"#   {shown(comment)}" for comment in self.comments]
        tail = []
        if self.read_back:
            tail.append(f"# read back against the same dumps, these lines pair {len(self.read_back)} train modules")
            tail.append("# otherwise than the mapping (a substring of a longer name, or other calls):")
            tail += [f"#   {shown(key)}" for key in self.read_back]
        return "\n".join(head + self.lines + tail) + "\n"


_SHORT_ESCAPES = {"\\": "\\\\", '"': '\\"', "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped(character: str) -> str:
    """A character inside a YAML double-quoted scalar: printable ASCII as it is, the rest escaped (a character beyond
    the BMP as one `\\U` escape: YAML reads a JSON-style surrogate pair `\\ud83d\\ude00` as two characters)."""
    if " " <= character <= "~" and character not in '"\\':
        return character
    short = _SHORT_ESCAPES.get(character)
    if short is not None:
        return short
    code = ord(character)
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _scalar(name: str) -> str:
    """The name as a YAML scalar: plain when YAML reads it back as this text, else double-quoted with everything
    but printable ASCII escaped (as json.dumps writes it, but for characters beyond the BMP), so no line break,
    control or bidi character is written as it is."""
    if _PLAIN.fullmatch(name) and _RESOLVER.resolve(yaml.ScalarNode, name, (True, False)) == "tag:yaml.org,2002:str":
        return name
    return '"' + "".join(map(_escaped, name)) + '"'


def _line(left: str, right: str) -> str:
    """`left: right`; a left side longer than YAML lets a key be written plainly (1024 characters up to the `:`)
    as an explicit key, `? left` then `: right` on the next line."""
    key = _scalar(left)
    return f"{key}: {_scalar(right)}" if len(key) < _SIMPLE_KEY_LIMIT else f"? {key}\n: {_scalar(right)}"


_SIMPLE_KEY_LIMIT = 1000  # under PyYAML's and libyaml's 1024


def _concrete(keys: Sequence[str], dump: Dump) -> list[str]:
    """The dump keys an entry's rollout keys name (`forward.*`: every call), in order, each once."""
    return list(dict.fromkeys(k for key in keys for k in dump.calls_of(key)))


def _names_by_key(dump: Dump, keys: Iterable[str]) -> dict[str, dict[str, str]]:
    """Key -> {target: msprobe tensor name below it}, read from the file that holds each key (a rank's file)."""
    by_file: dict[str, dict[str, str]] = {}
    for key in keys:
        file, original = dump.file_key(key)
        by_file.setdefault(file, {})[original] = key
    found: dict[str, dict[str, str]] = {}
    for file, originals in by_file.items():
        for original, (entry, slots) in entries_with_slots(file, originals).items():
            found[originals[original]] = tensor_names(entry, slots, dump.task == "tensor")
    return found


def _many(keys: Sequence[str]) -> str:
    return ", ".join(keys[:4]) + (f" and {len(keys) - 4} more" if len(keys) > 4 else "")


def export_data(entries: Sequence[MappingEntry], train: Dump, rollout: Dump) -> Exported:
    """Each 1:1 module pair as its compared tensors (primary input, first output, keyword arguments and parameters
    both sides have), under their msprobe names."""
    exported = Exported(DATA)
    concrete = {e.train_key: _concrete(e.rollout_keys, rollout) for e in entries}
    claimed: dict[str, list[str]] = {}
    for entry in entries:
        for key in concrete[entry.train_key]:
            claimed.setdefault(key, []).append(entry.train_key)
    pairs = []
    for entry in entries:
        train_key, targets = entry.train_key, concrete[entry.train_key]
        reason = _left_out(entry, train, targets, claimed)
        if reason:
            exported.comments.append(f"{reason}: {train_key} -> {_many(list(entry.rollout_keys))}")
        else:
            pairs.append((train_key, targets[0]))
    train_names = _names_by_key(train, [t for t, _ in pairs])
    rollout_names = _names_by_key(rollout, [r for _, r in pairs])
    written: dict[str, Sequence[str]] = {}
    for train_key, rollout_key in pairs:
        left, right = train_names.get(train_key, {}), rollout_names.get(rollout_key, {})
        common = [target for target in left if target in right]
        if not common:
            exported.comments.append(f"no tensor both sides have: {train_key} -> {rollout_key}")
            continue
        exported.lines += [_line(f"{train_key}.{left[t]}", f"{rollout_key}.{right[t]}") for t in common]
        exported.pairs += 1
        written[train_key] = (rollout_key,)
    exported.local_names = _renamed(train, written) or _renamed(rollout, [r for (r,) in written.values()])
    exported.read_back = _read_back(exported, train, rollout, written)
    return exported


def _left_out(entry: MappingEntry, train: Dump, targets: list[str], claimed: dict[str, list[str]]) -> str | None:
    if entry.train_key not in train.entries:
        return "not in the train dump"
    if not targets:
        return "not in the rollout dump"
    if len(targets) > 1:
        return f"1:{len(targets)} (one train module against several rollout modules or calls)"
    if len(claimed[targets[0]]) > 1:
        return f"N:1 ({len(claimed[targets[0]])} train modules or calls against one rollout module)"
    return None


def export_cells(entries: Sequence[MappingEntry], train: Dump, rollout: Dump) -> Exported:
    """Each module pair as `<path>.<Class>: <path>.<Class>` (whole names: msprobe renames them exactly)."""
    exported = Exported(CELL)
    cells: dict[str, set[str]] = {}  # train cell -> rollout cells its entries name
    by_cell: dict[str, list[MappingEntry]] = {}
    for entry in entries:
        left = cell_name(entry.train_key)
        named = [cell_name(k.replace(".forward.*", ".forward.0")) for k in entry.rollout_keys]
        rights = {name for name in named if name is not None}
        reason = (
            "not in the train dump"
            if left is None or entry.train_key not in train.entries
            else "not in the rollout dump"
            if len(rights) < len(set(named)) or not _concrete(entry.rollout_keys, rollout)
            else None
        )
        if left is None or reason:
            exported.comments.append(f"{reason}: {entry.train_key} -> {_many(list(entry.rollout_keys))}")
            continue
        cells.setdefault(left, set()).update(rights)
        by_cell.setdefault(left, []).append(entry)
    claimed: dict[str, list[str]] = {}
    for left, rights in cells.items():
        for right in rights:
            claimed.setdefault(right, []).append(left)
    intended: dict[str, Sequence[str]] = {}
    for left, rights in cells.items():
        right = next(iter(rights))
        if len(rights) > 1:
            reason = f"1:{len(rights)} (one train module against several rollout modules)"
        elif len(claimed[right]) > 1:
            reason = f"N:1 ({len(claimed[right])} train modules against one rollout module)"
        else:
            exported.lines.append(_line(left, right))
            exported.pairs += 1
            intended.update({e.train_key: e.rollout_keys for e in by_cell[left]})
            continue
        keys = [e.train_key for e in by_cell[left]]
        exported.comments.append(f"{reason}: {_many(keys)} -> {_many(sorted(rights))}")
    rollout_keys = [k for keys in intended.values() for k in _concrete(keys, rollout)]
    exported.local_names = _renamed(train, intended) or _renamed(rollout, rollout_keys)
    exported.read_back = _read_back(exported, train, rollout, intended)
    return exported


def _renamed(dump: Dump, keys: Iterable[str]) -> bool:
    return any(dump.file_key(key)[1] != key for key in keys)


def _read_back(exported: Exported, train: Dump, rollout: Dump, intended: dict[str, Sequence[str]]) -> list[str]:
    """Train keys the written lines pair otherwise than intended (or pair though the mapping does not), as
    msprobe_mapping reads the file against the same dumps."""
    read = parse_msprobe_mapping(f"export.{exported.kind}.yaml", "\n".join(exported.lines) + "\n")
    found = {e.train_key: _concrete(e.rollout_keys, rollout) for e in read.for_dumps(train, rollout).entries}
    wanted = {key: _concrete(keys, rollout) for key, keys in intended.items()}
    return [key for key in dict.fromkeys([*wanted, *found]) if found.get(key) != wanted.get(key)]


def export_mapping(kind: str, entries: Sequence[MappingEntry], train: Dump, rollout: Dump) -> Exported:
    """`entries`: the mapping's effective entries (one per train key), resolved against these dumps."""
    return export_data(entries, train, rollout) if kind == DATA else export_cells(entries, train, rollout)
