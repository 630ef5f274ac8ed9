"""Per-dump lookup tables for matching: canonical names, keys by canonical path, split parts, layer scopes."""

from __future__ import annotations

from rca_lsp.dumps.dump import Dump, ModuleEntry
from rca_lsp.suggest.canonical import Canonicalizer, CanonicalName

Scope = tuple[int | None, int]  # (layer index or None for modules outside the layers, call index)
PathKey = tuple[str, int]  # (canonical path, call index)


class SideIndex:
    """One dump's forward modules, indexed by what matching looks them up by. Built once per dump."""

    def __init__(self, dump: Dump, canonicalizer: Canonicalizer) -> None:
        self.dump = dump
        self.entries: dict[str, ModuleEntry] = dump.entries
        self._canonicalizer = canonicalizer
        self.names: dict[str, CanonicalName] = {}
        self.by_path: dict[PathKey, list[str]] = {}
        self.parts: dict[PathKey, dict[int, str]] = {}  # fused module's canonical path -> part position -> key
        self.scopes: dict[Scope, list[str]] = {}  # keys in dump order
        self.children: dict[PathKey, list[str]] = {}  # (canonical parent path, call) -> keys in dump order
        self._returned: dict[str, str | None] = {}
        for key in dump.keys:
            entry = dump.entries[key]
            name = canonicalizer.canonical(entry.path)
            self.names[key] = name
            call = entry.call_index
            self.by_path.setdefault((name.path, call), []).append(key)
            if name.group is not None and name.part is not None:
                self.parts.setdefault((name.group, call), {}).setdefault(name.part, key)
            self.scopes.setdefault((name.layer, call), []).append(key)
            self.children.setdefault((name.path.rpartition(".")[0], call), []).append(key)

    def returned_from(self, key: str) -> str | None:
        """The latest descendant (same call) whose output is this module's output unchanged, every statistic and
        the element count equal (a model returning its final norm's or its output layer's output); None if none.
        A scan of the dump: asked for whole-model modules only."""
        if key not in self._returned:
            self._returned[key] = _returned_from(self.dump, self.entries[key])
        return self._returned[key]

    def canonical(self, module_path: str) -> CanonicalName:
        """The canonical name of any module path (also one not in this dump, e.g. a misspelt key's)."""
        return self._canonicalizer.canonical(module_path)

    def siblings(self, name: CanonicalName, call: int) -> list[str]:
        """This dump's modules under the same canonical parent as `name` (which may come from the other dump)."""
        return self.children.get((name.path.rpartition(".")[0], call), [])

    def scope_of(self, key: str) -> Scope:
        return self.names[key].layer, self.entries[key].call_index

    def group_parts(self, path: str, call: int) -> tuple[str, ...]:
        """The split parts of a fused module at (path, call), in part order, if they start at part 0 and have no gap."""
        found = self.parts.get((path, call))
        if not found or len(found) < 2 or sorted(found) != list(range(len(found))):
            return ()
        return tuple(found[position] for position in range(len(found)))


def _returned_from(dump: Dump, entry: ModuleEntry) -> str | None:
    output = entry.output
    if output is None or output.numel is None or None in (output.max, output.min, output.mean, output.norm):
        return None
    inside = entry.path + "."
    same = (output.max, output.min, output.mean, output.norm, output.numel)
    for key in reversed(dump.keys[: entry.position]):
        other = dump.entries[key]
        found = other.output
        if other.call_index != entry.call_index or not other.path.startswith(inside) or found is None:
            continue
        if (found.max, found.min, found.mean, found.norm, found.numel) == same:
            return key
    return None
