"""A tensor-parallel rollout dumped one msprobe step per engine step (vllm_tp2_decode_steps_*: real vLLM at TP=2
decoding, each worker dumping every forward as its own step): each step's ranks merged, then the steps joined; against
a train run of the same TP layout, compared rank by rank over every joined call."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from conftest import FIXTURES, expected, rollout_options

from rca_lsp.compare.rankview import held_by, merged_slots, per_rank_rows, rank_by_rank
from rca_lsp.compare.records import ModuleRecord
from rca_lsp.diagnose.analysis import Analysis
from rca_lsp.diagnose.run import analyze_paths
from rca_lsp.dumps.dump import Dump
from rca_lsp.dumps.load import DumpCache
from rca_lsp.dumps.sources import StepSpan, resolve_dump_source
from rca_lsp.model.tolerance import Tolerances
from rca_lsp.report.markdown import render_markdown
from rca_lsp.report.root_cause import root_cause_report
from rca_lsp.server.features.hover import hover_markdown

ROOT = FIXTURES / "vllm_tp2_decode_steps_healthy" / "rollout"
DOWN = "Module.model.layers.0.mlp.down_proj.RowParallelLinear.forward."
STATS = ("Max", "Min", "Mean", "Norm")


def _joined(root: Path = ROOT) -> Dump:
    return DumpCache().get(resolve_dump_source(root, StepSpan()))


def _step(n: int, root: Path = ROOT) -> Dump:
    return DumpCache().get(resolve_dump_source(root, n))


@pytest.mark.parametrize("fault", ["healthy", "norm_eps", "tp2_healthy", "rank_desync"])
def test_the_joined_tp2_decode_is_diagnosed_over_every_call(fault: str) -> None:
    variant = f"vllm_tp2_decode_steps_{fault}"
    folder = FIXTURES / variant
    assert rollout_options(variant).step == StepSpan()
    analysis = analyze_paths(
        folder / "train", folder / "rollout", folder / "mapping_key.json", rollout_options=rollout_options(variant)
    )
    assert analysis.issues == [] and analysis.records
    assert all(len(r.comparison.rollout_keys) == 5 for r in analysis.records)  # prefill + 4 decode steps
    assert root_cause_report(analysis)["joined_steps"]["rollout"]["steps"] == [0, 1, 2, 3, 4]
    assert root_cause_report(analysis)["parallel"]["rollout"]["ranks"] == [0, 1]
    cause = expected(variant)["root_cause"]
    if cause is None:
        assert analysis.suspects == []
        return
    first = analysis.suspects[0]
    assert (first.train_key, first.classification) == (cause["train_key"], cause["classification"])
    assert cause["rollout_key"].endswith(".forward.*")  # every call of the rollout module, across the steps
    assert list(first.record.comparison.rollout_keys) == [f"{cause['rollout_key'][:-1]}{n}" for n in range(5)]
    assert [s.train_key for s in analysis.suspects if s.credible_origin] == [first.train_key]


def test_a_joined_call_is_that_step_merged_from_its_ranks() -> None:
    joined = _joined()
    assert joined.joined_steps is not None and joined.joined_steps.steps == (0, 1, 2, 3, 4)
    assert joined.parallel is not None
    assert [joined.entries[f"{DOWN}{n}"].output.shape for n in range(5)] == [(8, 128)] + [(1, 128)] * 4
    for n in (0, 3):
        step = _step(n)
        assert step.parallel is not None
        once = [k for k in step.keys if k.endswith(".forward.0") and f"{k[:-1]}1" not in step.entries]
        assert len(once) > 20  # (vLLM's rotary embedding, shared by the layers, runs twice per step)
        for key in once:
            joined_key = f"{key[:-1]}{n}"
            assert joined.entries[joined_key].output == step.entries[key].output, joined_key
            assert joined.parallel.merges.get(joined_key) == step.parallel.merges.get(key), joined_key


def test_a_joined_key_opens_in_its_step_rank_file() -> None:
    joined = _joined()
    assert joined.file_key(f"{DOWN}3") == (str(ROOT / "step3" / "rank0" / "dump.json"), f"{DOWN}0")
    assert joined.file_key(f"{DOWN}0") == (str(ROOT / "step0" / "rank0" / "dump.json"), f"{DOWN}0")
    file, line = joined.location_of(f"{DOWN}3") or ("", -1)
    assert f'"{DOWN}0"' in Path(file).read_text().split("\n")[line]
    assert held_by(joined, f"{DOWN}3") == {"ranks": [0, 1], "key": f"{DOWN}0"}


def test_per_rank_statistics_of_a_joined_key_are_its_steps_ranks() -> None:
    joined = _joined()
    assert merged_slots(joined, [f"{DOWN}3"]) == ["input"]  # row-parallel: the input is sharded
    for n in (0, 3):
        rows = per_rank_rows(joined, [f"{DOWN}{n}"], ["input"], Tolerances())
        files = [json.loads((ROOT / f"step{n}" / f"rank{r}" / "dump.json").read_text())["data"] for r in (0, 1)]
        dumped = [tuple(f[f"{DOWN}0"]["input_args"][0][s] for s in STATS) for f in files]
        assert rows == [("input", 0, dumped[0]), ("input", 1, dumped[1])]
    assert per_rank_rows(joined, [f"{DOWN}0"], ["input"], Tolerances()) != per_rank_rows(
        joined, [f"{DOWN}3"], ["input"], Tolerances()
    )


def test_per_rank_statistics_of_every_call_are_each_rank_s_calls_joined() -> None:
    """A record joining the 5 calls: each rank's row is that rank's 5 step files' copies joined along the sequence
    (exact aggregates: max of maxes, numel-weighted mean, root of summed squared norms)."""
    joined = _joined()
    calls = [f"{DOWN}{n}" for n in range(5)]
    assert merged_slots(joined, calls) == ["input"]
    rows = per_rank_rows(joined, calls, ["input"], Tolerances())
    assert [(slot, rank) for slot, rank, _ in rows] == [("input", 0), ("input", 1)]
    for _, rank, (high, low, mean, norm) in rows:
        files = [json.loads((ROOT / f"step{n}" / f"rank{rank}" / "dump.json").read_text())["data"] for n in range(5)]
        parts = [f[f"{DOWN}0"]["input_args"][0] for f in files]
        tokens = [p["shape"][0] for p in parts]
        assert tokens == [8, 1, 1, 1, 1]
        assert high == max(p["Max"] for p in parts) and low == min(p["Min"] for p in parts)
        assert mean == pytest.approx(sum(p["Mean"] * t for p, t in zip(parts, tokens)) / sum(tokens), rel=1e-12)
        assert norm == pytest.approx(math.sqrt(sum(p["Norm"] ** 2 for p in parts)), rel=1e-12)


def test_how_the_ranks_were_merged_is_said_once() -> None:
    joined, step0 = _joined(), _step(0)
    assert joined.parallel is not None and step0.parallel is not None
    assert joined.parallel.notes == step0.parallel.notes and joined.parallel.layout == step0.parallel.layout
    assert joined.parallel.rank_count == 2 and len(joined.parallel.files) == 10
    assert joined.path.endswith("steps 0-4 (5 steps of 2 ranks joined)")


def _without(tmp_path: Path, key: str) -> Path:
    """The fixture's rollout with `key` left out of step 3's rank 1 file; returns that file."""
    shutil.copytree(ROOT, tmp_path / "rollout")
    rank1 = tmp_path / "rollout" / "step3" / "rank1" / "dump.json"
    document = json.loads(rank1.read_text())
    del document["data"][key]
    rank1.write_text(json.dumps(document))
    return rank1


def test_a_step_whose_merge_differs_is_named_in_the_notes(tmp_path: Path) -> None:
    norm = "Module.model.norm.RMSNorm.forward."
    rank1 = _without(tmp_path, f"{norm}0")  # rank 1 stopped mid-dump in step 3, before its last module
    joined, step0 = _joined(tmp_path / "rollout"), _step(0)
    assert joined.parallel is not None and step0.parallel is not None
    assert joined.parallel.notes[: len(step0.parallel.notes)] == step0.parallel.notes
    (extra,) = joined.parallel.notes[len(step0.parallel.notes) :]
    assert extra.startswith(f"step3: rank 1 ({rank1}) lacks 1 keys")
    assert joined.parallel.dropped == {f"{norm}*": f"step3: rank 1 ({rank1}) lacks it"}
    assert [f"{norm}{n}" in joined.entries for n in range(5)] == [True] * 4 + [False]  # step 3 has no call
    assert joined.file_key(f"{norm}3") == (str(tmp_path / "rollout" / "step4" / "rank0" / "dump.json"), f"{norm}0")


def test_a_step_merged_in_another_layout_is_said_so(tmp_path: Path) -> None:
    _without(tmp_path, f"{DOWN}0")  # the ranks of step 3 no longer dump the same keys: read as pipeline stages
    joined = _joined(tmp_path / "rollout")
    assert joined.parallel is not None and joined.parallel.layout.startswith("tp=2, pp=1")
    assert "step3: ranks laid out as tp=1, pp=2, ep=1, dp=1 (inferred from the dumps)" in joined.parallel.notes


def _analysed(variant: str) -> Analysis:
    folder = FIXTURES / variant
    return analyze_paths(
        folder / "train", folder / "rollout", folder / "mapping_key.json", rollout_options=rollout_options(variant)
    )


def _verdicts(analysis: Analysis, record: ModuleRecord, first_call_only: bool = False) -> list[str]:
    c = record.comparison
    rollout_keys = c.rollout_keys[:1] if first_call_only else c.rollout_keys
    return rank_by_rank(analysis.train, analysis.rollout, c.train_keys, rollout_keys, analysis.comparator.tolerances)


def test_both_sides_tp2_healthy_agree_rank_by_rank_on_every_record() -> None:
    """Megatron TP=2 against vLLM TP=2 decoding (vllm_tp2_decode_steps_tp2_healthy): every record, each rank's 5
    joined calls against the train rank's shard, agrees (fused-residual norms read as the records are)."""
    analysis = _analysed("vllm_tp2_decode_steps_tp2_healthy")
    assert root_cause_report(analysis)["parallel"]["train"]["ranks"] == [0, 1] and analysis.suspects == []
    mapping = json.loads((FIXTURES / "vllm_tp2_decode_steps_tp2_healthy" / "mapping_key.json").read_text())
    assert len(analysis.records) == len(mapping)
    assert [(r.train_key, v) for r in analysis.records if (v := _verdicts(analysis, r))] == []


def test_a_fault_on_one_rank_s_decode_steps_is_named_with_its_rank() -> None:
    """vllm_tp2_decode_steps_rank_desync: rank 1's gate_up_proj is wrong on the 4 decode steps only. Rank by rank
    over the joined calls names rank 1 alone."""
    variant = "vllm_tp2_decode_steps_rank_desync"
    truth = expected(variant)
    rank = truth["true_fault"]["rank"]
    analysis = _analysed(variant)
    first = root_cause_report(analysis)["first_divergence"]
    assert first["train_key"] == truth["root_cause"]["train_key"]
    assert first["rank_by_rank"] == [f"rank {rank}: output.0 differ"]
    record = analysis.suspects[0].record
    assert len(record.comparison.rollout_keys) == 5
    # the prefill call alone (what was compared before) holds 8 of the train's 12 tokens: both ranks "differ"
    assert [v.split(":")[0] for v in _verdicts(analysis, record, first_call_only=True)] == ["rank 0", "rank 1"]
    # each side's per-rank rows of the output: the rollout's are its 12 tokens' (5 calls joined), like the train's
    rows = {
        side: {row["rank"]: row for row in first[f"{side}_per_rank"] if row["slot"] == "output.0"}
        for side in ("train", "rollout")
    }
    assert sorted(rows["train"]) == sorted(rows["rollout"]) == [0, 1]
    for r in (0, 1):
        close = all(rows["train"][r][s] == pytest.approx(rows["rollout"][r][s], rel=1e-4, abs=1e-5) for s in STATS)
        assert close == (r != rank), r
    hover = hover_markdown(analysis, first["train_key"], None) or ""
    assert f"Rank by rank: rank {rank}: output.0 differ" in hover
    markdown = render_markdown(analysis)
    assert f"- Rank by rank: rank {rank}: output.0 differ\n" in markdown
    # the entry as the mapping names it (every call of the rollout module), and the calls it joined
    at = next(line for line in markdown.splitlines() if line.startswith("- At: "))
    assert (
        f"`{truth['root_cause']['rollout_key']}` (call 0; rollout: 5 calls: prefill of 8 tokens + 4 decode steps)" in at
    )
