"""FSDP trainers (verl's `fsdp` / `fsdp2`) on real msprobe dumps (fixtures/fsdp*: 2 gloo ranks, each on its own
batch): the train rank whose model input equals the rollout's is the one compared, and the tool says which and
why; data no rank read is one finding at the embedding naming the closest rank; `--train-rank` / `train_rank`
choose a rank instead."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import FIXTURES, expected, variants
from test_cli import analyze_args

from rca_lsp.cli.main import main
from rca_lsp.diagnose.run import SideOptions, analyze_paths
from rca_lsp.report.markdown import render_markdown
from rca_lsp.report.mdtext import md_text
from rca_lsp.report.root_cause import root_cause_report

FSDP = [v for v in variants() if "data_parallel" in expected(v)]
OTHER_DATA = [v for v in FSDP if expected(v)["data_parallel"]["rollout_data"] == "other"]
VLLM = [v for v in FSDP if expected(v)["data_parallel"].get("rollout_engine") == "vllm"]


def analyse(variant: str, train_rank: int | None = None):
    folder = FIXTURES / variant
    return analyze_paths(
        folder / "train",
        folder / "rollout",
        folder / "mapping_key.json",
        train_options=SideOptions(data_rank=train_rank),
    )


def test_the_fsdp_fixtures_are_there() -> None:
    strategies = {expected(v)["data_parallel"]["strategy"] for v in FSDP}
    assert strategies == {"fsdp1", "fsdp2"}
    assert {expected(v)["data_parallel"]["rollout_data"] for v in FSDP} == {"rank0", "rank1", "other"}
    faulty = {(expected(v)["data_parallel"]["rollout_data"], expected(v)["clean"]) for v in FSDP}
    assert {("rank0", False), ("rank1", False)} <= faulty  # a fault with the rollout on either rank's data
    for strategy in ("fsdp1", "fsdp2"):  # a real vLLM rollout of either rank's data, a fault on rank 1's, other data
        cases = {
            (expected(v)["data_parallel"]["rollout_data"], expected(v)["clean"])
            for v in VLLM
            if expected(v)["data_parallel"]["strategy"] == strategy
        }
        assert {("rank0", True), ("rank1", True), ("rank1", False), ("other", False)} <= cases, strategy


@pytest.mark.parametrize("variant", FSDP)
def test_the_rank_that_read_the_rollouts_data_is_compared_and_named(variant: str) -> None:
    truth = expected(variant)["data_parallel"]
    analysis = analyse(variant)
    choice = analysis.comparator.data_choice
    assert choice is not None and not choice.given
    assert choice.matching == truth["matching_ranks"]
    info = analysis.train.parallel
    assert info is not None
    analysed = info.ranks[info.data_groups[info.analysed_group][0]]
    if truth["analysed_rank"] is not None:
        assert choice.rank == analysed == truth["analysed_rank"] and choice.matched
        assert f"train rank {truth['analysed_rank']} analysed" in choice.describe()
    else:
        assert not choice.matched and choice.rank == analysed
        assert f"analysed the closest, rank {choice.rank}" in choice.describe()
    for key in analysis.train.keys:  # go-to-definition, tensor files, the report's holders: the analysed rank's file
        assert Path(analysis.train.file_key(key)[0]).parent.name == f"rank{choice.rank}"
    report = root_cause_report(analysis)
    assert report["train_data_group"]["rank"] == choice.rank
    assert report["train_data_group"]["why"] == choice.describe()
    assert md_text(choice.describe()) in render_markdown(analysis, report=report)


@pytest.mark.parametrize("variant", VLLM)
def test_a_vllm_rollouts_flat_batch_is_matched_to_the_rank_that_read_it(variant: str) -> None:
    """vLLM runs a rank's two sequences as one prefill of 16 tokens (`[16]` ids, no batch dimension) where the FSDP
    rank read `[2, 8]`: the same ids, so the same number of elements and statistics."""
    choice = analyse(variant).comparator.data_choice
    assert choice is not None and choice.rollout_input.shape == (16,)
    assert {group.stats.shape for group in choice.groups} == {(2, 8)}
    assert choice.matching == expected(variant)["data_parallel"]["matching_ranks"]


@pytest.mark.parametrize("variant", [v for v in VLLM if not expected(v)["clean"]])
def test_the_cli_diagnoses_a_vllm_rollout_of_an_fsdp_rank(variant: str, tmp_path: Path, capsys) -> None:
    truth = expected(variant)
    cause, rank = truth["root_cause"], truth["data_parallel"]["analysed_rank"]
    assert main(list(analyze_args(FIXTURES / variant, tmp_path))) == 0
    out = capsys.readouterr().out
    told = f"train rank {rank} analysed" if rank is not None else "the two sides were fed different data"
    assert f"- train data-parallel group: {told}" in out
    assert f"{cause['classification']}: {cause['train_key']}" in out
    report = json.loads((tmp_path / "output_5_root_cause_report.json").read_text())
    assert report["root_cause_suspects"][0]["classification"] == cause["classification"]


@pytest.mark.parametrize("variant", OTHER_DATA)
def test_data_no_rank_read_is_one_finding_at_the_embedding(variant: str) -> None:
    analysis = analyse(variant)
    assert len(analysis.suspects) == 1
    (finding,) = analysis.suspects
    assert finding.classification == "input_data_mismatch" and finding.credible_origin
    assert "the two sides were fed different data" in finding.rationale
    assert f"the closest, rank {analysis.comparator.data_choice.rank}" in finding.rationale


def test_a_given_train_rank_is_compared_even_when_it_read_other_data() -> None:
    analysis = analyse("fsdp1_healthy_rank1", train_rank=0)
    choice = analysis.comparator.data_choice
    assert choice is not None and choice.given and choice.rank == 0 and not choice.matched
    assert choice.matching == [1]
    assert [s.classification for s in analysis.suspects] == ["input_data_mismatch"]
    assert "as asked" in choice.describe()
    given = analyse("fsdp1_healthy_rank1", train_rank=1)
    assert given.suspects == [] and given.comparator.data_choice.given


def test_the_cli_names_the_rank_and_takes_train_rank(tmp_path: Path, capsys) -> None:
    folder = FIXTURES / "fsdp2_weight_desync_rank1"
    assert main(list(analyze_args(folder, tmp_path / "auto"))) == 0
    out = capsys.readouterr().out
    assert "- train data-parallel group: train rank 1 analysed" in out
    assert "parameter_or_checkpoint_issue: Module.model.layers.1.self_attn.o_proj.Linear.forward.0" in out
    report = json.loads((tmp_path / "auto" / "output_5_root_cause_report.json").read_text())
    assert report["train_data_group"]["matching_ranks"] == [1] and not report["train_data_group"]["given"]

    assert main([*analyze_args(folder, tmp_path / "given"), "--train-rank", "0"]) == 0
    report = json.loads((tmp_path / "given" / "output_5_root_cause_report.json").read_text())
    assert report["train_data_group"]["given"] and report["train_data_group"]["rank"] == 0
    assert report["root_cause_suspects"][0]["classification"] == "input_data_mismatch"


def test_a_train_rank_not_in_the_dump_is_one_line(tmp_path: Path, capsys) -> None:
    folder = FIXTURES / "fsdp1_healthy_rank0"
    assert main([*analyze_args(folder, tmp_path), "--train-rank", "7"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "train rank 7" in err[0] and "ranks here: 0, 1" in err[0]


def test_a_plain_hf_mapping_names_the_wrappers_and_the_records_msprobe_skipped(tmp_path: Path) -> None:
    """A mapping written for the plain HF model (the rollout's names on both sides) against an FSDP2 train dump made
    under verl: the renamed classes are found under their FSDP names, `model` and `lm_head` are reported as not
    dumped (msprobe skipped them), not as unknown."""
    folder = FIXTURES / "fsdp2_norm_eps_rank1"
    rollout = json.loads((folder / "rollout" / "step0" / "rank0" / "dump.json").read_text())["data"]
    plain = {key: key for key in rollout if "rotary" not in key}
    (tmp_path / "mapping_key.json").write_text(json.dumps(plain, indent=2))
    analysis = analyze_paths(folder / "train", folder / "rollout", tmp_path / "mapping_key.json")
    by_key = {issue.key: issue for issue in analysis.issues}
    assert {issue.code for issue in analysis.issues} == {"unknown-train-key", "not-dumped"}
    assert {k for k, issue in by_key.items() if issue.code == "not-dumped"} == {
        "Module.model.Qwen2Model.forward.0",
        "Module.lm_head.Linear.forward.0",
    }
    assert "`verl` imported" in by_key["Module.lm_head.Linear.forward.0"].message
    layer = by_key["Module.model.layers.0.Qwen2DecoderLayer.forward.0"]
    assert layer.suggestions[0] == "Module.model.layers.0.FSDPQwen2DecoderLayer.forward.0"
    assert "wrapper parts (FSDP class prefix)" in layer.message
    embedding = by_key["Module.model.embed_tokens.Embedding.forward.0"]
    assert embedding.suggestions[0] == "Module.model.embed_tokens.FSDPEmbedding.forward.0"
    assert len(by_key) == 5  # the two renamed layers, the embedding, and the two records msprobe skipped


@pytest.mark.parametrize("variant", [v for v in FSDP if expected(v)["data_parallel"]["dtype"] == "bfloat16"])
def test_mixed_precision_is_judged_in_the_precision_fsdp_computes_in(variant: str) -> None:
    """FSDP mixed precision (param_dtype=bfloat16) against a bf16 rollout: msprobe's hooks see the all-gathered bf16
    copies FSDP computes with (the fp32 shards never), so every compared slot is bf16 and judged by bf16's tolerance:
    rounding noise (up to ~1e-2 here) is not a finding."""
    analysis = analyse(variant)
    assert analysis.suspects == []
    train = analysis.train
    assert {stats.dtype for entry in train.entries.values() for stats in entry.parameters.values()} == {
        "torch.bfloat16"
    }
    threshold = analysis.calibration.by_dtype["bfloat16"].threshold
    outputs = [r.comparison.output for r in analysis.records if r.comparison.output.train is not None]
    assert {o.train.dtype for o in outputs} == {"torch.bfloat16"} and {o.tolerance for o in outputs} == {threshold}
    assert max(r.comparison.output_error or 0.0 for r in analysis.records) > 1e-3  # real bf16 noise, tolerated


def test_when_several_ranks_read_the_rollouts_data_the_first_is_taken_and_said(tmp_path: Path) -> None:
    """Both ranks with rank 1's batch (rank 1's real dump copied over rank 0's): the first matching rank is
    compared, and the choice says the others read that data too."""
    folder = FIXTURES / "fsdp2_healthy_rank1"
    shutil.copytree(folder, tmp_path / "pair")
    ranks = tmp_path / "pair" / "train" / "step0"
    shutil.copy(ranks / "rank1" / "dump.json", ranks / "rank0" / "dump.json")
    analysis = analyze_paths(ranks.parent, tmp_path / "pair" / "rollout", tmp_path / "pair" / "mapping_key.json")
    choice = analysis.comparator.data_choice
    assert choice is not None and choice.matching == [0, 1] and choice.rank == 0
    assert "ranks 0, 1 all read that data: the first was taken" in choice.describe()
    assert analysis.suspects == []
