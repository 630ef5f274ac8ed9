"""What a long editing session must not pile up in the server: pygls' records of requests (one per command), each
holding a future and its result for good."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from rca_lsp.server.app import RcaServer


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
