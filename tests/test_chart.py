"""The divergence chart's data (report/chart.py) on every real fixture: its markers are where the root-cause report
says, its points are the analysis' records in execution order with the errors they were judged by."""

from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path

import orjson
import pytest
from conftest import FIXTURES, rollout_options, variants

from rca_lsp.diagnose.analysis import Analysis
from rca_lsp.diagnose.run import analyze_paths
from rca_lsp.dumps.dump import load_dump_file
from rca_lsp.dumps.ranks.slots import slot_stats
from rca_lsp.model.keys import is_activation_like
from rca_lsp.model.stats import relative_error
from rca_lsp.report.chart import chart_data
from rca_lsp.report.chart_schema import TARGET_KINDS, ChartCall, ChartData, encode_chart, key_text
from rca_lsp.report.root_cause import root_cause_report


@lru_cache(maxsize=None)
def analysed(variant: str) -> tuple[Analysis, ChartData]:
    folder = FIXTURES / variant
    analysis = analyze_paths(
        folder / "train", folder / "rollout", folder / "mapping_key.json", rollout_options=rollout_options(variant)
    )
    return analysis, chart_data(analysis, "run-1")


def number(value: float | str | None) -> float | None:
    return None if value is None else float(value)


@pytest.mark.parametrize("variant", variants())
def test_the_first_divergence_marker_is_the_module_the_report_names(variant: str) -> None:
    analysis, chart = analysed(variant)
    named = root_cause_report(analysis)["first_divergence"]
    marked = [(call, call.first_divergence) for call in chart.calls if call.first_divergence is not None]
    if named is None:
        assert marked == [] and chart.top_hypothesis == root_cause_report(analysis)["top_hypothesis"]
        return
    call = chart.calls[chart.default_call]
    assert call.call_index == named["call_index"]
    marker = call.first_divergence
    assert marker is not None
    assert (marker.train_key, marker.classification) == (named["train_key"], named["classification"])
    assert key_text(chart, call.modules.train_key[marker.index]) == named["train_key"]
    assert chart.strings[call.modules.suspect[marker.index]] == named["classification"]  # type: ignore[index]
    boundary = named["previous_aligned_boundary"]
    if boundary is None:
        assert call.boundary is None
    else:
        assert call.boundary is not None and call.boundary.train_key == boundary["train_key"]
        assert call.boundary.index < marker.index
        assert chart.strings[call.modules.output.consistency[call.boundary.index]] == "aligned"
    # the marked modules carry every target's statistics (the hover of the divergence shows its inputs too)
    details = call.modules.details[marker.index]
    assert [chart.strings[d.target] for d in details] == [
        spec.target for spec in analysis.by_train_key[named["train_key"]].comparison.target_specs()
    ]


@pytest.mark.parametrize("variant", variants())
def test_points_are_the_records_in_execution_order_judged_as_the_analysis_judged_them(variant: str) -> None:
    analysis, chart = analysed(variant)
    assert [c.call_index for c in chart.calls] == sorted(analysis.calls)
    for call in chart.calls:
        records = analysis.calls[call.call_index].records
        modules = call.modules
        keys = [key_text(chart, k) for k in modules.train_key]
        assert keys == [r.train_key for r in records]
        assert [key_text(chart, k) for k in modules.rollout_key] == [
            " + ".join(r.comparison.rollout_keys) for r in records
        ]
        positions = [analysis.train.entries[k].position for k in keys]
        assert positions == sorted(positions)
        columns = [modules.rollout_key, modules.label, modules.layer, modules.bucket, modules.noise_floor]
        columns += [getattr(getattr(modules, kind), field) for kind in TARGET_KINDS for field in ("error", "tolerance")]
        assert {len(column) for column in columns} == {len(records)}
        # layers: consecutive, covering every module once, one span per layer index run
        assert [i for span in call.layers for i in range(span.start, span.end)] == list(range(len(records)))
        assert all(modules.layer[i] == span.layer for span in call.layers for i in range(span.start, span.end))
        for index, record in enumerate(records):
            comparison = record.comparison
            strings = chart.strings
            assert strings[modules.bucket[index]] == comparison.module_bucket
            assert strings[modules.output.consistency[index]] == comparison.output_consistency
            assert strings[modules.parameters.consistency[index]] == comparison.parameter_consistency
            error, at = number(modules.output.error[index]), modules.output.tolerance[index]
            tolerance = chart.thresholds[at] if at is not None else None
            if comparison.output_consistency == "aligned" and error is not None:  # both rounded to 4 digits
                assert tolerance is not None and error <= tolerance * (1 + 1e-3), (record.train_key, error, tolerance)
            if comparison.output_error is not None:
                assert error == pytest.approx(comparison.output_error, rel=1e-3, abs=1e-300)
            output = next(s for s in comparison.target_specs() if s.target == "output.0")
            train_stats = modules.output_train[index]
            if output.train is not None and output.train.max is not None and math.isfinite(output.train.max):
                assert train_stats is not None
                assert number(chart.stats[train_stats][2]) == pytest.approx(output.train.max, rel=1e-4)


@pytest.mark.parametrize("variant", variants())
def test_the_chart_is_json_with_the_calibrated_noise_floor(variant: str) -> None:
    analysis, chart = analysed(variant)
    decoded = orjson.loads(encode_chart(chart))  # strict JSON: orjson refuses NaN/Infinity literals
    assert decoded["run_id"] == "run-1" and decoded["version"] == 1
    assert len(decoded["calls"]) == len(chart.calls)
    floors = {
        dtype: c["noise_floor"] for dtype, c in root_cause_report(analysis)["calibration"].items() if not c["fallback"]
    }
    assert {dtype: line.noise_floor for dtype, line in chart.calibration.items() if not line.fallback} == floors
    shown = {chart.thresholds[f] for call in chart.calls for f in call.modules.noise_floor if f is not None}
    assert shown <= {float(f"{f:.4g}") for f in floors.values()}


def explaining(call: ChartCall) -> list[str]:
    return [op.key for op in call.one_sided if op.explains]


@pytest.mark.parametrize("variant", ["missing_activation", "vllm_missing_activation", "decode_missing_activation"])
def test_one_sided_ops_lie_between_the_boundary_and_the_first_divergence(variant: str) -> None:
    analysis, chart = analysed(variant)
    named = root_cause_report(analysis)["first_divergence"]
    call = chart.calls[chart.default_call]
    between = named["unmatched_rollout_between_boundary"] + named["unmatched_train_between_boundary"]
    acts = [k for k in between if is_activation_like(k)]
    assert acts and sorted(explaining(call)) == sorted(acts)
    assert call.boundary is not None and call.first_divergence is not None
    for op in call.one_sided:
        assert op.key not in analysis.matched_train | analysis.matched_rollout and is_activation_like(op.key)
        if op.explains:
            assert call.boundary.index <= op.after < call.first_divergence.index


def test_a_clean_run_has_one_sided_ops_but_none_explains_a_divergence() -> None:
    _, chart = analysed("healthy_fp32")
    call = chart.calls[0]
    assert call.one_sided and explaining(call) == [] and call.first_divergence is None
    assert all(0 <= op.after < len(call.modules.train_key) for op in call.one_sided)


def test_micro_batches_are_calls_of_their_own_and_the_chart_opens_on_the_diverging_one() -> None:
    analysis, chart = analysed("microbatch_fault")
    assert [c.label for c in chart.calls] == ["forward.0", "forward.1"]
    assert chart.calls[0].first_divergence is None  # the first micro-batch is clean
    diverging = chart.calls[chart.default_call]
    assert diverging.label == "forward.1" and diverging.first_divergence is not None
    assert diverging.first_divergence.train_key == root_cause_report(analysis)["first_divergence"]["train_key"]


def test_a_decoding_rollout_is_one_call_noting_the_joined_decode_steps() -> None:
    _, chart = analysed("decode_missing_activation")
    assert len(chart.calls) == 1 and "decode steps" in chart.calls[0].note


def test_each_train_rank_s_copy_shows_where_a_desynced_replica_parts() -> None:
    analysis, chart = analysed("tp2_sp_replica_desync")
    assert chart.rank_side == "train"
    call = chart.calls[chart.default_call]
    (disagreement,) = root_cause_report(analysis)["disagreements"]
    index = [key_text(chart, k) for k in call.modules.train_key].index(disagreement["key"])
    assert call.first_divergence is not None and call.first_divergence.index == index
    by_rank = {series.rank: series for series in call.ranks}
    assert sorted(by_rank) == [0, 1]
    reference, (member,) = disagreement["reference"], disagreement["members"]
    assert by_rank[reference].mismatch == [] and by_rank[member].mismatch[0] == index
    assert number(by_rank[member].parameters[index]) == pytest.approx(disagreement["rel_err"], rel=2e-3)
    assert number(by_rank[reference].parameters[index]) == 0.0
    # a sharded slot is not a whole tensor: no per-rank error for it
    sharded = analysis.train.parallel.merges  # type: ignore[union-attr]
    keys = [key_text(chart, k) for k in call.modules.train_key]
    qkv = next(i for i, k in enumerate(keys) if "linear_qkv" in k)
    assert "output sharded" in sharded[keys[qkv]] and by_rank[0].output[qkv] is None


RANK_FIXTURES = [v for v in variants() if v.startswith(("tp2_", "moe_ep2", "vllm_tp")) and "pp2" not in v]


@pytest.mark.parametrize("variant", RANK_FIXTURES)
def test_each_rank_series_is_that_rank_file_s_own_copy_against_the_rollout(variant: str) -> None:
    """Oracle: every merged rank file loaded whole, its copy of each 1:1 module's replicated slots compared with the
    rollout's (the chart takes keys whose copies the merge saw equal from the merged entry)."""
    analysis, chart = analysed(variant)
    info = analysis.train.parallel
    if info is None or analysis.train.joined_steps is not None:
        assert chart.rank_side is None
        return
    merged = sorted(info.peers) if info.peers else list(range(len(info.files)))
    files = {index: load_dump_file(Path(info.files[index])).entries for index in merged}
    rollout = analysis.rollout.entries
    for call in chart.calls:
        assert [series.rank for series in call.ranks] == [info.ranks[i] for i in merged]
        records = analysis.calls[call.call_index].records
        for index, record in enumerate(records):
            comparison = record.comparison
            single = len(comparison.train_keys) == 1 and len(comparison.rollout_keys) == 1
            how = info.merges.get(comparison.train_key, "")
            holder, original = info.origins.get(comparison.train_key, (None, comparison.train_key))
            for file, series in zip(merged, call.ranks):
                mine = files[file].get(original) if holder in (None, file) else None
                if not single or mine is None:
                    assert (series.output[index], series.input[index], series.parameters[index]) == (None,) * 3
                    continue
                theirs = rollout[comparison.rollout_key]
                for kind, column in zip(
                    ("output", "input", "parameters"), (series.output, series.input, series.parameters)
                ):
                    slots = (
                        [kind]
                        if kind != "parameters"
                        else [f"parameters.{n}" for n in mine.parameters.keys() & theirs.parameters.keys()]
                    )
                    errors = [
                        e
                        for slot in slots
                        if f"{slot} sharded" not in how
                        and (e := relative_error(slot_stats(mine, slot), slot_stats(theirs, slot))) is not None
                    ]
                    expected = max(errors) if errors else None
                    assert number(column[index]) == (
                        None if expected is None else pytest.approx(expected, rel=1e-3, abs=1e-12)
                    ), (variant, call.label, comparison.train_key, file, kind)


def test_pipeline_stages_have_no_rank_series() -> None:
    _, chart = analysed("pp2_in_module_diff")
    assert chart.rank_side is None and all(call.ranks == [] for call in chart.calls)


def test_non_finite_statistics_and_errors_are_spelt_as_strings(tmp_path: Path) -> None:
    from builders import ROLLOUT
    from test_analysis import ACT, GATE, NAMES_ROLLOUT, NAMES_TRAIN, OUT, TRAIN, UP, X, mapping_for, mlp_layer, run

    train = mlp_layer(TRAIN, 0, NAMES_TRAIN, X, GATE, UP, ACT, OUT)
    rollout = mlp_layer(ROLLOUT, 0, NAMES_ROLLOUT, X, GATE, UP, ACT, OUT, act_module=True, fused_fc1=False)
    rollout[f"{ROLLOUT}.0.mlp.down_proj.Linear.forward.0"]["output"][0]["Max"] = math.nan
    chart = chart_data(run(tmp_path, train, rollout, mapping_for()))
    decoded = orjson.loads(encode_chart(chart))["calls"][0]["modules"]
    keys = [key_text(chart, k) for k in chart.calls[0].modules.train_key]
    index = keys.index(f"{TRAIN}.0.mlp.linear_fc2.Linear.forward.0")
    rollout_stats = orjson.loads(encode_chart(chart))["stats"][decoded["output_rollout"][index]]
    assert rollout_stats[2] == "NaN" and decoded["output"]["error"][index] == "Infinity"
    assert chart.strings[decoded["output"]["consistency"][index]] == "mismatch"
