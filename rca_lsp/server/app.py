"""The pygls server: thin handlers; the work happens in the engine and the feature modules."""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import sys
import uuid
from pathlib import Path
from typing import Any

import orjson
from lsprotocol import types
from pygls.uris import to_fs_path

from rca_lsp.base.cancel import Cancelled, ShouldStop
from rca_lsp.base.errors import InputError
from rca_lsp.diagnose.analysis import Analysis
from rca_lsp.mapping.model import MappingEntry, ParsedMapping
from rca_lsp.report.outputs import write_outputs
from rca_lsp.server.documents import MappingDocument
from rca_lsp.server.features.actions import ActionContext, code_actions
from rca_lsp.server.features.chart import CHART_DATA, chart_data_result
from rca_lsp.server.features.completion import complete
from rca_lsp.server.features.hover import hover_markdown
from rca_lsp.server.features.navigation import definition, document_symbols
from rca_lsp.server.pairing import CONFIG_NAME, MAPPING_GLOBS, Pair, Unpaired, is_mapping_name
from rca_lsp.server.pipeline import Pipeline
from rca_lsp.server.positions import Positions
from rca_lsp.server.protocol import CommandError, RawJson
from rca_lsp.server.settings import Settings
from rca_lsp.server.state import ServerState, local_folders
from rca_lsp.server.watcher import DumpWatcher
from rca_lsp.suggest.coverage import render_coverage

log = logging.getLogger(__name__)

SAVE_DELAY = 0.02  # seconds; repeated saves within it collapse into one run
CHANGE_DELAY = 0.4
DUMP_DELAY = 0.5
LIVE_EDIT_LIMIT = 2_000_000  # characters; larger files are re-analysed on save only
WRITE_OUTPUTS = "rcaLsp.server.writeOutputs"
SUGGEST_MAPPING = "rcaLsp.server.suggestMapping"
SKIP_DIRS = {".git", "node_modules", ".venv", "__pycache__", ".mypy_cache"}


class RcaServer(ServerState):
    """The server: its state, the pipeline that runs analyses, and the dump watcher that starts them."""

    def __init__(self) -> None:
        super().__init__()
        self.watcher = DumpWatcher(self._dump_changed_threadsafe)
        self.pipeline = Pipeline(self)

    async def scan_workspace(self, folders: list[Path] | None = None) -> None:
        """Analyse every mapping file of the workspace folders (or of `folders`, just added), found off the loop (a
        walk of the whole tree)."""
        found = await asyncio.get_running_loop().run_in_executor(
            self.executor, mapping_files, self.folders(resolved=False) if folders is None else folders
        )
        for path in found:
            self.pipeline.schedule(path.as_uri(), 0.0)

    def forget_folders(self, removed: list[Path]) -> None:
        """Folders no longer in the workspace: their mapping files that are not open are not analysed any more, and
        their diagnostics are cleared (those below a folder still in it stay)."""
        kept = self.folders()
        for doc in list(self.documents.values()):
            gone = any(doc.path.is_relative_to(f) for f in removed) and not any(
                doc.path.is_relative_to(f) for f in kept
            )
            if gone and self.opened(doc.uri) is None:
                self.pipeline.forget(doc)

    # --- dumps changing on disk ---------------------------------------------------------------------------------
    def _dump_changed_threadsafe(self, path: Path) -> None:
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self.dump_changed, path)

    def dump_changed(self, path: Path) -> None:
        """A dump file (or a folder) changed: analyse again the mapping files paired with it, and try again to pair
        those that found no dumps when the change lies below their folder (a dump folder renamed back, a new dump)."""
        resolved = path.resolve()
        for doc in self.documents.values():
            if any(resolved.is_relative_to(root) or root.is_relative_to(resolved) for root in doc.dump_roots()):
                self.pipeline.schedule(doc.uri, DUMP_DELAY)  # below one of its dump roots, or a folder holding one
            elif isinstance(doc.pair, Unpaired) and resolved.is_relative_to(doc.path.parent):
                self.pipeline.schedule(doc.uri, DUMP_DELAY)


def mapping_files(folders: list[Path]) -> list[Path]:
    """The mapping files below the folders (by name, see pairing.MAPPING_GLOBS), by their paths below them (as the
    client names them: not resolved); SKIP_DIRS and symlinked folders are not entered."""
    found = []
    for folder in folders:
        for parent, dirs, files in os.walk(folder):
            dirs[:] = [d for d in dirs if d not in SKIP_DIRS]
            found += [Path(parent, name) for name in files if is_mapping_name(Path(name))]
    return found


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
        except Exception as error:  # the client advertised dynamic registration but refused it
            log.warning("could not register file watchers: %s", error)
    await ls.scan_workspace()


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
    ls.pipeline.schedule_all(accept_layout=True)


@server.feature(types.WORKSPACE_DID_CHANGE_WORKSPACE_FOLDERS)
async def on_folders(ls: RcaServer, params: types.DidChangeWorkspaceFoldersParams) -> None:
    ls.forget_folders([folder.resolve() for folder in local_folders([f.uri for f in params.event.removed])])
    await ls.scan_workspace(local_folders([f.uri for f in params.event.added]))


@server.feature(types.TEXT_DOCUMENT_DID_OPEN)
def on_open(ls: RcaServer, params: types.DidOpenTextDocumentParams) -> None:
    ls.pipeline.schedule(params.text_document.uri, 0.0)


@server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
def on_change(ls: RcaServer, params: types.DidChangeTextDocumentParams) -> None:
    opened = ls.opened(params.text_document.uri)
    if opened is None:
        return
    if len(opened.source) <= LIVE_EDIT_LIMIT:
        ls.pipeline.schedule(params.text_document.uri, CHANGE_DELAY)
    else:
        ls.pipeline.schedule_parse(params.text_document.uri, CHANGE_DELAY)


@server.feature(types.TEXT_DOCUMENT_DID_SAVE)
def on_save(ls: RcaServer, params: types.DidSaveTextDocumentParams) -> None:
    if Path(to_fs_path(params.text_document.uri) or "").name == CONFIG_NAME:
        ls.pipeline.schedule_all(accept_layout=True)
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
            ls.pipeline.schedule_all(DUMP_DELAY, accept_layout=True)
        elif ls.is_mapping(path):
            if ls.opened(change.uri) is not None:
                continue  # the editor's text is analysed, not the file's (read again once it is closed)
            doc = ls.document(change.uri)
            if change.type == types.FileChangeType.Deleted and doc is not None:
                ls.pipeline.forget(doc)
            else:
                ls.pipeline.schedule(change.uri, DUMP_DELAY)
        else:
            ls.dump_changed(path)


async def analysed_text(ls: RcaServer, uri: str) -> tuple[ParsedMapping, Positions, Analysis] | None:
    """The current text's parse, its positions, and the analysis to show on it (None before any analysis)."""
    found = await ls.analysis_at(uri)
    if found is None:
        return None
    _doc, parsed, analysis = found
    return None if analysis is None else (parsed, Positions(parsed, ls.workspace.position_codec), analysis)


EntryFound = tuple[ParsedMapping, Positions, Analysis, MappingEntry, int | None]


async def entry_under_cursor(ls: RcaServer, uri: str, position: types.Position) -> EntryFound | None:
    """The analysed entry at a position, and which rollout value (None on the key)."""
    found = entry_before_last_change(ls, uri, position)
    if found is not None:
        return found
    text = await analysed_text(ls, uri)
    if text is None:
        return None
    parsed, positions, analysis = text
    hit = parsed.entry_at(positions.offset(position))
    return None if hit is None else (parsed, positions, analysis, hit[0], hit[1])


def entry_before_last_change(ls: RcaServer, uri: str, position: types.Position) -> EntryFound | None:
    """The entry at a position that lies before the client's last change, found in the parse of the text before
    it, which has that entry at the same place: no wait for the parse of the new text (0.3-0.8 s after a paste of
    10 MB). None when there is no such parse or the entry reaches into the change."""
    doc, open_text = ls.documents.get(uri), ls.rca_protocol.open_texts.get(uri)
    if doc is None or open_text is None or open_text.earlier is None:
        return None
    earlier, kept = open_text.earlier
    parsed = next((p for p in (doc.unsaved_view, doc.parsed) if p is not None and p.text is earlier), None)
    analysis = doc.last_good or doc.analysis
    if parsed is None or analysis is None:
        return None
    offset = open_text.offset(position, ls.workspace.position_codec)
    hit = parsed.entry_at(offset) if offset < kept else None
    if hit is None or parsed.spans(hit[0]).whole.end >= kept:
        return None
    return parsed, Positions(parsed, ls.workspace.position_codec), analysis, hit[0], hit[1]


@server.feature(types.TEXT_DOCUMENT_HOVER)
async def on_hover(ls: RcaServer, params: types.HoverParams) -> types.Hover | None:
    found = await entry_under_cursor(ls, params.text_document.uri, params.position)
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
async def on_code_action(ls: RcaServer, params: types.CodeActionParams) -> list[types.CodeAction] | None:
    found = await ls.analysis_at(params.text_document.uri)
    if found is None:
        return None
    doc, parsed, analysis = found
    opened = ls.opened(params.text_document.uri)
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
async def on_completion(ls: RcaServer, params: types.CompletionParams) -> types.CompletionList | None:
    found = await analysed_text(ls, params.text_document.uri)
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
async def on_definition(ls: RcaServer, params: types.DefinitionParams) -> types.Location | None:
    found = await entry_under_cursor(ls, params.text_document.uri, params.position)
    if found is None:
        return None
    _parsed, _positions, analysis, entry, index = found
    return definition(analysis, entry.train_key, entry.rollout_keys[index] if index is not None else None)


@server.feature(types.TEXT_DOCUMENT_DOCUMENT_SYMBOL)
async def on_symbols(ls: RcaServer, params: types.DocumentSymbolParams) -> list[types.DocumentSymbol] | None:
    found = await ls.analysis_at(params.text_document.uri)
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
    analysis = doc.commanded_analysis()
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
        except InputError as error:  # a rank file read for the report's per-rank rows went away or broke meanwhile
            raise CommandError(f"cannot write the output files of {doc.path}: {error}") from None
    return {"outDir": str(out_dir), "reportMarkdown": str(out_dir / "output_5_root_cause_report.md")}


@server.command(SUGGEST_MAPPING)
async def cmd_suggest_mapping(ls: RcaServer, *arguments: Any) -> dict[str, str] | None:
    doc = _document_for_command(ls, SUGGEST_MAPPING, arguments)
    if not isinstance(doc.pair, Pair):  # a configured pair that cannot be used now says why
        problem = doc.pair.problem if isinstance(doc.pair, Unpaired) else None
        raise CommandError(problem or f"{doc.path} is not paired with dumps")
    if doc.problems:  # a rank file gone or broken: not a mapping of what is left
        raise CommandError(f"cannot suggest a mapping for {doc.path} now: {doc.problems[0]}")
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
        except InputError as error:  # a dump broken or being rewritten since the last analysis: its one line
            raise CommandError(f"cannot suggest a mapping for {doc.path}: {error}") from None


@server.command(CHART_DATA)
async def cmd_chart_data(ls: RcaServer, *arguments: Any) -> RawJson:
    return await chart_data_result(ls.executor, _document_for_command(ls, CHART_DATA, arguments))
