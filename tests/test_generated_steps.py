"""Any generated rollout dumped one msprobe step per engine step (some steps missing keys, holding nulls, or other
modules), read with `--rollout-step all` or a span and joined as successive calls, is analysed and written without
an exception, or refused with a clear message."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_generated_runs import analyse_and_write, dump, write_documents

from rca_lsp.diagnose.run import SideOptions
from rca_lsp.dumps.sources import parse_step


@st.composite
def stepped_run(draw: st.DrawFn) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any], str]:
    train = draw(dump())
    steps = [draw(dump()) for _ in range(draw(st.integers(1, 4)))]
    rollout_keys = sorted({k for step in steps for k in step["data"]})
    train_keys = list(train["data"])
    mapping = {}
    for key in draw(st.lists(st.sampled_from(train_keys), max_size=6, unique=True)):
        target = draw(st.sampled_from(rollout_keys))
        mapping[key] = target.rpartition(".")[0] + ".*" if draw(st.booleans()) else target
    return train, steps, mapping, draw(st.sampled_from(["all", "0-1", "1-", "-2", "0"]))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(stepped_run())
def test_any_stepped_rollout_is_joined_analysed_and_written(
    generated: tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any], str],
) -> None:
    train, steps, mapping, chosen = generated
    documents = {f"rollout/step{step}/rank0/dump.json": document for step, document in enumerate(steps)}
    documents["train/step0/rank0/dump.json"] = train
    with tempfile.TemporaryDirectory() as name:
        write_documents(Path(name), documents, mapping)
        analyse_and_write(Path(name), rollout_options=SideOptions(parse_step(chosen, "--rollout-step")))
