"""A mapping group's form, read from its entries before any statistic: what is compared (`TargetSpec`), which
parts see the same input, which parameters and tensor kwargs both sides have, the forms compared otherwise (per-expert
modules against fused experts, routers of other classes), and which 1:1 pairs are plain: compared target by target,
so that records can judge all of them at once."""

from __future__ import annotations

from functools import lru_cache
from typing import Iterable, NamedTuple, Sequence

import numpy as np

from rca_lsp.dumps.columns import EntryColumns
from rca_lsp.dumps.dump import ModuleEntry
from rca_lsp.model.stats import TensorStats


class TargetSpec(NamedTuple):
    target: str
    train_key: str
    rollout_key: str
    train: TensorStats | None
    rollout: TensorStats | None
    aggregated: bool


SpecTuple = tuple[str, str, str, TensorStats | None, TensorStats | None, bool]  # a TargetSpec's fields


def pairwise(train: Sequence[ModuleEntry], rollout: Sequence[ModuleEntry]) -> list[tuple[ModuleEntry, ModuleEntry]]:
    """Which entries see the same input tensor: every part of a split side against the single fused module."""
    if len(train) == 1:
        return [(train[0], r) for r in rollout]
    if len(rollout) == 1:
        return [(t, rollout[0]) for t in train]
    return []


def is_experts_container(entry: ModuleEntry) -> bool:
    return (
        entry.path.rpartition(".")[2] == "experts"
        or "experts" in entry.class_name.lower()
        or "fusedmoe" in entry.class_name.lower()
    )


def is_fused_experts(train: Sequence[ModuleEntry], rollout: Sequence[ModuleEntry]) -> bool:
    """One side is a single module holding all experts; the other side several modules inside an experts module."""
    for one, many in ((train, rollout), (rollout, train)):
        if (
            len(one) == 1
            and len(many) > 1
            and is_experts_container(one[0])
            and all(".experts." in part.path for part in many)
            and any(part.parameters for part in many)
        ):
            return True
    return False


def routers_of_other_forms(train: Sequence[ModuleEntry], rollout: Sequence[ModuleEntry]) -> bool:
    """A router against a router of another class (Megatron TopKRouter against HF MixtralTopKRouter, ...)."""
    if len(train) != 1 or len(rollout) != 1:
        return False
    return routers_of_other_classes(train[0].class_name, rollout[0].class_name)


@lru_cache(maxsize=4096)
def routers_of_other_classes(train_class: str, rollout_class: str) -> bool:
    """Asked for every 1:1 group: a dump pair has a few hundred class pairs."""
    return train_class != rollout_class and ("router" in train_class.lower() or "router" in rollout_class.lower())


def common_parameters(train: Sequence[ModuleEntry], rollout: Sequence[ModuleEntry]) -> list[str] | None:
    """Parameter names both sides have (weight first); None when neither side has any (a container)."""
    if len(train) == 1 and len(rollout) == 1:
        return common_parameters_of(train[0].parameters.keys(), rollout[0].parameters.keys())
    if not any(t.parameters for t in train) and not any(r.parameters for r in rollout):
        return None
    names: set[str] = set(train[0].parameters)
    for part in [*train[1:], *rollout]:
        names &= part.parameters.keys()
    return sorted(names, key=weight_first)


def common_parameters_of(train: Iterable[str], rollout: Iterable[str]) -> list[str] | None:
    """The parameter names of two modules both have (weight first); None when neither has any."""
    train_names, rollout_names = set(train), set(rollout)
    if not train_names and not rollout_names:
        return None
    return sorted(train_names & rollout_names, key=weight_first)


def weight_first(name: str) -> tuple[bool, str]:
    return name != "weight", name


def paired_kwargs(
    parts: list[tuple[ModuleEntry, ModuleEntry]],
) -> tuple[list[tuple[str, ModuleEntry, ModuleEntry]], bool, bool]:
    """(name, train part, rollout part) for tensor kwargs on both sides of each `pairwise` pair; whether any
    exist; whether names differ."""
    pairs: list[tuple[str, ModuleEntry, ModuleEntry]] = []
    any_kwargs = names_differ = False
    for t, r in parts:
        if not t.kwargs and not r.kwargs:
            continue
        any_kwargs = True
        names_differ |= t.kwargs.keys() != r.kwargs.keys()
        for name in sorted(t.kwargs.keys() & r.kwargs.keys()):
            if not (t.input_source == r.input_source == f"input_kwargs.{name}"):  # else already the primary input
                pairs.append((name, t, r))
    return pairs, any_kwargs, names_differ


class PlainTargets(NamedTuple):
    """What a plain pair compares beyond its output and primary input (see `plain_targets`)."""

    parameter_names: list[str] | None  # common_parameters'
    kwarg_pairs: list[tuple[str, ModuleEntry, ModuleEntry]]  # paired_kwargs'
    any_kwargs: bool
    kwarg_names_differ: bool

    @property
    def parameter_count(self) -> int:
        """The common parameters compared; -1 when neither side has any (not applicable)."""
        return -1 if self.parameter_names is None else len(self.parameter_names)

    @property
    def kwarg_count(self) -> int:
        """The tensor kwargs compared; -1 when neither side passes any (not applicable)."""
        return len(self.kwarg_pairs) if self.any_kwargs else -1


def plain_targets(
    train: ModuleEntry,
    rollout: ModuleEntry,
    train_stats: list[TensorStats | None],
    rollout_stats: list[TensorStats | None],
) -> PlainTargets:
    """A plain pair's targets, their statistics appended to `train_stats` and `rollout_stats` in the order
    ModuleComparison judges them: output, primary input, each common parameter (weight first), each tensor kwarg
    both sides pass (records gather every plain pair's this way, to judge them at once)."""
    names = common_parameters((train,), (rollout,))
    kwarg_pairs, any_kwargs, names_differ = paired_kwargs([(train, rollout)])
    train_stats += (train.output, train.input)
    rollout_stats += (rollout.output, rollout.input)
    if names:
        train_stats += map(train.parameters.__getitem__, names)
        rollout_stats += map(rollout.parameters.__getitem__, names)
    for name, _, _ in kwarg_pairs:
        train_stats.append(train.kwargs[name])
        rollout_stats.append(rollout.kwargs[name])
    return PlainTargets(names, kwarg_pairs, any_kwargs, names_differ)


class PlainRows(NamedTuple):
    """Which of some 1:1 pairs are plain, and the targets of those without tensor kwargs as rows of the two dumps'
    columns (see `plain_rows`)."""

    by_rows: np.ndarray  # the plain pairs without tensor kwargs on either side (indexes into the pairs asked about)
    with_kwargs: np.ndarray  # the plain pairs with them: their kwargs are paired by name, object by object
    train_rows: np.ndarray  # by_rows[i]'s targets: rows starts[i]:starts[i + 1] of these, into each side's stats
    rollout_rows: np.ndarray
    starts: np.ndarray
    targets: list[PlainTargets]  # by_rows[i]'s (one object for the pairs of the same parameter names)
    parameter_counts: np.ndarray  # by_rows[i]'s common parameters; -1 when neither side has any


_NO_KWARGS: list[tuple[str, ModuleEntry, ModuleEntry]] = []


def plain_rows(
    train: EntryColumns, rollout: EntryColumns, train_positions: np.ndarray, rollout_positions: np.ndarray
) -> PlainRows:
    """Which of the 1:1 pairs (train entry at train_positions[i], rollout entry at rollout_positions[i]) are plain:
    compared target by target by ModuleComparison, nothing read in another form (no residual stream carried apart
    on one side: branch outputs are the records' to tell; no routers of other forms, no activations of other
    batches, no disagreeing copies); and `plain_targets` of those without tensor kwargs. From the columns: each
    pair's form read from integer codes, each distinct pair of codes judged once (classes: routers of other forms;
    parameter names: the common ones, weight first). The targets are in `plain_targets`' order: output, primary
    input, each common parameter."""
    t, r = train_positions, rollout_positions
    plain = (train.has_stream_output[t] == rollout.has_stream_output[r]) & ~train.odd[t] & ~rollout.odd[r]
    classes = _distinct(train.class_code[t], rollout.class_code[r], len(rollout.classes))
    routers = np.array(
        [routers_of_other_classes(train.classes[a], rollout.classes[b]) for a, b in classes.pairs], dtype=np.bool_
    )
    plain &= ~routers[classes.which]
    kwargs = train.has_kwargs[t] | rollout.has_kwargs[r]
    by_rows = np.flatnonzero(plain & ~kwargs)
    t, r = t[by_rows], r[by_rows]
    # rows: each side's output, its primary input, then its parameters at the common names' places
    signatures = _distinct(train.signature[t] + 1, rollout.signature[r] + 1, len(rollout.signatures) + 1)
    forms: list[PlainTargets] = []
    places: list[tuple[np.ndarray, np.ndarray]] = []
    for a, b in signatures.pairs:
        train_names = train.signatures[a - 1] if a else ()
        rollout_names = rollout.signatures[b - 1] if b else ()
        names = common_parameters_of(train_names, rollout_names)
        forms.append(PlainTargets(names, _NO_KWARGS, False, False))
        common = names or ()
        places.append(
            (
                np.array([train_names.index(n) for n in common], dtype=np.int64),
                np.array([rollout_names.index(n) for n in common], dtype=np.int64),
            )
        )
    widths = np.array([len(place[0]) for place in places], dtype=np.int64)[signatures.which] + 2
    starts = np.zeros(len(t) + 1, dtype=np.int64)
    np.cumsum(widths, out=starts[1:])
    train_rows = np.empty(int(starts[-1]), dtype=np.int64)
    rollout_rows = np.empty_like(train_rows)
    first = starts[:-1]
    train_rows[first], rollout_rows[first] = t, r
    train_rows[first + 1], rollout_rows[first + 1] = train.entry_count + t, rollout.entry_count + r
    for form, (train_place, rollout_place) in enumerate(places):
        if not len(train_place):
            continue
        members = np.flatnonzero(signatures.which == form)
        at = (first[members] + 2)[:, None] + np.arange(len(train_place))
        train_rows[at] = (2 * train.entry_count + train.parameter_start[t[members]])[:, None] + train_place
        rollout_rows[at] = (2 * rollout.entry_count + rollout.parameter_start[r[members]])[:, None] + rollout_place
    targets = [forms[form] for form in signatures.which.tolist()]
    counts = np.array([form.parameter_count for form in forms], dtype=np.int64)
    return PlainRows(
        by_rows, np.flatnonzero(plain & kwargs), train_rows, rollout_rows, starts, targets, counts[signatures.which]
    )


class _Distinct(NamedTuple):
    pairs: list[tuple[int, int]]  # each distinct pair of codes
    which: np.ndarray  # each row's, as an index into pairs


def _distinct(train_codes: np.ndarray, rollout_codes: np.ndarray, rollout_count: int) -> _Distinct:
    """The distinct (train code, rollout code) pairs of the rows (codes >= 0)."""
    joint = train_codes.astype(np.int64) * rollout_count + rollout_codes
    distinct, which = np.unique(joint, return_inverse=True)
    return _Distinct([divmod(code, rollout_count) for code in distinct.tolist()], which.reshape(-1))
