"""Module comparisons of the plain mapping groups, made in one pass.

Most groups of a large analysis are plain: one train module against one rollout module, one call each, read as
they are (no residual stream carried apart, no branch output, no copies that disagree, no router of another form,
the same output dtype on both sides). `ModuleComparison.__init__` spent most of its ~35 us per group deciding that
none of its special cases applies. Here the plain groups are recognised in one pass, the pairs of statistics they
compare (output, input, common parameters, tensor kwargs) judged by `quick_verdict` one after the other, and each
comparison filled in with what `__init__` would have found; any other group is left to `ModuleComparison`.
tests/test_bulk.py checks that both give the same comparison for every plain group of every fixture.

Tried and dropped: judging the pairs as columns (`TargetTable`). Reading 2.6x10^5 pairs' statistics out of their
objects into arrays cost ~7 us a pair, three times `quick_verdict` on them (identical statistics, the common case,
are judged in ~1 us); columns pay only when the dumps are decoded into them."""

from __future__ import annotations

from typing import Sequence

from rca_lsp.compare.module import (
    ModuleComparison,
    _bucket,
    _common_parameters,
    _kwarg_pairs,
    _summarise,
    _summarise_parameters,
)
from rca_lsp.compare.residual import branch_facts
from rca_lsp.compare.statistics import NONFINITE_BOTH, Consistency, quick_verdict
from rca_lsp.dumps.dump import Dump, ModuleEntry
from rca_lsp.model.tolerance import Tolerances

Group = tuple[tuple[str, ...], tuple[str, ...]]
_VERDICTS = ("aligned", "mismatch")


def _is_plain(train: ModuleEntry, rollout: ModuleEntry) -> bool:
    """Nothing `ModuleComparison.__init__` treats specially applies to this 1:1 pair (its branch outputs aside)."""
    if (train.stream_output is None) != (rollout.stream_output is None):
        return False  # one side carries the residual stream apart: residual.stream_reading
    if train.disagreements or rollout.disagreements or train.other_batches or rollout.other_batches:
        return False
    t_class, r_class = train.class_name, rollout.class_name
    if t_class != r_class and ("router" in t_class.lower() or "router" in r_class.lower()):
        return False  # routers of other forms: module._routers_of_other_forms
    t_out, r_out = train.output, rollout.output
    # another output dtype may be a numeric path inside the module (ModuleComparison._dtype_path_differs)
    return t_out is None or r_out is None or t_out.dtype == r_out.dtype


class _Plain:
    """One plain group and where its judged pairs start in the flat lists."""

    __slots__ = ("group", "train", "rollout", "names", "kwarg_pairs", "any_kwargs", "names_differ", "start")

    def __init__(self, group: Group, train: ModuleEntry, rollout: ModuleEntry, start: int) -> None:
        self.group, self.train, self.rollout, self.start = group, train, rollout, start
        self.names = _common_parameters((train,), (rollout,))
        if train.kwargs or rollout.kwargs:
            self.kwarg_pairs, self.any_kwargs, self.names_differ = _kwarg_pairs([(train, rollout)])
        else:
            self.kwarg_pairs, self.any_kwargs, self.names_differ = [], False, False


def compare_plain(
    groups: Sequence[Group], train: Dump, rollout: Dump, tol: Tolerances
) -> dict[Group, ModuleComparison]:
    """The comparisons of the plain groups among `groups` (the others are not in the result)."""
    check_branches = bool(train.branch_outputs.returns or rollout.branch_outputs.returns)
    train_entries, rollout_entries = train.entries, rollout.entries
    plain: list[_Plain] = []
    train_stats: list = []
    rollout_stats: list = []
    for group in groups:
        train_keys, rollout_keys = group
        if len(train_keys) != 1 or len(rollout_keys) != 1:
            continue
        t, r = train_entries[train_keys[0]], rollout_entries[rollout_keys[0]]
        if not _is_plain(t, r) or (check_branches and branch_facts(train, rollout, train_keys, rollout_keys)):
            continue
        found = _Plain(group, t, r, len(train_stats))
        plain.append(found)
        # judged in ModuleComparison.__init__'s order: output, input, parameters, kwargs
        train_stats += (t.output, t.input)
        rollout_stats += (r.output, r.input)
        for name in found.names or ():
            train_stats.append(t.parameters[name])
            rollout_stats.append(r.parameters[name])
        for name, _, _ in found.kwarg_pairs:
            train_stats.append(t.kwargs[name])
            rollout_stats.append(r.kwargs[name])
    if not plain:
        return {}
    verdicts = [quick_verdict(t, r, tol) for t, r in zip(train_stats, rollout_stats)]
    return {found.group: _comparison(found, tol, train_stats, rollout_stats, verdicts) for found in plain}


def _comparison(
    found: _Plain,
    tol: Tolerances,
    train_stats: list,
    rollout_stats: list,
    verdicts: list[tuple[Consistency, int]],
) -> ModuleComparison:
    """What ModuleComparison.__init__ sets for a plain group, from the verdicts of its judged pairs."""
    at = found.start
    names = found.names
    parameters = len(names) if names else 0
    end = at + 2 + parameters + len(found.kwarg_pairs)
    t_out, r_out = train_stats[at], rollout_stats[at]
    states = [state for state, _ in verdicts[at:end]]
    output, inputs = states[0], states[1]
    if names is None:
        parameter_state = "not_applicable"
    elif not names:
        parameter_state = "missing"
    else:
        parameter_state = _summarise_parameters(states[2 : 2 + parameters])
    if not found.any_kwargs:
        kwargs_state = "not_applicable"
    elif not found.kwarg_pairs:
        kwargs_state = "missing"
    else:
        kwargs_state = _summarise(states[2 + parameters :])
        kwargs_state = "partial" if found.names_differ and kwargs_state == "aligned" else kwargs_state
    train_keys, rollout_keys = found.group
    t_numel = t_out.numel if t_out is not None else None
    r_numel = r_out.numel if r_out is not None else None
    shape_numel_mismatch = output == "mismatch" and None not in (t_numel, r_numel) and t_numel != r_numel
    bucket, priority, reasoning = _bucket(
        train_keys, rollout_keys, output, shape_numel_mismatch, inputs, parameter_state, kwargs_state, ()
    )
    comparison = object.__new__(ModuleComparison)
    attributes = {
        "_tol": tol,
        "train_keys": train_keys,
        "rollout_keys": rollout_keys,
        "train_calls": [],
        "rollout_calls": [],
        "_train": (found.train,),
        "_rollout": (found.rollout,),
        "_judged": list(zip(train_stats[at:end], rollout_stats[at:end])),
        "_reading": None,
        "_output_train": t_out,
        "_output_rollout": r_out,
        "output_consistency": output,
        "output_nonfinite_both": bool(verdicts[at][1] & NONFINITE_BOTH),
        "input_args_consistency": inputs,
        "_parameter_names": names or [],
        "parameter_consistency": parameter_state,
        "_kwarg_pairs": found.kwarg_pairs,
        "kwargs_consistency": kwargs_state,
        "dtype_path": False,
        "_fused_experts": False,
        "_routers": False,
        "_other_batches": False,
        "train_disagreements": (),
        "disagreements": (),
        "module_bucket": bucket,
        "module_priority_rank": priority,
        "reasoning": reasoning,
    }
    comparison.__dict__.update(attributes)
    return comparison
