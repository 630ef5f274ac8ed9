"""One home per shared list: diagnostic codes (rca_lsp/server/codes.py) and mapping-file names (pairing.py);
the VS Code client's lists must name the same."""

from __future__ import annotations

import json
import re
from pathlib import Path

from rca_lsp.server import codes

EXTENSION = Path(__file__).resolve().parents[1] / "editors" / "vscode"


def test_the_client_and_its_settings_schema_list_every_server_code() -> None:
    server = set(codes.DEFAULT_SEVERITY)
    source = (EXTENSION / "src" / "settings.ts").read_text()
    listed = re.search(r"DIAGNOSTIC_CODES = \[(.*?)\] as const", source, re.S)
    assert listed is not None
    assert set(re.findall(r"'([a-z-]+)'", listed.group(1))) == server
    manifest = json.loads((EXTENSION / "package.json").read_text())
    severity = manifest["contributes"]["configuration"]["properties"]["rcaLsp.severity"]
    assert set(severity["propertyNames"]["enum"]) == server
    assert set(codes.CLASSIFICATION_CODES.values()) <= server


def test_the_client_selects_the_mapping_files_the_server_analyses() -> None:
    from rca_lsp.server.pairing import MAPPING_GLOBS

    source = (EXTENSION / "src" / "files.ts").read_text()
    listed = re.search(r"MAPPING_GLOBS = \[(.*?)\] as const", source, re.S)
    assert listed is not None
    assert re.findall(r"'([^']+)'", listed.group(1)) == [f"**/{glob}" for glob in MAPPING_GLOBS]
