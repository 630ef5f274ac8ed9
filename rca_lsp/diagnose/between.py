"""What lies between a suspect and its last aligned boundary: the unmapped modules completed in that window (on each
side, and inside the suspect), the one-sided activations among them, and the modules that are mere placeholders."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from rca_lsp.compare.records import ModuleRecord
from rca_lsp.dumps.dump import Dump
from rca_lsp.model.keys import is_activation_like, is_descendant_path, parse_module_key


@dataclass
class Between:
    train: list[str] = field(default_factory=list)
    rollout: list[str] = field(default_factory=list)
    inside_train: list[str] = field(default_factory=list)
    inside_rollout: list[str] = field(default_factory=list)


class UnmatchedPositions:
    """The dump positions of the keys no record matched, ascending, as the "between" lists read them: listed on first
    use (a pass over the dump), or derived from an earlier analysis's list by toggling the positions of the keys whose
    matched state an edit flipped."""

    def __init__(
        self,
        dump: Dump,
        matched: set[str],
        earlier: UnmatchedPositions | None = None,
        flipped: Iterable[int] = (),
    ) -> None:
        self._dump = dump
        self._matched = matched
        self._positions: list[int] | None = None
        if earlier is not None and earlier._positions is not None:
            positions = list(earlier._positions)
            for position in sorted(set(flipped)):
                at = bisect.bisect_left(positions, position)
                if at < len(positions) and positions[at] == position:
                    del positions[at]
                else:
                    positions.insert(at, position)
            self._positions = positions

    @property
    def positions(self) -> list[int]:
        if self._positions is None:
            matched = map(self._matched.__contains__, self._dump.keys)  # looked up in C
            self._positions = [p for p, found in enumerate(matched) if not found]
        return self._positions


def one_sided_activations(between: Between) -> tuple[str, list[str]]:
    """The side whose unmatched activation-like modules lie between (the rollout's first) and those modules."""
    rollout = [k for k in between.rollout if is_activation_like(k)]
    if rollout:
        return "rollout", rollout
    return "train", [k for k in between.train if is_activation_like(k)]


def _is_inside(path: str, paths: Sequence[str]) -> bool:
    return any(is_descendant_path(path, p) for p in paths)


def _encloses(path: str, paths: Sequence[str]) -> bool:
    return any(is_descendant_path(p, path) or p == path for p in paths)


def collect_between(
    dump: Dump,
    unmatched: list[int],
    start: int,
    end: int,
    boundary_paths: Sequence[str],
    suspect_paths: Sequence[str],
    placed: dict[str, int] | None = None,
) -> tuple[list[str], list[str]]:
    """Unmatched keys completed after `start` and before `end`: (between, inside the suspect). `unmatched`: the
    dump positions of its unmatched keys, ascending (a window over hundreds of decode calls visits only those).
    `placed` remembers where each module path went, across the windows of one suspect."""
    between: list[str] = []
    inside: list[str] = []
    keys, entries = dump.keys, dump.entries
    placed = {} if placed is None else placed  # path -> 1 inside the suspect, 2 between, 0 neither
    for position in unmatched[bisect.bisect_right(unmatched, start) : bisect.bisect_left(unmatched, end)]:
        key = keys[position]
        path = entries[key].path
        where = placed.get(path)
        if where is None:
            # a container of the boundary completes later; it is not "between"
            where = placed[path] = (
                1 if _is_inside(path, suspect_paths) else (0 if _encloses(path, boundary_paths) else 2)
            )
        if where == 1:
            inside.append(key)
        elif where == 2:
            between.append(key)
    return between, inside


_PLACEHOLDER_CLASSES = ("Identity", "IdentityOp", "IdentityFuncOp", "Dropout")


def is_placeholder(key: str) -> bool:
    """Modules that pass data through unchanged at inference (identity ops, dropout): weak evidence."""
    parsed = parse_module_key(key)
    return parsed is not None and parsed.class_name in _PLACEHOLDER_CLASSES


def reads_model_input(record: ModuleRecord, train: Dump, rollout: Dump) -> bool:
    """The record pairs the first module of both dumps (the one reading the model's input) and its positional
    input differs (not a keyword argument only)."""
    if record.comparison.input_args_consistency != "mismatch" or not train.keys or not rollout.keys:
        return False
    first_train = train.entries[train.keys[0]].path
    first_rollout = rollout.entries[rollout.keys[0]].path
    return record.train_paths[0] == first_train and record.rollout_paths[0] == first_rollout
