"""A mapping group's form, read from its entries before any statistic: what is compared (`TargetSpec`), which
parts see the same input, which parameters and tensor kwargs both sides have, the forms compared otherwise (per-expert
modules against fused experts, routers of other classes), and which 1:1 pairs are plain: compared target by target,
so that records can judge all of them at once."""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple, Sequence

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
        train_names, rollout_names = train[0].parameters.keys(), rollout[0].parameters.keys()
        if not train_names and not rollout_names:
            return None
        return sorted(train_names & rollout_names, key=weight_first)
    if not any(t.parameters for t in train) and not any(r.parameters for r in rollout):
        return None
    names: set[str] = set(train[0].parameters)
    for part in [*train[1:], *rollout]:
        names &= part.parameters.keys()
    return sorted(names, key=weight_first)


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


def plain_pair(train: ModuleEntry, rollout: ModuleEntry) -> bool:
    """A 1:1 pair ModuleComparison compares target by target, nothing read in another form: no residual stream
    carried apart on one side (branch outputs are the records' to tell), no routers of other forms, no activations
    of other batches, no disagreeing copies."""
    return (
        (train.stream_output is None) == (rollout.stream_output is None)
        and not train.disagreements
        and not rollout.disagreements
        and not train.other_batches
        and not rollout.other_batches
        and not routers_of_other_classes(train.class_name, rollout.class_name)
    )


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
