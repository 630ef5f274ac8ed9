"""msprobe's data_mapping / cell_mapping YAML as mapping-key files: read as msprobe reads them, the same analysis
as the equivalent mapping-key JSON on real fixtures, written back by export-mapping, bad files reported by line."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import FIXTURES

from rca_lsp.cli.main import main
from rca_lsp.diagnose.analysis import Analysis
from rca_lsp.diagnose.run import analyze_paths
from rca_lsp.dumps.load import DumpCache
from rca_lsp.mapping.export import export_mapping
from rca_lsp.mapping.msprobe_names import cell_name
from rca_lsp.mapping.msprobe_yaml import MsprobeMapping
from rca_lsp.mapping.parse import parse_mapping
from rca_lsp.report.root_cause import root_cause_report

DUMPS = DumpCache()

# the examples of msprobe's PyTorch compare guide (docs/en/accuracy_compare/pytorch_accuracy_compare_instruct.md)
DOC_DATA_MAPPING = """\
# API
NPU.npu_fusion_attention.4.forward.input.0: NPU.npu_fusion_attention.4.forward.input.0
# Module
Module.module.language_model.embedding.word_embedding.VocabParallelEmbedding.forward.0.input.0: Module.module.language_model.embedding.word_embedding.VocabParallelEmbedding.forward.0.input.0
"""
DOC_CELL_MAPPING = "fc2.Dense: fc2.Linear\nconv1.Conv2d: conv3.Conv2d\n"
DOC_CELL_SUBSTRINGS = "MindSpeedTELayerNormColumnParallelLinear: TELayerNormColumnParallelLinear\nRowParallelLinear: TERowParallelLinear\n"


def dumps(variant: str) -> tuple[Any, Any]:
    return DUMPS.get(FIXTURES / variant / "train"), DUMPS.get(FIXTURES / variant / "rollout")


def one_to_one(variant: str) -> dict[str, str]:
    """The fixture's mapping without its 1:N groups (msprobe maps one name to one name)."""
    mapping = json.loads((FIXTURES / variant / "mapping_key.json").read_text())
    return {k: v for k, v in mapping.items() if isinstance(v, str)}


def analysis_of(variant: str, mapping: Path) -> Analysis:
    return analyze_paths(FIXTURES / variant / "train", FIXTURES / variant / "rollout", mapping, cache=DUMPS)


def summary(analysis: Analysis) -> dict[str, Any]:
    """What an analysis concludes, whichever file its mapping came from."""
    report = {k: v for k, v in root_cause_report(analysis).items() if k != "mapping_key_path"}
    return {
        "usable": analysis.usable,
        "records": [
            (r.comparison.train_keys, r.comparison.rollout_keys, r.comparison.output_consistency)
            for r in analysis.records
        ],
        "suspects": [(s.train_key, s.classification, s.credible_origin) for s in analysis.suspects],
        "report": report,
    }


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def lines_of(analysis: Analysis, code: str) -> list[int]:
    return [analysis.mapping.line_of(i.span) for i in analysis.issues if i.code == code]


# --- files as msprobe's documentation writes them -------------------------------------------------------------


def test_the_documented_data_mapping_reads_as_yaml_safe_load_reads_it(tmp_path: Path) -> None:
    parsed = parse_mapping(str(tmp_path / "data_mapping.yaml"), DOC_DATA_MAPPING)
    assert isinstance(parsed, MsprobeMapping) and parsed.kind == "data" and parsed.issues == []
    assert {r.left: r.right for r in parsed.rules} == yaml.safe_load(DOC_DATA_MAPPING)
    assert [parsed.line_of(r.key) for r in parsed.rules] == [2, 4]


def test_the_documented_data_mapping_against_real_dumps_names_each_line(tmp_path: Path) -> None:
    """The API line is outside what rca-lsp compares; the module line is a module pair whose keys these dumps lack."""
    analysis = analysis_of("healthy_fp32", write(tmp_path / "data_mapping.yaml", DOC_DATA_MAPPING))
    module = "Module.module.language_model.embedding.word_embedding.VocabParallelEmbedding.forward.0"
    assert analysis.mapping.as_dict() == {module: module}
    assert lines_of(analysis, "unknown-train-key") == [2, 4]
    assert lines_of(analysis, "unknown-rollout-key") == [4]
    assert "API-level tensor" in analysis.issues[0].message


@pytest.mark.parametrize("text", [DOC_CELL_MAPPING, DOC_CELL_SUBSTRINGS])
def test_the_documented_cell_mappings_say_which_rules_resolve_nothing(tmp_path: Path, text: str) -> None:
    """fc2.Dense etc. name no module of these dumps; RowParallelLinear is a substring of Megatron's linear_proj and
    linear_fc2 names, renamed to TERowParallelLinear modules the HF rollout does not have."""
    analysis = analysis_of("healthy_fp32", write(tmp_path / "cell_mapping.yaml", text))
    assert isinstance(analysis.mapping, MsprobeMapping) and analysis.mapping.kind == "cell"
    assert analysis.mapping.as_dict() == {}
    messages = [i.message for i in analysis.issues]
    if text == DOC_CELL_MAPPING:
        assert lines_of(analysis, "unknown-train-key") == [1, 2]
        assert all("matches no module of the train dump" in m for m in messages)
    else:
        assert lines_of(analysis, "unknown-train-key") == [1] and lines_of(analysis, "unknown-rollout-key") == [2]
        assert "matches no module" in messages[0]
        assert "renames module.module.decoder.layers.0.self_attention.linear_proj.RowParallelLinear to " in messages[1]
        assert "linear_proj.TERowParallelLinear, which the rollout dump" in messages[1]


def test_an_msagent_cell_mapping_round_trips_through_export(tmp_path: Path) -> None:
    """msagent's module-name-mapper writes whole cell names with yaml.safe_dump (sort_keys=False)."""
    train, rollout = dumps("healthy_fp32")
    pairs = {cell_name(k): cell_name(v) for k, v in one_to_one("healthy_fp32").items()}
    path = write(tmp_path / "cell_mapping.yaml", yaml.safe_dump(pairs, sort_keys=False, default_flow_style=False))
    analysis = analysis_of("healthy_fp32", path)
    assert analysis.mapping.as_dict() == one_to_one("healthy_fp32")
    exported = export_mapping("cell", list(analysis.mapping.effective().values()), train, rollout)
    assert exported.comments == [] and exported.read_back == []
    assert yaml.safe_load(exported.text(str(path))) == pairs


# --- cell mappings by substring, as msprobe applies them --------------------------------------------------------

SUBSTRING_RULES = """\
module.module.decoder.layers: model.layers
self_attention.linear_proj.RowParallelLinear: self_attn.o_proj.Linear
mlp.linear_fc2.RowParallelLinear: mlp.down_proj.Linear
input_layernorm.RMSNorm: input_layernorm.Qwen2RMSNorm
pre_mlp_layernorm.RMSNorm: post_attention_layernorm.Qwen2RMSNorm
module.module.decoder.layers.1.mlp.MLP: model.layers.1.mlp.Qwen2MLP
"""
SUBSTRING_MODULES = ("linear_proj", "linear_fc2", "input_layernorm", "pre_mlp_layernorm", "layers.1.mlp.MLP")


@pytest.mark.parametrize("variant", ["missing_activation", "decode_missing_activation"])
def test_substring_rules_rename_in_file_order_and_whole_names_win(tmp_path: Path, variant: str) -> None:
    """Each rule replaces the first occurrence of its left side in what the rules before it left; a rule naming a
    whole cell applies alone. A decoding rollout's modules are paired over all their calls (forward.*)."""
    analysis = analysis_of(variant, write(tmp_path / "cell_mapping.yaml", SUBSTRING_RULES))
    wanted = {k: v for k, v in one_to_one(variant).items() if any(m in k for m in SUBSTRING_MODULES)}
    assert analysis.mapping.as_dict() == wanted
    assert len(wanted) == 9  # 2 layers x 4 rules, and the one MLP named whole
    if variant.startswith("decode"):
        assert all(v.endswith(".forward.*") for v in wanted.values())
    # the first rule alone renames other modules too (layers.0.mlp.MLP -> model.layers.0.mlp.MLP): the rollout
    # has no such module, said on that rule's line
    unresolved = [i for i in analysis.issues if i.code == "unknown-rollout-key"]
    assert [analysis.mapping.line_of(i.span) for i in unresolved] == [1]
    assert "which the rollout dump" in unresolved[0].message


# --- the same analysis as the equivalent mapping-key JSON ---------------------------------------------------------

DATA_VARIANTS = ["missing_activation", "param_desync", "tp2_shard_desync", "pp2_in_module_diff", "vllm_healthy"]
CELL_VARIANTS = DATA_VARIANTS + ["decode_missing_activation", "decode_healthy"]


def data_lines(mapping: dict[str, str]) -> str:
    """Two tensors of each module pair (they fold into one entry)."""
    return "".join(f"{k}.input.0: {v}.input.0\n{k}.output.0: {v}.output.0\n" for k, v in mapping.items())


def cell_lines(mapping: dict[str, str]) -> str:
    return "".join(f"{cell_name(k)}: {cell_name(v.replace('.forward.*', '.forward.0'))}\n" for k, v in mapping.items())


@pytest.mark.parametrize("variant", DATA_VARIANTS)
def test_a_data_mapping_analyses_as_its_json(tmp_path: Path, variant: str) -> None:
    mapping = one_to_one(variant)
    from_yaml = analysis_of(variant, write(tmp_path / "data_mapping.yaml", data_lines(mapping)))
    from_json = analysis_of(variant, write(tmp_path / "mapping_key.json", json.dumps(mapping)))
    assert from_yaml.issues == [] and from_yaml.mapping.as_dict() == mapping
    assert summary(from_yaml) == summary(from_json)


@pytest.mark.parametrize("variant", CELL_VARIANTS)
def test_a_cell_mapping_analyses_as_its_json(tmp_path: Path, variant: str) -> None:
    mapping = one_to_one(variant)
    from_yaml = analysis_of(variant, write(tmp_path / "cell_mapping.yml", cell_lines(mapping)))
    from_json = analysis_of(variant, write(tmp_path / "mapping_key.json", json.dumps(mapping)))
    assert from_yaml.issues == [] and from_yaml.mapping.as_dict() == mapping
    assert summary(from_yaml) == summary(from_json)


def test_the_findings_are_the_fixtures(tmp_path: Path) -> None:
    """The comparisons above compare analyses that find something: the fixture's root cause."""
    analysis = analysis_of(
        "missing_activation", write(tmp_path / "cell_mapping.yaml", cell_lines(one_to_one("missing_activation")))
    )
    origin = next(s for s in analysis.suspects if s.credible_origin)
    assert origin.train_key.endswith("layers.0.mlp.linear_fc2.RowParallelLinear.forward.0")
    assert origin.classification == "missing_or_extra_op_between_aligned_boundary"
    entry = analysis.mapping.effective()[origin.train_key]
    line = analysis.mapping.line_of(analysis.mapping.spans(entry).key)
    assert analysis.mapping.text.splitlines()[line - 1].startswith("module.module.decoder.layers.0.mlp.linear_fc2.")


def test_tensors_of_one_module_mapped_to_two_modules_are_a_conflict(tmp_path: Path) -> None:
    train = "Module.module.module.decoder.layers.0.mlp.linear_fc2.RowParallelLinear.forward.0"
    down, up = (
        "Module.model.layers.0.mlp.down_proj.Linear.forward.0",
        "Module.model.layers.0.mlp.up_proj.Linear.forward.0",
    )
    text = f"{train}.input.0: {down}.input.0\n{train}.output.0: {up}.output.0\n{train}.parameters.weight: {down}.parameters.weight\n"
    analysis = analysis_of("missing_activation", write(tmp_path / "data_mapping.yaml", text))
    assert analysis.mapping.as_dict() == {train: down}
    assert lines_of(analysis, "duplicate-key") == [2]


def test_modules_no_line_renames_pair_by_their_common_name(tmp_path: Path) -> None:
    """As msprobe matches the names a mapping leaves as they are: one dump against itself, a mapping of one line,
    and every module is paired with itself (call by call: a shared rotary module is called once per layer)."""
    _, rollout = dumps("vllm_healthy")
    first = cell_name(rollout.keys[0])
    side = FIXTURES / "vllm_healthy" / "rollout"
    path = write(tmp_path / "cell_mapping.yaml", f"{first}: {first}\n")
    analysis = analyze_paths(side, side, path, cache=DUMPS)
    assert analysis.mapping.as_dict() == {key: key for key in rollout.keys}
    assert analysis.issues == [] and analysis.suspects == []


# --- export, then import -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "variant,kind",
    [(v, "data") for v in DATA_VARIANTS] + [(v, "cell") for v in CELL_VARIANTS] + [("moe_ep2_healthy", "data")],
)
def test_export_then_import_gives_the_same_analysis(tmp_path: Path, variant: str, kind: str) -> None:
    """Every entry is either written (and reads back as it was) or named in a comment."""
    source = FIXTURES / variant / "mapping_key.json"
    out = tmp_path / f"{kind}_mapping.yaml"
    train, rollout = FIXTURES / variant / "train", FIXTURES / variant / "rollout"
    assert main(["export-mapping", "--train", str(train), "--rollout", str(rollout), "--mapping-key", str(source), "--format", kind, "-o", str(out)]) == 0  # fmt: skip
    text = out.read_text()
    original = json.loads(source.read_text())
    reread = analysis_of(variant, out)
    kept = reread.mapping.as_dict()
    comments = "\n".join(line for line in text.splitlines() if line.startswith("#"))
    assert "read back" not in comments and kept and all(original[k] == v for k, v in kept.items())
    assert all(k in comments for k in original if k not in kept)
    if kind == "cell":  # all calls of a module are one line: only 1:N and N:1 groups are left out
        assert [k for k in original if k not in kept] == [
            k for k, v in original.items() if isinstance(v, list) or list(original.values()).count(v) > 1
        ]
    restricted = write(tmp_path / "mapping_key.json", json.dumps({k: v for k, v in original.items() if k in kept}))
    assert summary(reread) == summary(analysis_of(variant, restricted))
    assert yaml.safe_load(text) == {r.left: r.right for r in reread.mapping.rules}  # what msprobe reads


def test_export_names_the_groups_left_as_comments_and_says_how_many(tmp_path: Path, capsys) -> None:
    variant = "missing_activation"
    out = tmp_path / "data_mapping.yaml"
    args = ["--train", str(FIXTURES / variant / "train"), "--rollout", str(FIXTURES / variant / "rollout")]
    source = FIXTURES / variant / "mapping_key.json"
    assert main(["export-mapping", *args, "--mapping-key", str(source), "-o", str(out)]) == 0
    groups = [k for k, v in json.loads(source.read_text()).items() if isinstance(v, list)]
    printed = capsys.readouterr().out
    assert f"{len(groups)} entries left as comments" in printed
    comments = [line for line in out.read_text().splitlines() if line.startswith("#   1:")]
    assert [next(g for g in groups if g in c) for c in comments] == groups
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~umask


def test_a_decode_against_a_data_mapping_is_all_comments(tmp_path: Path) -> None:
    """msprobe pairs calls one by one: a train forward against every decode call has no data-mapping form."""
    train, rollout = dumps("decode_healthy")
    parsed = parse_mapping("m.json", (FIXTURES / "decode_healthy" / "mapping_key.json").read_text())
    exported = export_mapping("data", list(parsed.effective().values()), train, rollout)
    assert exported.lines == [] and len(exported.comments) == len(parsed.entries)
    assert all(c.startswith("1:") for c in exported.comments)


# --- bad files: the one input error, with file, line and key ------------------------------------------------------


@pytest.mark.parametrize(
    "text,line,says",
    [
        ("a.Linear: b.Linear\nc.Linear: d: e\n", 2, "YAML syntax error"),
        ("a.Linear: b.Linear\n\tc.Linear: d.Linear\n", 2, "tab character"),
        ("- a.Linear\n- b.Linear\n", 1, "is a YAML mapping"),
        ("a.Linear: b.Linear\nc.Linear: [d.Linear, e.Linear]\n", 2, "a list"),
        ("a.Linear: b.Linear\n1: c.Linear\n", 2, "a number"),
        ("a.Linear: b.Linear\nc.Linear:\n", 2, "nothing (null)"),
        ("a.Linear: b.Linear\nc.Linear: true\n", 2, "true/false"),
        ("x.forward.0.input.0: y.forward.0.input.0\nnot.a.Tensor: y.forward.0.output.0\n", 2, "not an msprobe tensor"),
        ("a.Linear: b.Linear\nc.Linear: d.Linear.forward.0.input.0\n", 2, "a tensor name"),
    ],
)
def test_a_bad_yaml_mapping_is_one_line_naming_file_and_line(
    tmp_path: Path, capsys, text: str, line: int, says: str
) -> None:
    path = write(tmp_path / "cell_mapping.yaml", text)
    variant = FIXTURES / "healthy_fp32"
    code = main(["analyze", "--train", str(variant / "train"), "--rollout", str(variant / "rollout"), "--mapping-key", str(path), "--out-dir", str(tmp_path / "o")])  # fmt: skip
    error = capsys.readouterr().err
    assert code == 2 and "Traceback" not in error
    assert error.startswith(f"rca-lsp: error: {path}:{line}:") and says in error and error.count("\n") == 1


def test_a_yaml_syntax_error_has_its_own_code_and_the_other_lines_keep_their_rules() -> None:
    """Mid-edit, as for the mapping-key JSON: the error is `yaml-syntax` on its line, and the lines that read on
    their own (plain or quoted names) keep their rules, so the editor keeps their findings (issue 23, defect 19)."""
    text = (
        "a.Linear: b.Linear  # a comment\n"
        "c.Linear: d: e\n"
        "'e.Linear': \"f.Linear\"\n"
        "g.Linear: true\n"
        "  h.Linear: i.Linear\n"
        "j.Linear#x: k.Linear\r\n"
    )
    parsed = parse_mapping("cell_mapping.yaml", text)
    assert not parsed.syntax_ok
    assert [(i.code, parsed.line_of(i.span)) for i in parsed.issues] == [("yaml-syntax", 2), ("invalid-value", 4)]
    rules = parsed.rules  # type: ignore[attr-defined]
    assert {r.left: r.right for r in rules} == {
        "a.Linear": "b.Linear",
        "e.Linear": "f.Linear",
        "j.Linear#x": "k.Linear",
    }
    assert [text[r.key.start : r.value.end] for r in rules] == [
        "a.Linear: b.Linear",
        "'e.Linear': \"f.Linear\"",
        "j.Linear#x: k.Linear",
    ]


def test_a_duplicate_name_warns_and_the_last_is_used_as_yaml_reads_it(tmp_path: Path) -> None:
    mapping = one_to_one("healthy_fp32")
    first, second = list(mapping.items())[:2]
    text = cell_lines(dict([first])) + cell_lines(dict([second])) + f"{cell_name(first[0])}: {cell_name(second[1])}\n"
    analysis = analysis_of("healthy_fp32", write(tmp_path / "cell_mapping.yaml", text))
    assert lines_of(analysis, "duplicate-key") == [3]
    assert analysis.mapping.as_dict()[first[0]] == second[1]


def test_lines_that_resolve_to_nothing_are_warnings_with_file_line_and_key(tmp_path: Path, capsys) -> None:
    lines = cell_lines(one_to_one("missing_activation")).splitlines()
    lines.insert(2, "fc2.Dense: fc2.Linear")
    path = write(tmp_path / "cell_mapping.yaml", "\n".join(lines) + "\n")
    variant = FIXTURES / "missing_activation"
    code = main(["analyze", "--train", str(variant / "train"), "--rollout", str(variant / "rollout"), "--mapping-key", str(path), "--out-dir", str(tmp_path / "o")])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0 and "missing an activation" in captured.out
    assert captured.err.splitlines() == [
        f"warning: {path}:3: unknown-train-key: unknown train key: matches no module of the train dump "
        f"{variant / 'train' / 'step0' / 'rank0' / 'dump.json'} (key 'fc2.Dense')"
    ]


def test_suggest_mapping_keeps_the_entries_of_an_msprobe_mapping(tmp_path: Path, capsys) -> None:
    """--existing takes a cell mapping: its pairs are kept (here, linear_fc2 paired with up_proj, which no matcher
    would propose), the rest is proposed; suggest-mapping writes JSON, so a .yaml -o is refused."""
    variant = FIXTURES / "missing_activation"
    train = "Module.module.module.decoder.layers.0.mlp.linear_fc2.RowParallelLinear.forward.0"
    path = write(tmp_path / "cell_mapping.yaml", f"{cell_name(train)}: model.layers.0.mlp.up_proj.Linear\n")
    args = ["suggest-mapping", "--train", str(variant / "train"), "--rollout", str(variant / "rollout")]
    assert main([*args, "--existing", str(path), "-o", str(tmp_path / "m.json")]) == 0
    suggested = json.loads((tmp_path / "m.json").read_text())
    assert suggested[train] == "Module.model.layers.0.mlp.up_proj.Linear.forward.0" and len(suggested) > 10
    capsys.readouterr()
    assert main([*args, "-o", str(tmp_path / "m.yaml")]) == 2
    assert "export-mapping" in capsys.readouterr().err
