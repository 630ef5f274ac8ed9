"""The columnar target table judges every target exactly as `statistics.assess` and `stats.relative_error` do, one by
one: output_3's rows built from its arrays are those built target by target through `assess`, the same floats to
the last bit, whatever the statistics hold (equal, close, far, missing, non-finite, integer against floating, no
elements), the dtypes, the tolerances and the record's output verdict (a parameter's priority depends on it)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import FIXTURES, rollout_options, variants
from hypothesis import given, settings
from hypothesis import strategies as st

from rca_lsp.compare.statistics import quick_verdict
from rca_lsp.compare.targettable import TargetTable, listed_side
from rca_lsp.diagnose.run import analyze_paths
from rca_lsp.model.stats import TensorStats, relative_error
from rca_lsp.model.tolerance import Tolerances
from rca_lsp.report.tables.values import target_row, target_rows

DTYPES = ["torch.float32", "torch.bfloat16", "torch.float16", "torch.int64", "torch.bool", None, "torch.float64"]
SHAPES = [(4, 2), (8,), (2, 1, 4), (0,), None, (1, 8)]
special = st.sampled_from([0.0, -0.0, 1.0, -1.0, math.nan, math.inf, -math.inf, 1e-300, 1e308, -1e308, None])
number = st.one_of(st.floats(allow_nan=False, allow_infinity=False, width=64), special)


@st.composite
def stats(draw: st.DrawFn) -> TensorStats | None:
    if draw(st.integers(0, 9)) == 0:
        return None
    return TensorStats(
        draw(st.sampled_from(DTYPES)),
        draw(st.sampled_from(SHAPES)),
        draw(number),
        draw(number),
        draw(number),
        draw(number),
    )


@st.composite
def pair(draw: st.DrawFn) -> tuple[TensorStats | None, TensorStats | None]:
    """Sides often alike (a copy, or each statistic nudged by a relative step), as real mapped pairs are."""
    train = draw(stats())
    if train is None or draw(st.booleans()):
        return train, draw(stats())
    steps = draw(st.lists(st.sampled_from([0.0, 1e-9, 1e-6, 1e-4, 1e-3, 0.05, 3.0]), min_size=4, max_size=4))
    values = [
        v if v is None or not math.isfinite(v) else v * (1 + step)
        for v, step in zip((train.max, train.min, train.mean, train.norm), steps)
    ]
    dtype = train.dtype if draw(st.booleans()) else draw(st.sampled_from(DTYPES))
    return train, TensorStats(dtype, train.shape if draw(st.booleans()) else draw(st.sampled_from(SHAPES)), *values)


@st.composite
def synced(draw: st.DrawFn) -> tuple[TensorStats, TensorStats]:
    """A synced weight's two sides: one floating dtype and size, the same extremes, the Mean and Norm nudged by a
    relative step (2e-3 and 1e-2: beyond the float16 and bfloat16 rounding bounds of a parameter's sums, within
    their tolerances; model.stats.parameter_sum_tolerance)."""
    dtype = draw(st.sampled_from(["torch.float32", "torch.bfloat16", "torch.float16"]))
    shape = draw(st.sampled_from([(4, 2), (8,), (1, 8)]))
    top, mean = draw(st.floats(-1e3, 1e3)), draw(st.floats(-1e3, 1e3))
    norm = draw(st.floats(1e-3, 1e4))
    steps = draw(st.lists(st.sampled_from([0.0, 1e-6, 1e-4, 1e-3, 2e-3, 1e-2, 0.05]), min_size=2, max_size=2))
    train = TensorStats(dtype, shape, top, top - 1.0, mean, norm)
    return train, TensorStats(dtype, shape, top, top - 1.0, mean * (1 + steps[0]), norm * (1 + steps[1]))


TARGETS = ["output.0", "input_args.0", "parameters.weight", "parameters.bias"]
tolerances = st.sampled_from(
    [
        Tolerances(),
        Tolerances({"float32": 1e-6, "bfloat16": 2e-2}),
        Tolerances({"float32": 0.0}),
        Tolerances({"float16": 5e-4, "bfloat16": 5e-3}),  # tighter than a parameter's rounding bound
    ]
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.one_of(pair(), synced()), min_size=1, max_size=12),
    st.lists(tolerances, min_size=1, max_size=3),
    st.data(),
)
def test_the_table_judges_as_assess_does(pairs, per_record, data) -> None:
    outputs = data.draw(st.lists(st.sampled_from(["aligned", "mismatch"]), min_size=3, max_size=3))
    specs = [(data.draw(st.sampled_from(TARGETS)), "t", "r", t, r, False) for t, r in pairs]
    cuts = sorted(
        data.draw(st.lists(st.integers(0, len(specs)), min_size=len(per_record) - 1, max_size=len(per_record) - 1))
    )
    starts = [0, *cuts, len(specs)]
    table = TargetTable(
        specs, listed_side([s[3] for s in specs]), listed_side([s[4] for s in specs]), starts, per_record
    )
    owner = [next(i for i in range(len(per_record)) if starts[i] <= at < starts[i + 1]) for at in range(len(specs))]
    expected = [target_row(s, per_record[owner[i]], outputs[owner[i]]) for i, s in enumerate(specs)]
    assert repr(target_rows(table, 0, len(specs), outputs)) == repr(expected)
    middle = len(specs) // 2
    assert repr(target_rows(table, middle, len(specs), outputs)) == repr(expected[middle:])
    errors = [relative_error(s[3], s[4]) for s in specs]
    assert repr([None if math.isnan(e) else e for e in table.relative_error.tolist()]) == repr(errors)


@settings(max_examples=500, deadline=None)
@given(pair(), tolerances)
def test_an_aligned_verdict_measures_the_relative_error(sides, tolerance) -> None:
    """ModuleComparison.output_error takes the output's error from its verdict when that judged it aligned with
    every statistic finite: then the verdict measured each statistic, and the largest is relative_error's."""
    train, rollout = sides
    consistency, flags, measured = quick_verdict(train, rollout, tolerance)
    if consistency == "aligned" and not flags:
        assert repr(measured) == repr(relative_error(train, rollout))


def _gathered(table: TargetTable) -> TargetTable:
    """The same targets with their statistics read from the spec's objects, as any table's could be."""
    sides = listed_side([s[3] for s in table.specs]), listed_side([s[4] for s in table.specs])
    per_record = [table.tolerances_of(int(start)) for start in table.starts[:-1] if start < len(table.specs)]
    return TargetTable(table.specs, *sides, table.starts.tolist(), per_record or [Tolerances()])


@pytest.mark.parametrize("variant", variants())
def test_an_analysis_table_read_from_the_dumps_columns_is_the_one_gathered_from_objects(variant: str) -> None:
    """Plain pairs' targets are rows of the dumps' columns (dumps.columns): the very statistics of their specs, and
    output_3's rows and errors built from them are those of a table gathered from the spec's objects."""
    folder = FIXTURES / variant
    analysis = analyze_paths(
        folder / "train", folder / "rollout", folder / "mapping_key.json", rollout_options=rollout_options(variant)
    )
    table = analysis.targets
    gathered = _gathered(table)
    for ours, theirs in ((table.train_values, gathered.train_values), (table.rollout_values, gathered.rollout_values)):
        np.testing.assert_array_equal(ours, theirs)
    assert table.dtype_names(table.train_dtype) == gathered.dtype_names(gathered.train_dtype)
    assert table.dtype_names(table.rollout_dtype) == gathered.dtype_names(gathered.rollout_dtype)
    np.testing.assert_array_equal(table.simple, gathered.simple)
    np.testing.assert_array_equal(table.relative_error, gathered.relative_error)
    outputs = [record.comparison.output_consistency for record in analysis.records]
    assert repr(target_rows(table, 0, len(table.specs), outputs)) == repr(
        target_rows(gathered, 0, len(table.specs), outputs)
    )
