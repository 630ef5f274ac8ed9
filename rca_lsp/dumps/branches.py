"""Where a dump's modules hand on a branch output instead of the residual stream's sum (SGLang's decoder layers
return their MLP's output; the residual is added by the next fused-residual norm), found from the entries' statistics:
the residual pairing (compare.residual) reads it."""

from __future__ import annotations

import math
from typing import Any, Mapping, NamedTuple, Protocol, Sequence

from rca_lsp.model.stats import TensorStats, four_statistics, is_integer_dtype


class BranchEntry(Protocol):
    """What a dump entry (dumps.dump.ModuleEntry) tells of where its tensors flow."""

    @property
    def key(self) -> str: ...
    @property
    def position(self) -> int: ...
    @property
    def path(self) -> str: ...
    @property
    def call_index(self) -> int: ...
    @property
    def input(self) -> TensorStats | None: ...
    @property
    def output(self) -> TensorStats | None: ...
    @property
    def stream_output(self) -> TensorStats | None: ...


class BranchOutputs(NamedTuple):
    """A dump's modules that hand on a branch output instead of the residual stream's sum.

    `returns`: module key -> the key of a descendant (same call) whose output is its output unchanged, every
    statistic equal, for modules that contain a fused-residual module (one returning the residual stream as a
    second tensor, see ModuleEntry.stream_output) and return the output of a module that is not one: a residual
    block whose residual add happens outside it (SGLang's Qwen2DecoderLayer returns its Qwen2MLP's output; a plain
    wrapper such as an MLP returning its down projection's output, or a model returning its final norm's, is not
    listed). `takes`: module key -> the key of the latest earlier module of `returns`, neither its ancestor nor its
    descendant, whose output is this module's input (the next decoder layer takes the previous one's MLP
    output)."""

    returns: dict[str, str]
    takes: dict[str, str]


def _exact_signature(stats: TensorStats | None) -> tuple[Any, ...] | None:
    """What identifies one float tensor among a dump's: its shape and all four statistics (None if not all known)."""
    if stats is None or not stats.observable or is_integer_dtype(stats.dtype) or not stats.numel:
        return None
    values = four_statistics(stats)
    return (stats.shape, *values) if all(type(v) is float for v in values) else None


def _nested(a: str, b: str) -> bool:
    """Whether module path a is b, or one of them contains the other."""
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def branch_outputs(entries: Mapping[str, BranchEntry], ordered_entries: Sequence[BranchEntry]) -> BranchOutputs:
    """The dump's BranchOutputs, from its entries by key and in dump order."""
    with_stream: set[tuple[str, int]] = set()  # (path, call) of modules containing a fused-residual module
    for entry in entries.values():
        if entry.stream_output is not None:
            parts = entry.path.split(".")
            with_stream.update((".".join(parts[:depth]), entry.call_index) for depth in range(1, len(parts)))
    if not with_stream:
        return BranchOutputs({}, {})  # no fused-residual module (Megatron, HF): no stream carried outside
    # Only such a container can hand on a branch output: the modules whose output is one of theirs (told first
    # by its Max, compared in C) are the only ones looked at.
    containers = [k for k, e in entries.items() if (e.path, e.call_index) in with_stream]
    wanted = {signature for k in containers if (signature := _exact_signature(entries[k].output)) is not None}
    maxima, values = {signature[1] for signature in wanted}, {signature[1:] for signature in wanted}
    by_output: dict[tuple[Any, ...], dict[tuple[str, int], str]] = {}
    for entry in ordered_entries:
        output = entry.output
        # bfloat16 maxima repeat: all four statistics looked up (in C) before a signature is built
        if output is not None and output.max in maxima and four_statistics(output) in values:
            if (signature := _exact_signature(output)) in wanted:
                by_output.setdefault(signature, {})[(entry.path, entry.call_index)] = entry.key
    returns: dict[str, str] = {}
    for group in by_output.values():
        for (path, call), key in group.items() if len(group) > 1 else ():
            if entries[key].stream_output is not None:
                continue  # a fused-residual module's output.0 is the normed stream: a full value
            parts = path.split(".")
            for depth in range(len(parts) - 1, 0, -1):  # the nearest ancestor with this very output
                ancestor = group.get((".".join(parts[:depth]), call))
                if ancestor is not None:
                    if (entries[ancestor].path, call) in with_stream:
                        returns.setdefault(ancestor, key)
                    break
    _returns_reduced_sums(entries, ordered_entries, returns, with_stream)
    takes: dict[str, str] = {}
    handed = {signature: [k for k in group.values() if k in returns] for signature, group in by_output.items()}
    handed_values = {signature[1:] for signature, found in handed.items() if found}
    handed_maxima = {found[0] for found in handed_values}
    for entry in ordered_entries if returns else ():
        given = entry.input
        if given is None or given.max not in handed_maxima or four_statistics(given) not in handed_values:
            continue
        signature = _exact_signature(given)
        if signature is None:
            continue
        producers = [
            k
            for k in handed.get(signature, ())
            if entries[k].position < entry.position and not _nested(entries[k].path, entry.path)
        ]
        if producers:
            takes[entry.key] = max(producers, key=lambda k: entries[k].position)
    return BranchOutputs(returns, takes)


def _returns_reduced_sums(
    entries: Mapping[str, BranchEntry],
    ordered_entries: Sequence[BranchEntry],
    returns: dict[str, str],
    with_stream: set[tuple[str, int]],
) -> None:
    """Add to `returns` the residual blocks that return the reduced sum of a descendant's per-rank partial sums
    (dumps/ranks: only their Mean is known; SGLang at TP > 1 reduces the MLP's output at the layer's end): the
    nearest ancestor holding a fused-residual module whose output has that shape and Mean (within float32
    rounding of its scale)."""
    by_place: dict[tuple[str, int], str] | None = None  # built at the first summed output: most dumps have none
    for entry in reversed(ordered_entries):  # a container before its children: the nearest descendant is named
        summed = entry.output
        if summed is None or summed.mean is None or summed.max is not None or summed.norm is not None:
            continue
        if by_place is None:
            by_place = {(e.path, e.call_index): k for k, e in entries.items()}
        parts = entry.path.split(".")
        for depth in range(len(parts) - 1, 0, -1):
            place = (".".join(parts[:depth]), entry.call_index)
            ancestor = by_place.get(place)
            if ancestor is None or place not in with_stream:
                continue
            full = entries[ancestor].output
            if full is not None and full.shape == summed.shape and full.norm is not None and full.numel:
                scale = full.norm / math.sqrt(full.numel)
                if type(full.mean) is float and abs(full.mean - summed.mean) <= 1e-5 * scale:
                    returns.setdefault(ancestor, entry.key)
            break
