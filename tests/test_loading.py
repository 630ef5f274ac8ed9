"""Dump loading: non-standard literals, directory layouts, cache reuse, clear errors."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import orjson
import pytest
from builders import entry, tensor, write_dump
from conftest import FIXTURES

from rca_lsp.base.errors import InputError
from rca_lsp.base.jsonload import loads_lenient, quote_literals
from rca_lsp.diagnose.run import read_mapping_file
from rca_lsp.dumps.dump import decode_dump
from rca_lsp.dumps.load import DumpCache, load_source
from rca_lsp.dumps.sources import resolve_dump_source

KEY = "Module.model.layers.0.mlp.down_proj.Linear.forward.0"


def test_nan_and_infinity_literals_load_as_floats(tmp_path: Path) -> None:
    node = entry([1.0, 2.0], [3.0, 4.0])
    node["output"][0].update({"Max": math.inf, "Min": -math.inf, "Mean": math.nan})
    path = write_dump(tmp_path / "dump.json", {KEY: node})
    assert b"-Infinity" in path.read_bytes() and b"NaN" in path.read_bytes()
    dump = DumpCache().get(path)
    output = dump.entries[KEY].output
    assert output is not None and output.max == math.inf and output.min == -math.inf and math.isnan(output.mean)


def test_literals_without_spaces_and_inside_lists_still_load() -> None:
    data = b'{"a":NaN,"b":[Infinity,-Infinity],"c":"NaN inside a string"}'
    loaded = loads_lenient(data, "x.json")
    assert loaded["a"] == "NaN" and loaded["b"] == ["Infinity", "-Infinity"] and loaded["c"] == "NaN inside a string"


def test_literals_are_quoted_only_outside_strings(tmp_path: Path) -> None:
    node = entry([1.0, 2.0], [3.0, 4.0])
    node["output"][0].update({"Max": math.inf, "Min": -math.inf})
    path = write_dump(tmp_path / "dump.json", {KEY: node})
    text = path.read_text().replace('"framework": "pytorch"', '"framework": "x: NaN y, z: -Infinity"')
    path.write_text(text)
    dump = DumpCache().get(path)
    output = dump.entries[KEY].output
    assert dump.framework == "x: NaN y, z: -Infinity" and output.max == math.inf and output.min == -math.inf


@pytest.mark.parametrize(
    "text",
    [
        "x: NaN y",
        'a "quoted: NaN" b',
        "ends in a backslash \\",
        '\\\\": NaN',
        '\\": Infinity \\\\',
        "NaN",
        "-Infinity",
        "",
    ],
)
def test_quoting_agrees_with_python_json_around_tricky_strings(text: str) -> None:
    document = {"task": text, "data": {text: [math.nan, {"Max": math.inf, text: -math.inf}], "k": text}}
    data = json.dumps(document, allow_nan=True).encode()
    expected = json.loads(data, parse_constant=lambda literal: literal)  # literals read back as their strings
    assert orjson.loads(quote_literals(data)) == expected
    assert orjson.loads(quote_literals(json.dumps(document, allow_nan=True, indent=1).encode())) == expected


def test_normal_dumps_decode_as_before(tmp_path: Path) -> None:
    """msprobe's layout (`"Max": NaN`): quoting gives the same bytes as the plain replacements it replaces."""
    node = entry([1.0, 2.0], [3.0, 4.0])
    node["output"][0].update({"Max": math.inf, "Min": -math.inf, "Mean": math.nan})
    data = write_dump(tmp_path / "dump.json", {KEY: node, KEY.replace("0.mlp", "1.mlp"): node}).read_bytes()
    replaced = data.replace(b": -Infinity", b': "-Infinity"').replace(b": Infinity", b': "Infinity"')
    assert quote_literals(data) == replaced.replace(b": NaN", b': "NaN"')
    finite = (FIXTURES / "missing_activation" / "train" / "step0" / "rank0" / "dump.json").read_bytes()
    assert quote_literals(finite) is finite
    assert decode_dump(finite, "x") == decode_dump(finite.replace(b"\n", b"\r\n"), "x")


def _dump_text(tmp_path: Path, stat_line: str) -> Path:
    path = write_dump(tmp_path / "dump.json", {KEY: entry([1.0, 2.0], [3.0, 4.0])})
    path.write_text(path.read_text().replace('"Max": 4.0', stat_line))
    return path


@pytest.mark.parametrize("number", ["1e400", "-1e400", "1" + "0" * 400])
def test_a_number_beyond_a_double_is_reported_at_its_place(tmp_path: Path, number: str) -> None:
    path = _dump_text(tmp_path, f'"a": NaN, "b": [Infinity, "NaN"], "Max": {number}')
    line_number, line = next((n, l) for n, l in enumerate(path.read_text().splitlines(), 1) if number in l)
    with pytest.raises(InputError) as raised:
        DumpCache().get(path)
    error = raised.value
    assert (error.line, error.column) == (line_number, line.index(number) + 1)
    assert str(error).startswith(f"{path}:{line_number}:") and "out of the range of a double" in str(error)


def test_a_byte_that_is_not_utf8_is_reported_at_its_place(tmp_path: Path) -> None:
    path = write_dump(tmp_path / "dump.json", {KEY: entry([1.0, 2.0], [3.0, 4.0])})
    lines = path.read_bytes().split(b"\n")
    number = next(n for n, l in enumerate(lines) if b'"dtype"' in l and n > 5)
    lines[number] = lines[number].replace(b"float32", b"fl\xffoat32")
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(InputError) as raised:
        DumpCache().get(path)
    error = raised.value
    assert (error.line, error.column) == (number + 1, lines[number].index(b"\xff") + 1)
    assert "0xff" in str(error) and "surrogates" not in str(error)
    mapping = tmp_path / "mapping.json"
    mapping.write_bytes(b'{\n  "a": "b\xe9"\n}\n')
    with pytest.raises(InputError) as raised:
        read_mapping_file(mapping)
    assert (raised.value.line, raised.value.column) == (2, 10)


@pytest.mark.parametrize("field", ["Max", "output"])
@pytest.mark.parametrize("ranks", [1, 2])
def test_a_byte_not_utf8_in_a_field_name_is_reported_at_its_place_not_skipped(
    tmp_path: Path, field: str, ranks: int
) -> None:
    """The JSON decoder passes over the name of a field it does not read without checking it: a `"M\xffax"` lost
    that statistic, an `"out\xffput"` the module's output, and the dump loaded without a word. Refused instead, as a
    byte that is not UTF-8 anywhere else is, at its line and column (in a later rank's file too)."""
    node = entry([1.0, 2.0], [3.0, 4.0])
    files = [write_dump(tmp_path / f"rank{rank}" / "dump.json", {KEY: node}) for rank in range(ranks)]
    lines = files[-1].read_bytes().split(b"\n")
    number = next(n for n, line in enumerate(lines) if f'"{field}"'.encode() in line)
    lines[number] = lines[number].replace(field.encode(), field[:1].encode() + b"\xff" + field[1:].encode())
    files[-1].write_bytes(b"\n".join(lines))
    with pytest.raises(InputError) as raised:
        DumpCache().get(tmp_path if ranks > 1 else files[0])
    error = raised.value
    assert (error.path, error.line, error.column) == (str(files[-1]), number + 1, lines[number].index(b"\xff") + 1)
    assert "invalid UTF-8: byte 0xff" in str(error)


def test_invalid_json_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "dump.json"
    path.write_text('{\n "data": {\n  "k": [1, 2,,]\n }\n}')
    with pytest.raises(InputError) as raised:
        DumpCache().get(path)
    assert raised.value.line == 3 and str(path) in str(raised.value)


def test_directory_layouts(tmp_path: Path) -> None:
    write_dump(tmp_path / "one" / "step0" / "rank0" / "dump.json", {KEY: entry([1.0], [1.0])})
    assert resolve_dump_source(tmp_path / "one").files[0].parts[-3:] == ("step0", "rank0", "dump.json")
    for rank in (0, 1):
        write_dump(tmp_path / "two" / "step0" / f"rank{rank}" / "dump.json", {KEY: entry([1.0], [1.0])})
    two = resolve_dump_source(tmp_path / "two")
    assert [p.parts[-2] for p in two.files] == ["rank0", "rank1"] and two.ranks == (0, 1) and two.step == 0
    assert resolve_dump_source(tmp_path / "two" / "step0").ranks == (0, 1)
    write_dump(tmp_path / "two" / "step3" / "rank0" / "dump.json", {KEY: entry([1.0], [1.0])})
    with pytest.raises(InputError, match=r"2 steps found: step0 \(ranks 0-1\); step3 \(rank 0\); choose one"):
        resolve_dump_source(tmp_path / "two")
    assert resolve_dump_source(tmp_path / "two", step=3).ranks == (0,)
    with pytest.raises(InputError, match="no step7 here"):
        resolve_dump_source(tmp_path / "two", step=7)
    write_dump(tmp_path / "gap" / "step0" / "rank0" / "dump.json", {KEY: entry([1.0], [1.0])})
    write_dump(tmp_path / "gap" / "step0" / "rank2" / "dump.json", {KEY: entry([1.0], [1.0])})
    with pytest.raises(InputError, match="rank 1 is missing"):
        resolve_dump_source(tmp_path / "gap")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no dump.json found"):
        resolve_dump_source(tmp_path / "empty")
    (tmp_path / "two" / "step4").mkdir()  # a step that did not dump (or is still being copied)
    write_dump(tmp_path / "two" / "step5" / "proc7" / "dump.json", {KEY: entry([1.0], [1.0])})
    with pytest.raises(InputError, match=r"; step4 \(no dump.json\); step5 \(1 proc folder\); choose one"):
        resolve_dump_source(tmp_path / "two")


def test_cache_reuses_until_file_changes(tmp_path: Path) -> None:
    path = write_dump(tmp_path / "dump.json", {KEY: entry([1.0], [1.0])})
    cache = DumpCache()
    first = cache.get(path)
    assert cache.get(path) is first
    write_dump(path, {KEY: entry([1.0], [2.0])})
    os.utime(path, ns=(1, 1))
    second = cache.get(path)
    assert second is not first and second.entries[KEY].output.max == 2.0


def test_a_dump_read_while_rewritten_is_said_to_have_changed_not_to_be_broken(tmp_path: Path) -> None:
    """msprobe (or a copy) rewriting the file while it is read: the half read does not parse, but the file is
    whole by the time the user looks at the line named; the error says what happened."""
    path = write_dump(tmp_path / "dump.json", {KEY: entry([1.0], [1.0])})
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) // 2])  # the writer is halfway

    def read_while_the_writer_finishes(source: object) -> object:
        try:
            return load_source(resolve_dump_source(path))
        finally:
            path.write_bytes(whole)

    with pytest.raises(InputError) as caught:
        DumpCache().get(path, read_while_the_writer_finishes)  # type: ignore[arg-type]
    assert "changed while it was being read" in caught.value.message and caught.value.line is None
    assert Path(caught.value.path).samefile(path)
    assert DumpCache().get(path).entries[KEY].output.max == 1.0  # read again, once whole: it loads


def test_hidden_states_kwarg_is_the_input(tmp_path: Path) -> None:
    node = {
        "input_args": [],
        "input_kwargs": {"hidden_states": tensor([1.0, -1.0])},
        "output": [tensor([2.0])],
        "parameters": {},
    }
    path = write_dump(tmp_path / "dump.json", {KEY: node, "Functional.linear.0.forward": node})
    dump = DumpCache().get(path)
    assert dump.keys == [KEY] and dump.skipped_keys == 1
    assert dump.entries[KEY].input_source == "input_kwargs.hidden_states" and dump.entries[KEY].input.max == 1.0


def test_vllm_positions_before_hidden_states(tmp_path: Path) -> None:
    positions = {
        "type": "torch.Tensor",
        "dtype": "torch.int64",
        "shape": [4],
        "Max": 3,
        "Min": 0,
        "Mean": None,
        "Norm": None,
        "requires_grad": False,
    }
    node = {
        "input_args": [positions, tensor([0.5, -1.0, 2.0, 0.0])],
        "input_kwargs": {},
        "output": [tensor([1.0])],
        "parameters": {},
    }
    dump = DumpCache().get(write_dump(tmp_path / "dump.json", {KEY: node}))
    assert dump.entries[KEY].input.dtype == "torch.float32" and dump.entries[KEY].input.max == 2.0


def test_lines_of_many_keys_in_one_pass(tmp_path: Path) -> None:
    keys = [f"Module.model.layers.{i}.mlp.Linear.forward.0" for i in range(5)]
    path = write_dump(tmp_path / "dump.json", {k: entry([1.0], [1.0]) for k in keys})
    dump = DumpCache().get(path)
    dump.prefetch_lines(reversed(keys))
    lines = path.read_text().split("\n")
    for key in keys:
        assert f'"{key}"' in lines[dump.line_of(key)]
    assert dump.line_of("Module.not.there.X.forward.0") is None


def test_every_kind_of_json_value_where_msprobe_writes_arguments(tmp_path: Path) -> None:
    """The typed decoder accepts any JSON value in any node: scalars, nulls, nested tuples, non-tensor objects,
    bool statistics (masks) and a shape that is not a list of sizes."""
    mask = {
        "type": "torch.Tensor",
        "dtype": "torch.bool",
        "shape": [2, 2],
        "Max": True,
        "Min": False,
        "Mean": None,
        "Norm": None,
    }
    odd = {
        "type": "torch.Tensor",
        "dtype": "torch.float32",
        "shape": "2x2",
        "Max": "1.5",
        "Min": -1,
        "Mean": 0,
        "Norm": None,
    }
    nested = {
        "input_args": [None, {"type": "int", "value": 3}, [[tensor([4.0, -4.0])], mask]],
        "input_kwargs": {"flag": True, "scale": {"type": "float", "value": 0.5}, "mask": mask},
        "output": [7, [tensor([2.0]), tensor([3.0])]],
        "parameters": {"weight": odd, "bias": None},
    }
    keys = [f"Module.m.layers.{i}.Linear.forward.0" for i in range(5)]
    data = {
        keys[0]: nested,
        keys[1]: {"input_args": "text", "input_kwargs": [1], "output": 3.5, "parameters": []},
        keys[2]: [1, 2],
        keys[3]: None,
        keys[4]: {"output": {"type": "torch.Tensor", **tensor([1.0, 2.0])}},
    }
    dump = DumpCache().get(write_dump(tmp_path / "dump.json", data))
    assert dump.keys == [keys[0], keys[1], keys[4]] and dump.skipped_keys == 2
    first = dump.entries[keys[0]]
    assert first.input is not None and first.input.max == 4.0 and first.input.shape == (2,)
    assert first.output is not None and first.output.max == 2.0
    assert set(first.kwargs) == {"mask"} and first.kwargs["mask"].max == 1.0 and first.kwargs["mask"].min == 0.0
    weight = first.parameters["weight"]
    assert weight.shape is None and weight.numel is None and weight.max is None and weight.min == -1.0
    assert weight.mean == 0.0 and type(weight.mean) is float and set(first.parameters) == {"weight"}
    second = dump.entries[keys[1]]
    assert (second.input, second.output, dict(second.kwargs), dict(second.parameters)) == (None, None, {}, {})
    assert dump.entries[keys[4]].output.max == 2.0


@pytest.mark.parametrize(
    "text, reason",
    [
        ('[{"data": {}}]', "not an msprobe dump"),
        ('{"task": "statistics"}', "not an msprobe dump"),
        ('{"data": [1, 2]}', "not an msprobe dump"),
        ('{"data": {"Functional.linear.0.forward": {}}}', "no Module./Cell. forward entries"),
    ],
)
def test_files_that_are_not_dumps_say_so(tmp_path: Path, text: str, reason: str) -> None:
    path = tmp_path / "dump.json"
    path.write_text(text)
    with pytest.raises(InputError, match=reason) as raised:
        DumpCache().get(path)
    assert str(path) in str(raised.value)


def test_statistics_quoted_literals_and_literals_without_spaces(tmp_path: Path) -> None:
    path = tmp_path / "dump.json"
    text = (
        '{"data":{"%s":{"input_args":[{"dtype":"torch.float32","shape":[2],"Max":Infinity,"Min":-Infinity,'
        '"Mean":NaN,"Norm":"NaN"}],"output":[]}}}' % KEY
    )
    path.write_text(text)
    stats = DumpCache().get(path).entries[KEY].input
    assert stats is not None and stats.max == math.inf and stats.min == -math.inf
    assert math.isnan(stats.mean) and math.isnan(stats.norm) and stats.observable


def test_equal_dtypes_and_shapes_are_one_object_and_odd_shapes_keep_their_own(tmp_path: Path) -> None:
    """A dump's tensors share one object per distinct dtype and shape (memory held for the session); a shape that is
    not a list of sizes (a float in it: no element count) is never taken for the equal list of integers."""
    keys = [f"Module.m.layers.{i}.Linear.forward.0" for i in range(3)]
    nodes = [
        tensor([1.0, 2.0], shape=[2, 1]),
        tensor([3.0, 4.0], shape=[2, 1]),
        {**tensor([1.0, 2.0]), "shape": [2.0, 1]},
    ]
    data = {key: {"input_args": [], "input_kwargs": {}, "output": [node]} for key, node in zip(keys, nodes)}
    dump = DumpCache().get(write_dump(tmp_path / "dump.json", data))
    first, second, odd = (dump.entries[key].output for key in keys)
    assert first.shape == (2, 1) and first.shape is second.shape and first.dtype is second.dtype
    assert odd.shape == (2.0, 1) and type(odd.shape[0]) is float and odd.numel is None


def test_odd_shapes_read_first_change_nothing_of_a_later_dumps_sizes(tmp_path: Path) -> None:
    """The table of shapes is shared by every dump the process reads (the server's, for hours): a malformed shape
    read first (booleans equal 1 and 0, a negative size) has no numel and never stands for a later dump's sizes."""
    key = "Module.m.layers.0.Linear.forward.0"
    odd = {
        key: {"input_args": [{**tensor([1.0]), "shape": [True, 7]}], "output": [{**tensor([1.0]), "shape": [-3, 7]}]}
    }
    odd_dump = DumpCache().get(write_dump(tmp_path / "odd" / "dump.json", odd))
    assert odd_dump.entries[key].input.numel is None and odd_dump.entries[key].output.numel is None
    sizes = {key: {"input_args": [{**tensor([1.0]), "shape": [1, 7]}], "output": [{**tensor([1.0]), "shape": [3, 7]}]}}
    entry = DumpCache().get(write_dump(tmp_path / "sizes" / "dump.json", sizes)).entries[key]
    assert entry.input.shape == (1, 7) and [type(size) for size in entry.input.shape] == [int, int]
    assert entry.input.numel == 7 and entry.output.shape == (3, 7) and entry.output.numel == 21


def test_a_modules_calls_are_listed_in_call_order_whatever_the_dump_order(tmp_path: Path) -> None:
    """`forward.*` names a module's calls in call order: as msprobe writes them, and also from a dump that holds
    them in another order (a hand-merged one); other modules' lists are left as they are."""
    head, other = "Module.m.layers.0.Linear.forward", "Module.m.layers.1.Linear.forward"
    order = [f"{head}.2", f"{other}.0", f"{head}.0", f"{other}.1", f"{head}.1", f"{head}.3"]
    dump = DumpCache().get(write_dump(tmp_path / "dump.json", {key: entry([1.0], [2.0]) for key in order}))
    assert dump.calls_of(f"{head}.*") == [f"{head}.{call}" for call in range(4)]
    assert dump.calls_of(f"{other}.*") == [f"{other}.0", f"{other}.1"]
