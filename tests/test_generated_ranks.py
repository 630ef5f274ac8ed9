"""Any generated train side of two or four rank folders (tensor-parallel copies that agree, are sharded along a
dim, differ, or lack keys) is merged, analysed and its every output written without an exception, or refused with
a clear message."""

from __future__ import annotations

import copy
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_generated_runs import analyse_and_write, dump, tensor, write_documents

from rca_lsp.base.errors import InputError
from rca_lsp.diagnose.run import SideOptions
from rca_lsp.dumps.sources import parse_layout


@st.composite
def rank_copy(draw: st.DrawFn, entry: dict[str, Any] | None, rank: int, ranks: int) -> dict[str, Any] | None:
    """One rank's copy of an entry: the same, one slot redrawn, or its tensors sharded along their last dim."""
    if entry is None or rank == 0:
        return entry
    kind = draw(st.integers(0, 3))
    if kind == 0:
        return entry
    copied = copy.deepcopy(entry)
    if kind == 1:
        copied["output"] = [draw(tensor())]
    elif kind == 2:
        for node in [*copied["input_args"], *copied["output"], *copied.get("parameters", {}).values()]:
            shape = node.get("shape") if isinstance(node, dict) else None
            if isinstance(shape, list) and shape and all(type(size) is int for size in shape):  # odd ones as they are
                node["shape"] = [*node["shape"][:-1], max(node["shape"][-1] // ranks, 1)]
    else:
        return None
    return copied


@st.composite
def ranked_run(draw: st.DrawFn) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any]]:
    ranks = draw(st.sampled_from([2, 4]))
    first, rollout = draw(dump()), draw(dump())
    documents = []
    for rank in range(ranks):
        data = {}
        for key, entry in first["data"].items():
            if rank and draw(st.integers(0, 19)) == 0:
                continue  # a key one rank lacks
            data[key] = draw(rank_copy(entry, rank, ranks))
        documents.append({**first, "data": data})
    train_keys, rollout_keys = list(first["data"]), list(rollout["data"])
    mapping = {k: draw(st.sampled_from(rollout_keys)) for k in draw(st.lists(st.sampled_from(train_keys), max_size=6))}
    return documents, rollout, mapping


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(ranked_run())
def test_any_ranked_run_is_merged_analysed_and_written(
    generated: tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any]],
) -> None:
    ranks, rollout, mapping = generated
    documents = {f"train/step0/rank{rank}/dump.json": document for rank, document in enumerate(ranks)}
    documents["rollout/step0/rank0/dump.json"] = rollout
    with tempfile.TemporaryDirectory() as name:
        write_documents(Path(name), documents, mapping)
        analyse_and_write(Path(name))


LAYOUTS = {  # laid out as the user may say it (--parallel), or wrongly for the rank count: one clear message then
    2: ["tp=2", "dp=2", "pp=2", "ep=2", "tp=2,sp=1", "tp=4", "dp=3"],
    4: ["tp=2,dp=2", "tp=4", "dp=4", "pp=2,tp=2", "ep=2,dp=2", "pp=4", "ep=4", "tp=2,pp=2,dp=2", "tp=3"],
}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(ranked_run(), st.data())
def test_any_ranked_run_under_a_given_layout_and_train_rank_is_analysed_and_written(
    generated: tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any]], data: st.DataObject
) -> None:
    ranks, rollout, mapping = generated
    layout = data.draw(st.sampled_from(LAYOUTS[len(ranks)]))
    train_rank = data.draw(st.none() | st.integers(0, len(ranks)))
    documents = {f"train/step0/rank{rank}/dump.json": document for rank, document in enumerate(ranks)}
    documents["rollout/step0/rank0/dump.json"] = rollout
    with tempfile.TemporaryDirectory() as name:
        write_documents(Path(name), documents, mapping)
        try:
            options = SideOptions(layout=parse_layout(layout), data_rank=train_rank)
        except InputError as error:  # a layout the option itself refuses
            assert str(error)
            return
        analyse_and_write(Path(name), train_options=options)
