"""One version: the installed package's metadata, `rca-lsp --version` and the server's `serverInfo` agree."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import version

from test_lifecycle import frame

import rca_lsp


def test_the_command_line_says_the_installed_version() -> None:
    run = subprocess.run([sys.executable, "-m", "rca_lsp", "--version"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and run.stdout.strip() == f"rca-lsp {version('rca-lsp')}"
    assert rca_lsp.__version__ == version("rca-lsp")


def test_initialize_answers_with_the_server_name_and_version() -> None:
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"processId": None, "capabilities": {}}},
        {"jsonrpc": "2.0", "id": 2, "method": "shutdown", "params": None},
        {"jsonrpc": "2.0", "method": "exit", "params": None},
    ]
    run = subprocess.run(
        [sys.executable, "-m", "rca_lsp", "serve"],
        input=b"".join(frame(m) for m in messages),
        capture_output=True,
        timeout=60,
    )
    header, _, rest = run.stdout.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in header.split(b"\r\n") if line.startswith(b"Content-Length"))
    answer = json.loads(rest[:length])
    assert answer["id"] == 1 and answer["result"]["serverInfo"] == {"name": "rca-lsp", "version": version("rca-lsp")}
