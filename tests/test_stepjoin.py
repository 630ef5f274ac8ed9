"""A rollout dumped one msprobe step per engine step (as msprobe's vLLM integration dumps), joined as successive
calls: it reads as the same rollout dumped in one step (fixtures decode_steps_* are decode_* dumped that way)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES

from rca_lsp.base.errors import InputError
from rca_lsp.diagnose.run import SideOptions, analyze_paths
from rca_lsp.dumps.load import DumpCache
from rca_lsp.dumps.sources import StepSpan, parse_step, resolve_dump_source
from rca_lsp.server.pairing import Pair, find_pair


def _summary(variant: str, rollout: SideOptions) -> tuple[list[tuple[str, str, str]], list[tuple[str, str, bool]]]:
    folder = FIXTURES / variant
    analysis = analyze_paths(folder / "train", folder / "rollout", folder / "mapping_key.json", rollout_options=rollout)
    assert analysis.issues == []
    records = [
        (r.train_key, r.comparison.output_consistency, r.comparison.input_args_consistency) for r in analysis.records
    ]
    suspects = [(s.train_key, s.classification, s.credible_origin) for s in analysis.suspects]
    return records, suspects


@pytest.mark.parametrize("fault", ["healthy", "norm_eps"])
def test_joined_steps_analyse_as_the_rollout_dumped_in_one_step(fault: str) -> None:
    joined = _summary(f"decode_steps_{fault}", SideOptions(StepSpan()))
    assert joined == _summary(f"decode_{fault}", SideOptions())
    records, suspects = joined
    assert len(records) == 21 and (suspects == []) == (fault == "healthy")


def test_a_joined_key_opens_in_its_step_file_under_its_name_there() -> None:
    root = FIXTURES / "decode_steps_healthy" / "rollout"
    dump = DumpCache().get(resolve_dump_source(root, StepSpan()))
    assert dump.joined_steps is not None and dump.joined_steps.steps == (0, 1, 2, 3, 4)
    key = "Module.model.layers.0.mlp.down_proj.Linear.forward."
    assert [dump.entries[f"{key}{n}"].call_index for n in range(5)] == [0, 1, 2, 3, 4]
    assert dump.file_key(f"{key}3") == (str(root / "step3" / "rank0" / "dump.json"), f"{key}0")
    assert dump.file_key(f"{key}0") == (str(root / "step0" / "rank0" / "dump.json"), f"{key}0")
    assert dump.calls_of(f"{key[:-1]}.*") == [f"{key}{n}" for n in range(5)]
    assert dump.tokens_per_call == {0: 12, 1: 1, 2: 1, 3: 1, 4: 1}  # prefill, then one token per decode step


def test_a_span_joins_only_its_steps() -> None:
    root = FIXTURES / "decode_steps_healthy" / "rollout"
    source = resolve_dump_source(root, parse_step("1-3"))
    assert source.joined_steps == (1, 2, 3) and [p.parts[-3] for p in source.files] == ["step1", "step2", "step3"]
    assert resolve_dump_source(root, parse_step("4-")).step == 4  # one step: read as that step
    with pytest.raises(InputError, match="no step in 7-9 here"):
        resolve_dump_source(root, parse_step("7-9"))


@pytest.mark.parametrize(
    ("text", "parsed"),
    [(None, None), ("", None), ("3", 3), (3, 3), ("all", StepSpan()), ("ALL", StepSpan()), ("2-6", StepSpan(2, 6))]
    + [("2-", StepSpan(2, None)), ("-6", StepSpan(None, 6))],
)
def test_step_choices(text: str | int | None, parsed: object) -> None:
    assert parse_step(text) == parsed


@pytest.mark.parametrize(("text", "message"), [("6-2", "ends before it starts"), ("two", "expected a step number")])
def test_bad_step_choices_say_what_is_expected(text: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        parse_step(text, "--rollout-step")


def test_several_steps_without_a_choice_point_at_joining(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="--rollout-step all"):
        resolve_dump_source(FIXTURES / "decode_steps_healthy" / "rollout")


def test_steps_must_hold_the_same_ranks_and_the_step_that_differs_is_named(tmp_path: Path) -> None:
    shutil.copytree(FIXTURES / "vllm_tp2_decode_steps_healthy" / "rollout", tmp_path / "rollout")
    shutil.rmtree(tmp_path / "rollout" / "step2" / "rank1")
    with pytest.raises(InputError, match=r"step2: step2 holds rank 0 but step0 holds ranks 0-1: steps joined"):
        resolve_dump_source(tmp_path / "rollout", StepSpan())
    assert resolve_dump_source(tmp_path / "rollout", parse_step("3-4")).ranks == (0, 1, 0, 1)  # step2 left out


def test_the_cli_joins_the_steps_and_says_so(tmp_path: Path) -> None:
    folder = FIXTURES / "decode_steps_norm_eps"
    args = ["--train", folder / "train", "--rollout", folder / "rollout", "--mapping-key", folder / "mapping_key.json"]
    run = [sys.executable, "-m", "rca_lsp", "analyze", *map(str, args), "--out-dir", str(tmp_path / "out")]
    refused = subprocess.run(run, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "5 steps found" in refused.stderr and "--rollout-step all" in refused.stderr
    joined = subprocess.run([*run, "--rollout-step", "all"], capture_output=True, text=True, timeout=120)
    assert joined.returncode == 0, joined.stderr
    assert "- rollout: 5 steps (step0-step4) joined, their calls in succession" in joined.stdout
    assert "pre_mlp_layernorm" in joined.stdout.split("top_hypothesis")[1].splitlines()[1]


def test_the_server_pairs_by_the_rollout_step_of_rca_lsp_toml() -> None:
    pair = find_pair(FIXTURES / "decode_steps_healthy" / "mapping_key.json", (), [])
    assert isinstance(pair, Pair) and pair.rollout.joined_steps == (0, 1, 2, 3, 4)
    assert pair.train.joined_steps == () and len(pair.rollout.files) == 5
