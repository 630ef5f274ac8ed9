"""What a long editing session must not pile up in the server: pygls' records of requests and progress tokens (one
per command, per dump load), each holding a future and its result for good; reference cycles made while the
collector is paused, which its freeze (base.gcpause) would keep for good."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from concurrent.futures import Future
from pathlib import Path

import pytest
import pytest_lsp
from conftest import FIXTURES
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient
from test_server import TIMEOUT, copy_variant, initialize_in_workspace, open_document, wait_for
from test_server_hardening import change_and_save, problems, report

from rca_lsp.server.app import RcaServer
from rca_lsp.server.pairing import Pair
from rca_lsp.server.pipeline import Run

SURVIVORS = "rcaTest/survivors"
# The server with one request more: a full collection of every object, frozen ones too (frozen again after): how many
# it found garbage, which only the freeze kept, and how many objects survive it.
COUNTING_SERVER = f"""
import gc, sys
from rca_lsp.cli.main import main
from rca_lsp.server.app import server

@server.feature({SURVIVORS!r})
def survivors(ls, params):
    gc.unfreeze()
    garbage = gc.collect()
    survivors = len(gc.get_objects())
    gc.freeze()
    return {{"survivors": survivors, "garbage": garbage}}

sys.exit(main(["serve"]))
"""


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


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[sys.executable, "-c", COUNTING_SERVER]))
async def counted(lsp_client: LanguageClient, tmp_path: Path):
    await initialize_in_workspace(lsp_client, tmp_path)
    yield
    await lsp_client.shutdown_session()


async def survivors(client: LanguageClient) -> tuple[int, int]:
    """The objects alive after a full collection, and how many it freed (see COUNTING_SERVER)."""
    counted = await asyncio.wait_for(client.protocol.send_request_async(SURVIVORS, None), TIMEOUT)
    return counted.survivors, counted.garbage


@pytest.mark.asyncio(loop_scope="function")
async def test_a_long_session_leaves_no_garbage_behind_the_collectors_freeze(counted: LanguageClient) -> None:
    """What the session does again and again (a text that does not parse mid-edit, then saved; a rank file rewritten
    broken, then back; writeOutputs) made reference cycles while the collector was paused, and the freeze at the end
    of the pause kept them for good: the parse's JSON error, held with its traceback by the frame its traceback holds
    (with the text and the parse), the same for a dump's (its `doc`: the whole dump's text), and the report image's
    matplotlib figure (~12,000 objects). The session leaves no garbage, and the objects alive after a full collection
    stop growing."""
    mapping = copy_variant(counted, "missing_activation")
    uri = open_document(counted, mapping)
    await wait_for(counted, uri, lambda ds: any(d.code == "missing-op" for d in ds))
    text = mapping.read_text()
    rank = mapping.parent / "train" / "step0" / "rank0" / "dump.json"
    dump = rank.read_bytes()
    version = 1

    async def one_round() -> None:
        nonlocal version
        change_and_save(counted, uri, text[: len(text) // 2], version + 1)
        await wait_for(counted, uri, lambda ds: any(d.code == "json-syntax" for d in ds))
        change_and_save(counted, uri, text, version + 2)
        await wait_for(counted, uri, lambda ds: not any(d.code == "json-syntax" for d in ds))
        version += 2
        rank.write_bytes(dump[: len(dump) // 2])
        report(counted, rank, types.FileChangeType.Changed)
        await wait_for(counted, uri, lambda ds: bool(problems(ds)))
        rank.write_bytes(dump)
        report(counted, rank, types.FileChangeType.Changed)
        await wait_for(counted, uri, lambda ds: not problems(ds) and any(d.code == "missing-op" for d in ds))
        await counted.workspace_execute_command_async(
            types.ExecuteCommandParams(command="rcaLsp.server.writeOutputs", arguments=[uri])
        )

    for _ in range(2):  # caches fill, modules are imported (matplotlib's at the first image)
        await one_round()
    before, _ = await survivors(counted)
    rounds = 4
    for _ in range(rounds):
        await one_round()
    after, garbage = await survivors(counted)
    assert garbage <= rounds
    # the suggestion matcher's bounded caches keep ~25 objects of each reloaded dump pair until they are full
    assert after - before <= 100 * rounds
