"""rcaLsp.server.chartData over stdio: the chart of the latest analysis for any client, and clear errors."""

# ruff: noqa: F811 (the tests take test_server's `client` fixture as their `client` argument)

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import msgspec
import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pytest_lsp import LanguageClient
from test_server import client, copy_variant, open_document, wait_for  # noqa: F401 (client: the fixture)

from rca_lsp.diagnose.run import analyze_paths
from rca_lsp.report.chart import chart_data

CHART_DATA = "rcaLsp.server.chartData"


async def chart(client: LanguageClient, *arguments: object) -> dict:
    return await asyncio.wait_for(
        client.workspace_execute_command_async(types.ExecuteCommandParams(command=CHART_DATA, arguments=arguments)),
        timeout=30,
    )


def train_keys(data: dict, call: dict) -> list[str]:
    """The call's train keys from their string-table indexes (head, label, tail)."""
    return ["".join(data["strings"][i] for i in key) for key in call["modules"]["train_key"]]


@pytest.mark.asyncio(loop_scope="function")
async def test_the_chart_follows_the_analysis_after_a_save(client: LanguageClient) -> None:
    mapping = copy_variant(client, "param_desync")
    uri = open_document(client, mapping)
    await wait_for(client, uri, lambda ds: any(d.code == "parameter-sync" for d in ds))
    data = await chart(client, uri)
    written = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="rcaLsp.server.writeOutputs", arguments=[uri])
    )
    report = json.loads((Path(written["outDir"]) / "output_5_root_cause_report.json").read_text())
    call = data["calls"][data["default_call"]]
    named = report["first_divergence"]["train_key"]
    assert call["first_divergence"]["train_key"] == named
    assert train_keys(data, call)[call["first_divergence"]["index"]] == named
    assert data["mapping_path"] == str(mapping)
    # the diverging entry removed and saved: the next chart no longer has it
    entries = json.loads(mapping.read_text())
    del entries[named]
    text = json.dumps(entries, indent=2)
    mapping.write_text(text)
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
        )
    )
    client.text_document_did_save(types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri)))
    await wait_for(client, uri, lambda ds: not any(d.code == "parameter-sync" for d in ds))
    after = await chart(client, uri)
    assert all(named not in train_keys(after, c) for c in after["calls"])


@pytest.mark.asyncio(loop_scope="function")
async def test_bad_arguments_get_one_clear_message(client: LanguageClient) -> None:
    unpaired = client.root / "alone" / "mapping_key.json"  # type: ignore[attr-defined]
    unpaired.parent.mkdir()
    unpaired.write_text("{}")
    uri = open_document(client, unpaired)
    await wait_for(client, uri, lambda ds: any(d.code == "unpaired-mapping" for d in ds))
    for arguments, expected_text in (
        ((), "takes one argument, the mapping-key file's URI"),
        ((42,), "takes one argument"),
        (("file:///nowhere/mapping_key.json",), "not a mapping-key file known"),
        ((uri,), "has not been analysed yet (is it paired with dumps?)"),
    ):
        with pytest.raises(JsonRpcException) as raised:
            await chart(client, *arguments)
        assert expected_text in raised.value.message and "Traceback" not in raised.value.message
    assert not [m for m in client.messages if "Error in server" in m.message]


@pytest.mark.asyncio(loop_scope="function")
async def test_commands_on_a_file_whose_dumps_cannot_be_analysed_say_why(client: LanguageClient) -> None:
    """A mapping paired with dumps that hold no module entry: the chart and the outputs answer with the dump problem
    shown at the top of the file, not with "not analysed yet"."""
    folder = client.root / "no_modules"  # type: ignore[attr-defined]
    for side in ("train", "rollout"):
        dump = folder / side / "step0" / "rank0" / "dump.json"
        dump.parent.mkdir(parents=True)
        dump.write_text(json.dumps({"task": "statistics", "level": "L0", "data": {"Functional.linear.0.forward": {}}}))
    mapping = folder / "mapping_key.json"
    mapping.write_text("{}")
    uri = open_document(client, mapping)
    shown = await wait_for(client, uri, lambda ds: any(d.code == "dump-problem" for d in ds))
    problem = next(d.message for d in shown if d.code == "dump-problem")
    assert "no Module./Cell. forward entries" in problem
    for command in (CHART_DATA, "rcaLsp.server.writeOutputs"):
        with pytest.raises(JsonRpcException) as raised:
            await asyncio.wait_for(
                client.workspace_execute_command_async(types.ExecuteCommandParams(command=command, arguments=[uri])),
                timeout=30,
            )
        assert "has no analysis" in raised.value.message and "no Module./Cell. forward entries" in raised.value.message


@pytest.mark.asyncio(loop_scope="function")
@pytest.mark.parametrize("variant", ["param_desync", "tp2_pp2_shard_desync"])
async def test_the_chart_built_in_a_child_is_the_one_built_here(client: LanguageClient, variant: str) -> None:
    """The server builds the chart in a forked child and sends its bytes: the same data as chart_data here."""
    mapping = copy_variant(client, variant)
    uri = open_document(client, mapping)
    await wait_for(client, uri, lambda ds: any(d.source == "rca-lsp" for d in ds))
    data = await chart(client, uri)
    here = analyze_paths(mapping.parent / "train", mapping.parent / "rollout", mapping)
    assert data == json.loads(json.dumps(msgspec.to_builtins(chart_data(here))))


@pytest.mark.asyncio(loop_scope="function")
async def test_a_command_during_a_rerun_still_says_why_the_dumps_cannot_be_analysed(client: LanguageClient) -> None:
    """The dump problem stays shown, and told to commands, while the next run (a save) reads the dumps again: the
    run's own outcome replaces it, not the start of the run."""
    folder = client.root / "slow_no_modules"  # type: ignore[attr-defined]
    data = {f"Functional.linear.{i}.forward": {"input_args": [], "output": []} for i in range(200_000)}
    for side in ("train", "rollout"):
        dump = folder / side / "step0" / "rank0" / "dump.json"
        dump.parent.mkdir(parents=True)
        dump.write_text(json.dumps({"task": "statistics", "level": "L0", "data": data}))
    mapping = folder / "mapping_key.json"
    mapping.write_text("{}")
    uri = open_document(client, mapping)
    await wait_for(client, uri, lambda ds: any(d.code == "dump-problem" for d in ds), timeout=60)
    loading = sum(getattr(status, "state", None) == "loading" for status in client.statuses)  # type: ignore[attr-defined]
    client.text_document_did_save(types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri)))
    deadline = asyncio.get_running_loop().time() + 60
    while sum(getattr(status, "state", None) == "loading" for status in client.statuses) == loading:  # type: ignore[attr-defined]
        assert asyncio.get_running_loop().time() < deadline, "the save started no run"
        await asyncio.sleep(0.005)
    with pytest.raises(JsonRpcException) as raised:
        await chart(client, uri)  # answered while the save's run reads the dumps again
    assert "has no analysis" in raised.value.message and "no Module./Cell. forward entries" in raised.value.message
