"""The command line: demo, outputs, one-line errors with exit status 2."""

from __future__ import annotations

import filecmp
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES

from rca_lsp.cli.main import DEMO_DIR, main

DEMO_SOURCE = FIXTURES / "missing_activation"


def rca(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rca_lsp", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def analyze_args(folder: Path, out: Path) -> tuple[str, ...]:
    """`analyze` of a fixture folder's train/, rollout/ and mapping_key.json into `out`."""
    return (
        "analyze",
        "--train",
        str(folder / "train"),
        "--rollout",
        str(folder / "rollout"),
        "--mapping-key",
        str(folder / "mapping_key.json"),
        "--out-dir",
        str(out),
    )


def test_demo_is_a_copy_of_a_real_fixture() -> None:
    for name in ("mapping_key.json", "train/step0/rank0/dump.json", "rollout/step0/rank0/dump.json"):
        assert filecmp.cmp(DEMO_DIR / name, DEMO_SOURCE / name, shallow=False), name


def test_demo_runs_and_writes_every_output(tmp_path: Path) -> None:
    result = rca("analyze", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "top_hypothesis: train may be missing an activation-like operation" in result.stdout
    out = tmp_path / "rca_out"
    names = {p.name for p in out.iterdir()}
    for stem in ("output_1_key_mapping", "output_2_mapping", "output_3_value_compare", "output_4_module_analysis"):
        assert {f"{stem}.json", f"{stem}.csv"} <= names
    report = json.loads((out / "output_5_root_cause_report.json").read_text())
    assert report["root_cause_suspects"][0]["classification"] == "missing_or_extra_op_between_aligned_boundary"
    markdown = (out / "output_5_root_cause_report.md").read_text()
    for section in (
        "## Context",
        "## Final judgement",
        "## Evidence chain",
        "## Key suspects",
        "## Excluded candidates",
        "## Expert hypothesis",
        "## Next checks",
        "## Notes",
    ):
        assert section in markdown
    assert not [p for p in out.iterdir() if p.name.startswith(".")], "temporary files left behind"


def test_seed_flag_spelling_and_explicit_paths(tmp_path: Path) -> None:
    result = rca(
        "analyze",
        "--train",
        str(DEMO_SOURCE / "train"),
        "--rollout",
        str(DEMO_SOURCE / "rollout"),
        "--mapping_key",
        str(DEMO_SOURCE / "mapping_key.json"),
        "--out-dir",
        str(tmp_path / "o"),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    rows = json.loads((tmp_path / "o" / "output_3_value_compare.json").read_text())["rows"]
    assert any(r["aggregated"] for r in rows) and {r["target"] for r in rows} >= {
        "output.0",
        "input_args.0",
        "parameters.weight",
    }


def test_bad_inputs_give_one_line_errors(tmp_path: Path) -> None:
    broken = tmp_path / "mapping_key.json"
    broken.write_text('{\n  "a": "b",\n  "c" "d"\n}\n')
    cases = {
        "syntax": (["--mapping-key", str(broken)], f"{broken}:3"),
        "missing dump": (["--mapping-key", str(DEMO_SOURCE / "mapping_key.json")], "no such dump file or directory"),
    }
    for name, (extra, needle) in cases.items():
        train = str(DEMO_SOURCE / "train") if name == "syntax" else str(tmp_path / "nowhere")
        result = rca(
            "analyze",
            "--train",
            train,
            "--rollout",
            str(DEMO_SOURCE / "rollout"),
            *extra,
            "--out-dir",
            str(tmp_path / "o"),
            cwd=tmp_path,
        )
        assert result.returncode == 2, name
        assert needle in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert "Traceback" not in result.stderr
    several = tmp_path / "several"
    for step in ("step0", "step1"):
        target = several / step / "rank0"
        target.mkdir(parents=True)
        (target / "dump.json").write_bytes((DEMO_SOURCE / "train/step0/rank0/dump.json").read_bytes())
    args = (
        "analyze",
        "--train",
        str(several),
        "--rollout",
        str(DEMO_SOURCE / "rollout"),
        "--mapping-key",
        str(DEMO_SOURCE / "mapping_key.json"),
        "--out-dir",
        str(tmp_path / "o"),
    )
    result = rca(*args, cwd=tmp_path)
    assert (
        result.returncode == 2
        and "2 steps found: step0 (rank 0); step1 (rank 0); choose one with --step N" in result.stderr
        and len(result.stderr.strip().splitlines()) == 1
    )
    assert rca(*args, "--step", "1", cwd=tmp_path).returncode == 0
    result = rca(*args, "--step", "1", "--parallel", "tp=two", cwd=tmp_path)
    assert result.returncode == 2 and "--parallel: tp must be a positive integer" in result.stderr


def test_an_unwritable_output_folder_is_a_one_line_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    result = rca("analyze", "--out-dir", str(blocker / "out"), cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip() == f"rca-lsp: error: {blocker / 'out'}: cannot write the output files: Not a directory"


def test_an_out_dir_that_is_no_folder_is_refused_before_the_analysis(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Said before the dumps are read (minutes on large ones), in words: not mkdir's "File exists"."""

    def no_analysis(*args: object, **kwargs: object) -> None:
        raise AssertionError("the analysis ran")

    monkeypatch.setattr("rca_lsp.cli.main.analyze_paths", no_analysis)
    (tmp_path / "a_file").write_text("kept")
    (tmp_path / "a_link").symlink_to(tmp_path / "gone")
    cases = {
        "a_file": "a_file: cannot write the output files: a file, not a folder",
        "a_link": f"a_link: cannot write the output files: a symbolic link to nothing ({tmp_path / 'gone'})",
        "": "--out-dir: an empty folder name",  # e.g. --out-dir "$OUT" with OUT unset: not ./rca_out
    }
    for out, message in cases.items():
        given = str(tmp_path / out) if out else out
        assert main(list(analyze_args(DEMO_SOURCE, Path("placeholder")))[:-1] + [given]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.rstrip().endswith(message), err
    assert (tmp_path / "a_file").read_text() == "kept" and not (tmp_path / "gone").exists()


def test_unknown_keys_are_warnings_naming_the_line(tmp_path: Path) -> None:
    mapping = json.loads((DEMO_SOURCE / "mapping_key.json").read_text())
    key = next(iter(mapping))
    mapping[key + "x"] = mapping.pop(key)
    path = tmp_path / "m.json"
    path.write_text(json.dumps(mapping, indent=2))
    result = rca(
        "analyze",
        "--train",
        str(DEMO_SOURCE / "train"),
        "--rollout",
        str(DEMO_SOURCE / "rollout"),
        "--mapping-key",
        str(path),
        "--out-dir",
        str(tmp_path / "o"),
        cwd=tmp_path,
    )
    assert result.returncode == 0
    line = path.read_text().split("\n").index(next(l for l in path.read_text().split("\n") if key + "x" in l)) + 1
    assert f"{path}:{line}: unknown-train-key" in result.stderr


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (("--train-rank", "5"), "--train-rank 5 ignored: the train dump is one rank"),
        (("--parallel", "tp=2"), "--parallel tp=2 ignored: the train dump is one rank"),
        (("--rollout-parallel", "tp=4,pp=1"), "--rollout-parallel tp=4,pp=1 ignored: the rollout dump is one rank"),
        (("--parallel", "tp=1", "--train-rank", "0"), None),  # what one rank is: nothing to say
    ],
)
def test_a_rank_layout_given_for_a_dump_of_one_rank_is_said_to_be_ignored(
    tmp_path: Path, options: tuple[str, ...], said: str | None
) -> None:
    result = rca(*analyze_args(FIXTURES / "param_desync", tmp_path / "o"), "--no-chart", *options, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "ignored" in line]
    assert warnings == ([] if said is None else [warnings[0]]) and (said is None or said in warnings[0]), warnings


def test_a_parallel_run_is_merged_and_its_replica_disagreement_named(tmp_path: Path) -> None:
    folder = FIXTURES / "tp2_sp_replica_desync"
    result = rca(*analyze_args(folder, tmp_path / "o"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "- train: merged 2 ranks (tp=2, pp=1, ep=1, dp=1 (inferred from the dumps))" in result.stdout
    assert "sequence parallel" in result.stdout
    assert "rank_replica_disagreement: Module.module.module.decoder.layers.1.pre_mlp_layernorm" in result.stdout
    assert "- disagreements: 1" in result.stdout and "ranks 0 and 1 disagree" in result.stdout
    report = json.loads((tmp_path / "o" / "output_5_root_cause_report.json").read_text())
    assert report["parallel"]["train"]["sequence_parallel"] is True
    markdown = (tmp_path / "o" / "output_5_root_cause_report.md").read_text()
    assert "## Calibration, ranks and calls" in markdown and "Disagreement (train)" in markdown
    assert "- Calibration: float32: noise floor" in markdown


def test_a_drifted_data_parallel_replica_is_named_not_merged_as_shards(tmp_path: Path) -> None:
    folder = FIXTURES / "tp2_dp2_same_data_replica_drift"
    result = rca(*analyze_args(folder, tmp_path / "o"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "- train: merged 4 ranks (tp=2, pp=1, ep=1, dp=2 (inferred from the dumps))" in result.stdout
    key = "Module.module.module.decoder.layers.1.mlp.linear_fc1.ColumnParallelLinear.forward.0"
    assert f"rank_replica_disagreement: {key}" in result.stdout
    assert "- disagreements: 2" in result.stdout
    assert "ranks 0 and 2 disagree" in result.stdout and "ranks 1 and 3 disagree" in result.stdout


def test_pipeline_stages_given_explicitly(tmp_path: Path) -> None:
    folder = FIXTURES / "pp2_in_module_diff"
    args = analyze_args(folder, tmp_path / "o")
    inferred, given = rca(*args, cwd=tmp_path), rca(*args, "--parallel", "pp=2", cwd=tmp_path)
    assert inferred.returncode == given.returncode == 0, inferred.stderr + given.stderr
    assert "pp=2, ep=1, dp=1 (inferred from the dumps)" in inferred.stdout and "(given: pp=2)" in given.stdout
    for result in (inferred, given):
        assert "in_module_impl_difference: Module.module.module.decoder.layers.3.pre_mlp_layernorm" in result.stdout
    wrong = rca(*args, "--parallel", "tp=2,pp=2", cwd=tmp_path)
    assert wrong.returncode == 2 and wrong.stderr.strip().endswith(
        "--parallel tp=2,pp=2: the 1 rank(s) of a data-parallel group cannot be split into tp=2"
    )


def test_a_decoding_rollout_through_the_cli(tmp_path: Path) -> None:
    folder = FIXTURES / "decode_norm_eps"
    result = rca(*analyze_args(folder, tmp_path / "o"), cwd=tmp_path)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert "in_module_impl_difference: Module.module.module.decoder.layers.1.pre_mlp_layernorm" in result.stdout
    assert "- calibration: float32: noise floor" in result.stdout
    markdown = (tmp_path / "o" / "output_5_root_cause_report.md").read_text()
    assert "5 calls: prefill of 12 tokens + 4 decode steps" in markdown
    report = json.loads((tmp_path / "o" / "output_5_root_cause_report.json").read_text())
    assert report["first_divergence"]["calls"] == "rollout: 5 calls: prefill of 12 tokens + 4 decode steps"


def _analyze_demo(tmp_path: Path, *extra: str, mapping: Path | None = None, train: Path | None = None):
    return rca(
        "analyze",
        "--train",
        str(train or DEMO_SOURCE / "train"),
        "--rollout",
        str(DEMO_SOURCE / "rollout"),
        "--mapping-key",
        str(mapping or DEMO_SOURCE / "mapping_key.json"),
        "--out-dir",
        str(tmp_path / "o"),
        *extra,
        cwd=tmp_path,
    )


def test_tolerances_must_be_positive_finite_numbers_of_known_dtypes(tmp_path: Path) -> None:
    for value in (
        "float32=-1",
        "float32=0",
        "float32=nan",
        "float32=inf",
        "float32=-inf",
        "flaot32=0.1",
        "float32=abc",
        "float32",
    ):
        result = _analyze_demo(tmp_path, "--tolerance", value)
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and len(lines) == 1 and "Traceback" not in result.stderr, (value, result.stderr)
        assert lines[0].startswith("rca-lsp: error: --tolerance: ") and repr(value) in lines[0], lines[0]
    assert "unknown dtype 'flaot32'" in _analyze_demo(tmp_path, "--tolerance", "flaot32=0.1").stderr
    for value in ("float32=0.1", "bf16=0.05", "torch.float16=1e-3"):
        result = _analyze_demo(tmp_path, "--tolerance", value)
        assert result.returncode == 0, (value, result.stderr)


def test_a_named_pipe_or_a_folder_is_refused_not_read(tmp_path: Path) -> None:
    import os

    pipe = tmp_path / "pipe.json"
    os.mkfifo(pipe)
    for given, needle in (
        ({"mapping": pipe}, "cannot read mapping-key file: a named pipe (FIFO), not a regular file"),
        ({"mapping": tmp_path}, "cannot read mapping-key file: a directory, not a regular file"),
        ({"train": pipe}, "not a dump file or directory: a named pipe (FIFO)"),
    ):
        result = _analyze_demo(tmp_path, **given)  # a blocked read would end in subprocess's TimeoutExpired
        assert result.returncode == 2 and result.stderr.strip().splitlines() == [
            f"rca-lsp: error: {next(iter(given.values()))}: {needle}"
        ], result.stderr
    rank = tmp_path / "dumps" / "step0" / "rank0"
    rank.mkdir(parents=True)
    os.mkfifo(rank / "dump.json")
    from rca_lsp.base.errors import InputError
    from rca_lsp.dumps.dump import load_dump_file

    try:
        load_dump_file(rank / "dump.json")
    except InputError as error:
        assert "a named pipe (FIFO), not a regular file" in str(error)
    else:
        raise AssertionError("a named pipe was read as a dump")


def test_an_empty_mapping_says_nothing_was_compared(tmp_path: Path) -> None:
    empty = tmp_path / "empty.json"
    empty.write_text("{}")
    result = _analyze_demo(tmp_path, mapping=empty)
    assert result.returncode == 0, result.stderr
    assert "- nothing was compared: no mapped module pair" in result.stdout
    judgement = (tmp_path / "o" / "output_5_root_cause_report.md").read_text().split("## Final judgement")[1]
    judgement = judgement.split("##")[0]
    assert "Nothing was compared: no mapped module pair" in judgement and "aligned" not in judgement
    assert json.loads((tmp_path / "o" / "output_5_root_cause_report.json").read_text())["counts"]["mapped_groups"] == 0
    demo = _analyze_demo(tmp_path)
    assert "nothing was compared" not in demo.stdout


def test_a_null_entry_is_said_to_have_no_data_not_to_be_unknown(tmp_path: Path) -> None:
    dump = json.loads((DEMO_SOURCE / "train" / "step0" / "rank0" / "dump.json").read_text())
    mapping = json.loads((DEMO_SOURCE / "mapping_key.json").read_text())
    key = next(iter(mapping))
    dump["data"][key] = None
    train = tmp_path / "train.json"
    train.write_text(json.dumps(dump))
    result = _analyze_demo(tmp_path, train=train)
    assert result.returncode == 0, result.stderr
    warning = next(line for line in result.stderr.splitlines() if "unknown-train-key" in line)
    assert f"train key has no entry data in {train} (a null entry)" in warning and "unknown train key" not in warning


def test_serve_on_an_address_it_cannot_take_is_a_one_line_error(tmp_path: Path) -> None:
    """A port in use, out of range, or a host that does not resolve: not asyncio's traceback with status 1."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for address, said in {
            f"127.0.0.1:{port}": f"--tcp: cannot listen on 127.0.0.1:{port}: ",
            "127.0.0.1:99999": "--tcp: expected HOST:PORT (a port from 0 to 65535), got '127.0.0.1:99999'",
            "no-such-host.invalid:2087": "--tcp: cannot listen on no-such-host.invalid:2087: ",
        }.items():
            result = rca("serve", "--tcp", address, cwd=tmp_path)
            assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
            assert result.stderr.startswith(f"rca-lsp: error: {said}") and result.stderr.count("\n") == 1


def test_analyze_with_its_output_closed_still_ends_well(tmp_path: Path) -> None:
    """Started with stdout closed (`>&-`, as some schedulers do): Python's sys.stdout is None; the summary has
    nowhere to go, the files are written and the status is 0, not an AttributeError at exit."""
    result = subprocess.run(
        [sys.executable, "-m", "rca_lsp", *analyze_args(DEMO_SOURCE, tmp_path / "o")],
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
        preexec_fn=lambda: os.close(1),
    )
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert (tmp_path / "o" / "output_manifest.json").is_file()
