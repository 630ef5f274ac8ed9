"""Records judge every plain 1:1 pair of an analysis at once (their statistics as arrays, compare.records); each such
comparison is what ModuleComparison makes of the pair on its own: the same verdicts, bucket, reasoning, errors and
detailed comparisons, on every fixture and on generated pairs (parameters and tensor kwargs on one side, both or
neither, statistics equal, close, far, missing or non-finite, dtypes alike or not)."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import FIXTURES, rollout_options, variants
from hypothesis import given, settings
from hypothesis import strategies as st
from test_target_table import pair, synced, tolerances

from rca_lsp.compare.groupform import routers_of_other_classes
from rca_lsp.compare.module import ModuleComparison, compare_module
from rca_lsp.compare.records import Comparator, Group, build_groups
from rca_lsp.compare.residual import branch_facts
from rca_lsp.compare.targettable import target_table
from rca_lsp.diagnose.run import analyze_paths
from rca_lsp.dumps.dump import Dump, ModuleEntry


def _observed(c: ModuleComparison) -> tuple[Any, ...]:
    """Everything a reader of a comparison can see."""
    return (
        c.train_keys,
        c.rollout_keys,
        c.output_consistency,
        c.input_args_consistency,
        c.parameter_consistency,
        c.kwargs_consistency,
        c.output_nonfinite_both,
        c.module_bucket,
        c.module_priority_rank,
        c.reasoning,
        repr(c.output_error),
        repr(list(c.judged_errors)),
        c.dtype_path,
        c.disagreements,
        c.train_disagreements,
        list(c.train_calls),
        list(c.rollout_calls),
        c.joins_calls,
        c.calls_note,
        c.output_dtype,
        c.dtype_mismatch,
        c.cardinality,
        c.aggregated,
        c.tolerances.key(),
        repr(c.spec_tuples()),
        repr(c.compare_targets()),
        repr(c.kwargs),
        c.tensor_evidence,
    )


def _one_by_one(comparator: Comparator, group: Group) -> ModuleComparison:
    train_keys, rollout_keys = group
    return compare_module(
        [comparator.train.entries[k] for k in train_keys],
        [comparator.rollout.entries[k] for k in rollout_keys],
        comparator.tolerances,
        branch_facts(comparator.train, comparator.rollout, train_keys, rollout_keys),
    )


def plain_pair(train: ModuleEntry, rollout: ModuleEntry) -> bool:
    """What groupform.plain_rows tells from the dumps' columns, told from the entries: compared target by target,
    nothing read in another form (branch outputs aside: the records tell them)."""
    return (
        (train.stream_output is None) == (rollout.stream_output is None)
        and not train.disagreements
        and not rollout.disagreements
        and not train.other_batches
        and not rollout.other_batches
        and not routers_of_other_classes(train.class_name, rollout.class_name)
    )


def _plain(comparator: Comparator, groups: list[Group]) -> int:
    """The plain pairs among `groups`: judged together as arrays by the records."""
    train, rollout = comparator.train, comparator.rollout
    return sum(
        len(t) == len(r) == 1
        and plain_pair(train.entries[t[0]], rollout.entries[r[0]])
        and not branch_facts(train, rollout, t, r)
        for t, r in groups
    )


@pytest.mark.parametrize("variant", variants())
def test_every_fixture_record_is_what_comparing_it_alone_gives(variant: str) -> None:
    folder = FIXTURES / variant
    analysis = analyze_paths(
        folder / "train", folder / "rollout", folder / "mapping_key.json", rollout_options=rollout_options(variant)
    )
    groups = build_groups(analysis.usable, analysis.train, analysis.rollout)
    # statistics only, as for dumps without tensors: the tensors' evidence is added to both ways alike
    comparator = Comparator(analysis.train, analysis.rollout, analysis.judge.tolerances, element_wise=False)
    records = comparator.records(groups)
    assert [_observed(r.comparison) for r in records] == [_observed(_one_by_one(comparator, g)) for g in groups]


def test_the_fixtures_have_plain_pairs_of_every_kind() -> None:
    """The test above reaches the batch: most pairs of a real analysis are plain, with and without parameters."""
    folder = FIXTURES / "vllm_healthy"
    analysis = analyze_paths(folder / "train", folder / "rollout", folder / "mapping_key.json")
    groups = build_groups(analysis.usable, analysis.train, analysis.rollout)
    assert _plain(analysis.comparator, groups) > len(groups) / 2
    assert sum(r.comparison.plain_positions is not None for r in analysis.records) == _plain(
        analysis.comparator, groups
    )
    assert any(r.comparison.parameter_consistency == "aligned" for r in analysis.records)


KWARGS = ["hidden_states", "residual", "attention_mask"]
PARAMETERS = ["weight", "bias", "scale"]


@st.composite
def entry_pair(draw: st.DrawFn, index: int) -> tuple[ModuleEntry, ModuleEntry]:
    """A train entry and a rollout entry of one module, their slots' statistics drawn as pairs."""
    output, primary = draw(pair()), draw(pair())
    names = [draw(st.lists(st.sampled_from(PARAMETERS), unique=True)) for _ in range(2)]
    kwarg_names = [draw(st.lists(st.sampled_from(KWARGS), unique=True, max_size=2)) for _ in range(2)]
    parameters = {name: draw(st.one_of(pair(), synced())) for name in PARAMETERS}
    kwargs = {name: draw(pair()) for name in KWARGS}
    sides = []
    for side in (0, 1):
        source = draw(st.sampled_from(["input_args.0", *(f"input_kwargs.{n}" for n in kwarg_names[side])]))
        path = f"layers.{index}.mlp"
        sides.append(
            ModuleEntry(
                key=f"Module.{path}.MLP.forward.0",
                position=index,
                path=path,
                class_name=draw(st.sampled_from(["MLP", "TopKRouter"])) if side else "MLP",
                call_index=0,
                input=primary[side],
                input_source=source,
                kwargs={n: s for n in kwarg_names[side] if (s := kwargs[n][side]) is not None},
                output=output[side],
                parameters={n: s for n in names[side] if (s := parameters[n][side]) is not None},
            )
        )
    return sides[0], sides[1]


def _dump(name: str, entries: list[ModuleEntry]) -> Dump:
    return Dump(name, None, None, None, [e.key for e in entries], {e.key: e for e in entries}, 0)


@settings(max_examples=200, deadline=None)
@given(st.data(), tolerances)
def test_generated_plain_pairs_are_judged_as_one_by_one(data: st.DataObject, tolerance: Any) -> None:
    pairs = [data.draw(entry_pair(i)) for i in range(data.draw(st.integers(1, 6)))]
    train, rollout = _dump("train", [t for t, _ in pairs]), _dump("rollout", [r for _, r in pairs])
    groups: list[Group] = [((t.key,), (r.key,)) for t, r in pairs]
    comparator = Comparator(train, rollout, tolerance)
    records = comparator.records(groups)
    assert [_observed(r.comparison) for r in records] == [_observed(_one_by_one(comparator, g)) for g in groups]
    # plain_rows (the dumps' columns) picks the pairs plain_pair names, and reads their targets' very statistics
    assert sum(r.comparison.plain_positions is not None for r in records) == _plain(comparator, groups)
    table = target_table([r.comparison for r in records], train, rollout)
    for side, slot in ((table.train_side, 3), (table.rollout_side, 4)):
        assert [id(side.stats(i)) for i in range(len(table.specs))] == [id(spec[slot]) for spec in table.specs]
