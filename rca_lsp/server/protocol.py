"""The server's JSON-RPC protocol: cancellation reaching the work (cancellation.py), and answers instead of silence
or a traceback for input the protocol cannot take."""

from __future__ import annotations

import asyncio
import inspect
import logging
from typing import Any, Iterator
from urllib.parse import unquote

import orjson
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pygls.io_ import StdinAsyncReader
from pygls.protocol.json_rpc import RPCRequest
from pygls.protocol.language_server import lsp_method
from pygls.workspace import TextDocument, Workspace

from rca_lsp.server.cancellation import CancellingProtocol
from rca_lsp.server.positions import OpenText

log = logging.getLogger(__name__)
REQUEST_FAILED = -32803  # LSP's RequestFailed: the request was valid, the work could not be done


class CommandError(JsonRpcException):
    """A command that cannot run as asked: answered with this message, and logged without a traceback (it is the
    user's input, not a fault of the server)."""

    def __init__(self, message: str, invalid_params: bool = False) -> None:
        super().__init__(message=message, code=-32602 if invalid_params else REQUEST_FAILED)


class _NoTracebackForCommandErrors(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, CommandError):
            record.msg, record.args, record.exc_info = f"{record.getMessage()}: {error.message}", (), None
        return True


logging.getLogger("pygls.protocol.json_rpc").addFilter(_NoTracebackForCommandErrors())


def open_document(workspace: Workspace, uri: str) -> TextDocument | None:
    """The open document of a URI as the client spells it; None when it is not open. (pygls keeps open documents
    under the URI with its %-escapes decoded: a folder "run 1" is `run%201` in the client's URI, `run 1` there.)"""
    return workspace.text_documents.get(unquote(uri))


_ANSWERED = object()  # a request already answered with an error while it was read


class RawJson:
    """A request's result encoded already (e.g. in a child process): sent as it is, not encoded again on the loop."""

    def __init__(self, data: bytes) -> None:
        self.data = data


Encoded = dict[int, tuple[types.Diagnostic, bytes]]  # a diagnostic's JSON, by the object's id (kept with it)


class RcaProtocol(CancellingProtocol):
    def __init__(self, server: Any, converter: Any) -> None:
        super().__init__(server, converter)
        self.open_texts: dict[str, OpenText] = {}  # open documents' texts with their line indexes, by URI
        self._encoded: dict[str, Encoded] = {}  # the diagnostics last published for each URI, encoded

    def structure_message(self, data: dict[str, Any]) -> Any:
        """A request whose params do not fit its method (a position with line -1, params as a string) gets an
        InvalidParams answer; pygls would log it and answer nothing, leaving the client waiting for good."""
        try:
            return super().structure_message(data)
        except JsonRpcException as error:
            if "id" not in data or "method" not in data:
                raise  # a notification or a response: nobody waits for an answer
            self._send_response(
                data["id"],
                error=types.ResponseError(
                    code=error.code, message=f"{data['method']}: the params do not fit the request ({error.message})"
                ),
            )
            return _ANSWERED

    def handle_message(self, message: Any) -> None:
        """What LSP says of messages out of their time, which pygls does not do: before initialize a request gets
        ServerNotInitialized and a notification but exit is dropped (pygls ran them: a traceback each, the
        workspace does not exist yet); after shutdown a request gets InvalidRequest (pygls left it unanswered)."""
        if message is _ANSWERED:
            return
        method = getattr(message, "method", None)
        if self._workspace is None and method not in (types.INITIALIZE, types.EXIT, None):
            if isinstance(message, RPCRequest):
                self._refuse(message, types.ErrorCodes.ServerNotInitialized, "the server is not initialized yet")
            else:
                log.warning("%s before initialize: dropped", method)
            return
        if self._shutdown and isinstance(message, RPCRequest):
            self._refuse(message, types.ErrorCodes.InvalidRequest, "the server is shut down")
            return
        super().handle_message(message)

    def _refuse(self, request: RPCRequest, code: int, why: str) -> None:
        self._send_response(request.id, error=types.ResponseError(code=code, message=f"{request.method}: {why}"))

    def _execute_handler(self, msg_id: Any, handler: Any, callback: Any, *args: Any, **kwargs: Any) -> None:
        """pygls' execution of a handler, whose future is forgotten once done: pygls keeps the future of a handler
        that one of its own (a notification's, workspace/executeCommand's) hands on under a made-up id, and never
        removes it, so every command's result (a chart's data, MBs) stayed in memory for good."""
        super()._execute_handler(msg_id, handler, callback, *args, **kwargs)
        future = self._request_futures.get(msg_id)
        if future is not None:
            future.add_done_callback(lambda done: self._forget(msg_id, done))

    def _forget(self, msg_id: Any, done: Any) -> None:
        # a future cancelled is left to pygls: its shutdown cancels the pending ones while it iterates over the table
        # (a deletion then is a RuntimeError, its traceback logged), and pops a request's own once answered
        if not done.cancelled() and self._request_futures.get(msg_id) is done:
            del self._request_futures[msg_id]

    def publish_diagnostics(self, uri: str, version: int | None, diagnostics: list[types.Diagnostic]) -> None:
        """textDocument/publishDiagnostics, each diagnostic encoded once for as long as it is published (an edit
        keeps most findings' Diagnostic objects: pygls would encode all of them again, on the loop, for each)."""
        kept = self._encoded.get(uri, {})
        encoded: Encoded = {}
        for diagnostic in diagnostics:
            found = kept.get(id(diagnostic))
            if found is None or found[0] is not diagnostic:
                found = (diagnostic, orjson.dumps(self._converter.unstructure(diagnostic)))
            encoded[id(diagnostic)] = found
        self._encoded[uri] = encoded
        head = b'{"uri":' + orjson.dumps(uri) + (b"" if version is None else b',"version":' + orjson.dumps(version))
        params = head + b',"diagnostics":[' + b",".join(data for _, data in encoded.values()) + b"]}"
        self._send_raw(b'{"jsonrpc":"2.0","method":"textDocument/publishDiagnostics","params":' + params + b"}")

    def _send_data(self, data: Any) -> None:
        """A response whose result is RawJson goes out as it is; anything else as pygls sends it."""
        if isinstance(getattr(data, "result", None), RawJson) and getattr(data, "error", None) is None:
            self._send_raw(b'{"jsonrpc":"2.0","id":' + orjson.dumps(data.id) + b',"result":' + data.result.data + b"}")
        else:
            super()._send_data(data)

    def _send_raw(self, body: bytes) -> None:
        """One encoded message, framed as pygls frames its own."""
        if self.writer is None:
            log.error("Unable to send data, no available transport!")
            return
        header = f"Content-Length: {len(body)}\r\nContent-Type: {self.CONTENT_TYPE}; charset={self.CHARSET}\r\n\r\n"
        written = self.writer.write(header.encode() + body if self._include_headers else body)
        if inspect.isawaitable(written):
            asyncio.ensure_future(written)

    @lsp_method(types.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params: types.DidChangeTextDocumentParams) -> Iterator[Any]:
        """Each change applied to the open text as the edit it is (OpenText: not a re-split of the whole text per
        change, as pygls does). A change of a document that is not open is ignored (pygls raises a KeyError, which a
        client shows as "Error in server: KeyError")."""
        uri = params.text_document.uri
        opened = open_document(self.workspace, uri)
        if opened is None:
            log.warning("didChange for %s, which is not open: ignored", uri)
            return
        source = opened.source
        kept = self.open_texts.get(uri)
        text = OpenText(source, kept.lines if kept is not None and kept.text is source else None)
        for change in params.content_changes:  # each one applied as the edit it is (see OpenText)
            if isinstance(change, types.TextDocumentContentChangePartial):
                text = text.changed(change, self.workspace.position_codec)
            else:
                text = OpenText(change.text, earlier=(source, 0))
        self.workspace.update_text_document(
            params.text_document, types.TextDocumentContentChangeWholeDocument(text=text.text)
        )
        self.open_texts[uri] = text
        if (handler := self.fm.features.get(types.TEXT_DOCUMENT_DID_CHANGE)) is not None:
            yield handler, (params,), None

    @lsp_method(types.TEXT_DOCUMENT_DID_CLOSE)
    def lsp_text_document__did_close(self, params: types.DidCloseTextDocumentParams) -> Iterator[Any]:
        self.open_texts.pop(params.text_document.uri, None)
        yield from super().lsp_text_document__did_close(params)


HEADER = b"Content-Length:"


class ResyncingReader(StdinAsyncReader):
    """stdin for pygls' reading loop, finding the next message after one whose Content-Length was wrong: its
    leftover then runs into the next header line, which pygls' loop would never recognise again (deaf for good)."""

    async def readline(self) -> bytes:  # type: ignore[override]
        line = await super().readline()
        at = line.find(HEADER)
        if at > 0:
            log.warning("dropped %d bytes before a message header: a previous Content-Length was wrong", at)
            return line[at:]
        return line
