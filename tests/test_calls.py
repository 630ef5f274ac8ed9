"""A rollout's calls (prefill + decode steps) joined along the sequence against one train forward."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from builders import tensor, write_dump, write_mapping

from rca_lsp.compare.records import Comparator, build_groups
from rca_lsp.diagnose.run import analyze_paths
from rca_lsp.dumps.load import DumpCache
from rca_lsp.model.tolerance import Tolerances
from rca_lsp.report.root_cause import root_cause_report
from rca_lsp.suggest import suggest_mapping

P = "Module.module.module.decoder.layers.0"
R = "Module.model.layers.0"
HIDDEN = 2
RNG = random.Random(3)
TOKENS = [3, 1, 1]  # prefill of 3 tokens, 2 decode steps


def node(vals: list[float], tokens: int, dtype: str = "torch.float32") -> dict:
    return tensor(vals, dtype, shape=[1, tokens, len(vals) // tokens])


def seq(tokens: int) -> list[float]:
    return [RNG.uniform(-2, 2) for _ in range(tokens * HIDDEN)]


def entry(inp: dict, out: dict, weight: list[float] | None = None, kwargs: dict | None = None) -> dict:
    return {
        "input_args": [inp],
        "input_kwargs": kwargs or {},
        "output": [out, None],
        "parameters": {"weight": tensor(weight)} if weight else {},
    }


def make(
    tmp_path: Path,
    *,
    decode_scale: float = 1.0,
    weight_change: float = 0.0,  # relative change of the down projection's inner weights in call 2 (not Max, Min)
    extreme_change: float = 0.0,  # relative change of its largest weight in call 2
    explicit: bool = False,
    mask: bool = False,
) -> tuple[Path, Path, Path]:
    total = sum(TOKENS)
    x, y, z = seq(total), seq(total), seq(total)
    norm_w, down_w = [1.0, 1.1], [0.5, -0.25, 0.125, 1.0]
    train_mask = {"attention_mask": tensor([-1e9] * 10 + [0.0] * 15)} if mask else None  # the full causal mask
    write_dump(
        tmp_path / "train" / "dump.json",
        {
            f"{P}.input_layernorm.RMSNorm.forward.0": entry(node(x, total), node(y, total), norm_w, train_mask),
            f"{P}.mlp.linear_fc2.RowParallelLinear.forward.0": entry(node(y, total), node(z, total), down_w),
        },
    )
    rollout: dict = {}
    start = 0
    for call, tokens in enumerate(TOKENS):
        part = slice(start * HIDDEN, (start + tokens) * HIDDEN)
        start += tokens
        scale = decode_scale if call > 0 else 1.0
        weight = down_w
        if call == 2:  # 0.5 and 0.125 are neither its Max nor its Min
            weight = [0.5 * (1 + weight_change), -0.25, 0.125 * (1 + weight_change), 1.0 * (1 + extreme_change)]
        mask_node = {"attention_mask": tensor([-1e9, 0.0] if call == 0 else [0.0, 0.0])} if mask else None
        rollout[f"{R}.input_layernorm.Qwen2RMSNorm.forward.{call}"] = entry(
            node(x[part], tokens), node(y[part], tokens), norm_w, mask_node
        )
        rollout[f"{R}.mlp.down_proj.Linear.forward.{call}"] = entry(
            node(y[part], tokens), node([v * scale for v in z[part]], tokens), weight
        )
    write_dump(tmp_path / "rollout" / "dump.json", rollout)

    def calls(name: str) -> str | list[str]:
        return [f"{R}.{name}.forward.{c}" for c in range(len(TOKENS))] if explicit else f"{R}.{name}.forward.*"

    mapping = {
        f"{P}.input_layernorm.RMSNorm.forward.0": calls("input_layernorm.Qwen2RMSNorm"),
        f"{P}.mlp.linear_fc2.RowParallelLinear.forward.0": calls("mlp.down_proj.Linear"),
    }
    return tmp_path / "train", tmp_path / "rollout", write_mapping(tmp_path / "mapping_key.json", mapping)


@pytest.mark.parametrize("explicit", [False, True], ids=["forward.*", "explicit list"])
def test_decode_calls_aggregate_into_the_one_train_forward(tmp_path: Path, explicit: bool) -> None:
    analysis = analyze_paths(*make(tmp_path, explicit=explicit))
    assert analysis.issues == [] and analysis.suspects == []
    record = analysis.by_train_key[f"{P}.mlp.linear_fc2.RowParallelLinear.forward.0"]
    assert record.comparison.output_consistency == record.comparison.input_args_consistency == "aligned"
    assert record.comparison.parameter_consistency == "aligned"
    assert record.comparison.calls_note == "rollout: 3 calls: prefill of 3 tokens + 2 decode steps"
    assert len(record.comparison.rollout_keys) == 3
    output = record.comparison.output
    assert output.rollout.shape == (1, 5, 2) and output.shape_relation == "exact_match"


def test_a_decode_only_fault_is_found_inside_the_module(tmp_path: Path) -> None:
    analysis = analyze_paths(*make(tmp_path, decode_scale=1.02))
    first = analysis.suspects[0]
    assert (first.train_key, first.classification) == (
        f"{P}.mlp.linear_fc2.RowParallelLinear.forward.0",
        "in_module_impl_difference",
    )
    assert first.credible_origin


def test_weights_that_change_between_calls_are_a_finding(tmp_path: Path) -> None:
    analysis = analyze_paths(*make(tmp_path, weight_change=0.01))
    first = analysis.suspects[0]
    assert first.classification == "call_parameter_disagreement"
    assert "calls 0 and 2 disagree" in first.rationale
    assert [r["across"] for r in root_cause_report(analysis)["disagreements"]] == ["calls"]


def test_a_weights_extreme_that_changes_between_calls_at_all_is_a_finding(tmp_path: Path) -> None:
    """The same weights serve every call: an extreme off by 1e-7, far within float32's tolerance, is a disagreement
    (model.stats.extremes_differ), as it is between the two sides."""
    analysis = analyze_paths(*make(tmp_path, extreme_change=1e-7))
    first = analysis.suspects[0]
    assert first.classification == "call_parameter_disagreement"
    assert "calls 0 and 2 disagree" in first.rationale


def test_weights_that_change_within_the_tolerance_disagree_under_a_tighter_one(tmp_path: Path) -> None:
    """Calibration judges again under tighter tolerances, sharing the records none of whose verdicts can change:
    a weight that changed between calls by less than the fixed tolerance but more than the tighter one is a
    disagreement under it, as comparing anew finds."""
    analysis = analyze_paths(*make(tmp_path, weight_change=1e-5))
    assert analysis.suspects == []  # within float32's fixed 1e-4
    groups = build_groups(analysis.usable, analysis.train, analysis.rollout)
    base = Comparator(analysis.train, analysis.rollout, Tolerances())
    base.records(groups)
    tight = Tolerances({**Tolerances().by_dtype, "float32": 1e-6})
    shared = base.with_tolerances(tight).records(groups)
    anew = Comparator(analysis.train, analysis.rollout, tight).records(groups)
    buckets = [r.comparison.module_bucket for r in anew]
    assert "call_parameter_disagreement" in buckets
    assert [r.comparison.module_bucket for r in shared] == buckets
    assert [r.comparison.disagreements for r in shared] == [r.comparison.disagreements for r in anew]


def test_attention_masks_are_not_compared_across_joined_calls(tmp_path: Path) -> None:
    analysis = analyze_paths(*make(tmp_path, mask=True))
    record = analysis.by_train_key[f"{P}.input_layernorm.RMSNorm.forward.0"]
    assert record.comparison.kwargs_consistency != "mismatch" and analysis.suspects == []


def test_an_unknown_all_calls_key_is_reported(tmp_path: Path) -> None:
    train, rollout, mapping = make(tmp_path)
    text = mapping.read_text().replace("down_proj.Linear.forward.*", "down_prj.Linear.forward.*")
    mapping.write_text(text)
    analysis = analyze_paths(train, rollout, mapping)
    issue = analysis.issues[0]
    assert issue.code == "unknown-rollout-key" and "no calls of this module" in issue.message


def test_suggest_mapping_proposes_every_call_of_the_counterpart(tmp_path: Path) -> None:
    train, rollout, mapping = make(tmp_path)
    cache = DumpCache()
    result = suggest_mapping(cache.get(train), cache.get(rollout))
    assert result.mapping == json.loads(mapping.read_text())
    assert analyze_paths(train, rollout, mapping).suspects == []


def test_train_micro_batches_against_rollout_calls_aggregate_both_sides(tmp_path: Path) -> None:
    """Two train micro-batches (forward.0, forward.1) against three rollout calls of other token counts: both
    train keys name the rollout module's every call, which makes one group aggregated on both sides."""
    total = sum(TOKENS)
    x, y = seq(total), seq(total)
    split = 2  # train micro-batches of 2 and 3 tokens; rollout calls of 3, 1, 1
    train = {}
    for call, part in enumerate((slice(0, split * HIDDEN), slice(split * HIDDEN, total * HIDDEN))):
        tokens = (part.stop - part.start) // HIDDEN
        train[f"{P}.mlp.linear_fc2.RowParallelLinear.forward.{call}"] = entry(
            node(x[part], tokens), node(y[part], tokens), [1.0, 2.0]
        )
    write_dump(tmp_path / "train" / "dump.json", train)
    rollout, start = {}, 0
    for call, tokens in enumerate(TOKENS):
        part = slice(start * HIDDEN, (start + tokens) * HIDDEN)
        start += tokens
        rollout[f"{R}.mlp.down_proj.Linear.forward.{call}"] = entry(
            node(x[part], tokens), node(y[part], tokens), [1.0, 2.0]
        )
    write_dump(tmp_path / "rollout" / "dump.json", rollout)
    star = f"{R}.mlp.down_proj.Linear.forward.*"
    mapping = write_mapping(
        tmp_path / "mapping_key.json",
        {
            f"{P}.mlp.linear_fc2.RowParallelLinear.forward.0": star,
            f"{P}.mlp.linear_fc2.RowParallelLinear.forward.1": star,
        },
    )
    analysis = analyze_paths(tmp_path / "train", tmp_path / "rollout", mapping)
    assert analysis.issues == [] and analysis.suspects == [] and len(analysis.records) == 1
    comparison = analysis.records[0].comparison
    assert comparison.output_consistency == comparison.input_args_consistency == "aligned"
    assert comparison.calls_note == (
        "train: 2 calls (2+3 tokens); rollout: 3 calls: prefill of 3 tokens + 2 decode steps"
    )


def test_suggest_mapping_pairs_train_micro_batches_with_the_rollout_calls_holding_their_tokens(tmp_path: Path) -> None:
    """Train: 2 micro-batches of 5 tokens; rollout: 2 sequences each as prefill (3) + 2 decode steps = 6 calls."""

    def sequence_calls(values: list[float]) -> list[list[float]]:
        return [values[: 3 * HIDDEN], values[3 * HIDDEN : 4 * HIDDEN], values[4 * HIDDEN :]]

    train, rollout = {}, {}
    call = 0
    for batch in range(2):
        x, y = seq(5), seq(5)
        train[f"{P}.input_layernorm.RMSNorm.forward.{batch}"] = entry(node(x, 5), node(y, 5), [1.0, 1.1])
        for part_x, part_y in zip(sequence_calls(x), sequence_calls(y)):
            tokens = len(part_x) // HIDDEN
            rollout[f"{R}.input_layernorm.Qwen2RMSNorm.forward.{call}"] = entry(
                node(part_x, tokens), node(part_y, tokens), [1.0, 1.1]
            )
            call += 1
    write_dump(tmp_path / "train" / "dump.json", train)
    write_dump(tmp_path / "rollout" / "dump.json", rollout)
    cache = DumpCache()
    result = suggest_mapping(cache.get(tmp_path / "train"), cache.get(tmp_path / "rollout"))
    assert result.mapping == {
        f"{P}.input_layernorm.RMSNorm.forward.0": [f"{R}.input_layernorm.Qwen2RMSNorm.forward.{c}" for c in (0, 1, 2)],
        f"{P}.input_layernorm.RMSNorm.forward.1": [f"{R}.input_layernorm.Qwen2RMSNorm.forward.{c}" for c in (3, 4, 5)],
    }
    assert result.unmatched_rollout == []
    mapping = write_mapping(tmp_path / "mapping_key.json", result.mapping)
    analysis = analyze_paths(tmp_path / "train", tmp_path / "rollout", mapping)
    assert analysis.suspects == [] and len(analysis.records) == 2
    assert all(r.comparison.output_consistency == "aligned" for r in analysis.records)


def test_scalar_tensors_joined_over_calls_are_flat() -> None:
    """A 0-d tensor per call (a scalar kwarg or loss at every decode step) has no dim to join along: the joined
    statistics are those of the flat vector of the calls' values, not an error."""
    from rca_lsp.compare.calls import _joined
    from rca_lsp.model.stats import TensorStats

    parts = [TensorStats(dtype="torch.float32", shape=(), max=v, min=v, mean=v, norm=abs(v)) for v in (0.5, -2.0, 1.5)]
    joined = _joined(parts)  # type: ignore[arg-type]
    assert joined is not None and joined.shape == (3,) and joined.numel == 3
    assert (joined.max, joined.min, joined.norm) == (1.5, -2.0, (0.25 + 4.0 + 2.25) ** 0.5)
    assert joined.mean == pytest.approx(0.0)


@pytest.mark.parametrize("seed", range(5))
def test_aggregate_is_the_statistics_of_the_concatenation(seed: int) -> None:
    """aggregate against the statistics computed from the parts' definitions, with unknown statistics and sizes."""
    import math

    from rca_lsp.model.stats import TensorStats, aggregate

    rng = random.Random(seed)
    for _ in range(200):
        parts = []
        for _ in range(rng.randint(1, 6)):
            value = lambda: rng.choice([None] + [rng.uniform(-3, 3)] * 9)  # noqa: E731
            shape = rng.choice([None, (rng.randint(1, 4), 8)])
            parts.append(
                TensorStats(
                    dtype="torch.float32",
                    shape=shape,
                    max=value(),
                    min=value(),
                    mean=value(),
                    norm=abs(rng.uniform(0, 5)) if rng.random() > 0.1 else None,
                )
            )
        got = aggregate(parts)
        if len(parts) == 1:
            assert got is parts[0]  # one part is its own concatenation
            continue
        numels = [p.numel for p in parts]
        total = sum(numels) if all(n is not None for n in numels) else None
        assert got.shape == ((total,) if total is not None else None)
        assert got.max == (max(p.max for p in parts) if all(p.max is not None for p in parts) else None)
        assert got.min == (min(p.min for p in parts) if all(p.min is not None for p in parts) else None)
        norms = [p.norm for p in parts]
        assert got.norm == (math.sqrt(math.fsum(n * n for n in norms)) if None not in norms else None)
        means = [p.mean for p in parts]
        expected = math.fsum(m * n for m, n in zip(means, numels)) / total if total and None not in means else None
        assert got.mean == expected


@pytest.mark.parametrize("order", ["in_order", "shuffled"])
def test_earlier_call_before_is_the_last_position_of_an_earlier_call(tmp_path: Path, order: str) -> None:
    """Per dump position, the last earlier position whose call is earlier (-1: none), whether the calls come in dump
    order (msprobe's) or not: where a suspect's scan back for unmatched modules stops."""
    rng = random.Random(5)
    calls = sorted(rng.randrange(6) for _ in range(60))
    if order == "shuffled":
        rng.shuffle(calls)
    data = {
        f"Module.m{i}.Linear.forward.{call}": entry(node(seq(2), 2), node(seq(2), 2)) for i, call in enumerate(calls)
    }
    write_dump(tmp_path / "dump.json", data)
    dump = DumpCache().get(tmp_path)
    found = [entry.call_index for entry in dump.ordered_entries]
    assert found == calls
    expected = [max((p for p in range(at) if found[p] < call), default=-1) for at, call in enumerate(found)]
    assert dump.earlier_call_before == expected
