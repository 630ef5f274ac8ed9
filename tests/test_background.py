"""Background work of the server fails loudly: logged and reported as an error status, never lost with its task."""

from __future__ import annotations

import asyncio
import logging

import pytest

from rca_lsp.server.app import RcaServer


@pytest.mark.asyncio(loop_scope="function")
async def test_a_failing_background_run_is_logged_and_reported(caplog: pytest.LogCaptureFixture) -> None:
    server = RcaServer()
    reported: list[tuple[str, str, str]] = []
    server.notify_status = lambda state, uri, message, **_: reported.append((state, uri, message))  # type: ignore[method-assign]

    async def broken() -> None:
        raise RuntimeError("the dumps vanished")

    with caplog.at_level(logging.ERROR, logger="rca_lsp.server.app"):
        handle = server.debounce(None, 0.0, broken, "file:///m/mapping_key.json")
        await asyncio.sleep(0.05)
    assert handle is not None and server.background == set()
    assert reported == [
        ("error", "file:///m/mapping_key.json", "rca-lsp: internal error: RuntimeError: the dumps vanished")
    ]
    assert "background work failed: the dumps vanished" in caplog.text
    server.stop()
    with pytest.raises(RuntimeError):  # no new work is accepted after a shutdown
        server.executor.submit(print)
