"""Several steps of one dump directory joined into one logical dump whose module calls follow each other.

msprobe's vLLM integration dumps every engine step (`execute_model`) as its own `step<N>/` folder, each with its
own `forward.0` keys: a decoding rollout is then prefill in one step and one decode call per later step. Joined,
a module's calls are numbered across the steps in order (`forward.0` of step N is the module's N-th call when it
runs once per step), so `....forward.*` names all of them, as for a rollout dumped in one step.
"""

from __future__ import annotations

from typing import Sequence

import msgspec

from rca_lsp.core.dump import Dump, JoinedSteps, ModuleEntry
from rca_lsp.core.dumpsource import DumpSource


def join_steps(dumps: Sequence[Dump], source: DumpSource) -> Dump:
    """The steps' dumps (in step order, one per file of `source`) as one dump of successive calls."""
    calls: dict[str, int] = {}  # `....forward.` stem -> calls so far
    keys: list[str] = []
    entries: dict[str, ModuleEntry] = {}
    origins: dict[str, tuple[int, str]] = {}
    null_keys: set[str] = set()
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
    first = dumps[0]
    return Dump(
        source.label,
        first.task,
        first.level,
        first.framework,
        keys,
        entries,
        sum(d.skipped_keys for d in dumps),
        None,
        frozenset(null_keys),
        JoinedSteps(source.joined_steps, tuple(str(p) for p in source.files), origins),
    )


def _call_number(key: str) -> int:
    """The call number ending a `....forward.<n>` key."""
    return int(key[key.rindex(".") + 1 :])


def steps_joined(steps: Sequence[int]) -> str:
    """What the reports say of a joined dump, e.g. "5 steps (step0-step4) joined, their calls in succession"."""
    return f"{len(steps)} steps (step{steps[0]}-step{steps[-1]}) joined, their calls in succession"
