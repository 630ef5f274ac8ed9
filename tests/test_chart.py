"""The divergence chart's data (report/chart.py) on every real fixture: its markers are where the root-cause report
says, its points are the analysis' records in execution order with the errors they were judged by."""

from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path

import msgspec
import orjson
import pytest
from conftest import FIXTURES, rollout_options, variants

from rca_lsp.compare.module import compare_module
from rca_lsp.compare.rankview import holders
from rca_lsp.compare.residual import branch_facts
from rca_lsp.diagnose.analysis import Analysis
from rca_lsp.diagnose.run import analyze_paths
from rca_lsp.dumps.dump import Dump, load_dump_file
from rca_lsp.model.keys import is_activation_like
from rca_lsp.model.stats import relative_error
from rca_lsp.report.chart import chart_data
from rca_lsp.report.chart_schema import CHART_VERSION, TARGET_KINDS, ChartCall, ChartData, encode_chart, key_text
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
    assert decoded["run_id"] == "run-1" and decoded["version"] == CHART_VERSION
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


def rank_view(chart: ChartData, call: ChartCall, rank: int) -> dict[str, list[float | None]]:
    """A rank's errors as the chart's reader expands them (editors/vscode/chart/src/ranks.ts): nothing where it
    holds no copy; its side's shared errors (the merged ones, but where SharedCopies say otherwise) where it holds
    one; its own where RankCopies say so."""
    count = len(call.modules.label)
    series: dict[str, list[float | None]] = {kind: [None] * count for kind in TARGET_KINDS}
    (copies,) = [c for c in call.ranks if c.rank == rank]
    held = {i for at in range(0, len(copies.held), 2) for i in range(copies.held[at], copies.held[at + 1])}
    for kind in TARGET_KINDS:
        for index in held:
            series[kind][index] = number(getattr(call.modules, kind).error[index])
    overlays = [s for s in call.shared if s.side == chart.ranks[rank].side] + [copies]
    for overlay in overlays:
        for at, index in enumerate(overlay.changed):
            if index in held:
                for kind in TARGET_KINDS:
                    series[kind][index] = number(getattr(overlay, kind)[at])
    return series


def view_of(chart: ChartData, side: str, rank: int) -> int:
    return next(i for i, r in enumerate(chart.ranks) if (r.side, r.rank) == (side, rank))


def test_each_train_rank_s_copy_shows_where_a_desynced_replica_parts() -> None:
    analysis, chart = analysed("tp2_sp_replica_desync")
    assert [(r.side, r.rank, r.coordinates, r.against) for r in chart.ranks] == [
        ("train", 0, "tp=0", "rollout merged"),
        ("train", 1, "tp=1", "rollout merged"),
    ]
    call = chart.calls[chart.default_call]
    (disagreement,) = root_cause_report(analysis)["disagreements"]
    index = [key_text(chart, k) for k in call.modules.train_key].index(disagreement["key"])
    assert call.first_divergence is not None and call.first_divergence.index == index
    reference, (member,) = disagreement["reference"], disagreement["members"]
    by_rank = {chart.ranks[c.rank].rank: c for c in call.ranks}
    assert by_rank[reference].mismatch == [] and by_rank[member].mismatch[0] == index
    member_view = rank_view(chart, call, view_of(chart, "train", member))
    reference_view = rank_view(chart, call, view_of(chart, "train", reference))
    assert member_view["parameters"][index] == pytest.approx(disagreement["rel_err"], rel=2e-3)
    assert reference_view["parameters"][index] == 0.0
    # a sharded slot is not a whole tensor: no per-rank error for it
    sharded = analysis.train.parallel.merges  # type: ignore[union-attr]
    keys = [key_text(chart, k) for k in call.modules.train_key]
    qkv = next(i for i, k in enumerate(keys) if "linear_qkv" in k)
    assert "output sharded" in sharded[keys[qkv]] and reference_view["output"][qkv] is None
    assert call.modules.output.error[qkv] is not None


RANK_FIXTURES = [v for v in variants() if v.startswith(("tp2_", "moe_ep2", "vllm_tp", "pp2_"))]


@pytest.mark.parametrize("variant", RANK_FIXTURES)
def test_each_rank_view_is_that_rank_file_s_own_copy_against_the_other_side(variant: str) -> None:
    """Oracle: every merged rank file loaded whole; each record's keys read from the files holding them (renamed as
    the logical dump names them), compared as the record is with the other side: the same rank's copies when both
    sides are laid out alike, else its merged entries on the slots held whole. The chart reads only the keys whose
    copies differ and shares the merged comparison elsewhere."""
    analysis, chart = analysed(variant)
    sides = {"train": analysis.train, "rollout": analysis.rollout}
    whole: dict[str, dict[str, dict]] = {}
    for dump in sides.values():
        for file in dump.parallel.files if dump.parallel is not None else ():
            whole[file] = load_dump_file(Path(file)).entries

    def parts(dump: Dump, keys: tuple[str, ...], rank: int) -> list | None:
        info = dump.parallel
        assert info is not None
        found = []
        for key in keys:
            peers, original = holders(info, key)
            files = [p for p in peers if info.ranks[p] == rank]
            if not files or original not in whole[info.files[files[0]]]:
                return None
            logical = dump.entries[key]
            entry = whole[info.files[files[0]]][original]
            found.append(
                msgspec.structs.replace(
                    entry, key=key, path=logical.path, call_index=logical.call_index, position=logical.position
                )
            )
        return found

    tolerances = analysis.judge.tolerances
    for at, view in enumerate(chart.ranks):
        side = "train" if view.side in ("train", "both") else "rollout"
        other = "rollout" if side == "train" else "train"
        for call in chart.calls:
            series = rank_view(chart, call, at)
            for index, record in enumerate(analysis.calls[call.call_index].records):
                comparison = record.comparison
                keys = {"train": comparison.train_keys, "rollout": comparison.rollout_keys}
                mine = parts(sides[side], keys[side], view.rank)
                theirs = (
                    parts(sides[other], keys[other], view.rank)
                    if view.side == "both"
                    else [sides[other].entries[k] for k in keys[other]]
                )
                if mine is None or theirs is None:
                    assert [series[kind][index] for kind in TARGET_KINDS] == [None] * 3, (variant, view, index)
                    continue
                pair = (mine, theirs) if side == "train" else (theirs, mine)
                specs = compare_module(
                    *pair, tolerances, branch_facts(analysis.train, analysis.rollout, keys["train"], keys["rollout"])
                ).target_specs()
                if view.side != "both":
                    how = "; ".join(sides[side].parallel.merges.get(k, "") for k in keys[side])  # type: ignore[union-attr]
                    specs = [s for s in specs if holds_whole(how, s.target)]
                for kind, letter in zip(TARGET_KINDS, "oip"):
                    errors = [
                        e
                        for s in specs
                        if s.target[0] == letter and (e := relative_error(s.train, s.rollout)) is not None
                    ]
                    expected = max(errors) if errors else None
                    assert series[kind][index] == (
                        None if expected is None else pytest.approx(expected, rel=1e-3, abs=1e-12)
                    ), (variant, view, call.label, comparison.train_key, kind)


def holds_whole(how: str, target: str) -> bool:
    """The slot of a target is held whole by each rank: neither sharded nor a partial result."""
    slot = "output" if target.startswith("output") else "input" if target.startswith("input_args") else target
    if slot in ("input", "output") and ("partial results" in how or "activations left out" in how):
        return False
    return f"{slot} sharded" not in how


def test_pipeline_stages_hold_their_own_modules() -> None:
    analysis, chart = analysed("pp2_in_module_diff")
    assert [(r.side, r.rank, r.coordinates) for r in chart.ranks] == [("train", 0, "pp=0"), ("train", 1, "pp=1")]
    call = chart.calls[0]
    layers = call.modules.layer
    held = {chart.ranks[c.rank].rank: c.held for c in call.ranks}
    first = [i for i, layer in enumerate(layers) if layer in (0, 1) or i == 0]
    assert held[0] == [0, max(first) + 1] and held[1] == [max(first) + 1, len(layers)]
    # the first divergence (layer 3) is the second stage's: its view shows it, the first stage's holds no copy
    marker = call.first_divergence
    assert marker is not None and layers[marker.index] == 3
    assert rank_view(chart, call, 1)["output"][marker.index] == number(call.modules.output.error[marker.index])
    assert rank_view(chart, call, 0)["output"][marker.index] is None


def test_a_tensor_parallel_rollout_s_ranks_are_views_against_the_train_side() -> None:
    _, chart = analysed("vllm_tp2_kv_replica_desync")
    assert [(r.side, r.rank, r.coordinates, r.against) for r in chart.ranks] == [
        ("rollout", 0, "tp=0", "train merged"),
        ("rollout", 1, "tp=1", "train merged"),
    ]


def test_a_decode_only_fault_on_one_engine_rank_parts_rank_by_rank() -> None:
    """Megatron TP=2 against vLLM TP=2 dumped one step per engine step: rank 1's decode steps use a desynced shard;
    the views pair train rank r with rollout rank r (shards against shards), and rank 1 parts where the report
    names it."""
    analysis, chart = analysed("vllm_tp2_decode_steps_rank_desync")
    assert [(r.side, r.rank, r.against) for r in chart.ranks] == [
        ("both", 0, "rollout rank 0"),
        ("both", 1, "rollout rank 1"),
    ]
    named = root_cause_report(analysis)["first_divergence"]
    assert [v.split(":")[0] for v in named["rank_by_rank"]] == ["rank 1"]
    call = chart.calls[chart.default_call]
    marker = call.first_divergence
    assert marker is not None and marker.train_key == named["train_key"]
    by_rank = {chart.ranks[c.rank].rank: c for c in call.ranks}
    assert by_rank[1].mismatch[0] == marker.index and marker.index not in by_rank[0].mismatch
    one, zero = (rank_view(chart, call, view_of(chart, "both", r))["output"][marker.index] for r in (1, 0))
    assert one is not None and zero is not None and one > 100 * zero


def test_ranks_are_named_by_their_coordinates_in_the_layout() -> None:
    _, chart = analysed("tp2_pp2_dp2_healthy")
    assert [(r.rank, r.coordinates) for r in chart.ranks] == [
        (0, "tp=0, pp=0, dp=0"),
        (1, "tp=1, pp=0, dp=0"),
        (4, "tp=0, pp=1, dp=0"),
        (5, "tp=1, pp=1, dp=0"),
    ]


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
