"""End to end over stdio with pytest-lsp, on the real fixture dumps."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

import pytest
import pytest_lsp
from conftest import FIXTURES, expected
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

SERVER = ClientServerConfig(server_command=[sys.executable, "-m", "rca_lsp", "serve"])
TIMEOUT = 30


async def initialize_in_workspace(lsp_client: LanguageClient, tmp_path: Path) -> None:
    """A VS Code-like client's session in a fresh workspace folder (tmp_path/ws), keeping the statuses and the
    registrations the server sends it."""
    root = tmp_path / "ws"
    root.mkdir()
    lsp_client.root = root  # type: ignore[attr-defined]
    lsp_client.statuses = []  # type: ignore[attr-defined]
    lsp_client.registrations = []  # type: ignore[attr-defined]

    @lsp_client.feature(types.CLIENT_REGISTER_CAPABILITY)
    def on_register(client: LanguageClient, params: types.RegistrationParams) -> None:
        lsp_client.registrations.extend(params.registrations)  # type: ignore[attr-defined]

    @lsp_client.feature("rcaLsp/status")
    def on_status(client: LanguageClient, params: object) -> None:
        lsp_client.statuses.append(params)  # type: ignore[attr-defined]

    await lsp_client.initialize_session(
        types.InitializeParams(
            capabilities=client_capabilities("visual-studio-code"),
            root_uri=root.as_uri(),
            workspace_folders=[types.WorkspaceFolder(uri=root.as_uri(), name="ws")],
        )
    )


@pytest_lsp.fixture(config=SERVER)
async def client(lsp_client: LanguageClient, tmp_path: Path):
    await initialize_in_workspace(lsp_client, tmp_path)
    yield
    await lsp_client.shutdown_session()


def copy_variant(client: LanguageClient, variant: str) -> Path:
    import shutil

    target = client.root / variant  # type: ignore[attr-defined]
    shutil.copytree(FIXTURES / variant, target)
    return target / "mapping_key.json"


async def wait_for(client: LanguageClient, uri: str, predicate, timeout: float = TIMEOUT) -> list[types.Diagnostic]:
    deadline = time.monotonic() + timeout
    while True:
        current = list(client.diagnostics.get(uri, []))
        if predicate(current):
            return current
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out; last diagnostics: {[(d.code, d.message[:80]) for d in current]}")
        await asyncio.sleep(0.05)


def open_document(client: LanguageClient, path: Path, text: str | None = None) -> str:
    uri = path.as_uri()
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(
                uri=uri, language_id="json", version=1, text=text if text is not None else path.read_text()
            )
        )
    )
    return uri


def apply_and_save(client: LanguageClient, uri: str, edit: types.TextEdit, version: int) -> None:
    """What an editor does when the user applies a quick fix's edit and saves."""
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[types.TextDocumentContentChangePartial(range=edit.range, text=edit.new_text)],
        )
    )
    client.text_document_did_save(types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri)))


def line_of(path: Path, key: str) -> int:
    return path.read_text().split("\n").index(next(l for l in path.read_text().split("\n") if f'"{key}"' in l))


def findings(diagnostics: list[types.Diagnostic]) -> list[types.Diagnostic]:
    return [
        d for d in diagnostics if d.code in ("missing-op", "parameter-sync", "in-module-diff", "upstream-propagation")
    ]


@pytest.mark.asyncio(loop_scope="function")
async def test_missing_activation_diagnostic_hover_and_definition(client: LanguageClient) -> None:
    mapping = copy_variant(client, "missing_activation")
    uri = open_document(client, mapping)
    truth = expected("missing_activation")["root_cause"]
    diagnostics = await wait_for(client, uri, lambda ds: any(d.code == "missing-op" for d in ds))
    assert [d.code for d in diagnostics].count("missing-op") == 1
    assert list(client.diagnostics) == [uri], "one file, published under the client's URI only"
    missing = next(d for d in diagnostics if d.code == "missing-op")
    assert missing.range.start.line == line_of(mapping, truth["train_key"])
    assert missing.severity == types.DiagnosticSeverity.Warning and "act_fn" in missing.message
    assert any(r.location.uri.endswith("dump.json") for r in missing.related_information or [])
    boundary = [d for d in diagnostics if d.code == "aligned-boundary"]
    assert boundary and "act_fn" in boundary[0].message

    hover = await client.text_document_hover_async(
        types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=types.Position(line=missing.range.start.line, character=missing.range.start.character + 5),
        )
    )
    assert hover is not None
    text = hover.contents.value
    assert "missing_or_extra_op_between_aligned_boundary" in text and "act_fn" in text and "| output.0" in text

    location = await client.text_document_definition_async(
        types.DefinitionParams(text_document=types.TextDocumentIdentifier(uri=uri), position=missing.range.start)
    )
    target = location if isinstance(location, types.Location) else location[0]
    dump_line = Path(target.uri.removeprefix("file://")).read_text().split("\n")[target.range.start.line]
    assert truth["train_key"] in dump_line


@pytest.mark.asyncio(loop_scope="function")
async def test_unknown_key_quick_fix_gives_empty_publish(client: LanguageClient) -> None:
    mapping = copy_variant(client, "healthy_fp32")
    text = mapping.read_text()
    key = next(iter(json.loads(text)))
    typo = key.replace(".forward.", ".froward.")
    uri = open_document(client, mapping, text.replace(f'"{key}"', f'"{typo}"', 1))
    diagnostics = await wait_for(client, uri, lambda ds: any(d.code == "unknown-train-key" for d in ds))
    unknown = next(d for d in diagnostics if d.code == "unknown-train-key")
    actions = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=unknown.range,
            context=types.CodeActionContext(diagnostics=[unknown]),
        )
    )
    fix = next(a for a in actions if a.title == f"Replace with {key}")
    edit = fix.edit.document_changes[0].edits[0]
    assert edit.new_text == json.dumps(key)
    apply_and_save(client, uri, edit, version=2)
    await wait_for(client, uri, lambda ds: ds == [])


@pytest.mark.asyncio(loop_scope="function")
async def test_syntax_error_mid_edit_keeps_last_findings(client: LanguageClient) -> None:
    mapping = copy_variant(client, "param_desync")
    uri = open_document(client, mapping)
    before = await wait_for(client, uri, lambda ds: any(d.code == "parameter-sync" for d in ds))
    finding = next(d for d in before if d.code == "parameter-sync")
    broken = mapping.read_text().replace('",', '"', 1)  # drop the first comma
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=broken)],
        )
    )
    client.text_document_did_save(types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri)))
    during = await wait_for(client, uri, lambda ds: any(d.code == "json-syntax" for d in ds))
    assert any(d.code == "parameter-sync" and d.range.start.line == finding.range.start.line for d in during)
    assert all(d.code != "unknown-train-key" for d in during)


@pytest.mark.asyncio(loop_scope="function")
async def test_dump_change_triggers_reanalysis(client: LanguageClient) -> None:
    mapping = copy_variant(client, "healthy_fp32")
    uri = open_document(client, mapping)
    await asyncio.sleep(1.0)
    assert findings(list(client.diagnostics.get(uri, []))) == []
    param_dir = FIXTURES / "param_desync" / "train"
    train_dump = next(mapping.parent.joinpath("train").rglob("dump.json"))
    train_dump.write_bytes(next(param_dir.rglob("dump.json")).read_bytes())
    client.workspace_did_change_watched_files(
        types.DidChangeWatchedFilesParams(
            changes=[types.FileEvent(uri=train_dump.as_uri(), type=types.FileChangeType.Changed)]
        )
    )
    await wait_for(client, uri, lambda ds: any(d.code == "parameter-sync" for d in ds))


@pytest.mark.asyncio(loop_scope="function")
async def test_unpaired_mapping_offers_config_skeleton(client: LanguageClient) -> None:
    folder = client.root / "lonely"  # type: ignore[attr-defined]
    folder.mkdir()
    mapping = folder / "my_mapping_key.json"
    mapping.write_text('{"a": "b"}\n')
    uri = open_document(client, mapping)
    diagnostics = await wait_for(client, uri, lambda ds: any(d.code == "unpaired-mapping" for d in ds))
    unpaired = next(d for d in diagnostics if d.code == "unpaired-mapping")
    assert "rca-lsp.toml" in unpaired.message and "train/" in unpaired.message
    actions = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=unpaired.range,
            context=types.CodeActionContext(diagnostics=[unpaired]),
        )
    )
    create = actions[0].edit.document_changes
    assert isinstance(create[0], types.CreateFile) and create[0].uri.endswith("rca-lsp.toml")
    assert "[[pair]]" in create[1].edits[0].new_text


@pytest.mark.asyncio(loop_scope="function")
async def test_unopened_mapping_files_in_the_workspace_are_analysed(client: LanguageClient) -> None:
    mapping = copy_variant(client, "in_module_diff")
    client.workspace_did_change_watched_files(
        types.DidChangeWatchedFilesParams(
            changes=[types.FileEvent(uri=mapping.as_uri(), type=types.FileChangeType.Created)]
        )
    )
    await wait_for(client, mapping.as_uri(), lambda ds: any(d.code == "in-module-diff" for d in ds))


@pytest.mark.asyncio(loop_scope="function")
async def test_commands_write_the_report_and_suggest_a_mapping(client: LanguageClient) -> None:
    mapping = copy_variant(client, "param_desync")
    uri = open_document(client, mapping)
    await wait_for(client, uri, lambda ds: any(d.code == "parameter-sync" for d in ds))
    written = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="rcaLsp.server.writeOutputs", arguments=[uri])
    )
    report = Path(written["reportMarkdown"])
    assert report.parent == mapping.parent / "rca_out" and "parameter_or_checkpoint_issue" in report.read_text()
    suggested = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="rcaLsp.server.suggestMapping", arguments=[uri])
    )
    assert json.loads(suggested["content"]) == json.loads(mapping.read_text())
    assert "matched" in suggested["coverage"]


@pytest.mark.asyncio(loop_scope="function")
async def test_cancelled_command_gets_an_answer_and_the_server_keeps_serving(client: LanguageClient) -> None:
    mapping = copy_variant(client, "missing_activation")
    uri = open_document(client, mapping)
    await wait_for(client, uri, lambda ds: any(d.code == "missing-op" for d in ds))
    answer = client.protocol.send_request_async(
        types.WORKSPACE_EXECUTE_COMMAND,
        types.ExecuteCommandParams(command="rcaLsp.server.suggestMapping", arguments=[uri]),
        msg_id="suggest-1",
    )
    client.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id="suggest-1"))
    try:
        result = await asyncio.wait_for(answer, TIMEOUT)
    except Exception as error:  # the usual outcome: the request was cancelled
        assert "cancel" in str(error).lower()
    else:  # it finished before the cancellation arrived
        assert "content" in result
    line = line_of(mapping, expected("missing_activation")["root_cause"]["train_key"])
    hover = await client.text_document_hover_async(
        types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=line, character=6)
        )
    )
    assert hover is not None


@pytest.mark.asyncio(loop_scope="function")
async def test_completion_offers_unmapped_train_keys_and_ranked_rollout_keys(client: LanguageClient) -> None:
    mapping = copy_variant(client, "missing_activation")
    entries = json.loads(mapping.read_text())
    train_key, rollout_key = next((k, v) for k, v in entries.items() if isinstance(v, str) and ".mlp." in k)
    del entries[train_key]
    text = json.dumps(entries, indent=2).replace("\n}", ',\n  "\n}')  # a new key being typed on the last line
    uri = open_document(client, mapping, text)
    await wait_for(client, uri, lambda ds: any(d.code == "json-syntax" for d in ds))
    last = text.split("\n")
    keys = await client.text_document_completion_async(
        types.CompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=types.Position(line=len(last) - 2, character=3),
        )
    )
    labels = [item.label for item in keys.items]
    assert train_key in labels and not set(labels) & set(entries)

    complete_text = json.dumps({**entries, train_key: rollout_key}, indent=2)
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=complete_text)],
        )
    )
    line = complete_text.split("\n").index(next(l for l in complete_text.split("\n") if f'"{train_key}"' in l))
    column = complete_text.split("\n")[line].index(f'"{rollout_key}"') + 1
    values = await client.text_document_completion_async(
        types.CompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=line, character=column)
        )
    )
    assert values.items[0].label == rollout_key


@pytest.mark.asyncio(loop_scope="function")
async def test_unmapped_train_module_hint_and_its_quick_fix(client: LanguageClient) -> None:
    mapping = copy_variant(client, "healthy_fp32")
    entries = json.loads(mapping.read_text())
    keys = list(entries)
    train_key = next(k for k in keys[len(keys) // 3 :] if ".linear_fc2." in k)
    rollout_value = entries.pop(train_key)
    text = json.dumps(entries, indent=2)
    uri = open_document(client, mapping, text)
    diagnostics = await wait_for(client, uri, lambda ds: any(d.code == "unmapped-train-module" for d in ds))
    hint = next(d for d in diagnostics if d.code == "unmapped-train-module")
    assert train_key in hint.message
    actions = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=hint.range,
            context=types.CodeActionContext(diagnostics=[hint]),
        )
    )
    fix = next(a for a in actions if train_key in a.title)
    edit = fix.edit.document_changes[0].edits[0]
    assert f"{json.dumps(train_key)}: {json.dumps(rollout_value)}" in edit.new_text
    apply_and_save(client, uri, edit, version=2)
    await wait_for(client, uri, lambda ds: ds == [])


@pytest.mark.asyncio(loop_scope="function")
@pytest.mark.parametrize(
    "variant",
    [
        "healthy_fp32",
        "vllm_healthy",
        "vllm_missing_activation",
        "vllm_param_desync",
        "in_module_diff",
        "bf16_healthy",
        "decode_healthy",
        "decode_norm_eps",
        "decode_missing_activation",
        "decode_steps_healthy",
        "decode_steps_norm_eps",
        "microbatch_fault",
        "moe_ep2_healthy",
        "moe_ep2_expert_desync",
        "moe_ep2_own_data_healthy",
        "moe_ep2_own_data_expert_desync",
        "tp2_healthy",
        "tp2_shard_desync",
        "tp2_sp_replica_desync",
        "pp2_in_module_diff",
        "tp2_pp2_shard_desync",
        "tp2_dp2_same_data",
        "tp2_dp2_shuffled_data",
        "tp2_dp2_same_data_replica_drift",
        "tp2_pp2_dp2_healthy",
        "vllm_tp2_kv_replica_desync",
        "vllm_tp2_shard_desync",
        "vllm_tp2_decode_steps_rank_desync",
        "tp2_replica_desync",
        "sglang_healthy",
        "sglang_param_desync",
        "sglang_tp2_healthy",
        "decode_kv_bf16",
        "autocast_down_proj",
        "weight_scale_1e5",
    ],
)
async def test_each_variant_gets_its_finding_on_the_root_cause_entry(client: LanguageClient, variant: str) -> None:
    from rca_lsp.server.codes import CLASSIFICATION_CODES

    mapping = copy_variant(client, variant)
    uri = open_document(client, mapping)
    truth = expected(variant)
    analysed = [s for s in client.statuses if getattr(s, "state", None) == "analysed"]  # type: ignore[attr-defined]
    await wait_for(
        client,
        uri,
        lambda ds: (
            uri in client.diagnostics
            and any(
                getattr(s, "uri", None) == uri and getattr(s, "state", None) == "analysed"
                for s in client.statuses[len(analysed) :]
            )
        ),
    )  # type: ignore[attr-defined]
    diagnostics = list(client.diagnostics[uri])  # published right after the status, in order
    origins = [
        d
        for d in diagnostics
        if d.code in CLASSIFICATION_CODES.values() and d.severity != types.DiagnosticSeverity.Hint
    ]
    if truth["clean"]:
        assert origins == [], [(d.code, d.message[:80]) for d in origins]
        return
    cause = truth["root_cause"]
    assert [(d.code, d.range.start.line) for d in origins] == [
        (CLASSIFICATION_CODES[cause["classification"]], line_of(mapping, cause["train_key"]))
    ]


@pytest.mark.asyncio(loop_scope="function")
async def test_all_calls_notation_in_hover_completion_and_definition(client: LanguageClient) -> None:
    mapping = copy_variant(client, "decode_missing_activation")
    uri = open_document(client, mapping)
    truth = expected("decode_missing_activation")["root_cause"]
    diagnostics = await wait_for(client, uri, lambda ds: any(d.code == "missing-op" for d in ds))
    missing = next(d for d in diagnostics if d.code == "missing-op")
    line = line_of(mapping, truth["train_key"])
    assert missing.range.start.line == line
    text = mapping.read_text().split("\n")[line]
    value_column = text.index(".forward.*") - 5
    hover = await client.text_document_hover_async(
        types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=types.Position(line=line, character=value_column),
        )
    )
    assert hover is not None and "prefill of 12 tokens + 4 decode steps" in hover.contents.value

    location = await client.text_document_definition_async(
        types.DefinitionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=types.Position(line=line, character=value_column),
        )
    )
    target = location if isinstance(location, types.Location) else location[0]
    dump_line = Path(target.uri.removeprefix("file://")).read_text().split("\n")[target.range.start.line]
    assert truth["rollout_key"].replace(".forward.*", ".forward.0") in dump_line

    start = text.index('": "') + 4
    values = await client.text_document_completion_async(
        types.CompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=line, character=start)
        )
    )
    stars = [item for item in values.items if item.label.endswith(".forward.*")]
    assert stars and "every call of this rollout module (5 calls)" == stars[0].detail


@pytest.mark.asyncio(loop_scope="function")
async def test_a_call_of_joined_steps_opens_in_its_own_step_file(client: LanguageClient) -> None:
    """decode_steps_*: the rollout dumped one msprobe step per engine step, paired with rollout_step = "all" by the
    fixture's rca-lsp.toml; an explicit forward.3 is the fourth step's forward.0."""
    mapping = copy_variant(client, "decode_steps_norm_eps").with_name("mapping_key_explicit.json")
    uri = open_document(client, mapping)
    await wait_for(client, uri, lambda ds: any(d.code == "in-module-diff" for d in ds))
    lines = mapping.read_text().split("\n")
    line = next(i for i, text in enumerate(lines) if ".forward.3" in text)
    location = await client.text_document_definition_async(
        types.DefinitionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=types.Position(line=line, character=lines[line].index(".forward.3") - 3),
        )
    )
    target = location if isinstance(location, types.Location) else location[0]
    assert "/rollout/step3/rank0/dump.json" in target.uri
    called = lines[line][: lines[line].index(".forward.3")].rsplit('"', 1)[1]
    dump_line = Path(target.uri.removeprefix("file://")).read_text().split("\n")[target.range.start.line]
    assert f'"{called}.forward.0"' in dump_line


@pytest.mark.asyncio(loop_scope="function")
async def test_a_rank_file_being_rewritten_keeps_the_last_analysis(client: LanguageClient) -> None:
    mapping = copy_variant(client, "moe_ep2_expert_desync")
    uri = open_document(client, mapping)
    before = await wait_for(client, uri, lambda ds: any(d.code == "parameter-sync" for d in ds))
    rank1 = mapping.parent / "train" / "step0" / "rank1" / "dump.json"
    good = rank1.read_bytes()
    rank1.write_bytes(good[: len(good) // 2])
    client.workspace_did_change_watched_files(
        types.DidChangeWatchedFilesParams(
            changes=[types.FileEvent(uri=rank1.as_uri(), type=types.FileChangeType.Changed)]
        )
    )
    during = await wait_for(client, uri, lambda ds: any(d.code == "dump-problem" for d in ds))
    problem = next(d for d in during if d.code == "dump-problem")
    assert "rank1" in problem.message
    assert [(d.code, d.range.start.line) for d in during if d.code == "parameter-sync"] == [
        (d.code, d.range.start.line) for d in before if d.code == "parameter-sync"
    ]
    rank1.write_bytes(good)
    client.workspace_did_change_watched_files(
        types.DidChangeWatchedFilesParams(
            changes=[types.FileEvent(uri=rank1.as_uri(), type=types.FileChangeType.Changed)]
        )
    )
    await wait_for(
        client,
        uri,
        lambda ds: not any(d.code == "dump-problem" for d in ds) and any(d.code == "parameter-sync" for d in ds),
    )


@pytest.mark.asyncio(loop_scope="function")
async def test_a_sub_tolerance_divergence_shows_its_calibration_in_the_hover(client: LanguageClient) -> None:
    mapping = copy_variant(client, "decode_kv_bf16")
    uri = open_document(client, mapping)
    truth = expected("decode_kv_bf16")["root_cause"]
    line = line_of(mapping, truth["train_key"])
    diagnostics = await wait_for(
        client, uri, lambda ds: any(d.code == "upstream-propagation" and d.range.start.line == line for d in ds)
    )
    origin = next(d for d in diagnostics if d.code == "upstream-propagation" and d.range.start.line == line)
    hover = await client.text_document_hover_async(
        types.HoverParams(text_document=types.TextDocumentIdentifier(uri=uri), position=origin.range.start)
    )
    assert hover is not None
    assert "Confidence: this divergence is" in hover.contents.value and "x the noise floor" in hover.contents.value


@pytest.mark.asyncio(loop_scope="function")
async def test_bad_input_gets_answers_not_silence_or_tracebacks(client: LanguageClient) -> None:
    from pygls.exceptions import JsonRpcException

    mapping = copy_variant(client, "missing_activation")
    uri = open_document(client, mapping)
    await wait_for(client, uri, lambda ds: any(d.code == "missing-op" for d in ds))
    # a request whose params do not deserialize, sent as raw JSON (a typed client cannot build it): answered with
    # InvalidParams, not left waiting
    answer = asyncio.get_running_loop().create_future()
    client.protocol._request_futures["bad-hover"] = answer
    client.protocol._send_data(
        {
            "jsonrpc": "2.0",
            "id": "bad-hover",
            "method": types.TEXT_DOCUMENT_HOVER,
            "params": {"textDocument": {"uri": uri}, "position": {"line": -1, "character": 0}},
        }
    )
    with pytest.raises(JsonRpcException) as raised:
        await asyncio.wait_for(answer, timeout=10)
    assert raised.value.code == -32602 and "textDocument/hover" in raised.value.message
    # commands with bad arguments: one clear message each
    for arguments, expected_text in (
        ([], "takes one argument, the mapping-key file's URI"),
        ([42], "takes one argument"),
        (["file:///nowhere/mapping_key.json"], "not a mapping-key file known"),
    ):
        with pytest.raises(JsonRpcException) as raised:
            await asyncio.wait_for(
                client.workspace_execute_command_async(
                    types.ExecuteCommandParams(command="rcaLsp.server.writeOutputs", arguments=arguments)
                ),
                timeout=10,
            )
        assert expected_text in raised.value.message and "Traceback" not in raised.value.message
        assert "TypeError" not in raised.value.message
    # a change of a document that was never opened: ignored, no "Error in server" pop-up
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri + ".unopened.json", version=2),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text="{}")],
        )
    )
    hover = await client.text_document_hover_async(
        types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=1, character=5)
        )
    )
    assert hover is not None  # still serving
    assert not [m for m in client.messages if "Error in server" in m.message]


@pytest.mark.asyncio(loop_scope="function")
async def test_a_dump_folder_renamed_away_and_back_pairs_again(client: LanguageClient) -> None:
    mapping = copy_variant(client, "missing_activation")
    uri = open_document(client, mapping)
    await wait_for(client, uri, lambda ds: any(d.code == "missing-op" for d in ds))
    train = mapping.parent / "train"
    away = mapping.parent / "train.moved"
    train.rename(away)
    client.workspace_did_change_watched_files(
        types.DidChangeWatchedFilesParams(
            changes=[types.FileEvent(uri=train.as_uri(), type=types.FileChangeType.Deleted)]
        )
    )
    await wait_for(client, uri, lambda ds: any(d.code == "unpaired-mapping" for d in ds))
    away.rename(train)  # back: the client reports the folder, not the files in it
    client.workspace_did_change_watched_files(
        types.DidChangeWatchedFilesParams(
            changes=[types.FileEvent(uri=train.as_uri(), type=types.FileChangeType.Created)]
        )
    )
    await wait_for(
        client,
        uri,
        lambda ds: any(d.code == "missing-op" for d in ds) and not any(d.code == "unpaired-mapping" for d in ds),
    )


@pytest.mark.asyncio(loop_scope="function")
async def test_a_pair_whose_mapping_key_is_an_msprobe_cell_mapping_analyses_and_reports(client: LanguageClient) -> None:
    """rcaLsp.pairs names a cell_mapping.yaml kept away from the dumps: its findings and its problems are drawn on
    its lines, and the report is written from it."""
    from rca_lsp.mapping.msprobe_names import cell_name

    copy_variant(client, "missing_activation")
    root = client.root  # type: ignore[attr-defined]
    mapping = json.loads((FIXTURES / "missing_activation" / "mapping_key.json").read_text())
    lines = [f"{cell_name(k)}: {cell_name(v)}" for k, v in mapping.items() if isinstance(v, str)]
    lines.insert(3, "fc2.Dense: fc2.Linear")  # msprobe's documentation example: no such module here
    (root / "msprobe").mkdir()
    path = root / "msprobe" / "ours.yaml"
    path.write_text("# cell mapping as msprobe compare -cm reads it\n" + "\n".join(lines) + "\n")
    ws = "${workspaceFolder}"
    pair = {"mappingKey": f"{ws}/msprobe/ours.yaml", "train": f"{ws}/missing_activation/train", "rollout": f"{ws}/missing_activation/rollout"}  # fmt: skip
    client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"rcaLsp": {"pairs": [pair]}})
    )
    uri = open_document(client, path)
    diagnostics = await wait_for(client, uri, lambda ds: any(d.code == "missing-op" for d in ds))
    text = path.read_text().split("\n")
    missing = next(d for d in diagnostics if d.code == "missing-op")
    assert text[missing.range.start.line].startswith("module.module.decoder.layers.0.mlp.linear_fc2.RowParallelLinear:")
    unknown = [d for d in diagnostics if d.code == "unknown-train-key"]
    assert [(d.range.start.line, "matches no module" in d.message) for d in unknown] == [(4, True)]
    hover = await client.text_document_hover_async(
        types.HoverParams(text_document=types.TextDocumentIdentifier(uri=uri), position=missing.range.start)
    )
    assert hover is not None and "linear_fc2" in str(hover.contents)
    definition = await client.text_document_definition_async(
        types.DefinitionParams(text_document=types.TextDocumentIdentifier(uri=uri), position=missing.range.start)
    )
    assert definition is not None and "missing_activation/train" in str(definition)
    actions = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=unknown[0].range,
            context=types.CodeActionContext(diagnostics=unknown),
        )
    )
    assert not actions  # the quick fixes write JSON: none on a YAML file
    result = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="rcaLsp.server.writeOutputs", arguments=[uri])
    )
    report = json.loads((Path(result["outDir"]) / "output_5_root_cause_report.json").read_text())
    assert report["mapping_key_path"] == str(path) and "missing an activation" in report["top_hypothesis"]
    dump = root / "missing_activation" / "train" / "step0" / "rank0" / "dump.json"
    dump.write_bytes(dump.read_bytes()[:1000])  # being rewritten: the last good findings stay on their line
    client.workspace_did_change_watched_files(
        types.DidChangeWatchedFilesParams(
            changes=[types.FileEvent(uri=dump.as_uri(), type=types.FileChangeType.Changed)]
        )
    )
    during = await wait_for(client, uri, lambda ds: any(d.code == "dump-problem" for d in ds))
    assert [d.range.start.line for d in during if d.code == "missing-op"] == [missing.range.start.line]


@pytest.mark.asyncio(loop_scope="function")
async def test_tensor_evidence_follows_the_statistics_findings(client: LanguageClient) -> None:
    """A tensor-mode pair: the statistics' finding is published first (one module late, as they allow), the
    element-wise one replaces it when the tensors are compared, at the module where the reordering enters."""
    from rca_lsp.server.codes import CLASSIFICATION_CODES

    variant = "tensor_qkv_heads_reordered"
    mapping = copy_variant(client, variant)
    uri = open_document(client, mapping)
    cause = expected(variant)["root_cause"]
    where = line_of(mapping, cause["train_key"])
    code = CLASSIFICATION_CODES[cause["classification"]]
    found = await wait_for(client, uri, lambda ds: any(d.code == code and d.range.start.line == where for d in ds))
    origin = next(d for d in found if d.code == code and d.range.start.line == where)
    assert "heads reordered" in origin.message
    statuses = client.statuses  # type: ignore[attr-defined]
    tops = [str(s) for s in statuses if getattr(s, "uri", None) == uri and getattr(s, "state", None) == "analysed"]
    assert len(tops) == 2 and "in-module implementation" in tops[0] and "heads reordered" in tops[1], tops
