"""Requests right after a large edit (a paste of megabytes) while its text is being parsed: the event loop never
parses it, and an entry the edit left where it was is answered from the parse of the text before the edit."""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES
from lsprotocol import types
from test_long_session import Collected, initialized
from test_server import TIMEOUT

from rca_lsp.mapping.parse import parse_mapping
from rca_lsp.server import state
from rca_lsp.server.app import RcaServer, on_hover
from rca_lsp.server.pipeline import Run


class HeldParse:
    """parse_mapping that waits, off the event loop, until released: a parse of a large paste still under way."""

    def __init__(self) -> None:
        self.threads: list[str] = []
        self.started = threading.Event()
        self.released = threading.Event()

    def __call__(self, *args: Any) -> Any:
        self.threads.append(threading.current_thread().name)
        self.started.set()
        if threading.current_thread() is not threading.main_thread():  # the loop's thread would wait for good
            self.released.wait()
        return parse_mapping(*args)


def send(server: RcaServer, message: dict[str, Any]) -> None:
    server.protocol.handle_message(server.protocol.structure_message({"jsonrpc": "2.0", **message}))


def hover(server: RcaServer, request_id: int, uri: str, line: int) -> None:
    position = {"line": line, "character": 6}
    params = {"textDocument": {"uri": uri}, "position": position}
    send(server, {"id": request_id, "method": "textDocument/hover", "params": params})


def answer(writer: Collected, request_id: int) -> dict[str, Any] | None:
    """The result the server sent for a request, None while it has not answered."""
    for data in writer.sent:
        message = json.loads(data.split(b"\r\n\r\n", 1)[1])
        if message.get("id") == request_id:
            return message["result"]
    return None


async def answered(writer: Collected, request_id: int) -> dict[str, Any]:
    deadline = time.monotonic() + TIMEOUT  # against a hang, not a speed target
    while (result := answer(writer, request_id)) is None:
        assert time.monotonic() < deadline, f"request {request_id} not answered"
        await asyncio.sleep(0.01)
    return result


@pytest.mark.asyncio(loop_scope="function")
async def test_a_hover_after_a_large_paste_does_not_make_the_loop_parse_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hover right after a 10 MB paste waited ~0.7 s (1.4 s in an audit): its handler parsed the new text on the
    event loop, which answered nothing else meanwhile. The parse is made in a thread, once for all the requests
    that need it; an entry before the paste is answered from the parse of the text before it, without waiting."""
    folder = tmp_path / "exp"
    shutil.copytree(FIXTURES / "missing_activation", folder)
    mapping = folder / "mapping_key.json"
    uri, text = mapping.as_uri(), mapping.read_text()
    server = RcaServer()
    server.feature(types.TEXT_DOCUMENT_HOVER)(on_hover)  # the one handler this test asks (no runs are scheduled)
    writer = initialized(server, tmp_path, {})
    opened = {"uri": uri, "languageId": "json", "version": 1, "text": text}
    send(server, {"method": "textDocument/didOpen", "params": {"textDocument": opened}})
    doc = server.document(uri)
    assert doc is not None
    await server.pipeline.run(Run(server, doc, doc.next_generation()))
    above, below = 1, 2  # the first two entries; the paste goes between them
    for line in (above, below):
        hover(server, line, uri, line)
    before = [await answered(writer, line) for line in (above, below)]

    held = HeldParse()
    monkeypatch.setattr(state, "parse_mapping", held)
    pasted = "".join(f'\n  "Module.pasted.{i}.forward.0": "Module.model.pasted.{i}.forward.0",' for i in range(50))
    end_of_first = {"line": above, "character": len(text.split("\n")[above])}
    change = {"range": {"start": end_of_first, "end": end_of_first}, "text": pasted}
    send(
        server,
        {
            "method": "textDocument/didChange",
            "params": {"textDocument": {"uri": uri, "version": 2}, "contentChanges": [change]},
        },
    )
    moved = below + pasted.count("\n")
    for request_id in (11, 12):
        hover(server, request_id, uri, moved)
    hover(server, 13, uri, above)
    assert await answered(writer, 13) == before[0]  # while the new text's parse is under way
    await asyncio.get_running_loop().run_in_executor(None, held.started.wait)
    assert answer(writer, 11) is None and answer(writer, 12) is None  # they wait for it...
    held.released.set()
    after = [await answered(writer, request_id) for request_id in (11, 12)]
    assert [name.startswith("rca-parse") for name in held.threads] == [True]  # ...made once, off the loop
    shifted = {
        **before[1],
        "range": {side: {**at, "line": at["line"] + pasted.count("\n")} for side, at in before[1]["range"].items()},
    }
    assert after == [shifted, shifted]
    server.stop()
