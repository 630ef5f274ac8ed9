"""A client that advertises almost nothing (no file watching, no progress, no configuration), as many do."""

from __future__ import annotations

import asyncio
import shutil
import sys
import time
from pathlib import Path

import pytest
import pytest_lsp
from conftest import FIXTURES
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

SERVER = ClientServerConfig(server_command=[sys.executable, "-m", "rca_lsp", "serve"])


@pytest_lsp.fixture(config=SERVER)
async def plain(lsp_client: LanguageClient, tmp_path: Path):
    root = tmp_path / "ws"
    root.mkdir()
    lsp_client.root = root  # type: ignore[attr-defined]
    await lsp_client.initialize_session(
        types.InitializeParams(
            capabilities=types.ClientCapabilities(),
            root_uri=root.as_uri(),
            workspace_folders=[types.WorkspaceFolder(uri=root.as_uri(), name="ws")],
        )
    )
    yield
    await lsp_client.shutdown_session()


def codes_of(client: LanguageClient, uri: str) -> set[str]:
    return {str(d.code) for d in client.diagnostics.get(uri, [])}


@pytest.mark.asyncio(loop_scope="function")
async def test_a_dump_changed_in_the_workspace_is_seen_without_the_clients_watcher(plain: LanguageClient) -> None:
    folder = plain.root / "pair"  # type: ignore[attr-defined]
    shutil.copytree(FIXTURES / "healthy_fp32", folder)
    mapping = folder / "mapping_key.json"
    uri = mapping.as_uri()
    plain.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=uri, language_id="json", version=1, text=mapping.read_text())
        )
    )
    deadline = time.monotonic() + 30
    while uri not in plain.diagnostics and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert uri in plain.diagnostics and "parameter-sync" not in codes_of(plain, uri)
    train_dump = next((folder / "train").rglob("dump.json"))
    train_dump.write_bytes(next((FIXTURES / "param_desync" / "train").rglob("dump.json")).read_bytes())
    # no workspace/didChangeWatchedFiles: the server must notice by itself
    deadline = time.monotonic() + 30
    while "parameter-sync" not in codes_of(plain, uri) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert "parameter-sync" in codes_of(plain, uri)


@pytest_lsp.fixture(config=SERVER)
async def misconfigured(lsp_client: LanguageClient, tmp_path: Path):
    await lsp_client.initialize_session(
        types.InitializeParams(
            capabilities=types.ClientCapabilities(),
            root_uri=tmp_path.as_uri(),
            initialization_options={"rcaLsp": {"severity": {"missing-op": "loud"}}},
        )
    )
    yield
    await lsp_client.shutdown_session()


@pytest.mark.asyncio(loop_scope="function")
async def test_ignored_settings_are_shown_from_initialize_and_from_a_pushed_change(
    misconfigured: LanguageClient,
) -> None:
    async def warnings(count: int) -> list[str]:
        deadline = time.monotonic() + 10
        while len(misconfigured.messages) < count and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return [m.message for m in misconfigured.messages if m.type == types.MessageType.Warning]

    shown = await warnings(1)
    assert len(shown) == 1 and "rcaLsp.severity.missing-op must be one of" in shown[0]
    misconfigured.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"rcaLsp": {"tolerances": {"float32": -1}}})
    )
    shown = await warnings(2)
    assert len(shown) == 2 and "rcaLsp.tolerances.float32" in shown[1]


@pytest.mark.asyncio(loop_scope="function")
@pytest.mark.parametrize("moved", ["rank1", "rank3"])
async def test_a_rank_folder_moved_away_is_noticed_and_the_last_analysis_kept(
    plain: LanguageClient, moved: str
) -> None:
    """Issue 23, defect 6: the server watched each rank file's own folder only, so a rank folder moved away went
    unnoticed (and rank 3 of 4 gone would re-merge three ranks; rank 1 gone leaves a gap). It watches the dump
    folders: a dump-problem names the folder's file, the findings of the last good analysis stay, and they are
    analysed again when it is back."""
    folder = plain.root / "pair"  # type: ignore[attr-defined]
    shutil.copytree(FIXTURES / "tp2_pp2_shard_desync", folder)
    mapping = folder / "mapping_key.json"
    uri = mapping.as_uri()
    plain.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=uri, language_id="json", version=1, text=mapping.read_text())
        )
    )

    async def until(predicate) -> list[tuple[str, int]]:
        deadline = time.monotonic() + 30
        while not predicate(plain.diagnostics.get(uri, [])) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        diagnostics = plain.diagnostics.get(uri, [])
        assert predicate(diagnostics), [(d.code, d.message[:120]) for d in diagnostics]
        return sorted((str(d.code), d.range.start.line) for d in diagnostics if d.code != "dump-problem")

    def dump_problems(diagnostics) -> list[str]:
        return [d.message for d in diagnostics if d.code == "dump-problem"]

    before = await until(lambda ds: any(d.code == "parameter-sync" for d in ds))
    rank = folder / "train" / "step0" / moved
    rank.rename(folder / f"{moved}.away")
    during = await until(lambda ds: bool(dump_problems(ds)))
    said = dump_problems(plain.diagnostics[uri])[0]
    assert (f"{moved}/dump.json" in said or f"rank {moved[4:]} is missing" in said) and during == before
    (folder / f"{moved}.away").rename(rank)
    after = await until(lambda ds: not dump_problems(ds) and any(d.code == "parameter-sync" for d in ds))
    assert after == before


@pytest.mark.asyncio(loop_scope="function")
async def test_a_pushed_settings_section_that_is_not_an_object_is_said(plain: LanguageClient) -> None:
    """`{"rcaLsp": "..."}` pushed by didChangeConfiguration was read as a section without any setting: every
    setting silently back to its default, and no word of why."""
    plain.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"rcaLsp": ["pairs"]}))
    deadline = time.monotonic() + 10
    while not plain.messages and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert [m.message for m in plain.messages] == ["rcaLsp settings must be an object, got a list"]
