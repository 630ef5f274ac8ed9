"""Property tests of the dump-folder reader (beside test_fuzz_readers): any tree of step and rank folders, as a
careless or hostile user leaves it, gives a source of contiguous ranks and steps made of regular dump files, or one
InputError in one line naming a path of the tree; never another exception, never a rank or step dropped silently."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from conftest import FIXTURES
from hypothesis import given, settings
from hypothesis import strategies as st

from rca_lsp.base.errors import InputError
from rca_lsp.dumps.load import DumpCache
from rca_lsp.dumps.sources import StepChoice, StepSpan, resolve_dump_source

REAL_DUMP = FIXTURES / "healthy_fp32" / "train" / "step0" / "rank0" / "dump.json"

numbers = st.one_of(st.integers(0, 3), st.integers(0, 10**12), st.just(10**40))
odd_digits = st.sampled_from(
    ["\u0661", "\u00b2", "\uff11", "\u0968"]
)  # Arabic-Indic, superscript, fullwidth, Devanagari
folder_names = st.one_of(
    st.builds(lambda kind, n: f"{kind}{n}", st.sampled_from(["rank", "step"]), numbers),
    st.builds(lambda kind, n: f"{kind}0{n}", st.sampled_from(["rank", "step"]), st.integers(0, 3)),  # rank01
    st.builds(lambda kind, d: f"{kind}{d}", st.sampled_from(["rank", "step"]), odd_digits),
    st.sampled_from(["rank", "step", "proc12", "rankx", "notes", "rank-1"]),
)
dump_kinds = st.sampled_from(["file", "file", "file", "absent", "directory", "dangling", "device", "fifo"])
# a rank folder: its name and what its dump.json is; a step folder: its name and its rank folders
rank_folders = st.lists(st.tuples(folder_names, dump_kinds), max_size=4)
trees = st.one_of(
    st.lists(st.tuples(folder_names, rank_folders), max_size=4),  # step*/rank*/dump.json
    st.builds(lambda ranks: [("", ranks)], rank_folders),  # rank*/dump.json at the top
)
choices = st.one_of(st.none(), st.integers(0, 4), st.builds(StepSpan, st.none() | st.integers(0, 3), st.none()))


def _write(root: Path, tree: list[tuple[str, list[tuple[str, str]]]]) -> None:
    for step, ranks in tree:
        for rank, kind in ranks:
            folder = root / step / rank if step else root / rank
            folder.mkdir(parents=True, exist_ok=True)
            dump = folder / "dump.json"
            if os.path.lexists(dump):
                continue
            if kind == "file":
                try:
                    os.link(REAL_DUMP, dump)  # cheap where it can be
                except OSError:
                    shutil.copy(REAL_DUMP, dump)
            elif kind == "directory":
                dump.mkdir()
            elif kind == "dangling":
                dump.symlink_to(folder / "gone.json")
            elif kind == "device":
                dump.symlink_to("/dev/null")
            elif kind == "fifo":
                os.mkfifo(dump)


@settings(max_examples=300, deadline=None)
@given(trees, choices)
def test_any_folder_tree_gives_contiguous_regular_rank_files_or_one_input_error(
    tree: list[tuple[str, list[tuple[str, str]]]], step: StepChoice
) -> None:
    with tempfile.TemporaryDirectory() as temporary:
        root = Path(temporary) / "dumps"
        root.mkdir()
        _write(root, tree)
        try:
            source = resolve_dump_source(root, step)
        except InputError as error:
            assert "\n" not in str(error) and error.path.startswith(str(root)), error
            return
        joined = list(source.joined_steps)
        assert joined == list(range(joined[0], joined[0] + len(joined))) if joined else True  # no gap
        per_step = len(source.files) // max(len(joined), 1)
        for index in range(max(len(joined), 1)):
            ranks = source.ranks[index * per_step : (index + 1) * per_step]
            assert list(ranks) == list(range(len(ranks)))  # no gap, no duplicate
        for path in source.files:
            assert path.is_file() and not path.is_symlink() and path.name == "dump.json"
            assert all(part.isascii() for part in path.relative_to(root).parts)
        if len(source.files) <= 2:  # the real rank file loads (two identical ranks merge)
            assert DumpCache().get(source).keys
