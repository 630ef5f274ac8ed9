"""The pygls server: thin handlers; the work happens in the engine and the feature modules."""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import sys
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, BinaryIO, Callable, ContextManager, Coroutine

import orjson
from lsprotocol import types
from pygls.io_ import StdoutWriter, run_async
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path

from rca_lsp import __version__
from rca_lsp.core.analysis import Analysis
from rca_lsp.core.cancel import Cancelled, ShouldStop
from rca_lsp.core.mapping import MappingEntry, ParsedMapping, parse_mapping
from rca_lsp.core.outputs import write_outputs
from rca_lsp.server.actions import ActionContext, code_actions
from rca_lsp.server.cancellation import CancellingProtocol
from rca_lsp.server.chart import CHART_DATA, chart_data_result
from rca_lsp.server.completion import complete
from rca_lsp.server.documents import MappingDocument
from rca_lsp.server.engine import Engine
from rca_lsp.server.hover import hover_markdown
from rca_lsp.server.navigation import definition, document_symbols
from rca_lsp.server.pairing import CONFIG_NAME, MAPPING_GLOBS, Pair, Unpaired, is_mapping_name
from rca_lsp.server.pipeline import Pipeline
from rca_lsp.server.positions import Positions
from rca_lsp.server.protocol import CommandError, RcaProtocol, ResyncingReader
from rca_lsp.server.settings import Settings
from rca_lsp.server.watcher import DumpWatcher
from rca_lsp.suggest.coverage import render_coverage

log = logging.getLogger(__name__)

SAVE_DELAY = 0.02  # seconds; repeated saves within it collapse into one run
CHANGE_DELAY = 0.4
DUMP_DELAY = 0.5
LIVE_EDIT_LIMIT = 2_000_000  # characters; larger files are re-analysed on save only
WRITE_OUTPUTS = "rcaLsp.server.writeOutputs"
SUGGEST_MAPPING = "rcaLsp.server.suggestMapping"
STATUS = "rcaLsp/status"
SKIP_DIRS = {".git", "node_modules", ".venv", "__pycache__", ".mypy_cache"}


class RcaServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__("rca-lsp", __version__, protocol_cls=RcaProtocol)
        self.engine = Engine()
        self.settings = Settings()
        self.documents: dict[str, MappingDocument] = {}
        self.executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="rca-analysis")
        self.watcher = DumpWatcher(self._dump_changed_threadsafe)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.background: set[asyncio.Task[None]] = set()
        self.client_watches_files = False  # the client reports workspace file changes (didChangeWatchedFiles)
        self.shut_down = False  # a shutdown request came
        self.pipeline = Pipeline(self)
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

    def apply_settings(self, raw: object) -> None:
        """New client settings; each part that had to be ignored is shown to the user (the rules: settings.py)."""
        self.settings, problems = Settings.from_client(raw)
        for problem in problems:
            self.window_show_message(types.ShowMessageParams(type=types.MessageType.Warning, message=problem))

    def cancellable(self) -> ContextManager[ShouldStop]:
        """The should-stop check of the request being handled: true once the client cancels it."""
        protocol = self.protocol
        assert isinstance(protocol, CancellingProtocol)
        return protocol.cancellations.track(protocol.msg_id)

    # --- which files -------------------------------------------------------------------------------------------
    def folders(self) -> list[Path]:
        return [Path(to_fs_path(f.uri) or "").resolve() for f in self.workspace.folders.values()] or (
            [Path(to_fs_path(self.workspace.root_uri) or "").resolve()] if self.workspace.root_uri else []
        )

    def is_mapping(self, path: Path) -> bool:
        return is_mapping_name(path) or any(self._named_by_pair(path, p.mapping_key) for p in self.settings.pairs)

    def _named_by_pair(self, path: Path, pattern: str) -> bool:
        folders = self.folders() or [path.parent]
        return any(
            path.match(pattern.replace("${workspaceFolder}", str(f)))
            or path == Path(pattern.replace("${workspaceFolder}", str(f))).resolve()
            for f in folders
        )

    def document(self, uri: str) -> MappingDocument | None:
        path = Path(to_fs_path(uri) or "")
        if uri not in self.documents and self.is_mapping(path):
            self.documents[uri] = MappingDocument(uri, path.resolve())
        return self.documents.get(uri)

    def scan_workspace(self) -> None:
        for folder in self.folders():
            for pattern in MAPPING_GLOBS:
                for path in folder.rglob(pattern):
                    if not SKIP_DIRS.intersection(path.relative_to(folder).parts):
                        self.pipeline.schedule(path.resolve().as_uri(), 0.0)

    def notify_status(
        self, state: str, uri: str, message: str, top: str | None = None, suspects: int | None = None
    ) -> None:
        params: dict[str, Any] = {"state": state, "uri": uri, "message": message}
        if top is not None:
            params["topHypothesis"] = top
        if suspects is not None:
            params["suspects"] = suspects
        self.protocol.notify(STATUS, params)

    # --- dumps changing on disk ---------------------------------------------------------------------------------
    def _dump_changed_threadsafe(self, path: Path) -> None:
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self.dump_changed, path)

    def dump_changed(self, path: Path) -> None:
        """A dump file (or a folder) changed: analyse again the mapping files paired with it, and try again to pair
        those that found no dumps when the change lies below their folder (a dump folder renamed back, a new dump)."""
        resolved = path.resolve()
        for doc in self.documents.values():
            if isinstance(doc.pair, Pair) and any(
                f == resolved or f.is_relative_to(resolved) for f in doc.pair.files()
            ):
                self.pipeline.schedule(doc.uri, DUMP_DELAY)  # one of its dump files, or a folder holding one
            elif isinstance(doc.pair, Unpaired) and resolved.is_relative_to(doc.path.parent):
                self.pipeline.schedule(doc.uri, DUMP_DELAY)

    def analysis_at(self, uri: str) -> tuple[MappingDocument, ParsedMapping, Analysis | None] | None:
        doc = self.documents.get(uri)
        opened = self.workspace.text_documents.get(uri)
        if doc is None:
            return None
        parsed = doc.parsed
        if opened is not None and (parsed is None or parsed.text != opened.source):
            if doc.unsaved_view is None or doc.unsaved_view.text != opened.source:
                doc.unsaved_view = parse_mapping(str(doc.path), opened.source, doc.latest_parse())  # once per edit
                doc.remember(doc.unsaved_view)
            parsed = doc.unsaved_view
        if parsed is None:
            return None
        return doc, parsed, doc.last_good or doc.analysis


server = RcaServer()


@server.feature(types.INITIALIZE)
def on_initialize(ls: RcaServer, params: types.InitializeParams) -> None:
    ls.settings, ls.pending_settings_problems = Settings.from_client(params.initialization_options)
    for problem in ls.pending_settings_problems:
        log.warning(problem)


@server.feature(types.SHUTDOWN)
def on_shutdown(ls: RcaServer, params: None) -> None:
    ls.shut_down = True
    ls.stop()


@server.feature(types.EXIT)
def on_exit(ls: RcaServer, params: None) -> None:
    """Exit now: an analysis running in a worker thread cannot be stopped, and the interpreter would wait for it
    (seconds on large dumps). Nothing is lost: output files are written atomically, the next run removes the
    temporaries of one that was cut short."""
    ls.stop()
    logging.shutdown()
    sys.stdout.flush()
    os._exit(0 if ls.shut_down else 1)  # as the protocol asks: 1 without a shutdown request first


@server.feature(types.INITIALIZED)
async def on_initialized(ls: RcaServer, params: types.InitializedParams) -> None:
    ls.loop = asyncio.get_running_loop()
    if not await pull_configuration(ls):  # the initializationOptions stay: say what in them was ignored
        for problem in ls.pending_settings_problems:
            ls.window_show_message(types.ShowMessageParams(type=types.MessageType.Warning, message=problem))
    ls.pending_settings_problems = []
    watched = ls.client_capabilities.workspace
    if watched and watched.did_change_watched_files and watched.did_change_watched_files.dynamic_registration:
        watchers = [
            types.FileSystemWatcher(glob_pattern=p)
            for p in ("**/dump.json", *(f"**/{g}" for g in MAPPING_GLOBS), f"**/{CONFIG_NAME}")
        ]
        try:
            await ls.client_register_capability_async(
                types.RegistrationParams(
                    registrations=[
                        types.Registration(
                            id=str(uuid.uuid4()),
                            method=types.WORKSPACE_DID_CHANGE_WATCHED_FILES,
                            register_options=types.DidChangeWatchedFilesRegistrationOptions(watchers=watchers),
                        )
                    ]
                )
            )
            ls.client_watches_files = True
        except Exception as error:  # the client advertised dynamic registration but refused it
            log.warning("could not register file watchers: %s", error)
    ls.scan_workspace()


async def pull_configuration(ls: RcaServer) -> bool:
    """The settings the client holds, if it answers workspace/configuration; whether it did."""
    workspace = ls.client_capabilities.workspace
    if not (workspace and workspace.configuration):
        return False
    try:
        result = await ls.workspace_configuration_async(
            types.ConfigurationParams(items=[types.ConfigurationItem(section="rcaLsp")])
        )
    except Exception as error:  # a client that advertises configuration but fails it: keep current settings
        log.warning("workspace/configuration failed: %s", error)
        return False
    if not (result and isinstance(result[0], dict)):
        return False
    ls.apply_settings(result[0])
    return True


@server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
async def on_configuration(ls: RcaServer, params: types.DidChangeConfigurationParams) -> None:
    if isinstance(params.settings, dict) and params.settings.get("rcaLsp") is not None:
        ls.apply_settings(params.settings)
    else:
        await pull_configuration(ls)
    ls.pipeline.schedule_all()


@server.feature(types.TEXT_DOCUMENT_DID_OPEN)
def on_open(ls: RcaServer, params: types.DidOpenTextDocumentParams) -> None:
    ls.pipeline.schedule(params.text_document.uri, 0.0)


@server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
def on_change(ls: RcaServer, params: types.DidChangeTextDocumentParams) -> None:
    opened = ls.workspace.text_documents.get(params.text_document.uri)
    if opened is None:
        return
    if len(opened.source) <= LIVE_EDIT_LIMIT:
        ls.pipeline.schedule(params.text_document.uri, CHANGE_DELAY)
    else:
        ls.pipeline.schedule_parse(params.text_document.uri, CHANGE_DELAY)


@server.feature(types.TEXT_DOCUMENT_DID_SAVE)
def on_save(ls: RcaServer, params: types.DidSaveTextDocumentParams) -> None:
    if Path(to_fs_path(params.text_document.uri) or "").name == CONFIG_NAME:
        ls.pipeline.schedule_all()
    ls.pipeline.schedule(params.text_document.uri, SAVE_DELAY)


@server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
def on_close(ls: RcaServer, params: types.DidCloseTextDocumentParams) -> None:
    ls.pipeline.schedule(
        params.text_document.uri, 0.0
    )  # analysed from disk from now on (the file may have unsaved edits)


@server.feature(types.WORKSPACE_DID_CHANGE_WATCHED_FILES)
def on_watched(ls: RcaServer, params: types.DidChangeWatchedFilesParams) -> None:
    for change in params.changes:
        path = Path(to_fs_path(change.uri) or "")
        if path.name == CONFIG_NAME:
            ls.pipeline.schedule_all(DUMP_DELAY)
        elif ls.is_mapping(path):
            doc = ls.document(change.uri)
            if change.type == types.FileChangeType.Deleted and doc is not None:
                ls.documents.pop(change.uri, None)
                ls.pipeline.clear(doc)
            elif change.uri not in ls.workspace.text_documents:
                ls.pipeline.schedule(change.uri, DUMP_DELAY)
        else:
            ls.dump_changed(path)


def analysed_text(ls: RcaServer, uri: str) -> tuple[ParsedMapping, Positions, Analysis] | None:
    """The current text's parse, its positions, and the analysis to show on it (None before any analysis)."""
    found = ls.analysis_at(uri)
    if found is None:
        return None
    _doc, parsed, analysis = found
    return None if analysis is None else (parsed, Positions(parsed, ls.workspace.position_codec), analysis)


def entry_under_cursor(
    ls: RcaServer, uri: str, position: types.Position
) -> tuple[ParsedMapping, Positions, Analysis, MappingEntry, int | None] | None:
    """The analysed entry at a position, and which rollout value (None on the key)."""
    found = analysed_text(ls, uri)
    if found is None:
        return None
    parsed, positions, analysis = found
    hit = parsed.entry_at(positions.offset(position))
    return None if hit is None else (parsed, positions, analysis, hit[0], hit[1])


@server.feature(types.TEXT_DOCUMENT_HOVER)
def on_hover(ls: RcaServer, params: types.HoverParams) -> types.Hover | None:
    found = entry_under_cursor(ls, params.text_document.uri, params.position)
    if found is None:
        return None
    parsed, positions, analysis, entry, index = found
    text = hover_markdown(analysis, entry.train_key, index)
    if text is None:
        return None
    spans = parsed.spans(entry)
    span = spans.values[index] if index is not None else spans.key
    return types.Hover(
        contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=text), range=positions.range(span)
    )


@server.feature(
    types.TEXT_DOCUMENT_CODE_ACTION, types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix])
)
def on_code_action(ls: RcaServer, params: types.CodeActionParams) -> list[types.CodeAction] | None:
    found = ls.analysis_at(params.text_document.uri)
    if found is None:
        return None
    doc, parsed, analysis = found
    opened = ls.workspace.text_documents.get(params.text_document.uri)
    context = ActionContext(
        params.text_document.uri,
        opened.version if opened else None,
        parsed,
        Positions(parsed, ls.workspace.position_codec),
        analysis,
        ls.engine.matchers,
    )
    return code_actions(context, list(params.context.diagnostics)) or None


@server.feature(types.TEXT_DOCUMENT_COMPLETION, types.CompletionOptions(trigger_characters=['"']))
def on_completion(ls: RcaServer, params: types.CompletionParams) -> types.CompletionList | None:
    found = analysed_text(ls, params.text_document.uri)
    if found is None:
        return None
    parsed, positions, analysis = found
    return complete(
        analysis,
        parsed,
        positions.offset(params.position),
        ls.engine.matchers,
        lambda start, end: types.Range(start=positions.position(start), end=positions.position(end)),
    )


@server.feature(types.TEXT_DOCUMENT_DEFINITION)
def on_definition(ls: RcaServer, params: types.DefinitionParams) -> types.Location | None:
    found = entry_under_cursor(ls, params.text_document.uri, params.position)
    if found is None:
        return None
    _parsed, _positions, analysis, entry, index = found
    return definition(analysis, entry.train_key, entry.rollout_keys[index] if index is not None else None)


@server.feature(types.TEXT_DOCUMENT_DOCUMENT_SYMBOL)
async def on_symbols(ls: RcaServer, params: types.DocumentSymbolParams) -> list[types.DocumentSymbol] | None:
    found = ls.analysis_at(params.text_document.uri)
    if found is None or not found[1].entries:
        return None
    doc, parsed, _analysis = found
    if doc.symbols is not None and doc.symbols[0] is parsed:
        return doc.symbols[1]
    positions = Positions(parsed, ls.workspace.position_codec)
    with ls.cancellable() as should_stop:
        try:
            symbols = await asyncio.get_running_loop().run_in_executor(
                ls.executor, document_symbols, parsed, positions, should_stop
            )
        except Cancelled:
            return None
    doc.symbols = (parsed, symbols)
    return symbols


def _document_for_command(ls: RcaServer, command: str, arguments: tuple[Any, ...]) -> MappingDocument:
    """The mapping document a command is about: its one argument, the file's URI."""
    if len(arguments) != 1 or not isinstance(arguments[0], str):
        raise CommandError(
            f"{command} takes one argument, the mapping-key file's URI; got {list(arguments)!r:.200}",
            invalid_params=True,
        )
    doc = ls.documents.get(arguments[0])
    if doc is None:
        raise CommandError(f"{command}: not a mapping-key file known to rca-lsp: {arguments[0]!r}", invalid_params=True)
    return doc


@server.command(WRITE_OUTPUTS)
async def cmd_write_outputs(ls: RcaServer, *arguments: Any) -> dict[str, str] | None:
    doc = _document_for_command(ls, WRITE_OUTPUTS, arguments)
    analysis = doc.last_good or doc.analysis
    if analysis is None:
        raise CommandError(f"{doc.path} has not been analysed yet (is it paired with dumps?)")
    out_dir = Path(ls.settings.out_dir)
    out_dir = out_dir if out_dir.is_absolute() else doc.path.parent / out_dir
    with ls.cancellable() as should_stop:
        try:
            await asyncio.get_running_loop().run_in_executor(
                ls.executor,
                functools.partial(
                    write_outputs, analysis, out_dir, should_stop=should_stop, columns=ls.settings.columns
                ),
            )
        except Cancelled:
            return None  # the client has its answer (request cancelled) already
        except OSError as error:
            raise CommandError(f"cannot write the output files to {out_dir}: {error.strerror or error}") from None
    return {"outDir": str(out_dir), "reportMarkdown": str(out_dir / "output_5_root_cause_report.md")}


@server.command(SUGGEST_MAPPING)
async def cmd_suggest_mapping(ls: RcaServer, *arguments: Any) -> dict[str, str] | None:
    doc = _document_for_command(ls, SUGGEST_MAPPING, arguments)
    if not isinstance(doc.pair, Pair):
        raise CommandError(f"{doc.path} is not paired with dumps")
    existing = doc.parsed.as_dict() if doc.parsed is not None else None
    pair = doc.pair

    def run(should_stop: ShouldStop) -> dict[str, str]:
        train, rollout = ls.engine.load(pair)
        result = ls.engine.matchers.get(train, rollout).suggest(existing, should_stop)
        return {
            "content": orjson.dumps(result.mapping, option=orjson.OPT_INDENT_2).decode(),
            "coverage": render_coverage(result),
        }

    with ls.cancellable() as should_stop:
        try:
            return await asyncio.get_running_loop().run_in_executor(ls.executor, run, should_stop)
        except Cancelled:
            return None  # the client has its answer (request cancelled) already


@server.command(CHART_DATA)
async def cmd_chart_data(ls: RcaServer, *arguments: Any) -> dict[str, Any]:
    return await chart_data_result(ls.executor, _document_for_command(ls, CHART_DATA, arguments))
