"""The value table (output_3) under the column names of `msprobe compare`'s statistics (summary) mode, so that
spreadsheets and scripts written for msprobe's compare_result files read it: train is msprobe's NPU side (`-tp`),
rollout its Bench side (`-gp`).

msprobe's columns come first, in its order (CompareConst.SUMMARY_COMPARE_RESULT_HEADER in
msprobe/core/common/const.py), computed as msprobe computes them (get_rela_diff_summary_mode in
core/compare/utils.py): `Max diff` = NPU max - Bench max, `MaxRelativeErr` = |diff / Bench max| * 100 written as
"<x>%" ("N/A" when the Bench value is 0), "Nan" for a NaN, "N/A" where a statistic is missing. Then the columns
of ours msprobe has no name for, under their own names (our relative errors are measured against the tensor's
scale, the verdicts against calibrated tolerances).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

from rca_lsp.compare.statistics import STAT_NAMES

COLUMN_STYLES = ("rca", "msprobe")  # output_3's column names: ours, or msprobe compare's
_STATS = ("max", "min", "mean", "l2norm")
MSPROBE_COLUMNS = (
    "NPU Name",
    "Bench Name",
    "NPU Dtype",
    "Bench Dtype",
    "NPU Tensor Shape",
    "Bench Tensor Shape",
    "NPU Requires_grad",
    "Bench Requires_grad",
    "Max diff",
    "Min diff",
    "Mean diff",
    "L2norm diff",
    "MaxRelativeErr",
    "MinRelativeErr",
    "MeanRelativeErr",
    "NormRelativeErr",
    *(f"NPU {stat}" for stat in _STATS),
    *(f"Bench {stat}" for stat in _STATS),
    "Requires_grad Consistent",
    "Result",
    "Err_message",
)
MSPROBE_LIST_COLUMNS = (4, 5)  # the shapes
# output_3's verdict of a target, the same in both column styles
VERDICT_COLUMNS = (
    *(f"{stat}_{part}" for stat in STAT_NAMES for part in ("rel_err", "status")),
    "tolerance",
    "numeric_consistency",
    "value_status",
    "priority",
    "priority_bucket",
    "focus",
)
# ours, kept beside msprobe's (train_key/rollout_key: the module keys the tensor names start with)
_KEPT = ("train_key", "rollout_key", "target", "aggregated", "dtype_match", "shape_relation", *VERDICT_COLUMNS)
_RESULT = {"aligned": "pass", "mismatch": "error"}  # else (statistics missing): "warning", look at it
_NON_FINITE = {"nan": "Nan", "inf": "inf", "-inf": "-inf"}  # msprobe's spellings


def msprobe_name(key: str, target: str) -> str:
    """A compared target under msprobe's tensor name: keyword arguments are inputs too (`.input.<name>`)."""
    slot, _, rest = target.partition(".")
    return f"{key}.{'input' if slot in ('input_args', 'input_kwargs') else slot}.{rest}"


def _number(value: Any) -> float | None:
    """A statistic as a number (output_3 marks non-finite ones for writing: their text is nan, inf, -inf)."""
    if type(value) in (float, int):
        return float(value)
    spelled = str(value) if value is not None and type(value) is not bool else ""
    return float(spelled) if spelled in _NON_FINITE else None


def _spelled(value: float | None) -> Any:
    if value is None:
        return None
    return value if math.isfinite(value) else _NON_FINITE[str(value)]


def _differences(train: list[float | None], rollout: list[float | None]) -> list[Any]:
    diffs, relative = [], []
    for npu, bench in zip(train, rollout):
        if npu is None or bench is None:
            diffs.append("N/A")
            relative.append("N/A")
            continue
        diff = npu - bench
        diffs.append(_spelled(diff))
        if math.isnan(diff):
            relative.append("Nan")
        else:
            relative.append(f"{abs(diff / bench * 100)}%" if bench != 0 else "N/A")
    return diffs + relative


def msprobe_rows(columns: Sequence[str]) -> tuple[tuple[str, ...], Callable[[Sequence[Any]], tuple[Any, ...]]]:
    """The msprobe-named columns, and the conversion of a value-table row written under `columns` into them."""
    at = {name: index for index, name in enumerate(columns)}
    kept = [at[name] for name in _KEPT]
    train_at = [at[f"train_{stat}"] for stat in STAT_NAMES]
    rollout_at = [at[f"rollout_{stat}"] for stat in STAT_NAMES]
    key, rollout_key, target = at["train_key"], at["rollout_key"], at["target"]
    dtypes = (at["train_dtype"], at["rollout_dtype"])
    shapes = (at["train_shape"], at["rollout_shape"])
    consistency, reason = at["numeric_consistency"], at["reason"]

    def convert(row: Sequence[Any]) -> tuple[Any, ...]:
        train = [_number(row[i]) for i in train_at]
        rollout = [_number(row[i]) for i in rollout_at]
        return (
            msprobe_name(row[key], row[target]),
            msprobe_name(row[rollout_key], row[target]),
            row[dtypes[0]],
            row[dtypes[1]],
            row[shapes[0]],
            row[shapes[1]],
            None,  # requires_grad: not kept by the analysis
            None,
            *_differences(train, rollout),
            *map(_spelled, train),
            *map(_spelled, rollout),
            None,
            _RESULT.get(row[consistency], "warning"),
            row[reason],
            *(row[i] for i in kept),
        )

    return MSPROBE_COLUMNS + _KEPT, convert
