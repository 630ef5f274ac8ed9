"""The fused q/k/v projection of a tensor-parallel rollout engine (vLLM's `QKVParallelLinear`, verified on real
vLLM TP=2 dumps; SGLang has a class of that name too): what merging its per-rank shards can state exactly.

Rank r holds cat(q_r, k_r, v_r) (its query heads, then the keys and values of its KV heads), not a row chunk of the
full [q | k | v]; `MergedColumnParallelLinear` likewise holds cat(gate_r, up_r). Taken together the ranks' shards are
a permutation of the full tensor's elements, so max of maxes, min of mins, root of summed squared norms and the
numel-weighted mean are exact - as long as each element lives on one rank only. When TP exceeds the number of KV
heads, the engine gives each KV head to tp / kv_heads ranks: their k and v parts are then copies, and statistics of
whole tensors cannot take a copy out again. Max and Min stay exact (a copy changes neither); Mean and Norm are not
computable (the shared part's sum and squared norm are unknown), so they are left out rather than guessed.

Which ranks share KV heads is read, for each projection, from the attention module called after it (vLLM
`Attention`: inputs (q, k, v)), whose per-rank k and v copies are identical on ranks sharing a head; the layers are
then checked against each other (see find_qkv_layouts). The output's own q, k, v parts are in the dump too (the
rotary's q, k inputs and the attention's v input): where they add up to each rank's output, the replicated case
merges exactly from them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import msgspec

from rca_lsp.dumps.dump import Dump
from rca_lsp.dumps.rankfile import read_raw_entries, read_raw_entry
from rca_lsp.dumps.ranks.slots import MERGE_TOLERANCES
from rca_lsp.model.stats import TensorStats, aggregate, copy_difference

QKV_CLASS = "QKVParallel"
MERGED_CLASS = "MergedColumnParallel"
_INPUTS_OF = "the q, k, v inputs of "  # how a layout's evidence names its attention module
_LOOKAHEAD = 16  # keys after the projection searched for its attention module (rotary and norms come between)


@dataclass(frozen=True)
class QkvLayout:
    """How a tensor-parallel QKVParallelLinear spreads its heads over the ranks."""

    replicas: int | None  # ranks holding the same KV heads (1: every rank its own); None: could not be found out
    q_width: int | None  # per rank: query features, then key features (values the same) in the projection's output
    kv_width: int | None
    evidence: str  # what it was decided on, for the report

    def full_width(self, ranks: int) -> int | None:
        if self.replicas is None or self.q_width is None or self.kv_width is None:
            return None
        return ranks * self.q_width + 2 * (ranks // self.replicas) * self.kv_width


def find_qkv_layouts(
    dumps: Sequence[Dump], files: Sequence[Path], ranks: Sequence[int], keys: Sequence[str], names: Sequence[int]
) -> dict[str, QkvLayout]:
    """The layout of every QKVParallelLinear of `keys` on the tensor-parallel peers `ranks` (indexes into
    dumps/files; `names` their rank numbers, for the report), each from the q, k, v inputs of the attention module
    that follows it (layers may differ: a model whose layers have other KV head counts).

    Identical k/v copies on several ranks can only be replicated KV heads; copies that differ can be other heads
    or a replicated copy out of sync. So a projection whose copies differ, where another of the same per-rank
    widths has identical ones, is left undecided (Max/Min only, exact either way) rather than taken as sharded."""
    first = dumps[ranks[0]]
    attentions = {key: _attention_after(first, key) for key in keys}
    wanted = [a for a in attentions.values() if a is not None]
    raw = [read_raw_entries(files[r], wanted) for r in ranks]  # one pass over each rank file
    evidence = {
        key: _kv_evidence(first, key, attention, [_tensors(entries[attention]) for entries in raw] if attention else [])
        for key, attention in attentions.items()
    }
    layouts = {key: _layout(found) for key, found in evidence.items()}
    replicated: dict[tuple[int | None, int | None], tuple[int, str]] = {}
    for layout in layouts.values():
        if layout.replicas is not None and layout.replicas > 1:
            replicated.setdefault((layout.q_width, layout.kv_width), (layout.replicas, layout.evidence))
    for key, layout in layouts.items():
        found = evidence[key]
        known = replicated.get((layout.q_width, layout.kv_width))
        if known is None or isinstance(found, QkvLayout) or layout.replicas not in (None, 1):
            continue
        replicas, where = known
        layouts[key] = QkvLayout(
            None,
            layout.q_width,
            layout.kv_width,
            f"{found.where}: {_differing(found.kv, replicas, names)}, where those of "
            f"{where.removeprefix(_INPUTS_OF)} (the same widths) are identical on {replicas} ranks each (replicated KV "
            "heads): a replicated copy out of sync or a layer of another KV layout, which the dumps cannot tell apart",
        )
    return layouts


@dataclass(frozen=True)
class _KvCopies:
    """Each peer's k and v (the inputs of the attention module after a projection) and the per-rank widths."""

    kv: list[list[TensorStats]]
    q_width: int
    kv_width: int
    where: str


def _kv_evidence(
    first: Dump, key: str, attention: str | None, qkv_inputs: list[list[TensorStats] | None]
) -> _KvCopies | QkvLayout:
    """The peers' k/v copies from the attention module's inputs on each rank, or the undecided layout saying why
    there are none."""
    entry = first.entries[key]
    if attention is None:
        return QkvLayout(None, None, None, f"no attention module after {entry.path} to read its q, k, v from")
    where = f"{_INPUTS_OF}{first.entries[attention].path}"
    if any(inputs is None or len(inputs) < 3 for inputs in qkv_inputs):
        return QkvLayout(None, None, None, f"{where} are not three tensors on every rank")
    widths = {tuple(_width(t) for t in inputs[:3]) for inputs in qkv_inputs}  # type: ignore[index]
    out = entry.output
    q_width, k_width, v_width = widths.pop() if len(widths) == 1 else (None, None, None)
    if q_width is None or k_width is None or k_width != v_width or out is None or _width(out) != q_width + 2 * k_width:
        return QkvLayout(None, None, None, f"{where} do not add up to the projection's per-rank width")
    return _KvCopies([inputs[1:3] for inputs in qkv_inputs], q_width, k_width, where)  # type: ignore[index]


def _layout(found: _KvCopies | QkvLayout) -> QkvLayout:
    """Consecutive ranks whose k and v copies agree hold the same KV heads (checked to form equal groups)."""
    if isinstance(found, QkvLayout):
        return found
    kv = found.kv
    replicas = 1
    while replicas < len(kv) and _same(kv[0], kv[replicas]):
        replicas += 1
    regular = len(kv) % replicas == 0 and all(
        all(_same(kv[start], kv[start + i]) for i in range(replicas))
        and (start + replicas >= len(kv) or not _same(kv[start], kv[start + replicas]))
        for start in range(0, len(kv), replicas)
    )
    if not regular:
        where = f"{found.where}: the ranks' k/v copies form no regular replica groups"
        return QkvLayout(None, found.q_width, found.kv_width, where)
    return QkvLayout(replicas, found.q_width, found.kv_width, found.where)


def _differing(kv: list[list[TensorStats]], replicas: int, names: Sequence[int]) -> str:
    """Which ranks' k/v copies differ from the first of their group of `replicas` consecutive ranks."""
    if len(kv) % replicas:
        return "the ranks' k/v copies differ"
    pairs = [
        f"rank {names[start + i]}'s k/v copy differs from rank {names[start]}'s"
        for start in range(0, len(kv), replicas)
        for i in range(1, replicas)
        if not _same(kv[start], kv[start + i])
    ]
    return "; ".join(pairs) or "the ranks' k/v copies differ"


def qkv_parts(
    dumps: Sequence[Dump], files: Sequence[Path], ranks: Sequence[int], key: str, replicas: int
) -> list[list[TensorStats]] | None:
    """Per rank, the statistics of the q, k and v parts of the projection's output as the next modules received them
    (the rotary embedding's q and k inputs, before rotation; the attention module's v input); None unless on every
    rank they are three tensors whose combined statistics are the projection's own output statistics, and the ranks
    sharing KV heads hold the same k and v (one copy stands for the others)."""
    first = dumps[ranks[0]]
    entry = first.entries[key]
    attention = _attention_after(first, key)
    if attention is None:
        return None
    between = first.keys[entry.position + 1 : first.entries[attention].position]
    rotary = next((k for k in between if "Rotary" in first.entries[k].class_name), None)
    if rotary is None:
        return None
    parts = []
    for rank in ranks:
        rotary_inputs = _positional_tensors(files[rank], rotary)
        attention_inputs = _positional_tensors(files[rank], attention)
        output = dumps[rank].entries[key].output
        if rotary_inputs is None or attention_inputs is None or output is None or len(rotary_inputs) < 3:
            return None
        q, k, v = rotary_inputs[1], rotary_inputs[2], attention_inputs[2]
        difference = copy_difference(output, aggregate([q, k, v], output.shape))
        if difference is None or difference > MERGE_TOLERANCES.for_dtypes(output.dtype):
            return None  # not (known to be) the projection's parts (e.g. a q/k norm between): no exact merge
        parts.append([q, k, v])
    if not all(_same(parts[r - r % replicas][1:], parts[r][1:]) for r in range(len(parts))):
        return None  # a replica's k/v differs from its group's: no copy stands for the others
    return parts


@dataclass(frozen=True)
class QkvEntry:
    """What merging the slots of one QKVParallelLinear entry needs."""

    layout: QkvLayout
    output_parts: list[list[TensorStats]] | None  # per rank [q, k, v] of its output (replicated KV heads only)

    def merge(self, slot: str, stats: list[TensorStats], dim: int) -> tuple[TensorStats, str]:
        return merge_qkv(stats, dim, self.layout, self.output_parts if slot == "output" else None)


def qkv_entry(
    layout: QkvLayout, dumps: Sequence[Dump], files: Sequence[Path], ranks: Sequence[int], key: str
) -> QkvEntry:
    replicas = layout.replicas or 1
    return QkvEntry(layout, qkv_parts(dumps, files, ranks, key, replicas) if replicas > 1 else None)


def merge_qkv(
    stats: list[TensorStats], dim: int, layout: QkvLayout, parts: list[list[TensorStats]] | None = None
) -> tuple[TensorStats, str]:
    """The merged statistics of a QKVParallelLinear slot sharded along `dim` (output features, or weight/bias
    rows), and how they were merged; `parts` (the output's per-rank q, k, v statistics, see qkv_parts) make the
    merge exact with replicated KV heads."""
    count = len(stats)
    first = stats[0]
    shape = first.shape
    known = bool(shape) and dim < len(shape)
    if layout.replicas == 1:
        merged = aggregate(stats, shape[:dim] + (shape[dim] * count,) + shape[dim + 1 :] if known else None)
        return merged, (
            f"sharded along dim {dim} over {count} ranks (each rank [q_r | k_r | v_r]: together a permutation of "
            "[q | k | v], exact)"
        )
    width = layout.full_width(count)
    full_shape = shape[:dim] + (width,) + shape[dim + 1 :] if width is not None and known else None
    if layout.replicas is not None and parts is not None and full_shape is not None:
        group_firsts = range(0, count, layout.replicas)
        distinct = [part for r, q_k_v in enumerate(parts) for part in (q_k_v if r in group_firsts else q_k_v[:1])]
        return aggregate(distinct, full_shape), (
            f"sharded along dim {dim} over {count} ranks; KV heads replicated on {layout.replicas} ranks each: merged "
            "exactly from every rank's q part and one copy of each k/v part (the rotary's q, k and the attention's v "
            "inputs, which add up to each rank's output)"
        )
    both = aggregate(stats, with_mean=False)
    merged = TensorStats(dtype=both.dtype, shape=full_shape, max=both.max, min=both.min)
    if layout.replicas is None:
        why = f"whether KV heads are replicated is unknown ({layout.evidence})"
    else:
        why = f"KV heads replicated on {layout.replicas} ranks each: the k/v parts are copies"
    return merged, (
        f"sharded along dim {dim} over {count} ranks; {why}: Max/Min exact, Mean/Norm not computable from "
        "per-rank statistics (left out)"
    )


def layout_note(layout: QkvLayout, ranks: int) -> str:
    """One line for the report's parallel notes."""
    if layout.replicas == 1:
        return (
            f"QKVParallelLinear: each of the {ranks} ranks holds its own KV heads ([q_r | k_r | v_r], "
            f"{layout.q_width} q + 2 x {layout.kv_width} k/v features per rank, decided on {layout.evidence}): "
            "its output and bias merge exactly"
        )
    if layout.replicas is None:
        return (
            f"QKVParallelLinear: whether its KV heads are replicated across ranks could not be told "
            f"({layout.evidence}): only Max/Min of its merged output and bias are compared (exact either way); "
            "Mean/Norm would count replicated k/v copies more than once and are left out"
        )
    return (
        f"QKVParallelLinear: KV heads replicated on {layout.replicas} ranks each (TP {ranks} > KV heads "
        f"{ranks // layout.replicas}; identical k/v copies in {layout.evidence}); each rank's output and bias are "
        f"[q_r | k | v] with {layout.q_width} q + 2 x {layout.kv_width} k/v features, so the ranks' statistics count "
        "the k/v copies more than once. The output is merged exactly from its parts where the next modules' inputs "
        "(the rotary's q, k; the attention's v) add up to each rank's output; otherwise, and for the bias (no parts "
        "anywhere), Max/Min are exact and Mean/Norm are not computable from per-rank statistics: left out, those "
        "slots are compared on Max/Min only"
    )


def layout_notes(layouts: Mapping[str, QkvLayout], paths: Mapping[str, str], ranks: int) -> list[str]:
    """The report's parallel notes on the layouts of a tensor-parallel group's projections (key -> layout, key ->
    module path): one line when all are alike, else one per layout naming its modules."""
    alike: dict[tuple[object, ...], list[str]] = {}
    for key, layout in layouts.items():
        kind = (layout.replicas, layout.q_width, layout.kv_width, layout.evidence if layout.replicas is None else "")
        alike.setdefault(kind, []).append(key)
    if len(alike) == 1:
        return [layout_note(next(iter(layouts.values())), ranks)]
    return [f"{', '.join(paths[k] for k in keys)}: {layout_note(layouts[keys[0]], ranks)}" for keys in alike.values()]


def merged_column_how(class_name: str) -> str:
    """What a MergedColumnParallelLinear shard holds, for the merge description ('' for other classes)."""
    if MERGED_CLASS not in class_name:
        return ""
    return " (each rank [gate_r | up_r]: together a permutation of [gate | up], exact)"


def _attention_after(dump: Dump, key: str) -> str | None:
    """The attention module called after the projection `key` (a child of the same parent), if dumped."""
    entry = dump.entries[key]
    parent = entry.path.rpartition(".")[0]
    following = dump.keys[entry.position + 1 : entry.position + 1 + _LOOKAHEAD]
    return next(
        (
            k
            for k in following
            if "Attention" in dump.entries[k].class_name and dump.entries[k].path.startswith(parent + ".")
        ),
        None,
    )


def _positional_tensors(path: Path, key: str) -> list[TensorStats] | None:
    """The statistics of every positional input of `key` in a rank file (non-tensors too, as nodes without them)."""
    return _tensors(read_raw_entry(path, key))


def _tensors(raw: dict[str, Any] | None) -> list[TensorStats] | None:
    """The statistics of every positional input of a raw entry (non-tensors too, as nodes without them)."""
    args: Any = raw.get("input_args") if raw is not None else None
    if not isinstance(args, list) or not all(isinstance(a, dict) for a in args):
        return None
    try:
        return [msgspec.convert(a, TensorStats) for a in args]
    except msgspec.ValidationError:
        return None


def _width(stats: TensorStats) -> int | None:
    return stats.shape[-1] if stats.shape else None


def _same(a: list[TensorStats], b: list[TensorStats]) -> bool:
    """Known to be the same tensors (statistics missing: not known)."""
    differences = [(copy_difference(x, y), MERGE_TOLERANCES.for_dtypes(x.dtype)) for x, y in zip(a, b)]
    return all(d is not None and d <= tol for d, tol in differences)
