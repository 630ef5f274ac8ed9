"""The rollout dump loaded by a forked child: the same index, the same errors, as loading it here."""

from __future__ import annotations

import math
import select
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from builders import entry, write_dump
from conftest import FIXTURES

from rca_lsp.base.errors import InputError
from rca_lsp.base.forkpart import ForkedBytes
from rca_lsp.diagnose.run import analyze_paths
from rca_lsp.dumps import dump as dump_module
from rca_lsp.dumps import forkload
from rca_lsp.dumps.columns import EntryColumns, entry_columns, packed_columns
from rca_lsp.dumps.dump import ModuleEntry, load_dump_file
from rca_lsp.dumps.forkload import BackgroundDump
from rca_lsp.dumps.load import DumpCache
from rca_lsp.dumps.sources import resolve_dump_source
from rca_lsp.model.stats import TensorStats
from rca_lsp.report.root_cause import root_cause_report

KEY = "Module.model.layers.0.mlp.down_proj.Linear.forward.0"


@pytest.mark.parametrize("threaded", [False, True], ids=["fork", "fork from a threaded caller"])
@pytest.mark.parametrize("variant", ["qkv_layout", "repeated_calls", "vllm_healthy"])
def test_background_load_gives_the_same_dump(variant: str, threaded: bool) -> None:
    path = next((FIXTURES / variant / "rollout").glob("**/dump.json")).resolve()
    source = resolve_dump_source(path)
    with BackgroundDump(source, threaded) as background:
        loaded = background.load(source)
    direct = load_dump_file(path)
    assert (loaded.path, loaded.task, loaded.level, loaded.framework) == (
        direct.path,
        direct.task,
        direct.level,
        direct.framework,
    )
    assert loaded.keys == direct.keys and loaded.entries == direct.entries
    assert loaded.skipped_keys == direct.skipped_keys
    for received in loaded.entries.values():  # received as _SentEntry/_SentStats, made the loaded classes
        assert type(received) is ModuleEntry
        slots = [received.input, received.output, received.stream_input, received.stream_output]
        slots += [*received.kwargs.values(), *received.parameters.values()]
        assert all(type(stats) is TensorStats for stats in slots if stats is not None)


def test_the_sent_classes_are_the_loaded_ones_field_for_field() -> None:
    """The transfer reads statistics back without TensorStats.__post_init__ and then only changes their class:
    valid while the classes hold the same fields, under the same wire names, with the same defaults."""
    for sent, loaded in ((forkload._SentStats, TensorStats), (forkload._SentEntry, ModuleEntry)):
        assert sent.__struct_fields__ == loaded.__struct_fields__
        assert sent.__struct_encode_fields__ == loaded.__struct_encode_fields__
        assert sent.__struct_defaults__ == loaded.__struct_defaults__
        assert sent.__struct_config__.gc == loaded.__struct_config__.gc


def test_nonfinite_statistics_survive_the_transfer(tmp_path: Path) -> None:
    node = entry([1.0, 2.0], [3.0, 4.0])
    node["output"][0].update({"Max": math.inf, "Min": -math.inf, "Mean": math.nan})
    source = resolve_dump_source(write_dump(tmp_path / "dump.json", {KEY: node}))
    with BackgroundDump(source) as background:
        output = DumpCache().get(source, background.load).entries[KEY].output
    assert output is not None and output.max == math.inf and output.min == -math.inf and math.isnan(output.mean)


def test_forked_analysis_reports_a_broken_rollout_like_the_usual_one(tmp_path: Path) -> None:
    folder = FIXTURES / "param_desync"
    broken = tmp_path / "dump.json"
    broken.write_text('{\n "data": {\n  "k": [1, 2,,]\n }\n}')
    errors = []
    for fork in (False, True):
        with pytest.raises(InputError) as raised:
            analyze_paths(folder / "train", broken, folder / "mapping_key.json", fork=fork)
        errors.append(str(raised.value))
    assert errors[0] == errors[1] and ":3:" in errors[0]


def test_forked_analysis_matches(tmp_path: Path) -> None:
    folder = FIXTURES / "missing_activation"
    usual, forked = (
        analyze_paths(folder / "train", folder / "rollout", folder / "mapping_key.json", fork=fork)
        for fork in (False, True)
    )
    assert root_cause_report(forked) == root_cause_report(usual)


def test_a_child_of_a_threaded_caller_that_fails_leaves_the_load_and_its_error_to_the_caller(tmp_path: Path) -> None:
    broken = tmp_path / "dump.json"
    broken.write_text('{\n "data": {\n  "k": [1, 2,,]\n }\n}')
    source = resolve_dump_source(broken)
    with pytest.raises(InputError) as raised, BackgroundDump(source, threaded=True) as background:
        background.load(source)
    with pytest.raises(InputError) as usual:
        load_dump_file(broken)
    assert str(raised.value) == str(usual.value)


def test_rank_files_loaded_on_both_cores_give_the_same_dumps_and_errors(tmp_path: Path) -> None:
    from rca_lsp.dumps.forkload import load_files_forked

    paths = sorted((FIXTURES / "tp2_sp_healthy" / "train").glob("step0/rank*/dump.json")) + sorted(
        (FIXTURES / "pp2_healthy" / "train").glob("step0/rank*/dump.json")
    )
    forked, direct = load_files_forked(paths), [load_dump_file(p) for p in paths]
    assert [d.path for d in forked] == [d.path for d in direct] == [str(p) for p in paths]
    assert all(f.keys == d.keys and f.entries == d.entries for f, d in zip(forked, direct))
    broken = tmp_path / "dump.json"
    broken.write_text('{\n "data": {\n  "k": [1, 2,,]\n }\n}')
    with pytest.raises(InputError) as raised:
        load_files_forked([paths[0], broken])
    with pytest.raises(InputError) as usual:
        load_dump_file(broken)
    assert str(raised.value) == str(usual.value)


@pytest.mark.parametrize("loader", ["rank files", "background dump"])
def test_the_loading_child_does_not_outlive_a_killed_parent(tmp_path: Path, loader: str) -> None:
    """The parent dies (SIGKILL) while it loads its own rank files: the child must not block forever on the pipe,
    holding its dumps (it inherited the pipe's read end, so no EPIPE would ever tell it)."""
    import subprocess
    import sys
    import time

    import psutil

    big = {
        f"Module.model.layers.{i}.mlp.down_proj.Linear.forward.0": entry([1.0, 2.0 + i], [3.0, 4.0])
        for i in range(3000)
    }  # packed, far more than a pipe buffer
    paths = [write_dump(tmp_path / f"rank{r}" / "dump.json", big) for r in range(2)]
    pids = tmp_path / "children.txt"
    script = f"""
import os, psutil
from pathlib import Path
import rca_lsp.dumps.forkload as forkload
parent, real = os.getpid(), forkload.load_dump_file
def load(path):
    if os.getpid() == parent:
        Path({str(pids)!r}).write_text(" ".join(str(c.pid) for c in psutil.Process().children()))
        os.kill(parent, 9)
    return real(path)
forkload.load_dump_file = load
if {loader!r} == "rank files":
    forkload.load_files_forked([Path({str(paths[0])!r}), Path({str(paths[1])!r})])
else:
    from rca_lsp.dumps.sources import resolve_dump_source
    background = forkload.BackgroundDump(resolve_dump_source({str(paths[1])!r}))
    load(Path({str(paths[0])!r}))  # the parent's own load, during which it is killed
"""
    subprocess.run([sys.executable, "-c", script], timeout=60)
    children = [int(pid) for pid in pids.read_text().split()]
    assert children
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and any(
        psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie" for pid in children
    ):
        time.sleep(0.1)
    alive = [pid for pid in children if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"]
    for pid in alive:
        psutil.Process(pid).kill()
    assert alive == []


def test_the_rollout_is_loaded_by_a_child_only_when_this_process_has_as_much_to_do(tmp_path: Path, monkeypatch) -> None:
    """A small train dump against a large rollout (hundreds of decode steps): the rollout is loaded here, its
    transfer from a child would cost more than the child saves; the same analysis either way."""
    from rca_lsp.diagnose import run

    variant = FIXTURES / "missing_activation"
    paths = (variant / "train", variant / "rollout", variant / "mapping_key.json")
    children: list[object] = []
    real = run.BackgroundDump

    def counted(source: object) -> object:
        children.append(source)
        return real(source)  # type: ignore[arg-type]

    monkeypatch.setattr(run, "BackgroundDump", counted)
    forked = run.analyze_paths(*paths, fork=True)
    assert len(children) == 1  # the train dump and mapping weigh about what the rollout does: a child loads it
    monkeypatch.setattr(forkload, "TRANSFER_SHARE", 1e6)  # as if the rollout were a million times the train side
    here = run.analyze_paths(*paths, fork=True)
    assert len(children) == 1
    assert [r.comparison.output_consistency for r in here.records] == [
        r.comparison.output_consistency for r in forked.records
    ]


def _assert_same_columns(found: EntryColumns, expected: EntryColumns) -> None:
    for name in EntryColumns._fields:
        ours, theirs = getattr(found, name), getattr(expected, name)
        if name == "stats":
            assert [id(s) for s in ours.objects] == [id(s) for s in theirs.objects]
            np.testing.assert_array_equal(ours.values, theirs.values)
            np.testing.assert_array_equal(ours.numels, theirs.numels)
            np.testing.assert_array_equal(ours.dtype_codes, theirs.dtype_codes)
            assert ours.dtypes == theirs.dtypes
        elif isinstance(ours, np.ndarray):
            assert ours.dtype == theirs.dtype
            np.testing.assert_array_equal(ours, theirs)
        else:
            assert ours == theirs


@pytest.mark.parametrize("threaded", [False, True], ids=["after the dump", "with the dump, to a threaded caller"])
@pytest.mark.parametrize("variant", ["qkv_layout", "vllm_healthy", "param_desync"])
def test_the_child_sends_the_columns_it_gathered(variant: str, threaded: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The columns come from the child, read when first asked for: the same arrays as gathered here, over this
    process's own statistics objects."""
    source = resolve_dump_source(next((FIXTURES / variant / "rollout").glob("**/dump.json")).resolve())
    with BackgroundDump(source, threaded) as background:
        loaded = background.load(source)
        assert loaded.received_columns is not None
        with monkeypatch.context() as patched:  # here, not in the child forked before
            patched.setattr(dump_module, "entry_columns", lambda entries: pytest.fail("gathered here"))
            received = loaded.columns
    assert loaded.received_columns is None
    _assert_same_columns(received, entry_columns(loaded.ordered_entries))


def test_columns_are_gathered_here_when_the_child_cannot_send_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """Asked once the child is gone (the load's context closed), or sent garbled: gathered here, the same."""
    source = resolve_dump_source(next((FIXTURES / "vllm_healthy" / "rollout").glob("**/dump.json")).resolve())
    with BackgroundDump(source) as background:
        loaded = background.load(source)
    _assert_same_columns(loaded.columns, entry_columns(loaded.ordered_entries))
    monkeypatch.setattr(forkload, "packed_columns", lambda columns: b"\x93not columns")  # what the child sends
    for threaded in (False, True):
        with BackgroundDump(source, threaded) as background:
            loaded = background.load(source)
            garbled = loaded.columns
        _assert_same_columns(garbled, entry_columns(loaded.ordered_entries))


def test_a_process_forked_while_the_columns_are_coming_gathers_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """The server forks its chart's child while the loader's columns may still be on their way to the thread that
    reads them: the chart's child, which has no such thread, gathers them itself instead of waiting forever."""
    source = resolve_dump_source(next((FIXTURES / "vllm_healthy" / "rollout").glob("**/dump.json")).resolve())

    def late(columns: EntryColumns) -> bytes:  # the loader's child: its columns come 2 s late
        time.sleep(2)
        return packed_columns(columns)

    monkeypatch.setattr(forkload, "packed_columns", late)
    with BackgroundDump(source, threaded=True) as background:
        loaded = background.load(source)
        with ForkedBytes(lambda: packed_columns(loaded.columns)) as child:
            assert select.select([child], [], [], 30)[0], "the forked child waits for columns it will never get"
            data = child.result()
        assert data == packed_columns(entry_columns(loaded.ordered_entries))
        received = loaded.columns  # here, the loader's (2 s late)
    _assert_same_columns(received, entry_columns(loaded.ordered_entries))


def test_a_child_forked_while_another_thread_computes_a_cached_value_computes_its_own() -> None:
    """The server forks (its chart, a dump's loader) while its other threads work. One of them computing a cached
    property at that moment (one dump's columns, held here in the middle) does not stop the child computing the same
    property of another object: Python 3.11's functools.cached_property held a lock the child waited on forever."""
    path = next((FIXTURES / "vllm_healthy" / "rollout").glob("**/dump.json"))
    one, two = load_dump_file(path), load_dump_file(path)
    inside, release = threading.Event(), threading.Event()

    def held(entries: object) -> None:
        inside.set()
        release.wait()

    one.received_columns = held
    computing = threading.Thread(target=lambda: one.columns)
    computing.start()
    try:
        assert inside.wait(10)
        with ForkedBytes(lambda: packed_columns(two.columns)) as child:
            assert select.select([child], [], [], 30)[0], "the child waits for a lock held by a thread it does not have"
            data = child.result()
    finally:
        release.set()
        computing.join()
    assert data == packed_columns(entry_columns(two.ordered_entries))


@pytest.mark.parametrize(
    ("train_entries", "rollout_entries", "child"), [(300, 200, "train"), (200, 300, "rollout"), (20, 400, "train")]
)
def test_the_server_child_loads_the_larger_dump_where_its_transfer_pays(
    tmp_path: Path, train_entries: int, rollout_entries: int, child: str
) -> None:
    """The larger dump, while this process loads the other and parses the mapping; the smaller one when this
    process would have too little to do meanwhile (a small train dump against a rollout of many decode steps):
    the CLI's rule (forkload.worth_loading_apart)."""
    from rca_lsp.server.engine import _child_side
    from rca_lsp.server.pairing import Pair

    sides = {}
    for side, count in (("train", train_entries), ("rollout", rollout_entries)):
        data = {
            KEY.replace("layers.0", f"layers.{i}"): entry([1.0, 2.0], [3.0, 4.0], [0.5, 0.25]) for i in range(count)
        }
        write_dump(tmp_path / side / "dump.json", data)
        sides[side] = resolve_dump_source(tmp_path / side)
    mapping = tmp_path / "mapping_key.json"
    mapping.write_text("{}")
    pair = Pair(mapping, sides["train"], sides["rollout"], "test")
    assert _child_side(pair) == sides[child]
