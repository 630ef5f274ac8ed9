"""The server under change and bad input (issue 23): dumps deleted or unreadable while it runs, YAML mid-edit,
floods of diagnostics, commands on broken dumps. pytest-lsp end to end on real fixtures (a rank folder moved away
with a client that does not watch files: test_plain_client; a pairing glob over symlink cycles: test_lifecycle)."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest
import test_server
from conftest import FIXTURES
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pytest_lsp import LanguageClient
from test_server import TIMEOUT, apply_and_save, copy_variant, open_document, wait_for

from rca_lsp.mapping.msprobe_names import cell_name

client = test_server.client  # the fixture: a VS Code-like client in a fresh workspace


def change_and_save(client: LanguageClient, uri: str, text: str, version: int) -> None:
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
        )
    )
    client.text_document_did_save(types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri)))


def placed(diagnostics: list[types.Diagnostic], *kinds: str) -> list[tuple[str, int]]:
    return sorted((str(d.code), d.range.start.line) for d in diagnostics if d.code in kinds)


@pytest.mark.asyncio(loop_scope="function")
async def test_a_yaml_syntax_error_mid_edit_keeps_the_findings_of_the_last_good_parse(client: LanguageClient) -> None:
    """Defect 19: one broken line of a cell_mapping.yaml made every finding give way to one `json-syntax`."""
    mapping = copy_variant(client, "missing_activation")
    entries = json.loads(mapping.read_text())
    path = mapping.with_name("cell_mapping.yaml")  # paired by convention, as the mapping-key JSON beside it
    good = "".join(f"{cell_name(k)}: {cell_name(v)}\n" for k, v in entries.items() if isinstance(v, str))
    path.write_text(good)
    uri = open_document(client, path)
    before = await wait_for(client, uri, lambda ds: any(d.code == "missing-op" for d in ds))
    change_and_save(client, uri, good + "module.being.Typed: model.half: typed\n", 2)
    during = await wait_for(client, uri, lambda ds: any(d.code == "yaml-syntax" for d in ds))
    assert placed(during, "yaml-syntax") == [("yaml-syntax", len(good.splitlines()))]
    assert placed(during, "missing-op", "aligned-boundary") == placed(before, "missing-op", "aligned-boundary")
    assert not [d for d in during if d.code in ("json-syntax", "unknown-train-key")]


@pytest.mark.asyncio(loop_scope="function")
async def test_each_kind_of_diagnostic_is_capped_with_one_summary_of_how_many_more(client: LanguageClient) -> None:
    """Also seen in issue 23: one edit published 240k unknown-key diagnostics in one message. At most 500 of each
    kind per file; one more diagnostic of that kind says how many were left out; the findings still show."""
    mapping = copy_variant(client, "missing_activation")
    entries = json.loads(mapping.read_text())
    rollout_key = next(v for v in entries.values() if isinstance(v, str))
    typos = {f"Module.no.such.module{i}.Linear.forward.0": rollout_key for i in range(1200)}
    wrong_values = {k: f"{v}.nowhere" for k, v in list(entries.items())[-3:] if isinstance(v, str)}
    uri = open_document(client, mapping, json.dumps({**entries, **typos, **wrong_values}, indent=2))
    diagnostics = await wait_for(client, uri, lambda ds: any(d.code == "missing-op" for d in ds))
    unknown = [d for d in diagnostics if d.code == "unknown-train-key"]
    summaries = [d for d in unknown if "more" in d.message and "not shown" in d.message]
    assert len(unknown) == 501 and len(summaries) == 1 and "700 more" in summaries[0].message
    assert summaries[0].severity == types.DiagnosticSeverity.Information
    assert len([d for d in diagnostics if d.code == "unknown-rollout-key"]) == len(wrong_values)  # under the cap
    actions = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=summaries[0].range,
            context=types.CodeActionContext(diagnostics=summaries),
        )
    )
    assert not actions  # the summary stands for no entry: nothing to replace or remove


@pytest.mark.asyncio(loop_scope="function")
async def test_suggest_mapping_on_a_broken_rank_answers_the_one_line_error(client: LanguageClient) -> None:
    """Also seen in issue 23: a rank file broken while the server runs made suggestMapping answer -32603 "internal
    error: InputError ..." (and log a traceback); the answer is the error's one line, naming the file."""
    mapping = copy_variant(client, "tp2_shard_desync")
    uri = open_document(client, mapping)
    await wait_for(client, uri, lambda ds: any(d.code == "parameter-sync" for d in ds))
    rank1 = mapping.parent / "train" / "step0" / "rank1" / "dump.json"
    rank1.write_bytes(rank1.read_bytes()[:5000])
    with pytest.raises(JsonRpcException) as raised:
        await asyncio.wait_for(
            client.workspace_execute_command_async(
                types.ExecuteCommandParams(command="rcaLsp.server.suggestMapping", arguments=[uri])
            ),
            timeout=TIMEOUT,
        )
    assert raised.value.code == -32803, raised.value  # RequestFailed: valid request, the dumps cannot be read
    message = raised.value.message
    assert str(rank1) in message and "\n" not in message
    assert "internal error" not in message.lower() and "InputError" not in message and "Traceback" not in message


def origins(diagnostics: list[types.Diagnostic]) -> list[tuple[str, int]]:
    """The findings drawn as origins (not the hints that follow from them), by code and line."""
    from rca_lsp.server.codes import CLASSIFICATION_CODES

    kinds = set(CLASSIFICATION_CODES.values())
    return sorted((str(d.code), d.range.start.line) for d in diagnostics if d.code in kinds and d.severity != 4)


def report(client: LanguageClient, path: Path, kind: types.FileChangeType) -> None:
    client.workspace_did_change_watched_files(
        types.DidChangeWatchedFilesParams(changes=[types.FileEvent(uri=path.as_uri(), type=kind)])
    )


def problems(diagnostics: list[types.Diagnostic]) -> list[str]:
    return [d.message for d in diagnostics if d.code == "dump-problem"]


@pytest.mark.asyncio(loop_scope="function")
async def test_a_rank_file_deleted_keeps_the_last_analysis_and_is_watched_when_back(client: LanguageClient) -> None:
    """Defect 6: deleting rank1's dump.json (as a rewrite does) re-merged rank 0 alone into another root cause, and
    the file, once back, was no longer watched (the pair held rank 0 only)."""
    mapping = copy_variant(client, "tp2_shard_desync")
    uri = open_document(client, mapping)
    before = origins(await wait_for(client, uri, lambda ds: bool(origins(ds))))
    rank1 = mapping.parent / "train" / "step0" / "rank1" / "dump.json"
    good = rank1.read_bytes()
    rank1.unlink()
    report(client, rank1, types.FileChangeType.Deleted)
    during = await wait_for(client, uri, lambda ds: bool(problems(ds)))
    assert str(rank1) in problems(during)[0] and "last good analysis" in problems(during)[0]
    assert origins(during) == before
    with pytest.raises(JsonRpcException) as raised:  # not a mapping suggested from rank 0 alone
        await client.workspace_execute_command_async(
            types.ExecuteCommandParams(command="rcaLsp.server.suggestMapping", arguments=[uri])
        )
    assert str(rank1) in raised.value.message
    rank1.write_bytes(good)
    report(client, rank1, types.FileChangeType.Created)
    after = await wait_for(client, uri, lambda ds: not problems(ds) and bool(origins(ds)))
    assert origins(after) == before


@pytest.mark.asyncio(loop_scope="function")
async def test_a_dump_too_deep_to_read_is_a_dump_problem_and_keeps_the_last_analysis(client: LanguageClient) -> None:
    """Defect 1 in the server: a rank file nested thousands of levels deep raised a RecursionError through the
    run: the status said "internal error" and nothing was published. Any failure to load a dump is a dump-problem
    naming it, over the last good analysis."""
    mapping = copy_variant(client, "tp2_shard_desync")
    uri = open_document(client, mapping)
    before = origins(await wait_for(client, uri, lambda ds: bool(origins(ds))))
    rank1 = mapping.parent / "train" / "step0" / "rank1" / "dump.json"
    deep = "[" * 100_000 + "]" * 100_000
    rank1.write_text('{"task": "statistics", "level": "L0", "dump_data_dir": null, "data": {"m": ' + deep + "}}")
    report(client, rank1, types.FileChangeType.Changed)
    during = await wait_for(client, uri, lambda ds: bool(problems(ds)))
    assert str(mapping.parent / "train") in problems(during)[0] and origins(during) == before
    statuses = [getattr(s, "message", "") for s in client.statuses]  # type: ignore[attr-defined]
    assert not [s for s in statuses if "internal error" in s]


@pytest.mark.asyncio(loop_scope="function")
async def test_a_pairing_that_fails_unforeseen_is_a_dump_problem_over_the_last_analysis(client: LanguageClient) -> None:
    """Defect 3 in the server: `parallel = "tp=²"` in an rca-lsp.toml (a digit to str.isdigit, not to int) raised
    a ValueError through the run: "internal error", nothing published. Whatever a pairing raises is the pair's
    dump-problem, and the last good findings stay."""
    mapping = copy_variant(client, "tp2_shard_desync")
    uri = open_document(client, mapping)
    before = origins(await wait_for(client, uri, lambda ds: bool(origins(ds))))
    config = mapping.with_name("rca-lsp.toml")
    config.write_text(
        '[[pair]]\nmapping_key = "mapping_key.json"\ntrain = "train"\nrollout = "rollout"\nparallel = "tp=²"\n'
    )
    report(client, config, types.FileChangeType.Created)
    during = await wait_for(client, uri, lambda ds: bool(problems(ds)))
    assert "²" in problems(during)[0] and origins(during) == before
    statuses = [getattr(s, "message", "") for s in client.statuses]  # type: ignore[attr-defined]
    assert not [s for s in statuses if "internal error" in s]


@pytest.mark.asyncio(loop_scope="function")
async def test_an_incremental_edit_lands_where_the_client_put_it_past_a_line_separator(client: LanguageClient) -> None:
    """U+2028 inside a JSON string ends no line for LSP (nor for the editor): an incremental change below it is applied
    on the line the client means. (pygls' own apply splits lines there too, and put this edit one line too high.)"""
    mapping = copy_variant(client, "healthy_fp32")
    entries = json.loads(mapping.read_text())
    text = '{\n  "Module.note\u2028x.Linear.forward.0": "Module.note.Linear.forward.0",\n' + mapping.read_text()[2:]
    lines = text.split("\n")
    key = list(entries)[2]
    line = next(i for i, content in enumerate(lines) if content.startswith(f'  "{key}"'))
    uri = open_document(client, mapping, text)
    await wait_for(client, uri, lambda ds: any(d.code == "unknown-train-key" for d in ds))
    typo = key.replace(".forward.", ".froward.")
    edit = types.TextEdit(
        range=types.Range(start=types.Position(line, 3), end=types.Position(line, 3 + len(key))), new_text=typo
    )
    apply_and_save(client, uri, edit, version=2)
    after = await wait_for(
        client,
        uri,
        lambda ds: sum(d.code == "unknown-train-key" for d in ds) == 2 or any(d.code == "json-syntax" for d in ds),
    )
    assert not [d for d in after if d.code == "json-syntax"]
    (flagged,) = [d for d in after if d.code == "unknown-train-key" and d.data["key"] == typo]
    assert flagged.range.start.line == line


@pytest.mark.asyncio(loop_scope="function")
async def test_edits_of_a_file_whose_uri_has_escapes_are_analysed_as_typed(client: LanguageClient) -> None:
    """A mapping in a folder named "run 1" (or with any non-ASCII letter): its URI holds %-escapes, and pygls keeps
    open documents under the unescaped URI. Looked up by the client's URI the document was "not open": every edit
    was ignored (the file on disk analysed instead), a typo typed in got no diagnostic."""
    folder = client.root / "run 1 é"  # type: ignore[attr-defined]
    shutil.copytree(FIXTURES / "missing_activation", folder)
    mapping = folder / "mapping_key.json"
    uri = open_document(client, mapping)
    assert "%20" in uri
    await wait_for(client, uri, lambda ds: any(d.code == "missing-op" for d in ds))
    key = list(json.loads(mapping.read_text()))[2]
    typo = key.replace(".forward.", ".froward.")
    on_disk = mapping.read_text()
    client.text_document_did_change(  # typed, not saved
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
            content_changes=[
                types.TextDocumentContentChangeWholeDocument(text=on_disk.replace(f'"{key}"', f'"{typo}"'))
            ],
        )
    )
    after = await wait_for(client, uri, lambda ds: any(d.code == "unknown-train-key" for d in ds), timeout=10)
    (flagged,) = [d for d in after if d.code == "unknown-train-key"]
    assert flagged.data["key"] == typo
    assert flagged.range.start.line == next(i for i, line in enumerate(on_disk.split("\n")) if f'"{key}"' in line)
    hover = await client.text_document_hover_async(
        types.HoverParams(text_document=types.TextDocumentIdentifier(uri=uri), position=flagged.range.start)
    )
    assert hover is not None and "Not in the train dump" in hover.contents.value  # the typed text's entry
    assert mapping.read_text() == on_disk


@pytest.mark.asyncio(loop_scope="function")
async def test_a_pair_whose_mapping_key_names_no_file_leaves_dump_changes_seen(client: LanguageClient) -> None:
    """`"mappingKey": "."` in rcaLsp.pairs (a pattern of no path parts): Path.match raised "empty pattern" for each
    file the client reported changed: "Error in server: ValueError" and the dump change was not analysed."""
    mapping = copy_variant(client, "healthy_fp32")
    uri = open_document(client, mapping)
    await asyncio.sleep(1.0)
    client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(
            settings={"rcaLsp": {"pairs": [{"mappingKey": ".", "train": "train", "rollout": "rollout"}]}}
        )
    )
    train_dump = next(mapping.parent.joinpath("train").rglob("dump.json"))
    train_dump.write_bytes(next((FIXTURES / "param_desync" / "train").rglob("dump.json")).read_bytes())
    report(client, train_dump, types.FileChangeType.Changed)
    await wait_for(client, uri, lambda ds: any(d.code == "parameter-sync" for d in ds), timeout=10)
    assert not [m.message for m in client.messages if "Error in server" in m.message]


@pytest.mark.asyncio(loop_scope="function")
async def test_the_open_mapping_file_deleted_or_replaced_on_disk_keeps_its_analysis(client: LanguageClient) -> None:
    """An open mapping file is analysed from the editor's text. A watcher's Deleted for it (the file removed while
    open, an editor's save by rename, a `git checkout`) dropped the document: its diagnostics were cleared, and once
    it was back (Created) it was not analysed again while open: hovers, code actions and commands had nothing."""
    mapping = copy_variant(client, "missing_activation")
    uri = open_document(client, mapping)
    before = await wait_for(client, uri, lambda ds: any(d.code == "missing-op" for d in ds))
    text = mapping.read_text()
    mapping.unlink()
    report(client, mapping, types.FileChangeType.Deleted)
    await asyncio.sleep(1.0)
    assert placed(client.diagnostics[uri], "missing-op") == placed(before, "missing-op")
    mapping.write_text(text)
    report(client, mapping, types.FileChangeType.Created)
    missing = next(d for d in before if d.code == "missing-op")
    hover = await client.text_document_hover_async(
        types.HoverParams(text_document=types.TextDocumentIdentifier(uri=uri), position=missing.range.start)
    )
    assert hover is not None and "act_fn" in hover.contents.value


@pytest.mark.asyncio(loop_scope="function")
async def test_a_workspace_folder_added_is_analysed_and_one_removed_is_forgotten(
    client: LanguageClient, tmp_path: Path
) -> None:
    """The mapping files of the folders open at start are analysed unopened; those of a folder added later were not
    (nothing until opened), and those of a folder removed kept their diagnostics for good."""
    await asyncio.sleep(1.0)  # the workspace at start has been scanned
    other = tmp_path / "other"
    shutil.copytree(FIXTURES / "missing_activation", other / "exp")
    uri = (other / "exp" / "mapping_key.json").as_uri()
    folder = types.WorkspaceFolder(uri=other.as_uri(), name="other")
    client.workspace_did_change_workspace_folders(
        types.DidChangeWorkspaceFoldersParams(event=types.WorkspaceFoldersChangeEvent(added=[folder], removed=[]))
    )
    await wait_for(client, uri, lambda ds: any(d.code == "missing-op" for d in ds))
    client.workspace_did_change_workspace_folders(
        types.DidChangeWorkspaceFoldersParams(event=types.WorkspaceFoldersChangeEvent(added=[], removed=[folder]))
    )
    await wait_for(client, uri, lambda ds: ds == [], timeout=5)
    await asyncio.sleep(1.0)  # nothing left to publish them again
    assert not client.diagnostics[uri]


@pytest.mark.asyncio(loop_scope="function")
async def test_an_open_text_starting_with_a_byte_order_mark_is_analysed_at_the_places_the_client_counts(
    client: LanguageClient,
) -> None:
    """A client that sends a UTF-8 file's BOM as the text's first character: the text was one `json-syntax` error,
    though the file on disk reads fine. Its entries are read, a problem placed where the client's text has it."""
    mapping = copy_variant(client, "missing_activation")
    entries = json.loads(mapping.read_text())
    key = list(entries)[2]
    typo = key.replace(".forward.", ".froward.")
    text = "\ufeff" + json.dumps(entries).replace(f'"{key}"', f'"{typo}"')  # one line: every place on line 0
    uri = open_document(client, mapping, text)
    after = await wait_for(
        client, uri, lambda ds: any(d.code in ("unknown-train-key", "json-syntax", "invalid-value") for d in ds)
    )
    assert not [d for d in after if d.code in ("json-syntax", "invalid-value")]
    (flagged,) = [d for d in after if d.code == "unknown-train-key"]
    start, end = flagged.range.start, flagged.range.end
    assert start.line == end.line == 0 and text[start.character : end.character] == f'"{typo}"'


@pytest.mark.asyncio(loop_scope="function")
async def test_a_dump_folder_with_rank_folders_beside_its_steps_says_which_is_read(client: LanguageClient) -> None:
    """Step folders won over rank folders at the top of a dump folder without a word: a warning says which is read
    and that the others are ignored, once (not again at each edit)."""
    mapping = copy_variant(client, "missing_activation")
    train = mapping.parent / "train"
    shutil.copytree(train / "step0" / "rank0", train / "rank0")
    uri = open_document(client, mapping)
    await wait_for(client, uri, lambda ds: any(d.code == "missing-op" for d in ds))
    said = [m.message for m in client.messages if str(train) in m.message]
    assert len(said) == 1 and "step0 is read" in said[0] and "rank folders 0" in said[0] and "ignored" in said[0]
    key = list(json.loads(mapping.read_text()))[2]
    change_and_save(client, uri, mapping.read_text().replace(f'"{key}"', '"Module.typed.forward.0"'), 2)
    await wait_for(client, uri, lambda ds: any(d.code == "unknown-train-key" for d in ds))  # the next run published
    assert [m.message for m in client.messages if str(train) in m.message] == said
