"""python -m rca_lsp serve  (mock: see __init__.py)."""

from __future__ import annotations

import json
import os
import re
import select
import signal
import sys
import threading
import time
from pathlib import Path
from urllib.parse import unquote, urlparse

from lsprotocol import types
from pygls.lsp.server import LanguageServer

from rca_lsp import __version__

server = LanguageServer("rca-lsp-mock", __version__)
KEY_RE = re.compile(r'"((?:Module|Cell)\.[^"]+)"\s*:')


def log_event(kind: str, payload) -> None:
    path = os.environ.get("RCA_LSP_MOCK_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"event": kind, "payload": payload}, default=str) + "\n")


def to_jsonable(obj):
    return server.protocol._converter.unstructure(obj) if obj is not None else None


def uri_to_path(uri: str) -> Path:
    return Path(unquote(urlparse(uri).path))


def key_ranges(text: str):
    lines = text.split("\n")
    for lineno, line in enumerate(lines):
        for m in KEY_RE.finditer(line):
            yield m.group(1), types.Range(
                start=types.Position(line=lineno, character=m.start(1) - 1),
                end=types.Position(line=lineno, character=m.end(1) + 1),
            )


class InputRelay:
    """The server's input passed on to pygls through a pipe, read from stdin only when select says it is readable,
    so that stdin can be closed while the server runs (a read blocked on it would keep the pipe open). Once closed,
    the client's writes fail with EPIPE while the process lives on: the moment between a server's death and Node
    seeing it exit, held open. The process then exits once its output is broken (the client gone), at most after
    10 minutes."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.closed = threading.Event()
        self.read_fd, self.write_fd = os.pipe()
        threading.Thread(target=self.run, daemon=True).start()

    def run(self) -> None:
        while not self.stop.is_set():
            if not select.select([0], [], [], 0.1)[0]:
                continue
            data = os.read(0, 65536)
            if not data:  # the client closed the server's input: end as a server does
                os.close(self.write_fd)
                return
            view = memoryview(data)
            while view:
                view = view[os.write(self.write_fd, view) :]
        os.close(0)  # the only reader of the pipe: the client's next write fails (EPIPE)
        self.closed.set()
        poller = select.poll()
        poller.register(1, select.POLLERR | select.POLLHUP)
        poller.poll(600_000)
        os._exit(0)

    def close_input(self) -> None:
        self.stop.set()
        self.closed.wait()


relay: InputRelay | None = None


def analyse(uri: str) -> None:
    doc = server.workspace.get_text_document(uri)
    stop_reading = os.environ.get("RCA_LSP_MOCK_STOP_READING")
    if relay and stop_reading and os.path.exists(stop_reading):  # the e2e's server gone while the client writes
        os.remove(stop_reading)
        relay.close_input()
        sys.stderr.write("mock: no longer reading its input\n")
        sys.stderr.flush()
        return
    once = os.environ.get("RCA_LSP_MOCK_CRASH_ONCE")
    if "CRASH_NOW" in doc.source or (once and os.path.exists(once)):  # the e2e's ways to kill the server mid-session
        if once and os.path.exists(once):
            os.remove(once)
        sys.stderr.write("mock: crashing on purpose\n")
        sys.stderr.flush()
        os._exit(1)
    server.protocol.notify("rcaLsp/status", {"state": "loading", "uri": uri, "message": "loading dumps (mock)"})
    diags = []
    for key, rng in key_ranges(doc.source):
        if "layers.0." in key and "linear_fc2" in key:
            diags.append(
                types.Diagnostic(
                    range=rng,
                    severity=types.DiagnosticSeverity.Warning,
                    code="missing-op",
                    source="rca-lsp",
                    message="mock: rollout applies act_fn before linear_fc2 but train has no act_fn",
                )
            )
        if "decodr" in key:
            diags.append(
                types.Diagnostic(
                    range=rng,
                    severity=types.DiagnosticSeverity.Error,
                    code="unknown-train-key",
                    source="rca-lsp",
                    message=f"unknown train key {key}",
                    data={"replacement": key.replace("decodr", "decoder")},
                )
            )
    server.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=diags))
    server.protocol.notify(
        "rcaLsp/status",
        {
            "state": "analysed",
            "uri": uri,
            "message": "mock analysis done",
            "topHypothesis": "missing act_fn before layer 0 linear_fc2",
            "suspects": sum(1 for d in diags if d.code == "missing-op"),
        },
    )


@server.feature(types.INITIALIZE)
def on_initialize(ls: LanguageServer, params: types.InitializeParams):
    log_event("initialize", {"initializationOptions": params.initialization_options})


@server.feature(types.INITIALIZED)
def on_initialized(ls: LanguageServer, params):
    log_event("initialized", {})


@server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
def on_config(ls: LanguageServer, params: types.DidChangeConfigurationParams):
    log_event("didChangeConfiguration", {"settings": params.settings})
    try:
        result = ls.workspace_configuration(
            types.ConfigurationParams(items=[types.ConfigurationItem(section="rcaLsp")])
        )
        result.add_done_callback(lambda f: log_event("configuration", {"result": f.result()}))
    except Exception as e:  # pragma: no cover - diagnostic aid only
        log_event("configurationError", {"error": repr(e)})


@server.feature(types.TEXT_DOCUMENT_DID_OPEN)
def did_open(ls: LanguageServer, params: types.DidOpenTextDocumentParams):
    log_event("didOpen", {"uri": params.text_document.uri})
    analyse(params.text_document.uri)


@server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
def did_change(ls: LanguageServer, params: types.DidChangeTextDocumentParams):
    analyse(params.text_document.uri)


@server.feature(types.TEXT_DOCUMENT_HOVER)
def hover(ls: LanguageServer, params: types.HoverParams):
    doc = ls.workspace.get_text_document(params.text_document.uri)
    for key, rng in key_ranges(doc.source):
        if rng.start.line == params.position.line:
            extra = "\n\n**missing op**: act_fn (mock)" if "linear_fc2" in key else ""
            return types.Hover(
                contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=f"**rca-lsp mock** `{key}`{extra}"),
                range=rng,
            )
    return None


@server.feature(
    types.TEXT_DOCUMENT_CODE_ACTION,
    types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix]),
)
def code_action(ls: LanguageServer, params: types.CodeActionParams):
    actions = []
    for d in params.context.diagnostics:
        if d.code == "unknown-train-key" and isinstance(d.data, dict) and d.data.get("replacement"):
            new = d.data["replacement"]
            actions.append(
                types.CodeAction(
                    title=f"Replace with {new}",
                    kind=types.CodeActionKind.QuickFix,
                    diagnostics=[d],
                    is_preferred=True,
                    edit=types.WorkspaceEdit(
                        changes={params.text_document.uri: [types.TextEdit(range=d.range, new_text=json.dumps(new))]}
                    ),
                )
            )
    return actions


@server.command("rcaLsp.server.writeOutputs")
def write_outputs(ls: LanguageServer, *args):
    log_event("writeOutputs", {"args": list(args)})
    mapping = uri_to_path(str(args[0]))
    out = mapping.parent / "rca_out"
    out.mkdir(parents=True, exist_ok=True)
    report = out / "output_5_root_cause_report.md"
    report.write_text("# Root cause report (mock)\n\n- **Top hypothesis**: missing `act_fn` before layer 0 linear_fc2\n")
    return {"outDir": str(out), "reportMarkdown": str(report)}


@server.command("rcaLsp.server.suggestMapping")
def suggest_mapping(ls: LanguageServer, *args):
    log_event("suggestMapping", {"args": list(args)})
    return {"content": json.dumps({"Module.mock.train.forward.0": "Module.mock.rollout.forward.0"}, indent=2), "coverage": "1/1 (mock)"}


def hang_forever() -> None:
    """A server wedged before it answers initialize (a deadlock, an import that never ends): it reads what the client
    sends, answers nothing, ignores SIGTERM and stays when its input closes. Only SIGKILL ends it."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    log_event("hang", {"pid": os.getpid()})
    sys.stderr.write("mock: importing a huge module...\n")
    sys.stderr.flush()
    received = b""
    while data := os.read(0, 65536):
        if b'"method":"initialize"' not in received and b'"method":"initialize"' in received + data:
            log_event("initializeIgnored", {"pid": os.getpid()})
        received += data
    while True:
        time.sleep(60)


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] != "serve":
        sys.stderr.write("usage: python -m rca_lsp serve\n")
        sys.exit(2)
    broken = os.environ.get("RCA_LSP_MOCK_BROKEN")
    if broken and os.path.exists(broken):  # the e2e's server that cannot start while this file exists
        sys.stderr.write("mock: cannot start (ModuleNotFoundError: No module named 'pygls_broken')\n")
        sys.exit(1)
    hang = os.environ.get("RCA_LSP_MOCK_HANG")
    if hang and os.path.exists(hang):  # the e2e's server that never answers initialize while this file exists
        hang_forever()
    slow = os.environ.get("RCA_LSP_MOCK_SLOW")
    while slow and os.path.exists(slow):  # the e2e's server slow to start while this file exists
        time.sleep(0.2)
    if os.environ.get("RCA_LSP_MOCK_STOP_READING"):
        global relay
        relay = InputRelay()
        server.start_io(stdin=os.fdopen(relay.read_fd, "rb"))
    else:
        server.start_io()


if __name__ == "__main__":
    main()
