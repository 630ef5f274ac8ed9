"""The server's JSON-RPC protocol: cancellation reaching the work (cancellation.py), and answers instead of silence
or a traceback for input the protocol cannot take."""

from __future__ import annotations

import logging
from typing import Any, Iterator

from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pygls.io_ import StdinAsyncReader
from pygls.protocol.language_server import lsp_method

from rca_lsp.server.cancellation import CancellingProtocol

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


_ANSWERED = object()  # a request already answered with an error while it was read


class RcaProtocol(CancellingProtocol):
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
        if message is not _ANSWERED:
            super().handle_message(message)

    @lsp_method(types.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params: types.DidChangeTextDocumentParams) -> Iterator[Any]:
        """A change of a document that is not open is ignored (pygls raises a KeyError, which a client shows as
        "Error in server: KeyError")."""
        if params.text_document.uri not in self.workspace.text_documents:
            log.warning("didChange for %s, which is not open: ignored", params.text_document.uri)
            return
        yield from super().lsp_text_document__did_change(params)


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
