"""Tensor- and sequence-parallel shards merged slot by slot: identical copies are replicas; differing activations are
shards along the dimension their module's class and the sequence decide, or partial sums; differing parameters are
shards of parallel classes, else a disagreement of replicas. Shards aggregate exactly."""

from __future__ import annotations

from typing import Sequence

import msgspec

from rca_lsp.dumps.dump import Disagreement, Dump, ModuleEntry
from rca_lsp.dumps.ranks.experts import EXPERT_RE, is_expert_path
from rca_lsp.dumps.ranks.plan import Plan
from rca_lsp.dumps.ranks.qkv import (
    QKV_CLASS,
    QkvEntry,
    QkvLayout,
    find_qkv_layouts,
    layout_notes,
    merged_column_how,
    qkv_entry,
)
from rca_lsp.dumps.ranks.slots import (
    MAX_LISTED_KEYS,
    MERGE_TOLERANCES,
    disagreement_of,
    entry_slots,
    parallel_kind,
    rename_entry,
    renamed_key,
    shard_dim,
    slot_stats,
)
from rca_lsp.dumps.sources import DumpSource
from rca_lsp.model.stats import TensorStats, aggregate, copy_difference, extremes_differ, leading_size


class Merger:
    def __init__(self, dumps: Sequence[Dump], source: DumpSource) -> None:
        self.dumps = dumps
        self.source = source
        self.notes: list[str] = []
        self.merges: dict[str, str] = {}
        self.origins: dict[str, tuple[int, str]] = {}
        self.dropped: dict[str, str] = {}
        self.varied: set[str] = set()  # see ParallelInfo.varied
        # differing activation copies (by the first rank's): the dim they are shards along, _PARTIAL_SUMS, or None
        # for replicas that disagree (see _slot)
        self.decided: dict[tuple[object, ...], tuple[tuple[int, ...] | None, int | None]] = {}
        self.sequence_parallel = False
        self.qkv_layouts: dict[tuple[int, ...], dict[str, QkvLayout]] = {}  # per tensor-parallel group, per key
        self.unknown: dict[int, int] = {}  # rank -> slots left unknown because it wrote null statistics

    def stage(self, ranks: list[int], plan: Plan) -> tuple[list[str], dict[str, ModuleEntry]]:
        """One stage's logical keys (local layer names) and entries: experts joined, then tensor shards merged."""
        by_tp = [
            self._experts_joined([ranks[t + e * plan.tp] for e in range(plan.ep)], plan.own_data)
            for t in range(plan.tp)
        ]
        if plan.tp == 1:
            return by_tp[0]
        keys = self._common_keys([k for k, _ in by_tp], [ranks[t] for t in range(plan.tp)])
        peers = [ranks[t] for t in range(plan.tp)]
        entries = {}
        # Replicas are mostly the same object on every rank (rankload): tuple.count tests identity first, in C.
        for key, parts in zip(keys, zip(*(map(e.__getitem__, keys) for _, e in by_tp))):
            first = parts[0]
            entries[key] = first if parts.count(first) == len(parts) else self._tensor_parallel(key, parts, peers)
        return keys, entries

    def _common_keys(self, key_lists: list[list[str]], ranks: list[int]) -> list[str]:
        """The keys every peer has, in the first peer's order; the others are dropped and said so."""
        if all(keys == key_lists[0] for keys in key_lists[1:]):
            return key_lists[0]
        everywhere = set(key_lists[0]).intersection(*key_lists[1:])
        longest = max(key_lists, key=len)
        for keys, rank in zip(key_lists, ranks):
            present = set(keys)
            lacking = [k for k in longest if k not in present]
            if lacking:
                label = self.source.rank_label(rank)
                self.notes.append(
                    f"{label} lacks {len(lacking)} keys the other ranks have (did it stop mid-dump?), "
                    f"e.g. {', '.join(lacking[:MAX_LISTED_KEYS])}; they are left out, the rest is "
                    "analysed"
                )
                for key in lacking:
                    self.dropped.setdefault(key, f"{label} lacks it")
        return [k for k in longest if k in everywhere]

    def _experts_joined(self, ranks: list[int], own_data: bool = False) -> tuple[list[str], dict[str, ModuleEntry]]:
        """EP peers: shared modules once (checked to agree), each rank's experts under their global index. With
        `own_data` (each EP rank read its own batch) the shared modules are EP rank 0's (their weights checked to
        agree) and the experts' activations are left out (see _other_batches)."""
        first = self.dumps[ranks[0]]
        if len(ranks) == 1:
            return first.keys, first.entries
        local = len({m.group(1) for k in first.keys if (m := EXPERT_RE.search(k))})
        keys: list[str] = []
        entries: dict[str, ModuleEntry] = {}
        run: list[str] = []

        def flush() -> None:
            for ep_rank, rank in enumerate(ranks):
                dump = self.dumps[rank]
                for key in run:
                    entry = dump.entries.get(key)
                    if entry is None:
                        self.dropped.setdefault(key, f"{self.source.rank_label(rank)} lacks it")
                        continue
                    match = EXPERT_RE.search(entry.path)
                    assert match is not None
                    path = (
                        entry.path[: match.start(1)]
                        + str(ep_rank * local + int(match.group(1)))
                        + entry.path[match.end(1) :]
                    )
                    new_key = renamed_key(key, entry.path, path)
                    keys.append(new_key)
                    entries[new_key] = rename_entry(
                        self._other_batches(new_key, entry) if own_data else entry, new_key, path
                    )
                    if (rank, key) != (ranks[0], new_key):
                        self.origins[new_key] = (rank, key)
            run.clear()

        for key in first.keys:
            if EXPERT_RE.search(key):
                run.append(key)
                continue
            if run:
                flush()
            keys.append(key)
            copies = [self.dumps[r].entries.get(key) for r in ranks]
            in_experts = is_expert_path(first.entries[key].path)
            if in_experts and own_data:
                entries[key] = self._other_batches(key, first.entries[key])
            elif in_experts and all(c is not None for c in copies):
                # the experts' container on each EP rank handles the tokens routed to its experts: shards
                entries[key] = self._shards(key, copies, ranks, "expert-parallel")  # type: ignore[arg-type]
            else:
                entries[key] = self._replicas(key, copies, ranks, parameters_only=own_data)
        flush()
        return keys, entries

    def _other_batches(self, key: str, entry: ModuleEntry) -> ModuleEntry:
        """A module of the experts on EP ranks that read their own batches: its activations hold routed tokens of
        every rank's batch, not a one-batch run's: left out (and flagged for the comparison), parameters kept."""
        if entry.input is None and entry.output is None and not entry.kwargs:
            return msgspec.structs.replace(entry, other_batches=True)
        left_out = "activations left out: they hold the routed tokens of every expert-parallel rank's batch"
        self.merges[key] = left_out + ("; parameters compared" if entry.parameters else "")
        return msgspec.structs.replace(
            entry, input=None, output=None, kwargs={}, stream_input=None, stream_output=None, other_batches=True
        )

    def _replicas(
        self, key: str, copies: list[ModuleEntry | None], ranks: list[int], parameters_only: bool = False
    ) -> ModuleEntry:
        """A module every peer computes identically (EP peers outside the experts): the first copy, with any
        disagreement of a slot recorded (`parameters_only`: of a weight, for peers that read other batches)."""
        first = copies[0]
        assert first is not None
        if all(c == first for c in copies[1:]):
            return first  # the common case: nothing to compare slot by slot
        self.varied.add(key)
        found = list(_carried(copies))
        for slot, _ in entry_slots(first):
            if parameters_only and not slot.startswith("parameters."):
                continue
            others = [slot_stats(c, slot) if c is not None else None for c in copies]
            disagreement = disagreement_of(slot, others, ranks, self.source)
            if disagreement is not None:
                found.append(disagreement)
        if found:
            described = [d.describe() for d in found if d not in first.disagreements]
            if described:
                self.merges[key] = "; ".join(described)
            return msgspec.structs.replace(first, disagreements=tuple(found))
        return first

    def _shards(self, key: str, parts: list[ModuleEntry], ranks: list[int], what: str) -> ModuleEntry:
        """Every differing slot concatenated along the token dim (the ranks' partial results of one module)."""
        first = parts[0]
        if all(p == first for p in parts[1:]):
            return first
        self.varied.add(key)
        merged: dict[str, TensorStats | None] = {}
        for slot, stats in entry_slots(first):
            copies = [slot_stats(p, slot) for p in parts]
            if stats is None or any(c is None for c in copies) or all(c == stats for c in copies[1:]):
                merged[slot] = stats
            else:
                merged[slot] = aggregate(copies, _concatenated(stats.shape, 0, len(copies)))  # type: ignore[arg-type]
        self.merges[key] = f"{what} partial results concatenated over {len(parts)} ranks"
        return _with_slots(first, merged, _carried(parts))

    def _tensor_parallel(self, key: str, parts: Sequence[ModuleEntry], ranks: list[int]) -> ModuleEntry:
        """Peers that are not all equal, slot by slot."""
        first = parts[0]
        kind = parallel_kind(first.class_name)
        qkv = (
            qkv_entry(self._qkv_layout(key, ranks), self.dumps, self.source.files, ranks, key)
            if QKV_CLASS in first.class_name
            else None
        )
        merged: dict[str, TensorStats | None] = {}
        described: list[str] = []
        found: list[Disagreement] = list(_carried(parts))
        same_inputs = kind is None and _same_inputs(parts)
        for slot, _ in entry_slots(first):
            copies = [slot_stats(p, slot) for p in parts]
            stats, how, disagreement = self._slot(slot, copies, kind, ranks, first.call_index, qkv, same_inputs)
            merged[slot] = stats
            if not how.startswith("sharded") and any(c != copies[0] for c in copies[1:]):
                self.varied.add(key)
            if how:
                described.append(
                    f"{slot} {how}{merged_column_how(first.class_name) if how.startswith('sharded') else ''}"
                )
            if disagreement is not None:
                found.append(disagreement)
                described.append(disagreement.describe())
        if described:  # after what joining the experts said (their activations left out)
            self.merges[key] = "; ".join(([self.merges[key]] if key in self.merges else []) + described)
        return _with_slots(first, merged, tuple(found))

    def _unknown(self, copies: list[TensorStats], ranks: list[int]) -> tuple[TensorStats, str, None]:
        """A slot some ranks wrote without statistics (null): unknown, which the comparison reports as missing,
        never a mismatch nor a disagreement of the ranks. Counted per rank for the notes (see unknown_notes)."""
        null = [rank for rank, copy in zip(ranks, copies) if not copy.observable]
        for rank in null:
            self.unknown[rank] = self.unknown.get(rank, 0) + 1
        names = ", ".join(str(self.source.ranks[rank]) for rank in null) or "?"
        what = f"rank{'s' if len(null) > 1 else ''} {names} wrote no statistics" if null else "no statistic on both"
        unknown = next((c for c in copies if not c.observable), TensorStats(copies[0].dtype, copies[0].shape))
        return unknown, f"unknown ({what})", None

    def unknown_notes(self) -> list[str]:
        return [
            f"rank {self.source.ranks[rank]} wrote no statistics (null) for {count} tensor(s) the merge needed: "
            "those tensors are unknown in the merged dump (missing), not compared"
            for rank, count in sorted(self.unknown.items())
        ]

    def _qkv_layout(self, key: str, ranks: list[int]) -> QkvLayout:
        """How the fused q/k/v projection `key` of these tensor-parallel peers spreads KV heads: decided for every
        projection of the group when the first is merged (each on its own evidence, checked against the others);
        said once in the notes."""
        group = tuple(ranks)
        layouts = self.qkv_layouts.get(group)
        if layouts is None:
            first = self.dumps[ranks[0]]
            keys = [k for k in first.keys if QKV_CLASS in first.entries[k].class_name]
            names = [self.source.ranks[r] for r in ranks]
            layouts = find_qkv_layouts(self.dumps, self.source.files, ranks, keys, names)
            self.qkv_layouts[group] = layouts
            if len(self.qkv_layouts) == 1:
                self.notes += layout_notes(layouts, {k: first.entries[k].path for k in keys}, len(ranks))
        return layouts[key]

    def _slot(
        self,
        slot: str,
        copies: list[TensorStats | None],
        kind: str | None,
        ranks: list[int],
        call: int,
        qkv: QkvEntry | None = None,
        same_inputs: bool = False,
    ) -> tuple[TensorStats | None, str, Disagreement | None]:
        """(merged statistics, how they were merged, a disagreement of replicas); `qkv` for the slots of a fused
        q/k/v projection; `same_inputs`: the module is no parallel layer and every rank gave it the same inputs."""
        first = copies[0]
        if first is None or any(c is None for c in copies):
            return first, "", None
        stats: list[TensorStats] = copies  # type: ignore[assignment]
        if all(c == first for c in stats[1:]):
            return first, "", None
        differences = [copy_difference(first, c) for c in stats[1:]]
        if None in differences:  # a rank wrote null statistics: neither shards nor replicas can be told
            return self._unknown(stats, ranks)
        tol = MERGE_TOLERANCES.for_dtypes(first.dtype)
        worst = max(d for d in differences if d is not None)
        parameter = slot.startswith("parameters.")
        dim = shard_dim(slot, kind, first)
        if parameter and dim is None:  # replicas of one weight: the same values, so the same extremes exactly
            if worst <= tol and not any(extremes_differ(first, c) for c in stats[1:]):
                return first, "", None
            return first, "", disagreement_of(slot, copies, ranks, self.source)
        if worst <= tol and not parameter:
            return first, f"replicated (copies differ by {worst:.2g}, within noise)", None
        identity = _tensor_identity(first)
        if dim is None:  # an activation of a module that is not a parallel layer: along the sequence or features
            dim = _same_tensor_dim(self.decided.get(identity), first.shape)
            if dim is _UNDECIDED:
                if leading_size(first) * len(stats) == self.dumps[ranks[0]].tokens_per_call.get(call, 0):
                    dim = 0  # sequence parallel: each rank holds a slice of the tokens
                    self.sequence_parallel = True
                elif slot == "output" and kind == "row":
                    # A row-parallel output whose copies differ was not all-reduced inside the module (SGLang
                    # reduces o_proj / down_proj outputs after it): each rank's partial sum.
                    dim = _PARTIAL_SUMS
                elif kind is not None or (same_inputs and slot in ("output", "stream_output")):
                    # A parallel layer's class says this slot is whole on every rank (a column-parallel input); a
                    # module that holds no shard computes the same output from the same inputs. Copies that differ
                    # there are replicas that disagree (a desynced weight upstream, a non-deterministic kernel),
                    # not shards of a tensor twice as wide.
                    dim = None
                else:
                    dim = max(len(first.shape or ()) - 1, 0)
        # one tensor is often dumped twice (a module's output is the next one's input, a container's output its
        # last child's, e.g. SGLang's Qwen2MLP returning its down_proj's partial sums): where it is seen again it is
        # what it was first decided to be
        self.decided.setdefault(identity, (first.shape, dim))
        if dim is None:
            return first, "", disagreement_of(slot, copies, ranks, self.source)
        if dim == _PARTIAL_SUMS:
            return _sum_of_all(stats), _PARTIAL_SUMS_HOW.format(len(stats)), None
        if qkv is not None and not slot.startswith("input"):
            merged, how = qkv.merge(slot, stats, dim)
            return merged, how, None
        shape = _concatenated(first.shape, dim, len(stats))
        return aggregate(stats, shape), f"sharded along dim {dim} over {len(stats)} ranks", None


_UNDECIDED = -1  # not a dim: a tensor not seen yet (see Merger.decided)


_PARTIAL_SUMS = -2  # not a dim: each rank holds a partial sum of the whole tensor


_PARTIAL_SUMS_HOW = "partial sums over {} ranks (reduced after this module): only the Mean of their sum is known"


def _sum_of_all(parts: Sequence[TensorStats]) -> TensorStats:
    """What the statistics of the sum of same-shape tensors say exactly: the Mean; Max, Min and Norm unknown."""
    means = [part.mean for part in parts]
    mean = sum(means) if all(type(m) is float for m in means) else None
    first = parts[0]
    return TensorStats(first.dtype, first.shape, None, None, mean, None)


def _same_tensor_dim(
    decided: tuple[tuple[int, ...] | None, int | None] | None, shape: tuple[int, ...] | None
) -> int | None:
    """What a tensor seen before was decided to be (its shape then, the dim it is sharded along, _PARTIAL_SUMS, or
    None for a replica), for this view of it: the sharded size's dim, last first (a transpose moves the others); _UNDECIDED
    when it was not seen or the size is not in this view."""
    if decided is None:
        return _UNDECIDED
    seen_shape, dim = decided
    if dim is None or dim == _PARTIAL_SUMS or seen_shape == shape:
        return dim
    size = seen_shape[dim] if seen_shape and dim < len(seen_shape) else None
    return next((d for d in reversed(range(len(shape or ()))) if shape[d] == size), _UNDECIDED)  # type: ignore[index]


def _tensor_identity(stats: TensorStats) -> tuple[object, ...]:
    """What tells one dumped tensor from another: where a module's output is the next one's input, both entries
    hold these same statistics (the shape may be another view: a transpose, a flattened batch)."""
    return stats.dtype, stats.numel, stats.max, stats.min, stats.mean, stats.norm


def _same_inputs(parts: Sequence[ModuleEntry]) -> bool:
    """Every rank's copy of the entry has the same dumped inputs (its primary input, keyword tensors and second
    float input), within their dtype's noise."""
    first = parts[0]
    if first.input is None:
        return False
    for slot, stats in entry_slots(first):
        if not slot.startswith(("input", "stream_input")):
            continue
        for part in parts[1:]:
            copy = slot_stats(part, slot)
            if (stats is None) != (copy is None):
                return False
            if stats is not None and copy is not None:
                difference = copy_difference(stats, copy)  # None: unknown, not known to be the same
                if difference is None or difference > MERGE_TOLERANCES.for_dtypes(stats.dtype):
                    return False
    return True


def _concatenated(shape: tuple[int, ...] | None, dim: int, count: int) -> tuple[int, ...] | None:
    if not shape or dim >= len(shape):
        return None
    return shape[:dim] + (shape[dim] * count,) + shape[dim + 1 :]


def _carried(entries: Sequence[ModuleEntry | None]) -> tuple[Disagreement, ...]:
    """The disagreements the entries of one logical module already carry (with data-parallel replicas), once each:
    merging the ranks keeps them."""
    return tuple(dict.fromkeys(d for e in entries if e is not None for d in e.disagreements))


def _with_slots(
    entry: ModuleEntry, merged: dict[str, TensorStats | None], disagreements: tuple[Disagreement, ...]
) -> ModuleEntry:
    kwargs = {n: merged[f"input_kwargs.{n}"] or s for n, s in entry.kwargs.items()}
    parameters = {n: merged[f"parameters.{n}"] or s for n, s in entry.parameters.items()}
    return msgspec.structs.replace(
        entry,
        input=merged["input"],
        output=merged["output"],
        kwargs=kwargs or entry.kwargs,
        parameters=parameters or entry.parameters,
        stream_input=merged.get("stream_input", entry.stream_input),
        stream_output=merged.get("stream_output", entry.stream_output),
        disagreements=disagreements,
    )
