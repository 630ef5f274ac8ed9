"""The server's process lifecycle over a raw stdio stream: shutdown and exit while dumps are still loading."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from builders import entry, write_dump, write_mapping

KEY = "Module.model.layers.{}.mlp.down_proj.Linear.forward.0"


def frame(message: dict) -> bytes:
    body = json.dumps(message).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def test_shutdown_and_exit_while_dumps_load_end_at_once_and_quietly(tmp_path: Path) -> None:
    data = {KEY.format(i): entry([1.0, 2.0 + i % 7], [3.0, 4.0], [0.5, 0.25]) for i in range(20_000)}
    write_dump(tmp_path / "train" / "dump.json", data)
    write_dump(tmp_path / "rollout" / "dump.json", data)
    mapping = write_mapping(tmp_path / "mapping_key.json", {key: key for key in data})
    messages = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"processId": None, "rootUri": tmp_path.as_uri(), "capabilities": {}},
        },
        {"jsonrpc": "2.0", "method": "initialized", "params": {}},
        {
            "jsonrpc": "2.0",
            "method": "textDocument/didOpen",
            "params": {
                "textDocument": {
                    "uri": mapping.as_uri(),
                    "languageId": "json",
                    "version": 1,
                    "text": mapping.read_text(),
                }
            },
        },
        {"jsonrpc": "2.0", "id": 2, "method": "shutdown", "params": None},
        {"jsonrpc": "2.0", "method": "exit", "params": None},
    ]
    server = subprocess.Popen(
        [sys.executable, "-m", "rca_lsp", "serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert server.stdin is not None
    server.stdin.write(b"".join(frame(m) for m in messages[:3]))
    server.stdin.flush()
    time.sleep(0.5)  # the dumps are loading
    started = time.monotonic()
    _out, err = server.communicate(b"".join(frame(m) for m in messages[3:]), timeout=60)
    assert server.returncode == 0, err.decode(errors="replace")[-2000:]
    assert b"Traceback" not in err, err.decode(errors="replace")[-2000:]
    assert time.monotonic() - started < 30  # a bound for a hang, not a speed target


def test_a_wrong_content_length_does_not_leave_the_server_deaf(tmp_path: Path) -> None:
    initialize = frame(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"processId": None, "rootUri": tmp_path.as_uri(), "capabilities": {}},
        }
    )
    body = json.dumps({"jsonrpc": "2.0", "method": "initialized", "params": {}}).encode()
    wrong = b"Content-Length: %d\r\n\r\n" % (len(body) - 7) + body  # says 7 bytes fewer than it sends
    rest = frame({"jsonrpc": "2.0", "id": 2, "method": "shutdown", "params": None}) + frame(
        {"jsonrpc": "2.0", "method": "exit", "params": None}
    )
    server = subprocess.Popen(
        [sys.executable, "-m", "rca_lsp", "serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = server.communicate(initialize + wrong + rest, timeout=60)
    assert b'"id": 2' in out or b'"id":2' in out, (out[-500:], err[-2000:])  # the shutdown after it was answered
    assert server.returncode == 0
