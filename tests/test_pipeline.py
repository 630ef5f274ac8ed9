"""The run pipeline's one "still current?" check: a run that a newer one superseded stops at its next step."""

from __future__ import annotations

from pathlib import Path

import pytest

from rca_lsp.base.errors import InputError
from rca_lsp.server.app import RcaServer
from rca_lsp.server.documents import MappingDocument
from rca_lsp.server.pipeline import Run, Superseded


@pytest.mark.asyncio(loop_scope="function")
async def test_a_step_of_a_superseded_run_raises_superseded_even_when_its_work_failed() -> None:
    server = RcaServer()
    doc = MappingDocument("file:///m/mapping_key.json", Path("/m/mapping_key.json"))

    def superseding(fail: bool) -> int:
        doc.next_generation()  # a newer edit arrives while the work runs
        if fail:
            raise InputError("train/dump.json", "the dump is being rewritten")
        return 1

    for fail in (False, True):
        with pytest.raises(Superseded):
            await Run(server, doc, doc.next_generation()).step(superseding, fail)
    current = Run(server, doc, doc.next_generation())
    assert await current.step(lambda: 2) == 2

    def failing() -> None:
        raise InputError("train/dump.json", "the dump is being rewritten")

    with pytest.raises(InputError):  # a current run's failure is its own to report
        await current.step(failing)
    server.stop()
