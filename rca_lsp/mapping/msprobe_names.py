"""msprobe's names below a module key, as `msprobe compare` builds and matches them.

- Tensor names (`-dm data_mapping.yaml`): the module key, then `.input` (positional and keyword arguments alike),
  `.output` or `.parameters`, then `.<index>` into a list or `.<name>` into a dict, down to the tensor
  (msprobe/core/compare/utils.py, read_op / op_item_parse; IO_NAME_MAPPING in core/common/const.py).
- Cell names (`-cm cell_mapping.yaml`): `<module path>.<Class>`, the key without its `Module.`/`Cell.` prefix and
  its `.forward.<n>` (acc_compare.py, process_cell_mapping). A rule whose left side is a whole cell name renames
  that cell; otherwise every rule whose left side occurs in the name replaces its first occurrence, rule after
  rule in file order.
"""

from __future__ import annotations

import re
from typing import Any, Iterator, Mapping, NamedTuple

from rca_lsp.base.cached import cached_property
from rca_lsp.dumps.dump import ModuleEntry
from rca_lsp.model.keys import parse_module_key
from rca_lsp.model.stats import TensorStats

# a module's tensor: <Module|Cell>.<path>.<Class>.<forward|backward>.<n>.<input|output|parameters|kwargs>[.<rest>]
_MODULE_TENSOR_RE = re.compile(
    r"^(?P<module>(?:Module|Cell)\..+?\.(?P<direction>forward|backward)\.\d+)\.(?:input|output|parameters|kwargs)(?:\.|$)"
)
# any msprobe tensor name, module or API (`Functional.conv2d.0.forward.input.0`), or a parameter gradient
_ANY_TENSOR_RE = re.compile(r"\.(?:forward|backward)(?:\.\d+)?\.(?:input|output|parameters|kwargs)(?:\.|$)")
_GRADIENT = ".parameters_grad"
_SLOT_STATES = {"input_args": "input", "input_kwargs": "input", "output": "output", "parameters": "parameters"}


class TensorName(NamedTuple):
    module_key: str  # `Module.<path>.<Class>.forward.<n>`
    direction: str  # forward | backward


def parse_tensor_name(name: str) -> TensorName | None:
    """The module a module tensor's name is below (the part below it: `input.0`, `parameters.weight`, ...);
    None for other names."""
    found = _MODULE_TENSOR_RE.match(name)
    return None if found is None else TensorName(found["module"], found["direction"])


def is_tensor_name(name: str) -> bool:
    """Whether a name is one of msprobe's tensor names (of a module or of an API, a gradient included)."""
    return _ANY_TENSOR_RE.search(name) is not None or _GRADIENT in name


def cell_name(key: str) -> str | None:
    """`Module.<path>.<Class>.forward.<n>` -> `<path>.<Class>`."""
    parsed = parse_module_key(key)
    return None if parsed is None else f"{parsed.path}.{parsed.class_name}"


class CellRename(NamedTuple):
    name: str  # the cell name after the rules
    rules: tuple[str, ...]  # the left sides of the rules that applied, in order


class CellRules:
    """msprobe's cell-mapping rules (a dict in file order, as yaml.safe_load gives it), indexed: a rule is tried on
    a name only when the name holds its target's rarest piece (its `_GRAM` characters, or all of a shorter target),
    so renaming costs about the name's length, not the number of rules (23k substring rules against 23k modules:
    minutes, tried one by one)."""

    def __init__(self, rules: Mapping[str, str]) -> None:
        self._rules = rules
        self._targets = [target for target in rules if target]  # an empty left side renames nothing

    @cached_property
    def _by_piece(self) -> dict[str, list[int]]:
        """Piece -> the rules indexed by it (built on the first name no whole-name rule renames)."""
        pieces = [self._pieces(target) for target in self._targets]
        seen: dict[str, int] = {}
        for found in pieces:
            for piece in set(found):
                seen[piece] = seen.get(piece, 0) + 1
        by_piece: dict[str, list[int]] = {}
        for index, found in enumerate(pieces):
            by_piece.setdefault(min(found, key=seen.__getitem__), []).append(index)
        return by_piece

    @cached_property
    def _lengths(self) -> list[int]:
        return sorted({len(piece) for piece in self._by_piece})

    @staticmethod
    def _pieces(target: str) -> list[str]:
        size = min(len(target), _GRAM)
        return [target[start : start + size] for start in range(len(target) - size + 1)]

    def _candidates(self, name: str, after: int) -> list[int]:
        """The rules after index `after` whose target `name` may hold, in file order."""
        found = {
            index
            for size in self._lengths
            for start in range(len(name) - size + 1)
            for index in self._by_piece.get(name[start : start + size], ())
            if index > after
        }
        return sorted(found)

    def rename(self, cell: str) -> CellRename:
        """The cell's name after the rules: a whole-name rule alone; else each rule whose target the name holds
        (at that point) replaces the target's first occurrence, rule after rule (msprobe's process_cell_mapping)."""
        exact = self._rules.get(cell)
        if exact is not None:
            return CellRename(exact, (cell,))
        name, applied, last = cell, list[str](), -1
        while True:
            index = next((i for i in self._candidates(name, last) if self._targets[i] in name), None)
            if index is None:
                return CellRename(name, tuple(applied))
            target = self._targets[index]
            name, last = name.replace(target, self._rules[target], 1), index
            applied.append(target)


_GRAM = 8  # characters of the pieces rules are indexed by


def _walk(node: Any, name: str) -> Iterator[tuple[str, Any]]:
    """Every leaf below a slot with its msprobe name: lists by index, dicts by key, down to a tensor node."""
    if type(node) is list:
        for index, item in enumerate(node):
            yield from _walk(item, f"{name}.{index}")
    elif type(node) is dict and not isinstance(node.get("type"), str):
        for key, item in node.items():
            yield from _walk(item, f"{name}.{key}")
    elif node is not None:
        yield name, node


def _same(leaf: Any, stats: TensorStats) -> bool:
    """The leaf the entry's statistics were taken from: the very node, or (nested nodes the reader converted) an
    equal one."""
    return leaf is stats or (type(leaf) is TensorStats and leaf == stats)


def tensor_names(entry: ModuleEntry, slots: Mapping[str, Any], tensor_mode: bool = False) -> dict[str, str]:
    """The msprobe name (below the module key) of each tensor the analysis compares for one entry, by its target
    (`input_args.0`, `output.0`, `input_kwargs.<name>`, `parameters.<name>`): `slots` are the entry's decoded
    `input_args`, `input_kwargs`, `output` and `parameters`, in which the entry's statistics are. Keyword arguments
    are `input.<name>` as msprobe compare names them in statistics mode, `kwargs.<name>` in tensor mode (its
    tensor files' names, what its compare then matches)."""
    states = {**_SLOT_STATES, "input_kwargs": "kwargs"} if tensor_mode else _SLOT_STATES
    leaves = {slot: list(_walk(slots.get(slot), states[slot])) for slot in states}

    def find(slot: str, stats: TensorStats | None, under: str = "") -> str | None:
        if stats is None:
            return None
        prefix = f"{states[slot]}.{under}"
        below = [(n, leaf) for n, leaf in leaves[slot] if not under or n == prefix or n.startswith(prefix + ".")]
        return next((n for n, leaf in below if _same(leaf, stats)), None)

    found: dict[str, str] = {}
    source_slot, _, source_name = entry.input_source.partition(".")
    primary = find(source_slot, entry.input, source_name if source_slot == "input_kwargs" else "")
    if primary is not None:
        found["input_args.0"] = primary
    output = find("output", entry.output)
    if output is not None:
        found["output.0"] = output
    for slot, tensors in (("input_kwargs", entry.kwargs), ("parameters", entry.parameters)):
        for name, stats in tensors.items():
            named = find(slot, stats, name)
            if named is not None:
                found[f"{slot}.{name}"] = named
    return found
