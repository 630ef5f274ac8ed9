"""Client cancellation reaching the work: pygls cancels a request's future, which does not stop a running
command or a function already running in a worker thread; this protocol also raises a flag the work polls."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Iterator

from pygls.protocol import LanguageServerProtocol

from rca_lsp.base.cancel import ShouldStop, never


class Cancellations:
    """Stop flags of the requests being worked on, by request id."""

    def __init__(self) -> None:
        self._flags: dict[Any, threading.Event] = {}
        self._lock = threading.Lock()

    @contextmanager
    def track(self, request_id: Any) -> Iterator[ShouldStop]:
        """The should-stop check of one request while it runs (never true for a request without an id)."""
        if request_id is None:
            yield never
            return
        flag = threading.Event()
        with self._lock:
            self._flags[request_id] = flag
        try:
            yield flag.is_set
        finally:
            with self._lock:
                self._flags.pop(request_id, None)

    def cancel(self, request_id: Any) -> None:
        with self._lock:
            flag = self._flags.get(request_id)
        if flag is not None:
            flag.set()


class CancellingProtocol(LanguageServerProtocol):
    def __init__(self, server: Any, converter: Any) -> None:
        super().__init__(server, converter)
        self.cancellations = Cancellations()

    def _handle_cancel_notification(self, msg_id: Any) -> None:
        self.cancellations.cancel(msg_id)
        super()._handle_cancel_notification(msg_id)
