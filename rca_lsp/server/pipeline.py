"""The run pipeline of one mapping file: schedule (debounced), parse, analyse, publish.

Every step that waits (a parse or an analysis in a worker thread) is followed by the one "still current?" check of
`Run.step`: a run that a newer edit, save or dump change superseded stops there, publishing nothing."""

from __future__ import annotations

import asyncio
import logging
import uuid
from pathlib import Path
from typing import Callable, TypeVar

from lsprotocol import types

from rca_lsp.base.errors import InputError
from rca_lsp.base.inputfile import read_text_file
from rca_lsp.diagnose.analysis import Analysis
from rca_lsp.mapping.model import ParsedMapping
from rca_lsp.mapping.parse import parse_mapping
from rca_lsp.server.diagnostics import document_diagnostics
from rca_lsp.server.documents import MappingDocument
from rca_lsp.server.pairing import Pair, Unpaired, dump_layout, find_pair, root_gone, vanished_error
from rca_lsp.server.positions import Positions
from rca_lsp.server.state import ServerState
from rca_lsp.server.timing import Laps

log = logging.getLogger(__name__)

T = TypeVar("T")


class Superseded(Exception):
    """A newer run of the same document was scheduled: this one stops without publishing."""


class Run:
    """One scheduled analysis of a document, current as long as no newer one was scheduled."""

    def __init__(self, server: ServerState, doc: MappingDocument, generation: int) -> None:
        self.server = server
        self.doc = doc
        self.generation = generation

    def check(self) -> None:
        """The one "still current?" check: raises Superseded once a newer run of the document was scheduled."""
        if self.generation != self.doc.generation:
            raise Superseded

    async def step(self, work: Callable[..., T], *args: object) -> T:
        """`work(*args)` in a worker thread, then the check (also when it failed: a stale error is not shown)."""
        try:
            return await asyncio.get_running_loop().run_in_executor(self.server.executor, work, *args)
        finally:
            self.check()


def _parsed(path: str, text: str, earlier: ParsedMapping | None) -> ParsedMapping:
    """The mapping's parse with its line index built here, off the loop: the publish that follows looks every
    finding's position up in it (~50 ms for a file of 10^5 entries, on the loop otherwise)."""
    parsed = parse_mapping(path, text, earlier)
    parsed.lines.build()
    return parsed


class Pipeline:
    def __init__(self, server: ServerState) -> None:
        self.server = server

    # --- scheduling ---------------------------------------------------------------------------------------------
    def schedule(self, uri: str, delay: float, accept_layout: bool = False) -> None:
        """`accept_layout`: the pairing was saved or set anew: analyse the dumps as they are now, also when files the
        last good analysis read are gone (see MappingDocument.accept_layout)."""
        doc = self.server.document(uri)
        if doc is None:
            return
        doc.accept_layout = doc.accept_layout or accept_layout
        run = Run(self.server, doc, doc.next_generation())
        doc.pending = self.server.debounce(doc.pending, delay, lambda: self.run(run), uri)

    def schedule_parse(self, uri: str, delay: float) -> None:
        """Large files are analysed on save only; parse their edits meanwhile so a save only has to analyse."""
        doc = self.server.document(uri)
        if doc is None:
            return
        doc.pending_parse = self.server.debounce(doc.pending_parse, delay, lambda: self.parse_unsaved(doc), uri)

    def schedule_all(self, delay: float = 0.0, accept_layout: bool = False) -> None:
        for uri in list(self.server.documents):
            self.schedule(uri, delay, accept_layout)

    async def parse_unsaved(self, doc: MappingDocument) -> None:
        opened = self.server.opened(doc.uri)
        if opened is not None:
            await self.server.unsaved_parse(doc, opened.source)

    # --- one run ------------------------------------------------------------------------------------------------
    async def run(self, run: Run) -> None:
        try:
            await self._run(run)
        except Superseded:
            log.debug("run %d of %s superseded", run.generation, run.doc.path.name)

    async def _run(self, run: Run) -> None:
        doc, laps = run.doc, Laps()
        current = self._text(doc)
        if current is None:
            self.clear(doc)
            return
        text, version = current
        pair = await self._pair(run)
        self._say_ignored_folders(doc.pair, pair)
        doc.pair = pair
        # the dumps of pairs no document has any more (a step no longer chosen, a mapping deleted) are let go
        self.server.engine.keep_only(d.pair for d in self.server.documents.values() if isinstance(d.pair, Pair))
        gone: list[Path] = []
        if isinstance(pair, Pair):
            await run.step(self.server.watcher.watch, pair.roots())  # off the loop: watchdog lists the folders
            layout, gone = await run.step(dump_layout, None if doc.accept_layout else doc.good_layout, pair)
            if not gone:  # dumps not loaded yet: one loads in a child while the mapping is parsed
                await run.step(self.server.engine.start_loading, pair)
        parsed = await run.step(_parsed, str(doc.path), text, doc.latest_parse())
        laps.lap("parse")
        replaced: list[object] = [doc.parsed, doc.analysis, doc.last_good]  # freed after the publish (release)
        doc.parsed = parsed  # the last run's dump problems stay shown (and told to commands) until this run's are known
        doc.remember(parsed)
        if doc.unsaved_view is not None and doc.unsaved_view.text == text:
            doc.unsaved_view = None
        if isinstance(pair, Unpaired):
            if doc.good_layout is not None and await run.step(root_gone, doc.good_layout):
                doc.good_layout = None
            doc.problems = []
            if pair.problem:  # a configured pair that cannot be used now: the last good analysis stays
                self._dump_problem(doc, parsed, pair.problem)
            self.publish(doc, version)
            return
        try:
            if gone:  # never a merge of the ranks that are left: the last good analysis stays
                raise vanished_error(gone)
            analysis = await self._analyse(run, pair, parsed)
            laps.lap("analysis")
        except InputError as error:
            self._dump_problem(doc, parsed, str(error))
        else:
            doc.problems = []
            doc.good_layout, doc.accept_layout = layout, False
            await self._accept(run, parsed, analysis, version)
            laps.lap("counterparts")
            if analysis.comparator.element_wise_later:  # tensor- or md5-mode dumps: their evidence follows
                self.server.loop_task(self.publish_element_wise(run, pair, parsed, version), doc.uri)
        self.publish(doc, version)
        laps.lap("publish")
        log.info("analysed %s (version %s): %s", doc.path.name, version, laps)
        self.release(replaced)
        kept = doc.analysis
        if kept is not None:  # what the next edit's analysis reads of this one, worked out meanwhile
            self._after_publish(lambda: kept.owners)

    def release(self, replaced: list[object]) -> None:
        """Free what a run replaced (the previous parse and analysis: containers of 10^5 items each, milliseconds to
        free) in a worker thread, once the run has published: not on the loop, not before the publish."""
        self._after_publish(replaced.clear)

    def _after_publish(self, work: Callable[[], object]) -> None:
        """`work` in a worker thread: what a run does once it has published."""
        try:
            self.server.executor.submit(work)
        except RuntimeError:  # shutting down
            pass

    async def _pair(self, run: Run) -> Pair | Unpaired:
        """The document's dumps, found off the loop (a pair's glob, its step and rank folders are listed); a failure
        other than an InputError (a fault of the listing, not of the files) is shown as the pair's problem."""
        try:
            return await run.step(find_pair, run.doc.path, self.server.settings.pairs, self.server.folders())
        except Superseded:
            raise
        except Exception as error:
            log.error("pairing %s failed", run.doc.path, exc_info=error)
            return Unpaired(run.doc.path, (), f"cannot pair this file with its dumps: {type(error).__name__}: {error}")

    def _say_ignored_folders(self, before: Pair | Unpaired | None, pair: Pair | Unpaired) -> None:
        """A dump folder holding a second layout beside the one read (DumpSource.ignored_note): a warning message,
        once per pairing of the document that finds it (not again at each edit)."""
        if not isinstance(pair, Pair):
            return
        said = {before.train.ignored_note, before.rollout.ignored_note} if isinstance(before, Pair) else set()
        for note in (pair.train.ignored_note, pair.rollout.ignored_note):
            if note is not None and note not in said:
                message = types.ShowMessageParams(type=types.MessageType.Warning, message=f"rca-lsp: {note}")
                self.server.window_show_message(message)

    def _dump_problem(self, doc: MappingDocument, parsed: ParsedMapping, problem: str) -> None:
        """A dump (or its pairing) that cannot be used now: said at the top, over the last good analysis."""
        doc.problems = [f"{problem} — showing the last good analysis" if doc.last_good else problem]
        if doc.last_good is not None:  # drawn on this text (msprobe's YAML mappings: resolved against its dumps)
            doc.parsed = parsed.for_dumps(doc.last_good.train, doc.last_good.rollout)
        self.server.notify_status("error", doc.uri, problem)

    async def publish_element_wise(self, run: Run, pair: Pair, parsed: ParsedMapping, version: int | None) -> None:
        """The analysis again with the tensors' (or md5 hashes') evidence, published when done: the statistics'
        findings came first; later runs of the document reuse the element-wise comparator."""
        settings = self.server.settings
        try:
            analysis = await run.step(self.server.engine.analyse, pair, parsed, settings.tolerances, None, True)
            await self._accept(run, parsed, analysis, version)
        except Superseded:
            return
        except InputError as error:  # the dumps changed meanwhile: the next run reports it
            log.info("element-wise analysis of %s dropped: %s", run.doc.path.name, error)
            return
        self.publish(run.doc, version)

    def _text(self, doc: MappingDocument) -> tuple[str, int | None] | None:
        """The text to analyse: the editor's if the file is open, else the file's; None if it cannot be read."""
        opened = self.server.opened(doc.uri)
        if opened is not None:
            return opened.source, opened.version
        try:
            return read_text_file(doc.path, "mapping-key file"), None
        except InputError:
            return None

    async def _analyse(self, run: Run, pair: Pair, parsed: ParsedMapping) -> Analysis:
        engine, settings = self.server.engine, self.server.settings
        if not engine.needs_loading(pair):
            return await run.step(engine.analyse, pair, parsed, settings.tolerances, run.doc.analysis)
        token = str(uuid.uuid4())
        self.server.notify_status(
            "loading",
            run.doc.uri,
            f"loading dumps {pair.train.root.name}, {pair.rollout.root.name} (paired by {pair.source})",
        )
        progress = await self._begin_progress(token, f"rca-lsp: loading {pair.train.label} and {pair.rollout.label}")
        try:
            await run.step(engine.load, pair)
            if progress:
                self.server.work_done_progress.report(
                    token, types.WorkDoneProgressReport(message="comparing", percentage=70)
                )
            return await run.step(engine.analyse, pair, parsed, settings.tolerances)
        finally:
            if progress:  # pygls keeps every token it was given (a Future each): forgotten once ended
                self.server.work_done_progress.end(token, types.WorkDoneProgressEnd(message="done"))
                self.server.work_done_progress.tokens.pop(token, None)

    async def _accept(self, run: Run, parsed: ParsedMapping, analysis: Analysis, version: int | None) -> None:
        """Keep a current run's analysis and its hints, and report its outcome."""
        doc, engine = run.doc, self.server.engine
        doc.parsed = analysis.mapping  # msprobe's YAML mappings: the parse resolved against the dumps
        doc.analysis = analysis
        later_counterparts = False
        if parsed.syntax_ok:
            doc.last_good = analysis
            await run.step(engine.prefetch_locations, analysis)
            # Building the matcher takes seconds on large dumps: the first findings do not wait for it.
            later_counterparts = not engine.has_matcher(analysis)
            if not later_counterparts:
                doc.counterparts = await run.step(engine.counterparts, analysis)
        top = analysis.top_hypothesis
        self.server.notify_status(
            "analysed", doc.uri, top or "no divergence found", top=top, suspects=len(analysis.suspects)
        )
        if later_counterparts:
            self.server.loop_task(self.publish_counterparts(run, analysis, version), doc.uri)

    async def publish_counterparts(self, run: Run, analysis: Analysis, version: int | None) -> None:
        """The unmapped-train-module hints, published once the matcher is built (after the first findings)."""
        try:
            counterparts = await run.step(self.server.engine.counterparts, analysis)
        except Superseded:
            return
        if counterparts:
            run.doc.counterparts = counterparts
            self.publish(run.doc, version)

    async def _begin_progress(self, token: str, title: str) -> bool:
        window = self.server.client_capabilities.window
        if window is None or not window.work_done_progress:
            return False
        try:
            await self.server.work_done_progress.create_async(token)
        except Exception:  # the client refused the token: go on without progress
            return False
        self.server.work_done_progress.begin(token, types.WorkDoneProgressBegin(title=title, percentage=0))
        return True

    # --- publishing ---------------------------------------------------------------------------------------------
    def publish(self, doc: MappingDocument, version: int | None) -> None:
        positions = Positions(doc.parsed, self.server.workspace.position_codec) if doc.parsed is not None else None
        diagnostics = document_diagnostics(doc, self.server.settings, positions)
        self.server.rca_protocol.publish_diagnostics(doc.uri, version, diagnostics)

    def forget(self, doc: MappingDocument) -> None:
        """Stop analysing a document (a pending run is cancelled, a running one publishes nothing) and clear its
        diagnostics."""
        for handle in (doc.pending, doc.pending_parse):
            if handle is not None:
                handle.cancel()
        doc.next_generation()
        self.server.documents.pop(doc.uri, None)
        self.clear(doc)

    def clear(self, doc: MappingDocument) -> None:
        self.server.rca_protocol.publish_diagnostics(doc.uri, None, [])
