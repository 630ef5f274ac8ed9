"""The server's shared state and loop helpers, below the pipeline and the handlers (app.py)."""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, BinaryIO, Callable, ContextManager, Coroutine

from lsprotocol import types
from pygls.io_ import StdoutWriter, run_async
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path
from pygls.workspace import TextDocument

from rca_lsp import __version__
from rca_lsp.base.cancel import ShouldStop
from rca_lsp.diagnose.analysis import Analysis
from rca_lsp.mapping.model import ParsedMapping
from rca_lsp.mapping.parse import parse_mapping
from rca_lsp.server.cancellation import CancellingProtocol
from rca_lsp.server.documents import MappingDocument
from rca_lsp.server.engine import Engine
from rca_lsp.server.pairing import is_mapping_name
from rca_lsp.server.protocol import RcaProtocol, ResyncingReader, open_document
from rca_lsp.server.settings import Settings
from rca_lsp.server.watcher import DumpWatcher

log = logging.getLogger(__name__)

STATUS = "rcaLsp/status"


class ServerState(LanguageServer):
    """What every part of the server shares: the engine, settings, documents, workers, and the loop helpers
    (background tasks, debounce, status notifications). The pipeline runs analyses on it; app.py adds the
    handlers and what schedules runs."""

    watcher: DumpWatcher  # set by the server that schedules the runs its changes start

    def __init__(self) -> None:
        super().__init__("rca-lsp", __version__, protocol_cls=RcaProtocol)
        self.engine = Engine()
        self.settings = Settings()
        self.documents: dict[str, MappingDocument] = {}
        self.executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="rca-analysis")
        # the parses of unsaved text that requests wait for: not queued behind an analysis of seconds
        self.parser = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rca-parse")
        self.loop: asyncio.AbstractEventLoop | None = None
        self.background: set[asyncio.Task[None]] = set()
        self.shut_down = False  # a shutdown request came
        self.pending_settings_problems: list[str] = []  # from initialize: shown once the client is initialized

    def _start_io_async(self, stdin: BinaryIO | None = None, stdout: BinaryIO | None = None) -> None:
        """pygls' stdio loop, reading through ResyncingReader (pygls' reader never recovers from a wrong
        Content-Length); the rest as pygls does it."""
        self._stop_event = threading.Event()
        reader = ResyncingReader(stdin or sys.stdin.buffer, self.thread_pool)
        self.protocol.set_writer(StdoutWriter(stdout or sys.stdout.buffer))
        try:
            asyncio.run(
                run_async(
                    stop_event=self._stop_event,
                    reader=reader,
                    protocol=self.protocol,
                    logger=log,
                    error_handler=self.report_server_error,
                )
            )
        except BrokenPipeError:
            log.error("the connection to the client is lost: shutting down")
        except (KeyboardInterrupt, SystemExit):
            pass
        finally:
            self.shutdown()

    def loop_task(self, work: Coroutine[Any, Any, None], uri: str | None = None) -> None:
        """The one way to run background work on the event loop: kept referenced until it ends, and a failure is
        logged and reported (as an error status of `uri`) instead of vanishing with the task."""
        task = asyncio.get_running_loop().create_task(work)
        self.background.add(task)
        task.add_done_callback(lambda done: self._background_done(done, uri))

    def _background_done(self, task: asyncio.Task[None], uri: str | None) -> None:
        self.background.discard(task)
        if task.cancelled() or task.exception() is None:
            return
        error = task.exception()
        log.error("background work failed: %s", error, exc_info=error)
        if uri is not None:
            self.notify_status("error", uri, f"rca-lsp: internal error: {type(error).__name__}: {error}")

    def debounce(
        self,
        pending: asyncio.TimerHandle | None,
        delay: float,
        start: Callable[[], Coroutine[Any, Any, None]],
        uri: str,
    ) -> asyncio.TimerHandle:
        """Cancel the pending run (if any) and start a new one after `delay`, as background work of `uri`."""
        if pending is not None:
            pending.cancel()
        return asyncio.get_running_loop().call_later(delay, lambda: self.loop_task(start(), uri))

    def stop(self) -> None:
        """Stop what runs besides the requests: pending runs, background work, the dump watcher, the workers."""
        for doc in self.documents.values():
            for handle in (doc.pending, doc.pending_parse):
                if handle is not None:
                    handle.cancel()
        for task in list(self.background):
            task.cancel()
        self.watcher.stop()
        self.executor.shutdown(wait=False, cancel_futures=True)
        self.parser.shutdown(wait=False, cancel_futures=True)

    def apply_settings(self, raw: object) -> None:
        """New client settings; each part that had to be ignored is shown to the user (the rules: settings.py)."""
        self.settings, problems = Settings.from_client(raw)
        for problem in problems:
            self.window_show_message(types.ShowMessageParams(type=types.MessageType.Warning, message=problem))

    @property
    def rca_protocol(self) -> RcaProtocol:
        assert isinstance(self.protocol, RcaProtocol)
        return self.protocol

    def cancellable(self) -> ContextManager[ShouldStop]:
        """The should-stop check of the request being handled: true once the client cancels it."""
        protocol = self.protocol
        assert isinstance(protocol, CancellingProtocol)
        return protocol.cancellations.track(protocol.msg_id)

    # --- which files -------------------------------------------------------------------------------------------
    def folders(self, resolved: bool = True) -> list[Path]:
        """The workspace folders on this machine (else the root's, if it is): resolved, or as the client names them
        (a folder that is a symlink: the files below it are the client's by these paths)."""
        root = self.workspace.root_uri
        found = local_folders([f.uri for f in self.workspace.folders.values()]) or local_folders([root] if root else [])
        return [folder.resolve() for folder in found] if resolved else found

    def is_mapping(self, path: Path) -> bool:
        return is_mapping_name(path) or any(self._named_by_pair(path, p.mapping_key) for p in self.settings.pairs)

    def _named_by_pair(self, path: Path, pattern: str) -> bool:
        folders = self.folders() or [path.parent]
        return any(
            _matches(path, pattern.replace("${workspaceFolder}", str(f)))
            or path == Path(pattern.replace("${workspaceFolder}", str(f))).resolve()
            for f in folders
        )

    def opened(self, uri: str) -> TextDocument | None:
        """The editor's document of `uri` while the client has it open."""
        return open_document(self.workspace, uri)

    def document(self, uri: str) -> MappingDocument | None:
        path = Path(to_fs_path(uri) or "")
        if uri not in self.documents and self.is_mapping(path):
            self.documents[uri] = MappingDocument(uri, path.resolve())
        return self.documents.get(uri)

    def notify_status(
        self, state: str, uri: str, message: str, top: str | None = None, suspects: int | None = None
    ) -> None:
        params: dict[str, Any] = {"state": state, "uri": uri, "message": message}
        if top is not None:
            params["topHypothesis"] = top
        if suspects is not None:
            params["suspects"] = suspects
        self.protocol.notify(STATUS, params)

    async def analysis_at(self, uri: str) -> tuple[MappingDocument, ParsedMapping, Analysis | None] | None:
        """The document's analysis to show, with the parse of the text the client has now (see unsaved_parse)."""
        doc = self.documents.get(uri)
        opened = self.opened(uri)
        if doc is None:
            return None
        parsed = doc.parsed
        if opened is not None and (parsed is None or parsed.text != opened.source):
            parsed = await self.unsaved_parse(doc, opened.source)
        if parsed is None:
            return None
        return doc, parsed, doc.last_good or doc.analysis

    async def unsaved_parse(self, doc: MappingDocument, text: str) -> ParsedMapping:
        """The parse of `text`, the editor's text of `doc` (not analysed yet), made once in the parse thread however
        many requests ask for it (and the pipeline's parse of a large file's edits). Never on the event loop: the
        parse of a 10 MB paste takes 0.3-0.8 s, which every request and notification would wait for."""
        if doc.unsaved_view is not None and doc.unsaved_view.text == text:
            return doc.unsaved_view
        if doc.unsaved_parse is None or doc.unsaved_parse[0] is not text:
            parse = asyncio.get_running_loop().run_in_executor(
                self.parser, parse_mapping, str(doc.path), text, doc.latest_parse()
            )
            doc.unsaved_parse = (text, parse)
        parsed = await asyncio.shield(doc.unsaved_parse[1])  # a request cancelled leaves it to the others
        doc.remember(parsed)
        opened = self.opened(doc.uri)
        if opened is not None and opened.source == text:
            doc.unsaved_view = parsed
        if doc.unsaved_parse is not None and doc.unsaved_parse[0] is text:
            doc.unsaved_parse = None
        return parsed


def _matches(path: Path, pattern: str) -> bool:
    """Whether the pattern matches the path; a pattern of no parts ("." or "./", which Path.match refuses with a
    ValueError) matches no file."""
    try:
        return path.match(pattern)
    except ValueError:
        return False


def local_folders(uris: list[str]) -> list[Path]:
    """The folders on this machine of workspace folder URIs (one of another scheme, such as vscode-vfs:, has none)."""
    paths = [to_fs_path(uri) for uri in uris]
    return [Path(path) for path in paths if path]
