"""What a long editing session must not pile up in the server: pygls' records of requests and progress tokens (one
per command, per dump load), each holding a future and its result for good."""

from __future__ import annotations

import asyncio
import os
import shutil
from concurrent.futures import Future
from pathlib import Path

import pytest
from conftest import FIXTURES

from rca_lsp.server.app import RcaServer
from rca_lsp.server.pairing import Pair
from rca_lsp.server.pipeline import Run


class Collected:
    """A writer for the server's protocol that keeps what it is sent."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.sent.append(data)

    def close(self) -> None:
        pass


def initialized(server: RcaServer, root: Path | None, capabilities: dict) -> Collected:
    writer = Collected()
    server.protocol.set_writer(writer)
    server.protocol.handle_message(
        server.protocol.structure_message(
            {
                "jsonrpc": "2.0",
                "id": "init",
                "method": "initialize",
                "params": {
                    "processId": None,
                    "rootUri": root.as_uri() if root else None,
                    "capabilities": capabilities,
                },
            }
        )
    )
    return writer


@pytest.mark.asyncio(loop_scope="function")
async def test_answered_commands_leave_no_future_behind() -> None:
    """Each workspace/executeCommand (the chart's data after every save) left its future, with the result, in
    pygls' table of requests for as long as the server ran."""
    server = RcaServer()

    @server.command("test.result")
    async def result(ls: RcaServer, *arguments: object) -> dict[str, int]:
        await asyncio.sleep(0)
        return {"size": 1}

    writer = initialized(server, None, {})
    await asyncio.sleep(0.05)
    for number in range(20):
        server.protocol.handle_message(
            server.protocol.structure_message(
                {
                    "jsonrpc": "2.0",
                    "id": number,
                    "method": "workspace/executeCommand",
                    "params": {"command": "test.result", "arguments": []},
                }
            )
        )
    await asyncio.sleep(0.05)
    answers = [data for data in writer.sent if b'"result": {"size": 1}' in data]
    assert len(answers) == 20
    assert server.protocol._request_futures == {}
    server.stop()


@pytest.mark.asyncio(loop_scope="function")
async def test_loading_dumps_with_progress_leaves_no_progress_token_behind(tmp_path: Path) -> None:
    """Every load of the dumps (the first, and each after the dumps changed) registered a work-done progress token
    that pygls never forgets."""
    folder = tmp_path / "exp"
    shutil.copytree(FIXTURES / "missing_activation", folder)
    server = RcaServer()
    initialized(server, tmp_path, {"window": {"workDoneProgress": True}})
    await asyncio.sleep(0.05)
    progress = server.work_done_progress

    async def accepted(token: str) -> None:  # the client's answer to window/workDoneProgress/create
        progress.tokens[token] = Future()

    progress.create_async = accepted  # type: ignore[method-assign]
    doc = server.document((folder / "mapping_key.json").as_uri())
    assert doc is not None
    for load in range(3):
        for dump in folder.rglob("dump.json"):  # rewritten: loaded again
            os.utime(dump, ns=(dump.stat().st_atime_ns, dump.stat().st_mtime_ns + 10**9 * (load + 1)))
        await server.pipeline.run(Run(server, doc, doc.next_generation()))
        assert doc.analysis is not None and doc.analysis.suspects
    assert progress.tokens == {}
    server.stop()


@pytest.mark.asyncio(loop_scope="function")
async def test_the_server_keeps_the_dumps_of_the_current_pairs_only(tmp_path: Path) -> None:
    """The dump cache kept every dump the server ever loaded: each step of a multi-step dump chosen in turn
    (rca-lsp.toml's rollout_step set to the next one, as the job dumps on) stayed in memory for good."""
    folder = tmp_path / "exp"
    shutil.copytree(FIXTURES / "decode_steps_healthy", folder)
    server = RcaServer()
    initialized(server, tmp_path, {})
    await asyncio.sleep(0.05)
    doc = server.document((folder / "mapping_key.json").as_uri())
    assert doc is not None
    config = folder / "rca-lsp.toml"
    for step in range(5):
        config.write_text(
            f'[[pair]]\nmapping_key = "mapping_key*.json"\ntrain = "train"\nrollout = "rollout"\nrollout_step = {step}\n'
        )
        await server.pipeline.run(Run(server, doc, doc.next_generation()))
        assert isinstance(doc.pair, Pair) and doc.pair.rollout.step == step
    assert len(server.engine.dumps._dumps) == 2  # this pair's train and rollout
    server.stop()
