"""Several steps of one dump directory joined into one logical dump whose module calls follow each other.

msprobe's vLLM integration dumps every engine step (`execute_model`) as its own `step<N>/` folder, each with its
own `forward.0` keys: a decoding rollout is then prefill in one step and one decode call per later step. Joined,
a module's calls are numbered across the steps in order (`forward.0` of step N is the module's N-th call when it
runs once per step), so `....forward.*` names all of them, as for a rollout dumped in one step.

A tensor-parallel rollout dumps one `rank<R>/` per worker in every step: each step's ranks are merged first (as
one step's are, see dumps/ranks), then the merged steps are joined; the joined dump's ParallelInfo spans every
step's rank files, so a joined key leads to its own step's rank files.
"""

from __future__ import annotations

from typing import Sequence

import msgspec

from rca_lsp.dumps.dump import Dump, JoinedSteps, ModuleEntry, ParallelInfo, combined_dump
from rca_lsp.dumps.sources import DumpSource


def join_steps(dumps: Sequence[Dump], source: DumpSource) -> Dump:
    """The steps' dumps (in step order, one per step of `source`, each loaded from or merged of its rank files) as
    one dump of successive calls."""
    calls: dict[str, int] = {}  # `....forward.` stem -> calls so far
    keys: list[str] = []
    entries: dict[str, ModuleEntry] = {}
    origins: dict[str, tuple[int, str]] = {}
    null_keys: set[str] = set()
    renamed_by_step: list[dict[str, str]] = []
    for index, dump in enumerate(dumps):
        renamed: dict[str, str] = {}
        # a module's calls in this step, in call order, follow its calls of the earlier steps
        for key in sorted((*dump.keys, *dump.null_keys), key=_call_number):
            stem = key[: key.rindex(".") + 1]
            calls[stem] = calls.get(stem, 0) + 1
            renamed[key] = new_key = f"{stem}{calls[stem] - 1}"
            if (index, key) != (0, new_key):
                origins[new_key] = (index, key)
        for key in dump.keys:
            new_key = renamed[key]
            entries[new_key] = msgspec.structs.replace(
                dump.entries[key], key=new_key, position=len(keys), call_index=_call_number(new_key)
            )
            keys.append(new_key)
        null_keys.update(renamed[k] for k in dump.null_keys)
        renamed_by_step.append(renamed)
    parallel = _joined_ranks(dumps, source, renamed_by_step)
    step_files = tuple(
        str(step.files[0] if len(step.files) == 1 else step.files[0].parent.parent) for step in source.step_sources()
    )
    return combined_dump(
        source.label,
        dumps,
        keys,
        entries,
        parallel,
        frozenset(null_keys),
        JoinedSteps(source.joined_steps, step_files, origins),
    )


def _joined_ranks(dumps: Sequence[Dump], source: DumpSource, renamed: list[dict[str, str]]) -> ParallelInfo | None:
    """How the steps' ranks were merged, under the joined keys and indexing every step's rank files (step by step);
    None when each step is one file. What was decided is said once, and per step only where a step differs."""
    infos = [dump.parallel for dump in dumps]
    if infos[0] is None:
        return None
    per = len(infos[0].files)
    merges: dict[str, str] = {}
    origins: dict[str, tuple[int, str]] = {}
    dropped: dict[str, str] = {}
    peers: dict[int, tuple[int, ...]] = {}
    varied: set[str] = set()
    notes = list(infos[0].notes)
    for index, (info, names) in enumerate(zip(infos, renamed)):
        assert info is not None and len(info.files) == per  # each step holds the first step's ranks (dumps/sources)
        offset = index * per
        for key, new_key in names.items():
            file_index, original = info.origins.get(key, (0, key))
            if (offset + file_index, original) != (0, new_key):
                origins[new_key] = (offset + file_index, original)
            if key in info.merges:
                merges[new_key] = info.merges[key]
            if key in info.varied:
                varied.add(new_key)
        for key, why in info.dropped.items():
            dropped.setdefault(f"{key[: key.rindex('.') + 1]}*", f"step{source.joined_steps[index]}: {why}")
        for local in range(per):
            peers[offset + local] = tuple(offset + p for p in info.peers.get(local, range(per)))
        step = f"step{source.joined_steps[index]}"
        if info.layout != infos[0].layout:
            notes.append(f"{step}: ranks laid out as {info.layout}")
        notes.extend(f"{step}: {note}" for note in info.notes if note not in infos[0].notes)
    return ParallelInfo(
        tuple(str(p) for p in source.files),
        source.ranks,
        infos[0].layout,
        any(info.sequence_parallel for info in infos if info is not None),
        notes,
        merges,
        origins,
        dropped,
        peers,
        frozenset(varied),
    )


def _call_number(key: str) -> int:
    """The call number ending a `....forward.<n>` key."""
    return int(key[key.rindex(".") + 1 :])


def steps_joined(steps: Sequence[int]) -> str:
    """What the reports say of a joined dump, e.g. "5 steps (step0-step4) joined, their calls in succession"."""
    return f"{len(steps)} steps (step{steps[0]}-step{steps[-1]}) joined, their calls in succession"
