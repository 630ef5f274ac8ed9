"""Property tests of the readers: any text or bytes give the project's one input-error type or a result, never
another exception; valid files read as Python's json reads them."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rca_lsp.base.errors import InputError
from rca_lsp.diagnose.run import raise_if_unusable
from rca_lsp.dumps.dump import load_dump_file
from rca_lsp.dumps.load import DumpCache
from rca_lsp.mapping.parse import parse_mapping

keys = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=30)
values = st.one_of(keys, st.lists(keys, min_size=1, max_size=4))
mappings = st.dictionaries(keys, values, max_size=12)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(mappings)
def test_a_valid_mapping_reads_as_json_does(mapping: dict) -> None:
    text = json.dumps(mapping, indent=2, ensure_ascii=False)
    parsed = parse_mapping("m.json", text)
    assert [i.code for i in parsed.issues if i.code in ("json-syntax", "invalid-value")] == []
    assert parsed.as_dict() == json.loads(text)


@settings(max_examples=300, deadline=None)
@given(mappings, st.integers(min_value=0, max_value=400), st.text(max_size=5))
def test_any_edit_of_a_mapping_is_read_without_an_exception(mapping: dict, cut: int, inserted: str) -> None:
    text = json.dumps(mapping, indent=2)
    broken = text[:cut] + inserted + text[cut + len(inserted) :]
    parsed = parse_mapping("m.json", broken)
    previous = parse_mapping("m.json", text)
    assert parse_mapping("m.json", broken, previous).as_dict() == parsed.as_dict()  # incremental = fresh


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(json_values, st.integers(min_value=0, max_value=10_000), st.sampled_from(["utf-8", "latin-1", "utf-16"]))
def test_any_dump_bytes_load_or_give_one_input_error(tmp_path: Path, document: object, cut: int, encoding: str) -> None:
    text = json.dumps(
        {
            "task": "statistics",
            "data": {
                "Module.m.Linear.forward.0": {
                    "input_args": [document],
                    "output": [document],
                    "parameters": {"w": document},
                }
            },
        },
        allow_nan=True,
    )
    path = tmp_path / "dump.json"
    for data in (text.encode(encoding, errors="replace"), text.encode()[:cut]):
        path.write_bytes(data)
        try:
            load_dump_file(path)
        except InputError as error:
            assert str(path) in str(error) and "\n" not in str(error)


# a key's call index in any digits (ASCII ones mostly; the superscripts str.isdigit() passes, which int() refuses)
call_indexes = st.integers(0, 300).map(str) | st.text(st.characters(categories=("Nd", "No")), min_size=1, max_size=3)
module_heads = st.sampled_from(["Module.m.Linear", "Module.a.b.Attention", "Cell.c.Dense", "Module.x"]) | keys
dump_keys = st.builds(lambda head, index: f"{head}.forward.{index}", module_heads, call_indexes)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(dump_keys, min_size=1, max_size=6, unique=True))
def test_any_dump_keys_load_or_give_one_input_error(tmp_path: Path, keys: list[str]) -> None:
    node = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], "Max": 1.0, "Min": 0.0, "Mean": 0.5}
    entry = {"input_args": [node], "output": [node], "parameters": {"weight": node}}
    path = tmp_path / "dump.json"
    path.write_text(json.dumps({"task": "statistics", "data": dict.fromkeys(keys, entry)}))
    try:
        dump = load_dump_file(path)
    except InputError as error:  # no module key among them
        assert str(path) in str(error) and "\n" not in str(error)
        return
    for key, loaded in dump.entries.items():
        index = key.rpartition(".")[2]
        assert index.isascii() and loaded.call_index == int(index)
        assert key.startswith(("Module.", "Cell.")) and loaded.path and loaded.class_name


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_nonfinite_literals_load_like_pythons_json(tmp_path: Path, literal: str) -> None:
    node = {
        "type": "torch.Tensor",
        "dtype": "torch.float32",
        "shape": [2],
        "Max": float(literal.replace("Infinity", "inf")),
        "Min": 0.0,
        "Mean": 1.0,
        "Norm": 2.0,
    }
    path = tmp_path / "dump.json"
    path.write_text(
        json.dumps({"data": {"Module.m.Linear.forward.0": {"input_args": [node], "output": [node]}}}, allow_nan=True)
    )
    stats = DumpCache().get(path).entries["Module.m.Linear.forward.0"].output
    assert stats is not None and (math.isnan(stats.max) if literal == "NaN" else stats.max == node["Max"])


# --- msprobe's YAML mappings (data_mapping / cell_mapping) ---------------------------------------------------------

YAML_DUMPS = DumpCache()
cell_names = st.from_regex(r"[a-z][a-z0-9_]{0,6}(\.[a-z0-9_]{1,6}){0,3}\.[A-Z][A-Za-z0-9]{0,8}", fullmatch=True)
tensor_names = st.builds(
    lambda cell, call, slot: f"Module.{cell}.forward.{call}.{slot}",
    cell_names,
    st.integers(0, 3),
    st.sampled_from(["input.0", "output.0", "parameters.weight", "input.hidden_states", "output.0.1"]),
)


def _fixture_dumps() -> tuple:
    from conftest import FIXTURES

    return YAML_DUMPS.get(FIXTURES / "healthy_fp32" / "train"), YAML_DUMPS.get(FIXTURES / "healthy_fp32" / "rollout")


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(
        st.dictionaries(cell_names, cell_names, max_size=10), st.dictionaries(tensor_names, tensor_names, max_size=10)
    )
)
def test_a_valid_msprobe_mapping_reads_as_yaml_safe_load_does(mapping: dict) -> None:
    """Written as msagent writes cell mappings (yaml.safe_dump), read back rule for rule, of the right kind."""
    text = yaml.safe_dump(mapping, sort_keys=False, default_flow_style=False) if mapping else ""
    parsed = parse_mapping("cell_mapping.yaml", text)
    assert [i.code for i in parsed.issues] == []
    assert {r.left: r.right for r in parsed.rules} == (yaml.safe_load(text) or {})  # type: ignore[attr-defined]
    kind = parsed.kind  # type: ignore[attr-defined]
    assert kind == (None if not mapping else "data" if ".forward." in next(iter(mapping)) else "cell")
    parsed.for_dumps(*_fixture_dumps())


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200), st.sampled_from(["data_mapping.yaml", "cell_mapping.yml"]))
def test_any_yaml_text_gives_issues_by_line_or_one_input_error_never_an_exception(text: str, name: str) -> None:
    parsed = parse_mapping(name, text)
    resolved = parsed.for_dumps(*_fixture_dumps())
    assert all(0 <= i.span.start <= i.span.end <= len(text) for i in resolved.issues)
    try:
        raise_if_unusable(resolved)
    except InputError as error:
        assert str(error).startswith(f"{name}:") and error.line is not None and "\n" not in error.message


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(codec="utf-8", exclude_characters="\r\n"), max_size=60))
def test_a_line_of_a_broken_yaml_file_reads_as_yaml_reads_it_alone(line: str) -> None:
    """A file that does not parse keeps the rules of its lines that read on their own (msprobe_yaml._salvaged): a
    line it takes must be the one pair yaml reads from that line alone, of the same names at the same places."""
    text = "x.Linear: y: z\n" + line + "\n"  # the first line breaks the file
    rules = parse_mapping("cell_mapping.yaml", text).rules  # type: ignore[attr-defined]
    try:
        alone = yaml.safe_load(line)
    except yaml.YAMLError:
        alone = None
    if not rules:
        assert (
            line[:1] in ("", " ", "\t", "#")
            or not (isinstance(alone, dict) and len(alone) == 1)
            or not all(isinstance(v, str) and v for v in (*alone, *alone.values()))
        )
        return
    (rule,) = rules
    assert alone == {rule.left: rule.right}
    assert yaml.safe_load(text[rule.key.start : rule.key.end]) == rule.left
