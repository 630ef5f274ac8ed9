"""Tensor- and md5-mode dumps (issue 26): real msprobe fixtures made by fixtures/generate_tensor.py, the safe
tensor-file reader, the element-wise comparison, layouts and the reorderings it names."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES, expected

from rca_lsp.diagnose.run import analyze_paths
from rca_lsp.report.root_cause import root_cause_report

torch = pytest.importorskip("torch")

from rca_lsp.compare.elementwise import elementwise  # noqa: E402
from rca_lsp.compare.hashes import crc32_combine  # noqa: E402
from rca_lsp.compare.layouts import arrangements  # noqa: E402
from rca_lsp.compare.permutation import find_reordering  # noqa: E402
from rca_lsp.dumps import tensorfile  # noqa: E402
from rca_lsp.dumps.tensorfile import read_tensor  # noqa: E402

TENSOR_VARIANTS = sorted(p.name for p in FIXTURES.glob("tensor_*")) + sorted(p.name for p in FIXTURES.glob("md5_*"))
ORDER_VARIANTS = [v for v in TENSOR_VARIANTS if (expected(v)["root_cause"] or {}).get("permutation")]


def analyse(folder: Path):
    return analyze_paths(folder / "train", folder / "rollout", folder / "mapping_key.json")


def test_the_fixtures_are_real_tensor_and_md5_dumps() -> None:
    for variant in TENSOR_VARIANTS:
        modes = expected(variant)["modes"]
        for side in ("train", "rollout"):
            dump = next((FIXTURES / variant / side).glob("step0/rank*/dump.json"))
            document = json.loads(dump.read_text())
            nodes = [e.get("output", [None])[0] for e in document["data"].values() if isinstance(e, dict)]
            first = next(n for n in nodes if isinstance(n, dict))
            if modes[side] == "tensor":
                assert (
                    document["task"] == "tensor" and (dump.parent / "dump_tensor_data" / first["data_name"]).is_file()
                )
            elif modes[side] == "md5":
                assert document["task"] == "statistics" and len(first["md5"]) == 8
            else:
                assert "data_name" not in first and "md5" not in first


@pytest.mark.parametrize("variant", ORDER_VARIANTS)
def test_the_reordering_is_named_where_it_enters(variant: str) -> None:
    cause = expected(variant)["root_cause"]
    analysis = analyse(FIXTURES / variant)
    first = analysis.suspects[0]
    assert (first.train_key, first.classification) == (cause["train_key"], cause["classification"])
    assert cause["permutation"] in first.rationale
    assert cause["hypothesis_mentions"] in root_cause_report(analysis)["top_hypothesis"]


def test_statistics_twins_keep_what_statistics_allow() -> None:
    """The same faults dumped in statistics mode: one module late, as the statistics alone can place them."""
    for twin in ("stats_weight_transposed", "stats_qkv_heads_reordered", "stats_gate_up_swapped", "stats_padding_side"):
        cause = expected(twin)["root_cause"]
        first = analyse(FIXTURES / twin).suspects[0]
        tensor_cause = expected("tensor_" + twin[len("stats_") :])["root_cause"]
        assert (first.train_key, first.classification) == (cause["train_key"], cause["classification"])
        assert (first.train_key, first.classification) != (tensor_cause["train_key"], tensor_cause["classification"])


def test_healthy_tensor_dumps_are_aligned_element_wise_in_every_layout() -> None:
    """Sequence-first against batch-first, fused against split, TP=2 shards, decode calls: every slot compared."""
    for variant in ("tensor_healthy", "tensor_tp2_healthy", "tensor_decode"):
        analysis = analyse(FIXTURES / variant)
        evidence = [e for r in analysis.records for e in r.comparison.tensor_evidence]
        assert analysis.suspects == [] and evidence
        assert {e.source for e in evidence} == {"tensors"} and {e.verdict for e in evidence} == {"aligned"}, variant
        layouts = " ".join(e.layout for e in evidence)
        assert "per query group" in layouts
        assert "sequence-first" in layouts or variant == "tensor_decode"  # its rollout's calls joined as [tokens, h]
    tp2 = " ".join(
        e.layout for r in analyse(FIXTURES / "tensor_tp2_healthy").records for e in r.comparison.tensor_evidence
    )
    assert "per tensor-parallel rank" in tp2 and "2 tensor-parallel shards concatenated" in tp2
    decode = " ".join(
        e.layout for r in analyse(FIXTURES / "tensor_decode").records for e in r.comparison.tensor_evidence
    )
    assert "5 calls joined along the tokens" in decode


def test_mixed_modes_compare_by_statistics_and_say_so() -> None:
    analysis = analyse(FIXTURES / "tensor_mixed")
    assert analysis.suspects == []
    assert any("mixed modes" in note for note in analysis.comparator.tensors.notes)


def test_md5_equal_hashes_are_bitwise_aligned() -> None:
    analysis = analyse(FIXTURES / "md5_healthy")
    evidence = [e for r in analysis.records for e in r.comparison.tensor_evidence]
    assert analysis.suspects == []
    assert sum(e.verdict == "aligned" and "bitwise" in e.note for e in evidence) >= 20
    weak = [e for e in evidence if e.weak]
    # Megatron's row-parallel outputs (and the containers returning them) get the residual added in place later
    assert any("linear_proj" in e.train_key for e in weak)
    assert all(e.target == "output.0" and e.verdict == "" and "weak evidence" in e.note for e in weak)


def test_a_pickled_callable_is_refused_without_being_run(tmp_path: Path) -> None:
    """A .pt is a pickle: a crafted one whose unpickling would run a command is refused, and the command never runs."""
    marker = tmp_path / "ran"
    (tmp_path / "dump_tensor_data").mkdir()
    script = (
        "import os, torch\n"
        "class Evil:\n"
        f"    def __reduce__(self): return (os.system, ('touch {marker}',))\n"
        f"torch.save(Evil(), '{tmp_path}/dump_tensor_data/evil.pt')\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True)
    read = read_tensor(str(tmp_path / "dump.json"), "evil.pt")
    assert read.tensor is None and "evil.pt" in read.problem and "refused" in read.problem
    assert not marker.exists()
    torch.save({"w": torch.ones(2)}, tmp_path / "dump_tensor_data" / "dict.pt")
    assert "not a tensor" in read_tensor(str(tmp_path / "dump.json"), "dict.pt").problem
    assert "not a plain file name" in read_tensor(str(tmp_path / "dump.json"), "../evil.pt").problem


def test_a_missing_or_cut_tensor_file_is_one_line_and_the_slot_keeps_its_statistics(tmp_path: Path) -> None:
    folder = tmp_path / "v"
    shutil.copytree(FIXTURES / "tensor_weight_transposed", folder)
    tensors = folder / "rollout" / "step0" / "rank0" / "dump_tensor_data"
    weight = tensors / "Module.model.layers.0.self_attn.o_proj.Linear.forward.0.parameters.weight.pt"
    weight.write_bytes(weight.read_bytes()[:200])
    (tensors / "Module.model.layers.0.self_attn.o_proj.Linear.forward.0.output.0.pt").unlink()
    marker = tmp_path / "ran"
    evil = tensors / "Module.model.layers.0.self_attn.o_proj.Linear.forward.0.input.0.pt"
    script = (
        "import os, sys, torch\n"
        "class Evil:\n"
        f"    def __reduce__(self): return (os.system, ('touch {marker}',))\n"
        f"torch.save(Evil(), {str(evil)!r})\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True)
    analysis = analyse(folder)
    problems = analysis.comparator.tensors.problems
    assert len(problems) == 3 and all("o_proj" in p and "\n" not in p for p in problems)
    assert any("refused" in p and "input.0.pt" in p for p in problems) and not marker.exists()
    first = analysis.suspects[0]
    assert first.classification == "in_module_impl_difference"  # the weight's statistics agree: all they allow
    slots = {e.target: e for e in first.record.comparison.tensor_evidence}
    assert slots["parameters.weight"].source == "statistics" and slots["input_args.0"].source == "statistics"


def test_without_torch_a_tensor_dump_is_analysed_from_statistics_with_one_note(monkeypatch) -> None:
    monkeypatch.setattr(tensorfile.importlib.util, "find_spec", lambda name: None)
    tensorfile.tensor_support.cache_clear()
    try:
        analysis = analyse(FIXTURES / "tensor_weight_transposed")
    finally:
        tensorfile.tensor_support.cache_clear()
    assert analysis.suspects[0].classification == "in_module_impl_difference"
    assert [n for n in analysis.comparator.tensors.notes if "rca-lsp[tensor]" in n]


def test_statistics_mode_never_imports_torch() -> None:
    """torch (hundreds of MB, seconds to import) only for tensor files; numpy is a core dependency (the target table)."""
    script = (
        "import sys\nfrom rca_lsp.diagnose.run import analyze_paths\n"
        f"f = {str(FIXTURES / 'param_desync')!r}\n"
        "a = analyze_paths(f + '/train', f + '/rollout', f + '/mapping_key.json')\n"
        "assert a.suspects and 'torch' not in sys.modules, sorted(sys.modules)\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True)


# -- the pieces, on synthetic tensors --------------------------------------------------------------------------
def test_elementwise_measures() -> None:
    a = torch.tensor([1.0, 2.0, 3.0])
    same = elementwise(a, a.clone())
    assert same.bitwise_equal and same.rel_l2 == 0 and same.cosine is None or same.cosine == pytest.approx(1)
    scaled = elementwise(a * 1.02, a)
    assert scaled.cosine == pytest.approx(1.0) and scaled.rel_l2 == pytest.approx(0.02)  # cosine alone misses it
    ids = elementwise(torch.tensor([1, 2, 3, 4]), torch.tensor([1, 2, 0, 4]))
    assert ids.differing == 1 and ids.cosine is None


def test_reorderings_are_named() -> None:
    g = torch.Generator().manual_seed(0)
    w = torch.randn(8, 8, generator=g)
    assert find_reordering(w, w.T.contiguous(), 1e-6, "parameter") == "transposed"
    ids = torch.arange(10).reshape(1, 10)
    assert find_reordering(ids, ids.flip(1), 0, "tokens").startswith("tokens reversed")
    assert "shifted by 3" in find_reordering(ids, ids.roll(3, 1), 0, "tokens")
    heads = torch.randn(4 * 4, 6, generator=g)
    swapped = heads.reshape(4, 4, 6)[[2, 1, 0, 3]].reshape(16, 6)
    assert "heads 0 and 2 swapped" in find_reordering(heads, swapped, 1e-6, "parameter", "head")
    assert find_reordering(w, w * 1.5, 1e-6, "parameter") == ""


def test_vllm_fused_layouts_are_plain_concatenations() -> None:
    q, k, v = torch.randn(8, 4), torch.randn(4, 4), torch.randn(4, 4)
    fused = torch.cat([q, k, v])
    (name, cut), *others = arrangements(fused, [8, 4, 4], 0, 1)
    assert name == "concatenated" and all(torch.equal(a, b) for a, b in zip(cut(), (q, k, v)))
    assert {n for n, _ in others} == {
        "per query group (2 groups: [q_g | k_g | v_g])",
        "per query group (4 groups: [q_g | k_g | v_g])",
    }


def test_crc32_combines_as_zlib() -> None:
    import zlib

    a, b = b"gate" * 100, b"up" * 77
    assert crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)


def test_outputs_carry_the_element_wise_evidence(tmp_path: Path) -> None:
    """output_3 gains the element-wise columns (only for dumps with tensors or hashes), the report and the hover say
    what decided the divergence."""
    from rca_lsp.report.outputs import write_outputs
    from rca_lsp.server.features.hover import hover_markdown

    analysis = analyse(FIXTURES / "tensor_weight_transposed")
    write_outputs(analysis, tmp_path / "out", chart=False)
    rows = json.loads((tmp_path / "out" / "output_3_value_compare.json").read_text())["rows"]
    weight = next(r for r in rows if "linear_proj" in r["train_key"] and r["target"] == "parameters.weight")
    assert (weight["evidence"], weight["element_verdict"], weight["permutation"]) == (
        "tensors",
        "mismatch",
        "transposed",
    )
    assert weight["numeric_consistency"] == "aligned"  # the statistics' own verdict stays beside it
    markdown = (tmp_path / "out" / "output_5_root_cause_report.md").read_text()
    assert "at the first divergence: parameters.weight: tensors:" in markdown
    hover = hover_markdown(analysis, weight["train_key"], None)
    assert hover is not None and "Element-wise:" in hover and "transposed" in hover

    statistics = analyse(FIXTURES / "stats_weight_transposed")
    write_outputs(statistics, tmp_path / "stats", chart=False)
    columns = (tmp_path / "stats" / "output_3_value_compare.csv").read_text().splitlines()[0]
    assert "evidence" not in columns.split(",")


def test_a_divergence_statistics_cannot_see_is_said_to_be_decided_element_wise() -> None:
    from rca_lsp.report.root_cause import confidence_text

    report = root_cause_report(analyse(FIXTURES / "tensor_qkv_heads_reordered"))  # linear_qkv: equal statistics
    assert "decided element-wise" in confidence_text(report)


def test_export_mapping_names_keyword_tensors_as_the_dump_mode_does(tmp_path: Path) -> None:
    """msprobe names a tensor keyword argument `kwargs.<name>` in tensor mode (its files' names) and `input.<name>`
    in statistics mode: export-mapping writes what each dump's mode needs."""
    from rca_lsp.cli.main import main

    for variant, spelled in (
        ("tensor_healthy", ".kwargs.hidden_states"),
        ("stats_weight_transposed", ".input.hidden_states"),
    ):
        folder, out = FIXTURES / variant, tmp_path / f"{variant}.yaml"
        args = ["export-mapping", "--train", str(folder / "train"), "--rollout", str(folder / "rollout")]
        assert main([*args, "--mapping-key", str(folder / "mapping_key.json"), "--format", "data", "-o", str(out)]) == 0
        lines = [
            line for line in out.read_text().splitlines() if "TransformerLayer" in line and "hidden_states" in line
        ]
        assert lines and all(spelled in line.split(": ")[0] for line in lines), lines
        reread = analyze_paths(folder / "train", folder / "rollout", out)
        assert reread.issues == [] and reread.records
