"""Pipeline stages joined into one model: each stage names its layers by local index; they are renamed to global
indices, and the modules on every stage (model, block, rotary) take their input from the first stage and their
output from the last."""

from __future__ import annotations

import re
from typing import Iterable

import msgspec

from rca_lsp.dumps.dump import ModuleEntry
from rca_lsp.dumps.ranks.slots import rename_entry, renamed_key

_LAYER_RE = re.compile(r"(?<![^.])layers\.(\d+)(?=\.|$)")


def _layer_indices(keys: Iterable[str]) -> list[int]:
    return sorted({int(m.group(1)) for k in keys if (m := _LAYER_RE.search(k))})


def join_stages(
    stages: list[tuple[list[str], dict[str, ModuleEntry]]],
    first_ranks: list[int],
    merges: list[tuple[dict[str, str], set[str]]],
) -> tuple[list[str], dict[str, ModuleEntry], dict[str, tuple[int, str]], dict[str, str], set[str]]:
    """Stages in order, layers renamed to global indices (in the keys and in each stage's `merges`: how its keys'
    slots were merged, and its varied keys, see ParallelInfo.varied); a module on several stages (model, block)
    completes on the last: its input comes from the first stage that saw one, its output from the last."""
    if len(stages) == 1:
        keys, entries = stages[0]
        return list(keys), dict(entries), {}, *merges[0]
    renamed: list[list[tuple[str, ModuleEntry]]] = []
    origins: dict[str, tuple[int, str]] = {}
    merged_how: dict[str, str] = {}
    varied: set[str] = set()
    offset = 0
    for (keys, entries), rank, (how, stage_varied) in zip(stages, first_ranks, merges):
        stage = []
        for key in keys:
            entry = entries[key]
            match = _LAYER_RE.search(entry.path) if offset else None
            if match is not None:
                path = entry.path[: match.start(1)] + str(offset + int(match.group(1))) + entry.path[match.end(1) :]
                new_key = renamed_key(key, entry.path, path)
                entry = rename_entry(entry, new_key, path)
            else:
                new_key = key
            stage.append((new_key, entry))
            if key in how:
                merged_how[new_key] = how[key]  # a module on several stages: as its last stage merged it
            if key in stage_varied:
                varied.add(new_key)
            if rank != 0 or new_key != key:
                origins.setdefault(new_key, (rank, key))
        renamed.append(stage)
        offset += len(_layer_indices(keys))
    last_stage_of: dict[str, int] = {}
    for index, stage in enumerate(renamed):
        for key, _ in stage:
            last_stage_of[key] = index
    keys_out: list[str] = []
    entries_out: dict[str, ModuleEntry] = {}
    seen: dict[str, ModuleEntry] = {}
    for index, stage in enumerate(renamed):
        for key, entry in stage:
            earlier = seen.get(key)
            if earlier is not None:
                entry = msgspec.structs.replace(
                    entry,
                    input=earlier.input or entry.input,
                    kwargs=earlier.kwargs or entry.kwargs,
                    output=entry.output or earlier.output,
                )
            if last_stage_of[key] != index:
                seen[key] = entry
                continue
            keys_out.append(key)
            entries_out[key] = entry
    return keys_out, entries_out, {k: v for k, v in origins.items() if k in entries_out}, merged_how, varied


def renumber(keys: list[str], entries: dict[str, ModuleEntry]) -> None:
    """Positions in the logical dump's order (keys were dropped, experts and stages joined)."""
    for position, key in enumerate(keys):
        if entries[key].position != position:
            entries[key] = msgspec.structs.replace(entries[key], position=position)
