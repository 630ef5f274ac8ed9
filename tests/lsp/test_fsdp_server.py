"""The server on real FSDP dumps (fixtures/fsdp*): it compares the train rank that read the rollout's data and
says which and why at the top of the mapping file; data no rank read is one `input-data` finding at the
embedding's entry; `train_rank` in rca-lsp.toml chooses the rank."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import expected
from lsprotocol import types
from pytest_lsp import LanguageClient
from test_server import client, copy_variant, line_of, open_document, wait_for

from rca_lsp.model.keys import unwrapped_key
from rca_lsp.report.mdtext import md_text

__all__ = ["client"]  # the pytest-lsp client fixture, shared with test_server


def by_code(diagnostics: list[types.Diagnostic], code: str) -> list[types.Diagnostic]:
    return [d for d in diagnostics if d.code == code]


def origins(diagnostics: list[types.Diagnostic], code: str) -> list[types.Diagnostic]:
    """The findings of a code shown as warnings or errors (the credible origins; what follows is a hint)."""
    shown = (types.DiagnosticSeverity.Warning, types.DiagnosticSeverity.Error)
    return [d for d in by_code(diagnostics, code) if d.severity in shown]


@pytest.mark.asyncio(loop_scope="function")
@pytest.mark.parametrize("variant", ["fsdp1_healthy_rank1", "fsdp2_vllm_healthy_rank1"])
async def test_the_rank_that_read_the_rollouts_data_is_named_and_clean(client: LanguageClient, variant: str) -> None:
    uri = open_document(client, copy_variant(client, variant))
    diagnostics = await wait_for(client, uri, lambda ds: bool(by_code(ds, "train-data-group")))
    (told,) = by_code(diagnostics, "train-data-group")
    assert told.severity == types.DiagnosticSeverity.Information and told.range.start.line == 0
    assert "train rank 1 analysed" in told.message and "rank 0 read other data" in told.message
    findings = [
        d for d in diagnostics if d.severity in (types.DiagnosticSeverity.Warning, types.DiagnosticSeverity.Error)
    ]
    assert findings == []


FAULTS_ON_RANK_1 = [("fsdp2_weight_desync_rank1", "parameter-sync"), ("fsdp1_vllm_norm_eps_rank1", "in-module-diff")]


@pytest.mark.asyncio(loop_scope="function")
@pytest.mark.parametrize(("variant", "code"), FAULTS_ON_RANK_1)
async def test_a_fault_on_the_second_ranks_data_is_found(client: LanguageClient, variant: str, code: str) -> None:
    mapping = copy_variant(client, variant)
    uri = open_document(client, mapping)
    diagnostics = await wait_for(client, uri, lambda ds: bool(origins(ds, code)))
    (found,) = origins(diagnostics, code)
    assert found.range.start.line == line_of(mapping, expected(variant)["root_cause"]["train_key"])
    assert "train rank 1 analysed" in by_code(diagnostics, "train-data-group")[0].message
    location = await client.text_document_definition_async(
        types.DefinitionParams(text_document=types.TextDocumentIdentifier(uri=uri), position=found.range.start)
    )
    target = location if isinstance(location, types.Location) else location[0]
    assert target.uri.endswith("/train/step0/rank1/dump.json")  # the record compared, not rank 0's


@pytest.mark.asyncio(loop_scope="function")
@pytest.mark.parametrize("variant", ["fsdp2_other_data", "fsdp1_vllm_other_data"])
async def test_other_data_is_one_finding_at_the_embedding(client: LanguageClient, variant: str) -> None:
    mapping = copy_variant(client, variant)
    uri = open_document(client, mapping)
    diagnostics = await wait_for(client, uri, lambda ds: bool(by_code(ds, "input-data")))
    (found,) = by_code(diagnostics, "input-data")
    assert found.range.start.line == line_of(mapping, expected(variant)["root_cause"]["train_key"])
    assert "fed different data" in found.message
    assert [d for d in diagnostics if d.code not in ("input-data", "train-data-group")] == []


@pytest.mark.asyncio(loop_scope="function")
async def test_train_rank_in_the_config_chooses_the_rank(client: LanguageClient) -> None:
    mapping = copy_variant(client, "fsdp1_healthy_rank1")
    (mapping.parent / "rca-lsp.toml").write_text(
        '[[pair]]\nmapping_key = "mapping_key.json"\ntrain = "train"\nrollout = "rollout"\ntrain_rank = 0\n'
    )
    uri = open_document(client, mapping)
    diagnostics = await wait_for(client, uri, lambda ds: bool(by_code(ds, "input-data")))
    (told,) = by_code(diagnostics, "train-data-group")
    assert "train rank 0 analysed as asked" in told.message and "differs from the rollout's" in told.message


def plain_mapping(mapping: Path) -> dict[str, str]:
    """The fixture's true mapping as written for the model without wrappers (a plain HF run's names)."""
    return {unwrapped_key(k): v for k, v in json.loads(mapping.read_text()).items()}


@pytest.mark.asyncio(loop_scope="function")
async def test_a_mapping_without_wrapper_names_is_rewritten_in_one_fix(client: LanguageClient) -> None:
    mapping = copy_variant(client, "fsdp1_norm_eps_rank1")
    text = json.dumps(plain_mapping(mapping), indent=2)
    uri = open_document(client, mapping, text)
    diagnostics = await wait_for(client, uri, lambda ds: bool(by_code(ds, "unknown-train-key")))
    unknown = by_code(diagnostics, "unknown-train-key")
    assert len(unknown) == 26  # every module inside a decoder layer; the embedding, rotary and norm keep their names
    assert all("wrapper parts (_fsdp_wrapped_module)" in d.message for d in unknown)
    actions = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=unknown[0].range,
            context=types.CodeActionContext(diagnostics=[unknown[0]]),
        )
    )
    (rewrite,) = [a for a in actions if a.title.startswith("Rewrite the 26 keys")]
    (change,) = rewrite.edit.document_changes
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
            content_changes=[
                types.TextDocumentContentChangePartial(range=e.range, text=e.new_text) for e in change.edits
            ],  # one key per line: the edits' positions do not move each other
        )
    )
    client.text_document_did_save(types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri)))
    diagnostics = await wait_for(client, uri, lambda ds: bool(by_code(ds, "in-module-diff")))
    assert not by_code(diagnostics, "unknown-train-key")
    (found,) = [d for d in by_code(diagnostics, "in-module-diff") if d.severity == types.DiagnosticSeverity.Warning]
    truth = expected("fsdp1_norm_eps_rank1")["root_cause"]["train_key"]
    assert found.range.start.line == line_of(mapping, truth)  # the rewritten file: the fixture's own keys


@pytest.mark.asyncio(loop_scope="function")
async def test_completion_sees_through_wrapper_names(client: LanguageClient) -> None:
    mapping = copy_variant(client, "fsdp2_checkpoint_rank1")
    entries = json.loads(mapping.read_text())
    wrapped = "Module.model.layers.1._checkpoint_wrapped_module.mlp.down_proj.Linear.forward.0"
    del entries[wrapped]
    typed = "Module.model.layers.1.mlp.down"
    text = json.dumps(entries, indent=2).replace("\n}", f',\n  "{typed}\n}}')
    uri = open_document(client, mapping, text)
    await wait_for(client, uri, lambda ds: any(d.code == "json-syntax" for d in ds))
    lines = text.split("\n")
    items = await client.text_document_completion_async(
        types.CompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=types.Position(line=len(lines) - 2, character=len(lines[-2])),
        )
    )
    assert [item.label for item in items.items] == [wrapped]


async def hover_text(client: LanguageClient, uri: str, line: int) -> str:
    hover = await client.text_document_hover_async(
        types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=line, character=5)
        )
    )
    assert hover is not None
    return hover.contents.value


@pytest.mark.asyncio(loop_scope="function")
@pytest.mark.parametrize(("variant", "code"), FAULTS_ON_RANK_1)
async def test_hovers_say_which_data_parallel_rank_was_compared(
    client: LanguageClient, variant: str, code: str
) -> None:
    mapping = copy_variant(client, variant)
    uri = open_document(client, mapping)
    diagnostics = await wait_for(client, uri, lambda ds: bool(origins(ds, code)))
    (told,) = by_code(diagnostics, "train-data-group")
    line = told.message.removeprefix("rca-lsp: ")
    assert line.startswith("train rank 1 analysed")
    (found,) = origins(diagnostics, code)
    first = line_of(mapping, next(iter(json.loads(mapping.read_text()))))  # the embedding's entry: aligned
    for entry in (found.range.start.line, first):
        assert f"Train data-parallel group: {md_text(line)}" in await hover_text(client, uri, entry)

    single = copy_variant(client, "tp2_healthy")  # one data-parallel group: nothing to say
    uri = open_document(client, single)
    await wait_for(
        client,
        uri,
        lambda ds: any(getattr(s, "uri", None) == uri and s.state == "analysed" for s in client.statuses),  # type: ignore[attr-defined]
    )
    first = line_of(single, next(iter(json.loads(single.read_text()))))
    assert "data-parallel group" not in await hover_text(client, uri, first)
