"""compare.bulk fills in a plain group's ModuleComparison without running its __init__: for every plain group of
every fixture (and of groups made to be plain but for one thing), both must be the same comparison, attribute for
attribute, and every group bulk leaves out must be one __init__ treats specially."""

from __future__ import annotations

import dataclasses

import msgspec
import pytest
from conftest import FIXTURES, rollout_options, variants

from rca_lsp.compare.bulk import compare_plain
from rca_lsp.compare.module import ModuleComparison
from rca_lsp.compare.records import build_groups
from rca_lsp.compare.residual import branch_facts
from rca_lsp.diagnose.analysis import _usable_mapping
from rca_lsp.diagnose.run import read_mapping_file
from rca_lsp.dumps.dump import Disagreement, Dump
from rca_lsp.dumps.load import DumpCache
from rca_lsp.model.stats import TensorStats
from rca_lsp.model.tolerance import Tolerances


def _groups(variant: str) -> tuple[Dump, Dump, list[tuple[tuple[str, ...], tuple[str, ...]]]]:
    folder = FIXTURES / variant
    cache = DumpCache()
    train = cache.get(rollout_options(variant).resolve(folder / "train"))
    rollout = cache.get(rollout_options(variant).resolve(folder / "rollout"))
    mapping = read_mapping_file(folder / "mapping_key.json")
    return train, rollout, build_groups(_usable_mapping(mapping.effective(), train, rollout), train, rollout)


def _state(comparison: ModuleComparison) -> dict[str, object]:
    comparison.output_error  # the cached property, measured as __init__'s comparisons measure it
    return dict(comparison.__dict__)


def _full(
    train: Dump, rollout: Dump, group: tuple[tuple[str, ...], tuple[str, ...]], tol: Tolerances
) -> ModuleComparison:
    train_keys, rollout_keys = group
    return ModuleComparison(
        [train.entries[k] for k in train_keys],
        [rollout.entries[k] for k in rollout_keys],
        tol,
        branch_facts(train, rollout, train_keys, rollout_keys),
    )


@pytest.mark.parametrize("variant", variants())
def test_bulk_comparisons_are_the_full_ones(variant: str) -> None:
    train, rollout, groups = _groups(variant)
    tol = Tolerances()
    bulk = compare_plain(groups, train, rollout, tol)
    assert bulk or not any(len(t) == len(r) == 1 for t, r in groups)  # some group of a 1:1 mapping is plain
    for group, comparison in bulk.items():
        assert _state(comparison) == _state(_full(train, rollout, group, tol)), group
    for group in groups:
        if group in bulk or len(group[0]) != 1 or len(group[1]) != 1:
            continue
        full = _full(train, rollout, group, tol)  # left out: something in it is not plain
        t, r = full._train[0], full._rollout[0]
        special = (
            (t.stream_output is None) != (r.stream_output is None),  # a stream reading may apply
            branch_facts(train, rollout, *group),
            full.disagreements,
            full._routers,
            full._other_batches,
            full._output_train is not None
            and full._output_rollout is not None
            and full._output_train.dtype != full._output_rollout.dtype,
        )
        assert any(special), group


def _stats(value: float, dtype: str = "torch.float32") -> TensorStats:
    return TensorStats(dtype=dtype, shape=[2, 4], max=value, min=-value, mean=value / 10, norm=value * 2)


@pytest.mark.parametrize(
    "change",
    ["none", "output_dtype", "disagreement", "other_batches", "router", "stream", "kwargs", "parameter", "nan"],
)
def test_each_special_case_is_left_to_the_full_comparison(change: str) -> None:
    """A plain pair, then one thing about it changed: bulk either leaves it out or gives __init__'s comparison."""
    train_dump, rollout_dump, groups = _groups("healthy_fp32")
    group = next(g for g in groups if g in compare_plain([g], train_dump, rollout_dump, Tolerances()))
    t, r = train_dump.entries[group[0][0]], rollout_dump.entries[group[1][0]]
    changed = {
        "none": (t, r),
        "output_dtype": (t, msgspec.structs.replace(r, output=_stats(1.0, "torch.bfloat16"))),
        "disagreement": (msgspec.structs.replace(t, disagreements=(Disagreement("output", "ranks", 0, (1,), 0.5),)), r),
        "other_batches": (msgspec.structs.replace(t, other_batches=True), r),
        "router": (msgspec.structs.replace(t, class_name="TopKRouter"), r),
        "stream": (t, msgspec.structs.replace(r, stream_output=_stats(2.0))),
        "kwargs": (
            msgspec.structs.replace(t, kwargs={"mask": _stats(1.0), "scale": _stats(3.0)}),
            msgspec.structs.replace(r, kwargs={"mask": _stats(1.0)}),
        ),
        "parameter": (
            msgspec.structs.replace(t, parameters={"weight": _stats(1.0), "bias": _stats(0.5)}),
            msgspec.structs.replace(r, parameters={"weight": _stats(1.0), "bias": _stats(0.7)}),
        ),
        "nan": (
            msgspec.structs.replace(t, output=_stats(float("nan"))),
            msgspec.structs.replace(r, output=_stats(float("nan"))),
        ),
    }[change]
    train = dataclasses.replace(train_dump, entries={**train_dump.entries, t.key: changed[0]})
    rollout = dataclasses.replace(rollout_dump, entries={**rollout_dump.entries, r.key: changed[1]})
    bulk = compare_plain([group], train, rollout, Tolerances())
    full = _full(train, rollout, group, Tolerances())
    if change in ("none", "kwargs", "parameter", "nan"):
        assert _state(bulk[group]) == _state(full)
    else:
        assert bulk == {}
