"""The columnar target table judges every target exactly as `statistics.assess` and `stats.relative_error` do, one by
one: output_3's rows built from its arrays are those built target by target through `assess`, the same floats to
the last bit, whatever the statistics hold (equal, close, far, missing, non-finite, integer against floating, no
elements), the dtypes, the tolerances and the record's output verdict (a parameter's priority depends on it)."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from rca_lsp.compare.statistics import quick_verdict
from rca_lsp.compare.targettable import TargetTable
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


TARGETS = ["output.0", "input_args.0", "parameters.weight", "parameters.bias"]
tolerances = st.sampled_from(
    [Tolerances(), Tolerances({"float32": 1e-6, "bfloat16": 2e-2}), Tolerances({"float32": 0.0})]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(pair(), min_size=1, max_size=12), st.lists(tolerances, min_size=1, max_size=3), st.data())
def test_the_table_judges_as_assess_does(pairs, per_record, data) -> None:
    outputs = data.draw(st.lists(st.sampled_from(["aligned", "mismatch"]), min_size=3, max_size=3))
    specs = [(data.draw(st.sampled_from(TARGETS)), "t", "r", t, r, False) for t, r in pairs]
    cuts = sorted(
        data.draw(st.lists(st.integers(0, len(specs)), min_size=len(per_record) - 1, max_size=len(per_record) - 1))
    )
    starts = [0, *cuts, len(specs)]
    table = TargetTable(specs, starts, per_record)
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
