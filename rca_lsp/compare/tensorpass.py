"""The element-wise pass over the mapped groups of a tensor-mode (or md5-mode) pair of dumps: for every compared
target (output, each pair of inputs, each common parameter) the best evidence both sides have - their tensors, else
their hashes, else the statistics alone - as a SlotEvidence. Tensors are loaded pair by pair and dropped after
(memory-mapped where the file allows); a missing or unreadable file is one line naming it, and that slot keeps its
statistics. Statistics-mode dumps never reach here (see `evidence_modes`), so they never import torch."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from rca_lsp.compare.elementwise import ALIGNED, MISMATCH, SlotEvidence, elementwise, identical, verdict_of
from rca_lsp.compare.hashes import combined_crc, crc_of, reordered_parts
from rca_lsp.compare.layouts import (
    arrangements,
    best_arrangement,
    fused_dim,
    joined_calls,
    shape_text,
    tokens_first,
)
from rca_lsp.compare.module import ModuleComparison
from rca_lsp.compare.permutation import close, find_reordering
from rca_lsp.dumps.dump import Dump, raw_entry
from rca_lsp.dumps.rankfile import read_raw_entries
from rca_lsp.dumps.tensorfile import TensorNode, entry_nodes, hashes_in, read_tensor, slot_node, tensor_support
from rca_lsp.model.keys import parse_module_key
from rca_lsp.model.stats import TensorStats, is_integer_dtype
from rca_lsp.model.tolerance import Tolerances

# Megatron slots the model changes in place after msprobe's hook (the residual added into the row-parallel
# outputs, the mask applied to the softmax input): on CPU msprobe hashes later, so their hash may be a later value's.
_IN_PLACE = (("linear_proj", "output"), ("linear_fc2", "output"), ("scale_mask_softmax", "input"))
_SAMPLE = 64  # entries looked at to tell a dump's mode
_SCAN_CHILDREN = 256  # earlier entries looked at for a container's in-place child


def dump_mode(dump: Dump) -> str:
    """ "tensor" (a tensor file per tensor), "md5" (a hash per tensor) or "statistics"."""
    if dump.task == "tensor":
        return "tensor"
    return "md5" if dump.keys and hashes_in(dump.file_key(dump.keys[0])[0]) else "statistics"


def evidence_modes(train: Dump, rollout: Dump) -> tuple[str, str]:
    return dump_mode(train), dump_mode(rollout)


class _Side:
    """One side's tensors of one target: per part (module), per call, the statistics node and its dump file."""

    def __init__(
        self, parts: list[list[tuple[str, TensorNode]]], ranks: int, names: list[str], merged: list[Any]
    ) -> None:
        self.parts, self.ranks, self.names = parts, ranks, names
        self.merged = merged  # per part, per call: the merged statistics' shape (ranks concatenated)


class TensorPass:
    """Evidence beyond statistics for the groups of one pair of dumps."""

    def __init__(self, train: Dump, rollout: Dump, tolerances: Tolerances) -> None:
        self.train, self.rollout, self.tolerances = train, rollout, tolerances
        self.modes = evidence_modes(train, rollout)
        self.problems: list[str] = []  # one line per file that could not be read
        self._nodes: dict[str, dict[str, Any]] = {}  # dump file -> its entries' tensor nodes (files, hashes)
        self.notes: list[str] = []
        unsupported = tensor_support() if "tensor" in self.modes else ""
        self.tensors = not unsupported and self.modes == ("tensor", "tensor")
        if unsupported:
            self.notes.append(unsupported)
        if self.modes[0] != self.modes[1]:
            self.notes.append(
                f"mixed modes: train dumped in {self.modes[0]} mode, rollout in {self.modes[1]} mode; every pair "
                "is compared by the best evidence both sides have"
            )

    @property
    def active(self) -> bool:
        return self.tensors or self.modes == ("md5", "md5")

    def evidence(self, comparison: ModuleComparison) -> tuple[SlotEvidence, ...]:
        found = []
        for target, train_id, rollout_id, train_stats, rollout_stats, _ in comparison.target_specs():
            if not (target in ("output.0", "input_args.0") or target.startswith("parameters.")) or target.endswith("*"):
                continue
            if train_stats is None or rollout_stats is None:  # a slot the comparison leaves out (routers of two
                continue  # forms, experts' activations of other batches): not the same tensor on both sides
            slot = target.split(".", 1)[1] if target.startswith("parameters.") else target.split(".")[0]
            train = self._side(self.train, train_id, comparison.train_keys, slot)
            rollout = self._side(self.rollout, rollout_id, comparison.rollout_keys, slot)
            try:
                found.append(self._compare(target, train_id, rollout_id, train, rollout))
            except (RuntimeError, ValueError, IndexError) as error:  # tensors that do not fit any known layout
                reason = str(error).strip().splitlines()[0][:160] if str(error).strip() else type(error).__name__
                note = f"the tensors could not be made comparable ({reason})"
                found.append(SlotEvidence(target, train_id, rollout_id, "tensors", "", note=note))
        return tuple(found)

    # -- what each side holds --------------------------------------------------------------------------------
    def _side(self, dump: Dump, joined_id: str, group_keys: Sequence[str], slot: str) -> _Side | None:
        parts, names, merged = [], [], []
        ranks = 1
        for part_key in joined_id.split("+"):
            calls = _call_keys(part_key, group_keys, dump)
            if not calls:
                return None
            nodes, shapes = [], []
            for key in calls:
                copies = self._copies(dump, key, slot)
                if copies is None:
                    return None
                ranks = max(ranks, len(copies))
                nodes.extend(copies)
                shapes.append(_slot_of(dump.entries[key], slot).shape)  # type: ignore[union-attr]
            parts.append(nodes)
            merged.append(shapes)
            parsed = parse_module_key(calls[0])
            names.append(parsed.path.rpartition(".")[2] if parsed else calls[0])
        return _Side(parts, ranks, names, merged)

    def _copies(self, dump: Dump, key: str, slot: str) -> list[tuple[str, TensorNode]] | None:
        """The slot's node in the file that holds the key; for a slot the rank merge concatenated, each
        tensor-parallel peer's node (their files in rank order)."""
        stats = _slot_of(dump.entries.get(key), slot)
        if stats is None:
            return None
        file, original = dump.file_key(key)
        node = slot_node(self._entries(file).get(original), slot, stats)
        if node is not None or dump.parallel is None:
            return [(file, node)] if node is not None else None
        index, original = dump.parallel.origins.get(key, (0, key))
        copies = []
        for peer in dump.parallel.peers.get(index, (index,)):
            path = dump.parallel.files[peer]
            raw = read_raw_entries(Path(path), [original])[original]
            own = _slot_of(raw_entry(original, raw), slot) if raw is not None else None
            node = slot_node(self._entries(path).get(original), slot, own) if own is not None else None
            if node is None:
                return None
            copies.append((path, node))
        return copies

    def _entries(self, file: str) -> dict[str, Any]:
        found = self._nodes.get(file)
        if found is None:
            found = self._nodes[file] = entry_nodes(file)
        return found

    # -- comparing ------------------------------------------------------------------------------------------
    def _compare(
        self, target: str, train_id: str, rollout_id: str, train: _Side | None, rollout: _Side | None
    ) -> SlotEvidence:
        base = SlotEvidence(target, train_id, rollout_id, "statistics", "")
        if train is None or rollout is None:
            return base._replace(note="the slot is not on both sides as one tensor per call")
        if self.tensors and _all_named(train) and _all_named(rollout):
            return self._compare_tensors(base, train, rollout)
        if self.modes == ("md5", "md5"):
            return self._compare_hashes(base, train, rollout)
        missing = [side for side, s in (("train", train), ("rollout", rollout)) if not _all_named(s)]
        lacking = " and ".join(missing) if missing else "one side"
        return base._replace(note=f"the {lacking} dumped no tensor files for it" if self.tensors else "")

    def _load(self, side: _Side, kind: str) -> list[Any] | None:
        loaded = []
        for nodes, shapes in zip(side.parts, side.merged):
            tensors = []
            for file, node in nodes:
                read = read_tensor(file, node.data_name if type(node.data_name) is str else "")
                if read.tensor is None:
                    if read.problem not in self.problems:
                        self.problems.append(read.problem)
                    return None
                tensors.append(read.tensor)
            joined = self._joined(tensors, shapes, side.ranks, kind)
            if joined is None:
                return None
            loaded.append(joined)
        return loaded

    def _joined(self, tensors: list[Any], shapes: list[Any], ranks: int, kind: str) -> Any:
        """One part's tensors as one: rank shards concatenated, then calls joined; None when the shards do not
        make up the merged tensor."""
        import torch

        if ranks > 1 and len(tensors) == ranks * len(shapes):
            per_call = [tensors[i : i + ranks] for i in range(0, len(tensors), ranks)]
            tensors = [_shards_joined(shards, shape, torch) for shards, shape in zip(per_call, shapes)]
            if any(t is None for t in tensors):
                return None
        if len(tensors) > 1 and kind != "parameter":  # calls of different lengths: as [tokens, features] first
            if any(t.dim() >= 3 and t.shape[0] > 1 and t.shape[1] > 1 for t in tensors):
                raise ValueError("calls of several sequences each: their batch order is not known")
            tensors = [tokens_first(t, kind, False) for t in tensors]
        return joined_calls(tensors, kind)

    def _compare_tensors(self, base: SlotEvidence, train: _Side, rollout: _Side) -> SlotEvidence:
        first = train.parts[0][0][1]
        kind = (
            "parameter"
            if base.target.startswith("parameters.")
            else ("tokens" if is_integer_dtype(first.dtype) else "activation")
        )
        raw_t, raw_r = self._load(train, kind), self._load(rollout, kind)
        if raw_t is None or raw_r is None:
            return base._replace(note="a tensor file could not be read, or rank shards did not make up the tensor")
        swap = _batch_orders_differ(raw_t, raw_r)
        if not swap and _batch_order_unknown(raw_t, raw_r):
            return base._replace(source="tensors", note="several sequences on a side whose batch order is not known")
        t_parts = [tokens_first(t, kind, swap) for t in raw_t]
        r_parts = [tokens_first(r, kind, False) for r in raw_r]
        layout = [
            f"train {' + '.join(shape_text(t) for t in raw_t)}"
            + (" sequence-first, read batch-first" if swap else "")
            + _joined_note(train, "train"),
            f"rollout {' + '.join(shape_text(r) for r in raw_r)}" + _joined_note(rollout, "rollout"),
        ]
        tolerance = self.tolerances.for_dtypes(first.dtype)
        if len(t_parts) == 1 and len(r_parts) == 1:
            t, r = t_parts[0], r_parts[0]
            if t.shape != r.shape and t.numel() == r.numel() and kind != "parameter":
                t = t.reshape(r.shape)
            if t.shape != r.shape:
                return base._replace(
                    source="tensors",
                    note=f"shapes differ ({shape_text(t)} vs {shape_text(r)}): not compared",
                    layout="; ".join(layout),
                )
            metrics = elementwise(t, r)
            verdict = verdict_of(metrics, tolerance)
            order = find_reordering(t, r, tolerance, kind) if verdict == MISMATCH else ""
            layout.append(f"compared as {shape_text(r)}")
            return base._replace(
                source="tensors", verdict=verdict, metrics=metrics, layout="; ".join(layout), permutation=order
            )
        return self._compare_fused(base, train, rollout, t_parts, r_parts, kind, tolerance, layout)

    def _compare_fused(
        self,
        base: SlotEvidence,
        train: _Side,
        rollout: _Side,
        t_parts: list[Any],
        r_parts: list[Any],
        kind: str,
        tolerance: float,
        layout: list[str],
    ) -> SlotEvidence:
        import torch

        if len(t_parts) > 1 and len(r_parts) > 1:
            return base._replace(source="tensors", note="split modules on both sides: not compared element-wise")
        fused_is_train = len(t_parts) == 1
        fused, parts = (t_parts[0], r_parts) if fused_is_train else (r_parts[0], t_parts)
        fused_side, split_side = (train, rollout) if fused_is_train else (rollout, train)
        dim = fused_dim(fused, parts, kind)
        if dim is None:
            return base._replace(
                source="tensors", note="the parts do not make up the fused tensor's shape", layout="; ".join(layout)
            )
        options = arrangements(fused, [p.shape[dim] for p in parts], dim, fused_side.ranks)
        qkv = len(parts) == 3 and "qkv" in fused_side.names[0]
        arranged, equal = best_arrangement(
            options, parts, tolerance, lambda name: ("group" in name) == (qkv and "linear" in fused_side.names[0])
        )
        layout.append(f"{fused_side.names[0]} against {' + '.join(split_side.names)}: {arranged.name} along dim {dim}")
        if all(p.dtype == q.dtype and torch.equal(p, q) for p, q in zip(arranged.pieces, parts)):
            metrics = identical(fused.numel())
        else:
            joined_fused, joined_parts = torch.cat(arranged.pieces, dim), torch.cat(parts, dim)
            metrics = elementwise(*((joined_fused, joined_parts) if fused_is_train else (joined_parts, joined_fused)))
        verdict = verdict_of(metrics, tolerance)
        order = ""
        if verdict == MISMATCH:
            order = _parts_reordered(arranged.pieces, parts, equal, split_side.names, tolerance, kind, qkv)
        return base._replace(
            source="tensors", verdict=verdict, metrics=metrics, layout="; ".join(layout), permutation=order
        )

    def _compare_hashes(self, base: SlotEvidence, train: _Side, rollout: _Side) -> SlotEvidence:
        t_nodes = [nodes[0][1] for nodes in train.parts]
        r_nodes = [nodes[0][1] for nodes in rollout.parts]
        if any(len(nodes) > 1 for nodes in (*train.parts, *rollout.parts)):
            return base._replace(source="md5", note="calls or ranks joined: their hashes do not combine")
        parameter = base.target.startswith("parameters.")
        order = ""
        if len(t_nodes) == len(r_nodes) == 1:
            t_crc, r_crc = crc_of(t_nodes[0]), crc_of(r_nodes[0])
        elif parameter and (len(t_nodes) == 1 or len(r_nodes) == 1):
            fused, parts, names = (
                (t_nodes[0], r_nodes, rollout.names) if len(t_nodes) == 1 else (r_nodes[0], t_nodes, train.names)
            )
            t_crc, r_crc = crc_of(fused), combined_crc(parts)
            if t_crc is not None and t_crc != r_crc:
                order = reordered_parts(fused, parts, names)
                if not order and len(parts) == 3 and parts[1].shape == parts[2].shape:
                    # q, k, v may be interleaved per query group (Megatron): only a plain concatenation combines
                    return base._replace(
                        source="md5",
                        note="not their plain concatenation, and an interleaved fusion's hash does not combine",
                    )
        else:
            return base._replace(source="md5", note="an interleaved fusion: the parts' hashes do not combine")
        if t_crc is None or r_crc is None:
            return base._replace(source="md5", note="a hash is missing")
        if t_crc == r_crc:
            return base._replace(source="md5", verdict=ALIGNED, note="equal hashes: bitwise equal")
        note = "hashes differ: the tensors are not bitwise equal, by a difference statistics cannot size"
        weak = not parameter and any(self._in_place(key, base.target) for key in base.train_key.split("+"))
        if weak:
            note += (
                "; weak evidence: the model changes this slot in place after msprobe's hook (Megatron's residual "
                "add, the softmax mask), so its hash may be of a later value"
            )
        # a weight is a copy of a checkpoint: other bytes are other values; an activation may differ by rounding
        return base._replace(
            source="md5", verdict=MISMATCH if parameter else "", note=note, permutation=order, weak=weak
        )

    def _in_place(self, key: str, target: str) -> bool:
        """A train slot the model changes in place after the hook: named so, or a container's output that is such a
        slot's (the same statistics as a descendant's in-place output)."""
        slot = "output" if target.startswith("output") else "input"
        if any(name in key and slot == which for name, which in _IN_PLACE):
            return True
        entry = self.train.entries.get(key)
        if entry is None or slot != "output" or entry.output is None:
            return False
        prefix = entry.path + "."
        for position in range(entry.position - 1, max(entry.position - _SCAN_CHILDREN, -1), -1):
            child = self.train.entries[self.train.keys[position]]
            if not child.path.startswith(prefix):
                break
            if any(name in child.path for name, which in _IN_PLACE if which == "output") and _same_values(
                child.output, entry.output
            ):
                return True
        return False


def _same_values(a: TensorStats | None, b: TensorStats) -> bool:
    """The same tensor by its statistics (hashes aside: an in-place slot's may differ between its two entries)."""
    return a is not None and (a.shape, a.max, a.min, a.mean, a.norm) == (b.shape, b.max, b.min, b.mean, b.norm)


def _call_keys(part_key: str, group_keys: Sequence[str], dump: Dump) -> list[str]:
    """The dump keys of one part of a joined target id (a `forward.*` id stands for the group's calls of it)."""
    if part_key in dump.entries:
        return [part_key]
    if part_key.endswith(".*"):
        stem = part_key[:-1]
        calls = [k for k in group_keys if k.startswith(stem) and k in dump.entries]
        return sorted(calls, key=lambda k: dump.entries[k].call_index)
    return []


def _slot_of(entry: Any, slot: str) -> TensorStats | None:
    if entry is None:
        return None
    if slot == "output":
        return entry.output
    if slot == "input_args":
        return entry.input
    return entry.parameters.get(slot)


def _all_named(side: _Side) -> bool:
    return all(type(node.data_name) is str and node.data_name for nodes in side.parts for _, node in nodes)


def _joined_note(side: _Side, name: str) -> str:
    calls = max(len(nodes) for nodes in side.parts) // max(side.ranks, 1)
    notes = []
    if side.ranks > 1:
        notes.append(f"{side.ranks} tensor-parallel shards concatenated")
    if calls > 1:
        notes.append(f"{calls} calls joined along the tokens")
    return f" ({', '.join(notes)})" if notes else ""


def _batch_orders_differ(train: list[Any], rollout: list[Any]) -> bool:
    """The train's activations sequence-first against batch-first ones: [s, b, ...] against [b, s, ...], b > 1."""
    t, r = train[0], rollout[0]
    return (
        t.dim() >= 3
        and r.dim() >= 3
        and t.shape[0] != t.shape[1]
        and (t.shape[0], t.shape[1]) == (r.shape[1], r.shape[0])
    )


def _batch_order_unknown(train: list[Any], rollout: list[Any]) -> bool:
    """A 3-D activation of several sequences against another form ([tokens, h], or [b, s, h] of other sizes): read as
    tokens, its sequence-major or batch-major order would be a guess."""
    t, r = train[0], rollout[0]
    several = [x for x in (t, r) if x.dim() >= 3 and x.shape[0] > 1 and x.shape[1] > 1]
    return bool(several) and tuple(t.shape[:2]) != tuple(r.shape[:2])


def _shards_joined(shards: list[Any], merged: tuple[int, ...] | None, torch: Any) -> Any:
    """Tensor-parallel copies of one tensor: one when they are replicas, else concatenated along the dim the rank
    merge found them sharded along (where the merged statistics' size is the copies' sizes summed)."""
    first = shards[0]
    if all(s.shape == first.shape and torch.equal(s, first) for s in shards[1:]):
        return first
    for dim in range(first.dim()):
        if merged is not None and len(merged) == first.dim() and merged[dim] == sum(s.shape[dim] for s in shards):
            return torch.cat(shards, dim)
    return None


def _parts_reordered(
    pieces: list[Any], parts: list[Any], equal: list[bool], names: list[str], tolerance: float, kind: str, qkv: bool
) -> str:
    """Which parts hold another part's values, or which reordering inside a part makes it equal."""
    found = []
    for index, part in enumerate(parts):
        if equal[index]:
            continue
        other = next((j for j, piece in enumerate(pieces) if j != index and close(piece, part, tolerance)), None)
        if other is not None:
            found.append(f"{names[index]} holds the values the other side has for {names[other]}")
            continue
        order = find_reordering(pieces[index], part, tolerance, kind, "head" if qkv else "")
        if order:
            found.append(f"{names[index]}: {order}")
    swapped = [i for i in range(len(parts)) if not equal[i]]
    if len(found) == 2 and len(swapped) == 2 and all("holds the values" in f for f in found):
        a, b = swapped
        return f"blocks swapped: {names[a]} and {names[b]} hold each other's values"
    return "; ".join(found)
