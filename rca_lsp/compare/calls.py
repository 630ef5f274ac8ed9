"""A module's calls read as one tensor along the sequence: a rollout that decodes (one prefill call, then one call
per generated token, msprobe's `forward.0..N` of the same key) against a trainer that recomputes prompt + response
in one forward, or several micro-batches against one or several calls.

Which statistics of which slot are comparable after joining calls (the README states the same rules):
- token-wise tensors (hidden states, norm and linear inputs/outputs, logits): all four statistics, exactly;
- attention probabilities (outputs of a softmax module, the attention dropout): Max, Min and Norm, not the Mean
  (decode rows never hold the masked upper triangle the one-forward side has as zeros);
- attention masks and caches (kwargs named like them): not comparable (a float mask at prefill, zeros at decode);
- integer tensors (ids, positions): Max and Min (msprobe gives them no Mean or Norm);
- parameters: the same tensor in every call, compared once; calls that disagree on one mean the weights changed
  mid-generation, which is a finding of its own.
"""

from __future__ import annotations

from operator import attrgetter
from typing import NamedTuple, Sequence

import msgspec

from rca_lsp.dumps.dump import Disagreement, Dump, ModuleEntry
from rca_lsp.model.keys import ALL_CALLS
from rca_lsp.model.stats import TensorStats, aggregate, copy_difference, extremes_differ, leading_size
from rca_lsp.model.tolerance import Tolerances

_MODULE = attrgetter("path", "class_name")  # what tells a module's calls from another module's
_CALL_INDEX = attrgetter("call_index")
_NOT_COMPARABLE_KWARGS = ("mask", "cache", "past_key_value", "layer_past", "kv_cache")
_PROBABILITY_DROPOUTS = ("attention_dropout", "attn_dropout")


class CallSummary(NamedTuple):
    """How many calls one side's module joined, and their tokens (from the output shapes)."""

    calls: tuple[int, ...]
    tokens: tuple[int | None, ...]
    # the parameters' differences across the calls that are within the tolerance: a tighter one (calibration's)
    # could make them a disagreement
    differences_within: tuple[float, ...] = ()

    def describe(self) -> str:
        counts = self.tokens
        if len(counts) > 1 and counts[0] is not None and all(t == 1 for t in counts[1:]):
            return f"{len(counts)} calls: prefill of {counts[0]} tokens + {len(counts) - 1} decode steps"
        shown = "+".join("?" if t is None else str(t) for t in counts[:8]) + ("+..." if len(counts) > 8 else "")
        return f"{len(counts)} calls ({shown} tokens)"


def all_calls_key(key: str) -> str:
    """`....forward.3` -> `....forward.*`."""
    head, _, _ = key.rpartition(".")
    return f"{head}.{ALL_CALLS}"


def is_all_calls_key(key: str) -> bool:
    return key.endswith(".forward." + ALL_CALLS)


def _joined_shape(shapes: list[tuple[int, ...] | None]) -> tuple[int, ...] | None:
    """The concatenation's shape, when the calls' shapes differ in one dim only (the sequence); None (flat) when a
    shape is unknown, 0-d (a scalar per call: no dim to join along) or not sizes (a malformed dump's)."""
    try:
        distinct = set(shapes)  # every call the same shape, mostly (one token per decode step): looked at once
    except TypeError:  # a malformed dump's shape holding lists
        return None
    known = {s for s in distinct if s}
    if len(known) != len(distinct) or len({len(s) for s in known}) != 1:
        return None
    if not all(type(size) is int and size >= 0 for shape in known for size in shape):  # the few distinct ones
        return None
    first = next(iter(known))
    differing = [d for d in range(len(first)) if len({s[d] for s in known}) > 1]
    if len(differing) > 1:
        return None
    dim = differing[0] if differing else next((d for d, size in enumerate(first) if size != 1), 0)
    return first[:dim] + (sum(s[dim] for s in shapes if s),) + first[dim + 1 :]


def _joined(parts: list[TensorStats | None], with_mean: bool = True) -> TensorStats | None:
    if None in parts:
        return None
    stats: list[TensorStats] = parts  # type: ignore[assignment]
    return aggregate(stats, _joined_shape([s.shape for s in stats]), with_mean)


def _is_probability(entry: ModuleEntry) -> bool:
    return "softmax" in entry.class_name.lower() or entry.path.rpartition(".")[2] in _PROBABILITY_DROPOUTS


def _comparable_kwarg(name: str) -> bool:
    lowered = name.lower()
    return not any(token in lowered for token in _NOT_COMPARABLE_KWARGS)


def _parameters(calls: Sequence[ModuleEntry], tolerances: Tolerances) -> tuple[list[Disagreement], list[float]]:
    """The parameters whose copies in later calls differ from the first call's beyond the tolerance; and the
    differences within it."""
    first = calls[0]
    found, within = [], []
    for name, stats in first.parameters.items():
        differing, worst = [], 0.0
        for call in calls[1:]:
            other = call.parameters.get(name)
            if other is None or other == stats:  # the same weights in every call: the common case
                continue
            error = copy_difference(stats, other)  # None: a call without statistics, which is no difference
            if error is None:
                continue
            if error > tolerances.for_dtypes(stats.dtype) or extremes_differ(stats, other):  # the same weights
                differing.append(call.call_index)
                worst = max(worst, error)
            else:
                within.append(error)
        if differing:
            found.append(Disagreement(f"parameters.{name}", "calls", first.call_index, tuple(differing), worst))
    return found, within


def join_calls(calls: Sequence[ModuleEntry], tolerances: Tolerances) -> ModuleEntry:
    """Several calls of one module as one entry (the first call's, with every slot joined along the sequence)."""
    return _joined_calls(calls, tolerances)[0]


def _joined_calls(calls: Sequence[ModuleEntry], tolerances: Tolerances) -> tuple[ModuleEntry, list[float]]:
    """join_calls, and the parameters' differences across the calls within the tolerance (see CallSummary)."""
    first = calls[0]
    with_mean = not _is_probability(first)
    kwargs = {
        name: joined
        for name in first.kwargs
        if _comparable_kwarg(name) and (joined := _joined([c.kwargs.get(name) for c in calls])) is not None
    }
    differing, within = _parameters(calls, tolerances)
    disagreements = tuple(d for c in calls for d in c.disagreements) + tuple(differing)
    entry = msgspec.structs.replace(
        first,
        key=all_calls_key(first.key),
        position=calls[-1].position,
        input=_joined([c.input for c in calls], with_mean),
        output=_joined([c.output for c in calls], with_mean),
        kwargs=kwargs,
        stream_input=_joined([c.stream_input for c in calls]),
        stream_output=_joined([c.stream_output for c in calls]),
        disagreements=disagreements,
    )
    return entry, within


def fold_calls(entries: Sequence[ModuleEntry], tolerances: Tolerances) -> tuple[list[ModuleEntry], list[CallSummary]]:
    """Entries grouped by module, in first-call order; a module with several calls joined into one entry. Also the
    call summary of every module with several calls."""
    if len(entries) == 1:  # most groups: nothing to fold
        return list(entries), []
    modules = set(map(_MODULE, entries))  # in C: a group over decode steps holds hundreds of one module's calls
    if len(modules) == len(entries):
        return list(entries), []
    by_module: dict[tuple[str, str], list[ModuleEntry]]
    if len(modules) == 1:
        by_module = {modules.pop(): list(entries)}
    else:
        by_module = {}
        for entry in entries:
            by_module.setdefault((entry.path, entry.class_name), []).append(entry)
    folded, summaries = [], []
    for calls in by_module.values():
        if len(calls) == 1:
            folded.append(calls[0])
            continue
        calls.sort(key=_CALL_INDEX)
        joined, within = _joined_calls(calls, tolerances)
        folded.append(joined)
        summaries.append(
            CallSummary(
                tuple(c.call_index for c in calls),
                tuple(leading_size(c.output) if c.output is not None else None for c in calls),
                tuple(within),
            )
        )
    return folded, summaries


def joined_calls_view(dump: Dump, tolerances: Tolerances) -> Dump:
    """The dump with every module's calls joined into one `forward.*` entry (call 0): what a side that ran the
    sequence in one forward is matched against (a decoding rollout against a train recompute)."""
    view, _ = regrouped_view(dump, [list(dump.tokens_per_call)], tolerances)
    return view


def partition_calls(wanted: dict[int, int], calls: dict[int, int]) -> list[list[int]] | None:
    """The calls (by their tokens, in call order) grouped so that group i holds as many tokens as wanted call i
    (train micro-batches against rollout calls); None when the token counts do not line up."""
    groups: list[list[int]] = []
    pending = list(calls.items())
    for _, tokens in wanted.items():
        group, total = [], 0
        while pending and total < tokens:
            call, count = pending.pop(0)
            group.append(call)
            total += count
        if total != tokens:
            return None
        groups.append(group)
    return groups if not pending else None


def regrouped_view(dump: Dump, groups: list[list[int]], tolerances: Tolerances) -> tuple[Dump, dict[str, list[str]]]:
    """The dump with each module's calls of group i joined into one entry of call index i (keyed `forward.*` when
    one group holds every call, else `forward.<i>`), and each view key's dump keys."""
    keys: list[str] = []
    entries: dict[str, ModuleEntry] = {}
    members: dict[str, list[str]] = {}
    seen: set[str] = set()
    for key in dump.keys:
        head = key.rpartition(".")[0]
        if head in seen:
            continue
        seen.add(head)
        by_call = {dump.entries[k].call_index: k for k in dump.calls_of(f"{head}.{ALL_CALLS}")}
        for index, group in enumerate(groups):
            present = [by_call[c] for c in group if c in by_call]
            if not present:
                continue
            label = ALL_CALLS if len(groups) == 1 else str(index)
            if len(present) == 1 and len(groups) > 1 or len(by_call) == 1:
                entry = dump.entries[present[0]]
                view_key = present[0] if len(by_call) == 1 else f"{head}.{label}"
            else:
                entry = join_calls([dump.entries[k] for k in present], tolerances)
                view_key = f"{head}.{label}"
            entry = msgspec.structs.replace(entry, key=view_key, call_index=index)
            keys.append(view_key)
            entries[view_key] = entry
            members[view_key] = present
    keys.sort(key=lambda k: entries[k].position)
    for position, key in enumerate(keys):
        entries[key] = msgspec.structs.replace(entries[key], position=position)
    view = Dump(
        dump.path,
        dump.task,
        dump.level,
        dump.framework,
        keys,
        entries,
        dump.skipped_keys,
        dump.parallel,
        dump.null_keys,
    )
    return view, members
