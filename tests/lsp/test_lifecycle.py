"""The server's process lifecycle over a raw stdio stream: shutdown and exit while dumps are still loading."""

from __future__ import annotations

import io
import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from builders import entry, write_dump, write_mapping
from conftest import FIXTURES

KEY = "Module.model.layers.{}.mlp.down_proj.Linear.forward.0"


def frame(message: dict) -> bytes:
    body = json.dumps(message).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def initialize(root: Path | None, request_id: int = 1, **params: object) -> dict:
    """The initialize request of a client of no capabilities, its root `root` (None: no root)."""
    start = {"processId": None, "rootUri": root.as_uri() if root is not None else None, "capabilities": {}}
    return {"jsonrpc": "2.0", "id": request_id, "method": "initialize", "params": {**start, **params}}


def shutdown(request_id: int) -> dict:
    return {"jsonrpc": "2.0", "id": request_id, "method": "shutdown", "params": None}


INITIALIZED = {"jsonrpc": "2.0", "method": "initialized", "params": {}}
EXIT = {"jsonrpc": "2.0", "method": "exit", "params": None}


def serving(**options: Any) -> subprocess.Popen[bytes]:
    """A server started on pipes (`options`: Popen's, such as cwd and env)."""
    return subprocess.Popen(
        [sys.executable, "-m", "rca_lsp", "serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        **options,
    )


def served(messages: list[dict]) -> subprocess.CompletedProcess[bytes]:
    """A server given `messages` on stdin, run until it exits."""
    return subprocess.run(
        [sys.executable, "-m", "rca_lsp", "serve"],
        input=b"".join(map(frame, messages)),
        capture_output=True,
        timeout=60,
    )


def test_shutdown_and_exit_while_dumps_load_end_at_once_and_quietly(tmp_path: Path) -> None:
    data = {KEY.format(i): entry([1.0, 2.0 + i % 7], [3.0, 4.0], [0.5, 0.25]) for i in range(20_000)}
    write_dump(tmp_path / "train" / "dump.json", data)
    write_dump(tmp_path / "rollout" / "dump.json", data)
    mapping = write_mapping(tmp_path / "mapping_key.json", {key: key for key in data})
    messages = [
        initialize(tmp_path),
        INITIALIZED,
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
        shutdown(2),
        EXIT,
    ]
    server = serving()
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
    started = frame(initialize(tmp_path))
    body = json.dumps(INITIALIZED).encode()
    wrong = b"Content-Length: %d\r\n\r\n" % (len(body) - 7) + body  # says 7 bytes fewer than it sends
    rest = frame(shutdown(2)) + frame(EXIT)
    server = serving()
    out, err = server.communicate(started + wrong + rest, timeout=60)
    assert b'"id": 2' in out or b'"id":2' in out, (out[-500:], err[-2000:])  # the shutdown after it was answered
    assert server.returncode == 0


def read_messages(stream, into: queue.Queue[dict]) -> None:
    """LSP messages from the server's stdout, one dict each, until the stream ends."""
    while True:
        header = b""
        while not header.endswith(b"\r\n\r\n"):
            byte = stream.read(1)
            if not byte:
                return
            header += byte
        length = int(header.split(b"Content-Length:")[1].split(b"\r\n")[0])
        into.put(json.loads(stream.read(length)))


def test_a_pairing_glob_over_symlink_cycles_leaves_the_server_answering(tmp_path: Path) -> None:
    """Issue 23, defect 15: `train = "**/train"` in an rca-lsp.toml beside two self-links made the server expand the
    glob on its event loop for ever, answering nothing, not even shutdown. The glob is expanded off the loop,
    without following symlinks to directories, so it finds the train folder and the findings are published."""
    folder = tmp_path / "exp"
    shutil.copytree(FIXTURES / "missing_activation", folder)
    (folder / "rca-lsp.toml").write_text(
        '[[pair]]\nmapping_key = "mapping_key.json"\ntrain = "**/train"\nrollout = "rollout"\n'
    )
    (folder / "cycle").mkdir()
    for name in ("a", "b"):
        (folder / "cycle" / name).symlink_to(".", target_is_directory=True)
    stderr = published_then_shut_down(folder / "mapping_key.json", tmp_path, "missing-op")
    assert b"Traceback" not in stderr, stderr.decode(errors="replace")[-2000:]


def published_then_shut_down(mapping: Path, root: Path, code: str, env: dict[str, str] | None = None) -> bytes:
    """A server session over a raw stream: `mapping` opened, until a publish of it with `code`, then shutdown and
    exit; what the server wrote on stderr."""
    opened = {"uri": mapping.as_uri(), "languageId": "json", "version": 1, "text": mapping.read_text()}
    server = serving(env=env)
    assert server.stdin is not None and server.stdout is not None and server.stderr is not None
    messages: queue.Queue[dict] = queue.Queue()
    threading.Thread(target=read_messages, args=(server.stdout, messages), daemon=True).start()
    try:
        server.stdin.write(
            frame(initialize(root))  # fmt: skip
            + frame(INITIALIZED)
            + frame({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": opened}})
        )
        server.stdin.flush()
        codes: list[str] = []
        deadline = time.monotonic() + 60  # a bound for a hang, not a speed target
        while code not in codes and time.monotonic() < deadline:
            try:
                message = messages.get(timeout=1)
            except queue.Empty:
                continue
            if message.get("method") == "textDocument/publishDiagnostics" and message["params"]["uri"] == opened["uri"]:
                codes = [d.get("code") for d in message["params"]["diagnostics"]]
        assert code in codes, codes
        server.stdin.write(frame(shutdown(2)))
        server.stdin.flush()
        while (answer := messages.get(timeout=30)).get("id") != 2:
            pass
        assert "error" not in answer
        server.stdin.write(frame(EXIT))
        server.stdin.close()
        assert server.wait(timeout=30) == 0
        return server.stderr.read()
    finally:
        server.kill()
        server.wait()


def test_the_log_level_an_editor_cannot_pass_comes_from_the_environment(tmp_path: Path) -> None:
    """RCA_LSP_LOG_LEVEL: the server's own lines at that level (what each run cost), not pygls's copy of every
    message; a level that is none names the variable."""
    folder = tmp_path / "exp"
    shutil.copytree(FIXTURES / "missing_activation", folder)
    env = {**os.environ, "RCA_LSP_LOG_LEVEL": "info"}
    stderr = published_then_shut_down(folder / "mapping_key.json", tmp_path, "missing-op", env).decode()
    assert "INFO rca_lsp.server.pipeline: analysed mapping_key.json" in stderr, stderr[-2000:]
    assert "pygls" not in stderr, stderr[-2000:]
    wrong = subprocess.run(
        [sys.executable, "-m", "rca_lsp", "serve"],
        env={**os.environ, "RCA_LSP_LOG_LEVEL": "loud"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert wrong.returncode == 2
    assert (
        wrong.stderr.strip()
        == "rca-lsp: error: RCA_LSP_LOG_LEVEL: expected one of debug, info, warning, error, got 'loud'"
    )


def answers(out: bytes) -> dict[object, dict]:
    """The responses in the server's stdout, by request id."""
    found: queue.Queue[dict] = queue.Queue()
    read_messages(io.BytesIO(out), found)
    return {m["id"]: m for m in list(found.queue) if "id" in m and "method" not in m}


def test_a_request_after_shutdown_is_refused_not_left_unanswered(tmp_path: Path) -> None:
    """pygls drops every message after shutdown but exit: a request sent meanwhile (a hover the editor asked for
    as it closed) waited for an answer that never came. LSP: it gets an InvalidRequest error."""
    messages = [
        initialize(tmp_path),
        INITIALIZED,
        shutdown(2),
        {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "textDocument/hover",
            "params": {
                "textDocument": {"uri": (tmp_path / "mapping_key.json").as_uri()},
                "position": {"line": 0, "character": 0},
            },
        },
        EXIT,
    ]
    server = served(messages)
    assert server.returncode == 0, server.stderr.decode(errors="replace")[-2000:]
    refused = answers(server.stdout)[3]
    assert refused["error"]["code"] == -32600 and "shut down" in refused["error"]["message"]


def test_messages_before_initialize_are_refused_or_dropped_without_a_traceback(tmp_path: Path) -> None:
    """A request before initialize was answered "RuntimeError: The workspace is not available" with pygls' traceback
    (also logged), a didOpen logged one too. LSP: a request gets ServerNotInitialized, a notification is dropped."""
    mapping = {"uri": (tmp_path / "mapping_key.json").as_uri(), "languageId": "json", "version": 1, "text": "{}"}
    position = {"textDocument": {"uri": mapping["uri"]}, "position": {"line": 0, "character": 0}}
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "textDocument/hover", "params": position},
        {"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": mapping}},
        initialize(tmp_path, 2),
        INITIALIZED,
        shutdown(3),
        EXIT,
    ]
    server = served(messages)
    stderr = server.stderr.decode(errors="replace")
    assert server.returncode == 0 and "Traceback" not in stderr, stderr[-2000:]
    found = answers(server.stdout)
    assert found[1]["error"]["code"] == -32002 and "not initialized" in found[1]["error"]["message"]
    assert "result" in found[2] and "result" in found[3]


def test_a_workspace_of_virtual_folders_scans_nothing_on_disk(tmp_path: Path) -> None:
    """A workspace whose folders are not on this machine (vscode-vfs://, a remote): their URIs have no path, which
    became Path("") - the server's working directory - and the server analysed every mapping file below it, files
    of no workspace (below / it would walk the whole disk)."""
    elsewhere = tmp_path / "server-cwd"
    shutil.copytree(FIXTURES / "missing_activation", elsewhere / "exp")
    messages = [
        initialize(None, workspaceFolders=[{"uri": "vscode-vfs://github/owner/repo", "name": "repo"}]),
        INITIALIZED,
    ]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}  # this checkout's rca_lsp
    server = serving(cwd=elsewhere, env=env)
    assert server.stdin is not None
    server.stdin.write(b"".join(map(frame, messages)))
    server.stdin.flush()
    time.sleep(3)  # a scan of the working directory publishes in well under a second
    out, err = server.communicate(
        frame(shutdown(2)) + frame(EXIT),
        timeout=60,
    )
    assert server.returncode == 0, err.decode(errors="replace")[-2000:]
    assert b"publishDiagnostics" not in out, out[-1000:]


def test_a_workspace_opened_through_a_symlink_is_published_under_the_clients_uris(tmp_path: Path) -> None:
    """A workspace folder that is a symlink (a home directory on a cluster's shared disk): the scan at start found
    its mapping files by their resolved paths, so each one was analysed twice once opened, and its diagnostics
    published under two URIs (the client's and the resolved one): each finding twice in the editor's problems."""
    shutil.copytree(FIXTURES / "missing_activation", tmp_path / "real" / "exp")
    workspace = tmp_path / "link"
    workspace.symlink_to(tmp_path / "real", target_is_directory=True)
    mapping = workspace / "exp" / "mapping_key.json"
    opened = {"uri": mapping.as_uri(), "languageId": "json", "version": 1, "text": mapping.read_text()}
    folder = {"uri": workspace.as_uri(), "name": "ws"}
    server = serving()
    assert server.stdin is not None and server.stdout is not None
    messages: queue.Queue[dict] = queue.Queue()
    threading.Thread(target=read_messages, args=(server.stdout, messages), daemon=True).start()
    server.stdin.write(
        frame(initialize(workspace, workspaceFolders=[folder]))
        + frame(INITIALIZED)
        + frame({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": opened}})
    )
    server.stdin.flush()
    published: set[str] = set()
    deadline = time.monotonic() + 4  # both runs publish in well under that
    while time.monotonic() < deadline:
        try:
            message = messages.get(timeout=0.2)
        except queue.Empty:
            continue
        if message.get("method") == "textDocument/publishDiagnostics" and message["params"]["diagnostics"]:
            published.add(message["params"]["uri"])
    server.stdin.write(frame(shutdown(2)) + frame(EXIT))
    server.stdin.close()
    assert server.wait(timeout=60) == 0
    assert published == {mapping.as_uri()}
