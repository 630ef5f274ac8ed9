"""The server under change and bad input (issue 23): dumps deleted or moved while it runs, pairing globs that would
not end, YAML mid-edit, floods of diagnostics, commands on broken dumps. pytest-lsp end to end on real fixtures."""

from __future__ import annotations

import json

import pytest
import test_server
from lsprotocol import types
from pytest_lsp import LanguageClient
from test_server import copy_variant, open_document, wait_for

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
