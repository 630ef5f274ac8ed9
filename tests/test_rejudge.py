"""Calibration re-judges every group under tightened tolerances: a record whose verdicts cannot change is the base
comparator's, shared (its errors measured as arrays), and every record is what comparing the group anew under the
calibrated tolerances gives."""

from __future__ import annotations

import pytest
from conftest import FIXTURES, rollout_options

from rca_lsp.compare.records import Comparator, build_groups
from rca_lsp.diagnose.run import analyze_paths
from rca_lsp.model.tolerance import Tolerances

# real dumps whose calibration tightens the tolerances: healthy (every group shared), faults (some compared anew)
VARIANTS = ["vllm_healthy", "healthy_fp32", "param_desync", "missing_activation", "decode_norm_eps", "tp2_healthy"]


def _verdicts(record: object) -> tuple[object, ...]:
    comparison = record.comparison  # type: ignore[attr-defined]
    return (
        comparison.output_consistency,
        comparison.input_args_consistency,
        comparison.parameter_consistency,
        comparison.kwargs_consistency,
        comparison.module_bucket,
        comparison.reasoning,
        comparison.tolerances.key(),
        tuple(record[1:]),  # type: ignore[index]
    )


@pytest.mark.parametrize("variant", VARIANTS)
def test_shared_records_are_what_comparing_anew_gives(variant: str) -> None:
    folder = FIXTURES / variant
    analysis = analyze_paths(
        folder / "train", folder / "rollout", folder / "mapping_key.json", rollout_options=rollout_options(variant)
    )
    assert analysis.judge is not analysis.comparator, f"{variant}: calibration should tighten its tolerances"
    groups = build_groups(analysis.usable, analysis.train, analysis.rollout)
    anew = Comparator(analysis.train, analysis.rollout, analysis.judge.tolerances).records(groups)
    assert [_verdicts(r) for r in analysis.records] == [_verdicts(r) for r in anew]
    base = analysis.comparator.records(groups)
    # a shared record keeps the base comparison's state (the very tuple of its keys: a comparison made anew has its own)
    shared = [r for r, b in zip(analysis.records, base) if r.comparison.train_keys is b.comparison.train_keys]
    assert len(shared) > len(groups) / 2, f"{variant}: {len(shared)} of {len(groups)} records shared"


def test_a_record_whose_error_lies_between_the_tolerances_is_compared_anew() -> None:
    folder = FIXTURES / "param_desync"
    analysis = analyze_paths(folder / "train", folder / "rollout", folder / "mapping_key.json")
    groups = build_groups(analysis.usable, analysis.train, analysis.rollout)
    loose = Comparator(analysis.train, analysis.rollout, Tolerances())
    before = loose.records(groups)
    # the largest output error of a record aligned under the loose tolerances, then a tolerance below it
    aligned = [r for r in before if r.comparison.output_consistency == "aligned" and r.comparison.output_error]
    assert aligned
    record = max(aligned, key=lambda r: r.comparison.output_error or 0.0)
    error, dtype = record.comparison.output_error, record.comparison.output_dtype
    assert error is not None and dtype is not None
    tight = loose.with_tolerances(Tolerances({**Tolerances().by_dtype, dtype.rpartition(".")[2]: error / 2}))
    after = dict(zip(groups, tight.records(groups)))
    changed = after[next(g for g, r in zip(groups, before) if r is record)]
    assert changed.comparison.output_consistency == "mismatch"
    assert changed.comparison is not record.comparison
