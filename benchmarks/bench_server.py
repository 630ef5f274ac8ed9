"""Benchmark the language server (`python -m rca_lsp serve` over stdio) on the large synthetic dump pair.

One run measures, against a real server subprocess driven by a pygls client, with a temporary workspace holding
`mapping_key.json` (the first --entries entries of the data set's mapping) next to `train/` and `rollout/`
(symlinks to the data set's dump folders), so that the server pairs them by convention:

1. cold: didOpen -> first publishDiagnostics with findings (dumps not yet parsed), against a cold CLI
   `python -m rca_lsp analyze` on the same three files in a fresh process: its time to the answer (the summary
   printed) and to its exit; and the analysis alone;
2. didSave of a one-line edit (one rollout value swapped with a neighbour's, alternately back) -> the first
   publishDiagnostics of the edited version, --saves times;
3. hover on --hovers mapping keys spread over the file, after the analysis;
4. rcaLsp.server.chartData of the latest analysis, with hovers sent one after another while it is built: how long
   the event loop keeps a request waiting meanwhile;
5. the server's peak RSS (VmHWM; psutil samples as a fallback) against the parse floor's (parse_floor.py).

A failed measurement prints one line and the others still run. The server's stderr, the CLI's output and the
parse floor's go to `<data-dir>/bench_server/`.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import itertools
import json
import multiprocessing
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable, TypeVar, Union

import orjson
import psutil
from bench_analyze import (
    Cost,
    Run,
    analyze_argv,
    ensure_dataset,
    floor_argv,
    kill_group,
    run_child,
    summarize,
    warm_caches,
)
from bench_answer import SUMMARY
from bench_common import (
    DECODE,
    DEFAULT_DATA_DIR,
    EXIT_NOT_STRICT_JSON,
    LARGE,
    REPO_ROOT,
    TP8,
    DataSet,
    DatasetPaths,
    benchmark_parser,
    mib,
)
from lsprotocol import types
from pygls.lsp.client import LanguageClient

DATA_SETS = {spec.name: spec for spec in (LARGE, TP8, DECODE)}

TARGET_COLD_RATIO = 1.0  # first findings no later than the CLI's answer
TARGET_SAVE_S = 0.2
TARGET_HOVER_S = 0.05  # also the longest a request may wait while chartData is built
CHART_DATA = "rcaLsp.server.chartData"
FINDING_CODES = {
    "missing-op",
    "aligned-boundary",
    "parameter-sync",
    "in-module-diff",
    "upstream-propagation",
    "needs-review",
    "fused-structural",
    "unmapped-train-module",
    "nan-inf",
}
ENTRY_LINE = re.compile(r'^  "((?:[^"\\]|\\.)*)": (.*)$')  # one top-level entry of an OPT_INDENT_2 mapping
STRING_VALUE = re.compile(r'^"((?:[^"\\]|\\.)*)",?$')
ANALYSIS_ONLY = (
    "import sys; from rca_lsp.diagnose.run import analyze_paths; "
    "a = analyze_paths(*sys.argv[1:4]); print(len(a.records), 'groups,', len(a.suspects), 'suspects')"
)
T = TypeVar("T")
Figure = Union[float, str]  # a measured value, or why the measurement failed


class MeasurementError(Exception):
    """A measurement that could not be taken; its message is the one line reported."""


# --- the workspace ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Entry:
    key: str
    line: int
    value: tuple[int, int, str] | None  # start and end column of a string value's content, and the content


@dataclass(frozen=True)
class Workspace:
    root: Path
    mapping: Path
    entries: int

    @property
    def uri(self) -> str:
        return self.mapping.as_uri()


def write_head(source: Path, target: Path, entries: int) -> int:
    """The first `entries` entries of a mapping-key file, in make_synthetic.py's layout. Run in a spawned child:
    the benchmark process must stay small, since a child's peak RSS counts the parent's at spawn."""
    head = dict(itertools.islice(orjson.loads(source.read_bytes()).items(), entries))
    target.write_bytes(orjson.dumps(head, option=orjson.OPT_INDENT_2))
    return len(head)


def make_workspace(root: Path, data_dir: Path, mapping_source: Path, entries: int) -> Workspace:
    root = root.resolve()  # the server reports resolved URIs
    for side in ("train", "rollout"):
        (root / side).symlink_to(data_dir / side, target_is_directory=True)
    mapping = root / "mapping_key.json"
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        written = pool.submit(write_head, mapping_source, mapping, entries).result()
    return Workspace(root, mapping, written)


def parse_entries(text: str) -> list[Entry]:
    found = []
    for line, content in enumerate(text.split("\n")):
        match = ENTRY_LINE.match(content)
        if match is None:
            continue
        value = STRING_VALUE.match(match.group(2))
        start = match.start(2) + 1
        found.append(
            Entry(match.group(1), line, (start, start + len(value.group(1)), value.group(1)) if value else None)
        )
    return found


def pick_edit(entries: list[Entry]) -> tuple[Entry, str]:
    """A 1:1 entry a tenth into the file, and the rollout key of the next 1:1 entry with another value: swapping
    them is a one-line, realistic mistake whose findings differ from the original's."""
    for i, entry in enumerate(entries[len(entries) // 10 :], len(entries) // 10):
        if entry.value is None:
            continue
        other = next((e.value[2] for e in entries[i + 1 :] if e.value and e.value[2] != entry.value[2]), None)
        if other is not None:
            return entry, other
    raise MeasurementError("no 1:1 entry to edit in the mapping")


def server_constant(name: str) -> Any:
    """A module-level constant of rca_lsp/server/app.py, read without importing the server into this process."""
    tree = ast.parse((REPO_ROOT / "rca_lsp" / "server" / "app.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise MeasurementError(f"{name} not found in rca_lsp/server/app.py")


# --- fresh-process references: CLI and parse floor ---------------------------------------------------------------
@dataclass
class References:
    cli: Cost | str = "not run"
    cli_answer: Figure = "not run"  # seconds until the CLI printed its summary (see bench_answer.py)
    analysis_only: Cost | str = "not run"
    floor: Cost | str = "not run"


def run_cli(argv: list[str], log: Path, timeout_s: float) -> tuple[Run, float | None]:
    """As run_child, reading the child's output as it comes: also the seconds until its summary line (None: never)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
    start = time.perf_counter()
    answer = None
    expired = threading.Event()
    with log.open("wb") as out:
        child = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        timer = threading.Timer(timeout_s, kill_group, (child.pid, expired))
        timer.start()
        try:
            assert child.stdout is not None
            for line in child.stdout:
                if answer is None and line.startswith(SUMMARY.encode()):
                    answer = time.perf_counter() - start
                out.write(line)
            _, status, usage = os.wait4(child.pid, 0)
            child.returncode = os.waitstatus_to_exitcode(status)
        except BaseException:
            kill_group(child.pid)
            raise
        finally:
            timer.cancel()
    cost = Cost(time.perf_counter() - start, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024)
    return Run(cost, child.returncode, expired.is_set(), log), answer


def run_references(paths: DatasetPaths, work: Path, logs: Path, timeout_s: float) -> References:
    def one(name: str, argv: list[str], explain: dict[int, str] | None = None) -> Cost | str:
        run = run_child(argv, logs / f"{name}.log", timeout_s)
        print(f"{name}: {run.cost.wall_s:.2f} s{'' if run.ok else ' (failed)'}", flush=True)
        return summarize([run], explain or {})

    refs = References()
    refs.floor = one("parse_floor", floor_argv(paths), {EXIT_NOT_STRICT_JSON: "orjson rejects a dump, floor n/a"})
    run, answer = run_cli(analyze_argv(paths, work / "cli_out"), logs / "cli_analyze.log", timeout_s)
    print(
        f"cli_analyze: answer {fmt_time(answer if answer is not None else 'n/a')}, exit {run.cost.wall_s:.2f} s",
        flush=True,
    )
    refs.cli = summarize([run], {})
    refs.cli_answer = answer if answer is not None else f"no line starting {SUMMARY!r} in {run.log}"
    refs.analysis_only = one("analysis_only", [sys.executable, "-c", ANALYSIS_ONLY, *map(str, paths.all())])
    return refs


# --- the client ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Published:
    at: float
    version: int | None
    diagnostics: list[types.Diagnostic]

    def findings(self) -> int:
        return sum(d.code in FINDING_CODES for d in self.diagnostics)

    def on_line(self, line: int) -> list[str]:
        return [str(d.code) for d in self.diagnostics if d.range.start.line == line]


class BenchClient(LanguageClient):
    """Records what the server sends (diagnostics, status, progress) with arrival times, and answers its requests."""

    def __init__(self, server_log: Path) -> None:
        super().__init__("rca-lsp-bench", "1")
        self.published: dict[str, list[Published]] = {}
        self.statuses: list[tuple[float, str]] = []
        self.registrations: list[str] = []
        self.exit_code: int | None = None
        self.news = asyncio.Event()
        self.server_log = server_log
        self._register_handlers()

    def _register_handlers(self) -> None:
        @self.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
        def on_diagnostics(_client: BenchClient, params: types.PublishDiagnosticsParams) -> None:
            self.published.setdefault(params.uri, []).append(
                Published(time.perf_counter(), params.version, list(params.diagnostics))
            )
            self.news.set()

        @self.feature("rcaLsp/status")
        def on_status(_client: BenchClient, params: Any) -> None:
            self.statuses.append((time.perf_counter(), str(getattr(params, "state", params))))

        @self.feature(types.CLIENT_REGISTER_CAPABILITY)
        def on_register(_client: BenchClient, params: types.RegistrationParams) -> None:
            self.registrations += [r.method for r in params.registrations]

        @self.feature(types.WORKSPACE_CONFIGURATION)
        def on_configuration(_client: BenchClient, params: types.ConfigurationParams) -> list[Any]:
            return [{} for _ in params.items]

        @self.feature(types.WINDOW_WORK_DONE_PROGRESS_CREATE)
        def on_progress_create(_client: BenchClient, _params: Any) -> None:
            return None

        @self.feature(types.PROGRESS)
        def on_progress(_client: BenchClient, _params: Any) -> None:
            return None

        @self.feature(types.WINDOW_LOG_MESSAGE)
        def on_log(_client: BenchClient, _params: Any) -> None:
            return None

    async def server_exit(self, server: asyncio.subprocess.Process) -> None:
        self.exit_code = server.returncode
        self.news.set()

    @property
    def process(self) -> asyncio.subprocess.Process:
        assert self._server is not None, "server not started"
        return self._server

    def last_stderr_line(self) -> str:
        lines = self.server_log.read_text(errors="replace").strip().splitlines() if self.server_log.exists() else []
        return lines[-1] if lines else "(no stderr output)"

    async def wait_published(
        self, uri: str, since: int, accept: Callable[[Published], bool], timeout_s: float
    ) -> Published:
        """The first publish for `uri`, from index `since` on, that `accept`s; MeasurementError on timeout or exit."""
        deadline = time.perf_counter() + timeout_s
        while True:
            found = next((p for p in self.published.get(uri, [])[since:] if accept(p)), None)
            if found is not None:
                return found
            if self.exit_code is not None:
                raise MeasurementError(f"server exited with status {self.exit_code}; stderr: {self.last_stderr_line()}")
            self.news.clear()
            try:
                await asyncio.wait_for(self.news.wait(), deadline - time.perf_counter())
            except asyncio.TimeoutError:
                seen = self.published.get(uri, [])[since:]
                raise MeasurementError(
                    f"nothing acceptable published within {timeout_s:g} s "
                    f"({len(seen)} publish(es) for the file meanwhile)"
                ) from None

    def count(self, uri: str) -> int:
        return len(self.published.get(uri, []))


CAPABILITIES = types.ClientCapabilities(
    workspace=types.WorkspaceClientCapabilities(
        configuration=True,
        workspace_folders=True,
        did_change_watched_files=types.DidChangeWatchedFilesClientCapabilities(dynamic_registration=True),
    ),
    text_document=types.TextDocumentClientCapabilities(
        synchronization=types.TextDocumentSyncClientCapabilities(did_save=True),
        publish_diagnostics=types.PublishDiagnosticsClientCapabilities(version_support=True, related_information=True),
        hover=types.HoverClientCapabilities(content_format=[types.MarkupKind.Markdown]),
    ),
    window=types.WindowClientCapabilities(work_done_progress=True),
)


async def drain(stream: asyncio.StreamReader | None, log: Path) -> None:
    """Copy the server's stderr to a file, so that a chatty server never blocks on a full pipe."""
    if stream is None:
        return
    with log.open("wb") as out:
        while chunk := await stream.read(1 << 16):
            out.write(chunk)
            out.flush()


class RssSampler(threading.Thread):
    """Maximum RSS of a process, sampled; VmHWM (the kernel's own peak) when Linux provides it."""

    def __init__(self, pid: int, interval_s: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.pid, self.interval_s = pid, interval_s
        self.max_rss = 0
        self.stopped = threading.Event()

    def run(self) -> None:
        process = psutil.Process(self.pid)
        while not self.stopped.wait(self.interval_s):
            try:
                self.max_rss = max(self.max_rss, process.memory_info().rss)
            except psutil.Error:
                return

    def high_water(self) -> int | None:
        try:
            status = Path(f"/proc/{self.pid}/status").read_text()
        except OSError:
            return None
        match = re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE)
        return int(match.group(1)) * 1024 if match else None


# --- the server measurements ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ChartFigures:
    seconds: float  # chartData sent -> its answer received
    hovers_s: list[float]  # latency of each hover answered while chartData was being built
    queued_s: list[float]  # hovers answered after the chart (behind it in the stream), less this client's decode
    note: str


@dataclass
class ServerFigures:
    cold_s: Figure = "not run"
    cold_note: str = ""
    first_save_s: Figure = "not run"
    live_edit_note: str = ""
    saves_s: list[float] | str = "not run"
    save_note: str = ""
    hovers_s: list[float] | str = "not run"
    hover_note: str = ""
    requests_s: dict[str, list[float]] | str = "not run"
    request_note: str = ""
    chart: ChartFigures | str = "not run"
    peak_rss: Figure = "not run"
    rss_note: str = ""


@dataclass
class Session:
    client: BenchClient
    workspace: Workspace
    text: str
    entries: list[Entry]
    incremental: bool
    version: int = 1
    values: dict[int, str] = field(default_factory=dict)  # line -> string value after our edits (incremental sync)
    opened_at: float = 0.0
    figures: ServerFigures = field(default_factory=ServerFigures)


async def guarded(step: Awaitable[T]) -> T | str:
    """Run one measurement; any failure becomes its one-line report (no traceback)."""
    try:
        return await step
    except Exception as error:  # noqa: BLE001 - a benchmark reports every failure and goes on
        return str(error) if isinstance(error, MeasurementError) else f"{type(error).__name__}: {error}"


async def within(request: Awaitable[T], timeout_s: float, what: str) -> T:
    """A request's answer, at most timeout_s; the request is shielded so that a late answer finds its future
    still pending (pygls logs a traceback for an answer to a cancelled one)."""
    try:
        return await asyncio.wait_for(asyncio.shield(request), timeout_s)
    except asyncio.TimeoutError:
        raise MeasurementError(f"no answer to {what} within {timeout_s:g} s") from None


async def start_session(workspace: Workspace, log: Path) -> Session:
    client = BenchClient(log)
    await client.start_io(sys.executable, "-m", "rca_lsp", "serve", "--log-level", "info", cwd=str(REPO_ROOT))
    asyncio.get_running_loop().create_task(drain(client.process.stderr, log))
    folder = types.WorkspaceFolder(uri=workspace.root.as_uri(), name=workspace.root.name)
    result = await within(
        client.initialize_async(
            types.InitializeParams(
                capabilities=CAPABILITIES, root_uri=folder.uri, workspace_folders=[folder], process_id=None
            )
        ),
        60,
        "initialize",
    )
    sync = result.capabilities.text_document_sync
    kind = sync.change if isinstance(sync, types.TextDocumentSyncOptions) else sync
    text = workspace.mapping.read_text()
    return Session(client, workspace, text, parse_entries(text), kind == types.TextDocumentSyncKind.Incremental)


async def measure_cold(session: Session, timeout_s: float) -> float:
    """initialized then didOpen at once, as an editor restoring an open file does; until the first findings."""
    client, uri = session.client, session.workspace.uri
    client.initialized(types.InitializedParams())
    session.opened_at = time.perf_counter()
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(
                uri=uri, language_id="json", version=session.version, text=session.text
            )
        )
    )
    found = await client.wait_published(uri, 0, lambda p: p.findings() > 0, timeout_s)
    first = client.published[uri][0]
    timeline = ", ".join(f"{state} @{at - session.opened_at:.2f}s" for at, state in client.statuses)
    analysed = [at for at, state in client.statuses if state == "analysed" and at <= found.at]
    if analysed:
        timeline += f" (publish {found.at - analysed[-1]:.2f} s after the last 'analysed')"
    in_dumps = {
        (r.location.uri, r.location.range.start.line)
        for d in found.diagnostics
        for r in d.related_information or []
        if r.location.uri != uri
    }
    session.figures.cold_note = (
        f"{client.count(uri)} publish(es), the first @{first.at - session.opened_at:.2f}s "
        f"with {len(first.diagnostics)} diagnostics; findings: {found.findings()} "
        f"(of {len(found.diagnostics)}), with {len(in_dumps)} distinct related locations "
        f"in the dumps; status: {timeline}; "
        f"registrations: {', '.join(client.registrations) or 'none'}"
    )
    return found.at - session.opened_at


def change(session: Session, entry: Entry, new_value: str) -> int:
    """Replace the entry's string value in the open document (didChange); return the new version."""
    assert entry.value is not None
    start, _end, original = entry.value
    old = session.values.get(entry.line, original)
    session.values[entry.line] = new_value
    session.version += 1
    edit: types.TextDocumentContentChangeEvent
    if session.incremental:
        edit = types.TextDocumentContentChangePartial(
            text=new_value,
            range=types.Range(
                start=types.Position(entry.line, start), end=types.Position(entry.line, start + len(old))
            ),
        )
    else:
        lines = session.text.split("\n")
        lines[entry.line] = lines[entry.line][:start] + new_value + lines[entry.line][start + len(old) :]
        session.text = "\n".join(lines)
        edit = types.TextDocumentContentChangeWholeDocument(text=session.text)
    session.client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=session.workspace.uri, version=session.version),
            content_changes=[edit],
        )
    )
    return session.version


@dataclass(frozen=True)
class SaveTiming:
    latency_s: float  # didSave sent -> publish received
    analysed_s: float | None  # didSave sent -> the server's "analysed" status (the publish step comes after it)
    published: Published


async def save_and_wait(session: Session, version: int, timeout_s: float) -> SaveTiming:
    client, uri = session.client, session.workspace.uri
    since, statuses = client.count(uri), len(client.statuses)
    sent = time.perf_counter()
    client.text_document_did_save(types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri)))
    found = await client.wait_published(uri, since, lambda p: p.version == version, timeout_s)
    analysed = [at for at, state in client.statuses[statuses:] if state == "analysed" and at <= found.at]
    return SaveTiming(found.at - sent, analysed[-1] - sent if analysed else None, found)


async def measure_first_save(session: Session, timeout_s: float) -> float:
    """didChange alone first: above LIVE_EDIT_LIMIT the server must not re-analyse until the save."""
    entry, other = pick_edit(session.entries)
    limit, delay = server_constant("LIVE_EDIT_LIMIT"), server_constant("CHANGE_DELAY")
    client, uri = session.client, session.workspace.uri
    since = client.count(uri)
    version = change(session, entry, other)
    await asyncio.sleep(delay + 1.0)
    early = client.published.get(uri, [])[since:]
    expected = "none expected" if len(session.text) > limit else "one expected"
    session.figures.live_edit_note = (
        f"mapping text {len(session.text):,} chars vs LIVE_EDIT_LIMIT {limit:,}: "
        f"{len(early)} publish(es) within {delay + 1.0:.1f} s of a didChange alone "
        f"({expected})"
    )
    timing = await save_and_wait(session, version, timeout_s)
    session.figures.live_edit_note += f"; first save: {split(timing)}"
    return timing.latency_s


SERVER_RUN = re.compile(r"analysed \S+ \(version (\d+)\): \d+ ms \((.*)\)$")


def server_stages(server_log: Path, versions: set[int | None]) -> str:
    """Median time per stage of the server's runs for these document versions, from its `--log-level info` lines."""
    stages: dict[str, list[float]] = {}
    lines = server_log.read_text(errors="replace").splitlines() if server_log.exists() else []
    for line in lines:
        found = SERVER_RUN.search(line)
        if found and int(found.group(1)) in versions:
            for stage in found.group(2).split(", "):
                name, _, ms = stage.rpartition(" ")[0].rpartition(" ")
                stages.setdefault(name, []).append(float(ms))
    if not stages:
        return "no timing lines in the server log"
    return ", ".join(f"{name} {statistics.median(values):.0f} ms" for name, values in stages.items())


def split(timing: SaveTiming) -> str:
    if timing.analysed_s is None:
        return "no 'analysed' status before the publish"
    return (
        f"'analysed' status after {fmt_time(timing.analysed_s)}, "
        f"publish {fmt_time(timing.latency_s - timing.analysed_s)} later"
    )


async def measure_saves(session: Session, saves: int, timeout_s: float) -> list[float]:
    """didChange + didSave right after, alternating the entry's value; until the publish of that version.
    Also checks that the edited line's findings follow the edit (a stale result would not)."""
    entry, other = pick_edit(session.entries)
    assert entry.value is not None
    original = entry.value[2]
    timings: list[SaveTiming] = []
    flagged: dict[str, list[tuple[str, ...]]] = {"original": [], "edited": []}
    current = session.values.get(entry.line, original)
    for _ in range(saves):
        current = original if current == other else other
        version = change(session, entry, current)
        timing = await save_and_wait(session, version, timeout_s)
        timings.append(timing)
        flagged["edited" if current == other else "original"].append(tuple(timing.published.on_line(entry.line)))
    described = "; ".join(f"{state}: {describe_codes(codes)}" for state, codes in flagged.items())
    analysed = [t.analysed_s for t in timings if t.analysed_s is not None]
    gaps = [t.latency_s - t.analysed_s for t in timings if t.analysed_s is not None]
    breakdown = (
        f"median {fmt_time(statistics.median(analysed))} to the 'analysed' status, then "
        f"{fmt_time(statistics.median(gaps))} to the publish"
        if analysed
        else "no 'analysed' statuses"
    )
    stages = server_stages(session.client.server_log, {t.published.version for t in timings})
    session.figures.save_note = (
        f"edit: line {entry.line + 1}, value {original!r} <-> {other!r}; {breakdown}; "
        f"server side, median per stage: {stages}; "
        f"findings on the edited line per state: {described}"
    )
    return [t.latency_s for t in timings]


def describe_codes(observed: list[tuple[str, ...]]) -> str:
    counts: dict[tuple[str, ...], int] = {}
    for codes in observed:
        counts[codes] = counts.get(codes, 0) + 1
    return ", ".join(f"{'+'.join(codes) or 'none'} x{n}" for codes, n in counts.items())


async def measure_hovers(session: Session, count: int, timeout_s: float) -> list[float]:
    entries = session.entries
    picked = [entries[i * len(entries) // count] for i in range(count)] if entries else []
    if not picked:
        raise MeasurementError("no entries to hover")
    latencies, empty = [], 0
    for entry in picked:
        params = types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=session.workspace.uri),
            position=types.Position(entry.line, 3),
        )
        sent = time.perf_counter()
        hover = await within(session.client.text_document_hover_async(params), timeout_s, "hover")
        latencies.append(time.perf_counter() - sent)
        empty += hover is None
    session.figures.hover_note = (
        f"{count - empty}/{count} with content; first {latencies[0] * 1000:.1f} ms, max {max(latencies) * 1000:.1f} ms"
    )
    return latencies


async def measure_requests(session: Session, count: int, timeout_s: float) -> dict[str, list[float]]:
    """Completion in key and in value position on --hovers entries spread over the file, and documentSymbol
    (the first, then cached, as an editor asks again after a scroll)."""
    uri = types.TextDocumentIdentifier(uri=session.workspace.uri)
    entries = [e for e in session.entries if e.value is not None]
    picked = [entries[i * len(entries) // count] for i in range(count)] if entries else []
    if not picked:
        raise MeasurementError("no entries to complete")
    timings: dict[str, list[float]] = {"completion (key)": [], "completion (value)": [], "documentSymbol": []}
    empty = 0
    for entry in picked:
        for kind, column in (("completion (key)", 3), ("completion (value)", entry.value[0] + 2)):  # type: ignore[index]
            sent = time.perf_counter()
            answer = await within(
                session.client.text_document_completion_async(
                    types.CompletionParams(text_document=uri, position=types.Position(entry.line, column))
                ),
                timeout_s,
                kind,
            )
            timings[kind].append(time.perf_counter() - sent)
            empty += not (answer and answer.items)
    for _ in range(3):
        sent = time.perf_counter()
        await within(
            session.client.text_document_document_symbol_async(types.DocumentSymbolParams(text_document=uri)),
            timeout_s,
            "documentSymbol",
        )
        timings["documentSymbol"].append(time.perf_counter() - sent)
    session.figures.request_note = (
        f"{2 * count - empty}/{2 * count} completions with items; documentSymbol "
        + ", ".join(f"{t * 1000:.0f} ms" for t in timings["documentSymbol"])
    )
    return timings


async def measure_chart(session: Session, timeout_s: float) -> ChartFigures:
    """chartData of the latest analysis (never charted before), and hovers one after another while it is pending:
    each hover's latency is how long the server's event loop kept a request waiting. A hover answered after the
    chart's answer also waited for this client to read and decode that answer (megabytes of JSON, on this side):
    the decode is timed here again on the answer's JSON and taken off its latency."""
    client, uri = session.client, session.workspace.uri
    entries = session.entries
    if not entries:
        raise MeasurementError("no entries to hover")
    sent = time.perf_counter()
    request = asyncio.ensure_future(
        client.workspace_execute_command_async(types.ExecuteCommandParams(command=CHART_DATA, arguments=[uri]))
    )
    answered: list[float] = []
    request.add_done_callback(lambda _: answered.append(time.perf_counter()))
    hovers: list[tuple[float, float]] = []  # (latency, when answered)
    while not request.done() and time.perf_counter() - sent < timeout_s:
        entry = entries[len(hovers) * 7919 % len(entries)]
        params = types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(entry.line, 3)
        )
        hovered = time.perf_counter()
        await within(client.text_document_hover_async(params), timeout_s, "hover during chartData")
        hovers.append((time.perf_counter() - hovered, time.perf_counter()))
        await asyncio.sleep(0.01)
    result = await within(request, max(timeout_s - (time.perf_counter() - sent), 1.0), CHART_DATA)
    if not isinstance(result, dict) or "calls" not in result:
        raise MeasurementError(f"{CHART_DATA} answered {str(result)[:200]}")
    body = json.dumps(result)
    decoding = time.perf_counter()
    json.loads(body, object_hook=lambda value: value)  # as pygls decodes a message: a hook call per object
    decode_s = time.perf_counter() - decoding
    before = [latency for latency, at in hovers if at < answered[0]]
    after = [max(latency - decode_s, 0.0) for latency, at in hovers if at >= answered[0]]
    modules = sum(len(call["modules"]["train_key"]) for call in result["calls"])
    note = (
        f"{modules:,} modules in {len(result['calls'])} calls, {len(body) / 2**20:.1f} MiB of JSON; {len(hovers)} "
        f"hovers sent meanwhile, {len(before)} answered before the chart"
        + (
            f", {len(after)} after it: {', '.join(f'{x * 1000:.0f} ms' for x in after)} once this client's decode "
            f"of the chart ({decode_s * 1000:.0f} ms) is taken off"
            if after
            else ""
        )
        + f"; server: {server_chart_line(session.client.server_log)}"
    )
    return ChartFigures(answered[0] - sent, before, after, note)


CHART_LINE = re.compile(r"chart built in (\d+) ms, (\d+) bytes \(fork (\d+) ms\)")


def server_chart_line(server_log: Path) -> str:
    """The server's own account of its last chart (logged at --log-level info), if it gives one."""
    lines = server_log.read_text(errors="replace").splitlines() if server_log.exists() else []
    found = [match for line in lines if (match := CHART_LINE.search(line))]
    if not found:
        return "no chart timing in its log"
    built, _size, fork = found[-1].groups()
    return f"built in a child in {built} ms, the fork {fork} ms"


async def stop_session(client: BenchClient) -> None:
    try:
        if client.exit_code is None:
            await within(client.shutdown_async(None), 30, "shutdown")
            client.exit(None)
            await within(client.process.wait(), 10, "exit")
    except (MeasurementError, RuntimeError) as error:
        print(f"server shutdown: {error}; killing pid {client.process.pid}", flush=True)
        client.process.kill()
    await client.stop()


async def run_server(workspace: Workspace, logs: Path, args: argparse.Namespace) -> ServerFigures:
    started = await guarded(start_session(workspace, logs / "server.stderr.log"))
    if isinstance(started, str):
        return ServerFigures(cold_s=started)
    session, figures = started, started.figures
    sampler = RssSampler(session.client.process.pid)
    sampler.start()
    try:
        figures.cold_s = await guarded(measure_cold(session, args.timeout))
        figures.first_save_s = await guarded(measure_first_save(session, args.step_timeout))
        figures.saves_s = await guarded(measure_saves(session, args.saves, args.step_timeout))
        figures.hovers_s = await guarded(measure_hovers(session, args.hovers, args.step_timeout))
        figures.requests_s = await guarded(measure_requests(session, args.hovers, args.step_timeout))
        figures.chart = await guarded(measure_chart(session, args.timeout))
    finally:
        high_water = sampler.high_water()
        sampler.stopped.set()
        figures.peak_rss = float(high_water or sampler.max_rss) or "no RSS sample"
        figures.rss_note = (
            f"VmHWM {mib(high_water)}" if high_water else "VmHWM n/a"
        ) + f", sampled max {mib(sampler.max_rss)}"
        await guarded(stop_session(session.client))
    return figures


# --- the report ------------------------------------------------------------------------------------------------------
def seconds(value: Figure | Cost, field_name: str = "wall_s") -> Figure:
    return getattr(value, field_name) if isinstance(value, Cost) else value


def quantile(values: list[float] | str, q: float) -> Figure:
    if isinstance(values, str):
        return values
    if len(values) < 2:
        return values[0] if values else "no samples"
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]


def fmt_time(value: Figure) -> str:
    if isinstance(value, str):
        return "n/a"
    return f"{value * 1000:.1f} ms" if value < 1 else f"{value:.2f} s"


def ratio(numerator: Figure, denominator: Figure) -> Figure:
    if isinstance(numerator, str) or isinstance(denominator, str) or not denominator:
        return "n/a"
    return numerator / denominator


def verdict(value: Figure, limit: float, unit: str = "") -> str:
    if isinstance(value, str):
        return "n/a"
    shown = f"{limit * 1000:.0f} ms" if unit == "ms" else f"{limit} s" if unit == "s" else f"{limit}x"
    return f"<= {shown}: {'ok' if value <= limit else 'OVER'}"


def report(refs: References, figures: ServerFigures, workspace: Workspace, saves: int, hovers: int) -> None:
    cold_ratio = ratio(figures.cold_s, refs.cli_answer)
    floor_rss = refs.floor.peak_rss if isinstance(refs.floor, Cost) else refs.floor
    rss = figures.peak_rss
    save_median = quantile(figures.saves_s, 0.5)
    rows = [
        ("cold: didOpen -> first findings", fmt_time(figures.cold_s), ""),
        ("cold: CLI analyze, to its answer", fmt_time(refs.cli_answer), ""),
        ("cold: CLI analyze, to its exit", fmt_time(seconds(refs.cli)), ""),
        ("cold: CLI analysis only (no outputs)", fmt_time(seconds(refs.analysis_only)), ""),
        ("  server cold / CLI answer", fmt_ratio(cold_ratio), verdict(cold_ratio, TARGET_COLD_RATIO)),
        ("  server cold / CLI exit", fmt_ratio(ratio(figures.cold_s, seconds(refs.cli))), ""),
        ("  server cold / CLI analysis only", fmt_ratio(ratio(figures.cold_s, seconds(refs.analysis_only))), ""),
        ("didSave -> publish, first save", fmt_time(figures.first_save_s), ""),
        (f"didSave -> publish, median of {saves}", fmt_time(save_median), verdict(save_median, TARGET_SAVE_S, "s")),
        (f"  median / {TARGET_SAVE_S * 1000:.0f} ms target", fmt_ratio(ratio(save_median, TARGET_SAVE_S)), "<= 1.0x"),
        (f"didSave -> publish, p90 of {saves}", fmt_time(quantile(figures.saves_s, 0.9)), ""),
        (
            f"hover, median of {hovers}",
            fmt_time(quantile(figures.hovers_s, 0.5)),
            verdict(quantile(figures.hovers_s, 0.5), TARGET_HOVER_S, "ms"),
        ),
        (
            f"hover, p90 of {hovers}",
            fmt_time(quantile(figures.hovers_s, 0.9)),
            verdict(quantile(figures.hovers_s, 0.9), TARGET_HOVER_S, "ms"),
        ),
        *request_rows(figures.requests_s),
        *chart_rows(figures.chart, quantile(figures.hovers_s, 0.5)),
        ("server peak RSS", mib(rss) if not isinstance(rss, str) else "n/a", ""),
        ("parse floor peak RSS", mib(floor_rss) if not isinstance(floor_rss, str) else "n/a", ""),
        ("  server / floor RSS", fmt_ratio(ratio(rss, floor_rss)), "(analyze's target: <= 1.3x)"),
    ]
    print(
        f"\nworkspace {workspace.root}: {workspace.entries:,} mapping entries, {mib(workspace.mapping.stat().st_size)}"
    )
    print(f"\n{'figure':<40}{'measured':>12}   target")
    for name, value, target in rows:
        print(f"{name:<40}{value:>12}   {target}")
    print()
    notes = [
        ("cold", figures.cold_note),
        ("live edit", figures.live_edit_note),
        ("saves", figures.save_note),
        ("hovers", figures.hover_note),
        ("requests", figures.request_note),
        ("chartData", figures.chart.note if isinstance(figures.chart, ChartFigures) else ""),
        ("RSS", figures.rss_note),
    ]
    for name, note in notes:
        if note:
            print(f"{name}: {note}")
    failures = [
        ("CLI analyze", refs.cli),
        ("CLI analysis only", refs.analysis_only),
        ("parse floor", refs.floor),
        ("cold didOpen", figures.cold_s),
        ("first save", figures.first_save_s),
        ("saves", figures.saves_s),
        ("hovers", figures.hovers_s),
        ("requests", figures.requests_s),
        ("chartData", figures.chart if isinstance(figures.chart, str) else None),
        ("CLI answer", refs.cli_answer),
        ("peak RSS", figures.peak_rss),
    ]
    for name, outcome in failures:
        if isinstance(outcome, str):
            print(f"{name}: failed: {outcome.splitlines()[0]}")


def request_rows(requests: dict[str, list[float]] | str) -> list[tuple[str, str, str]]:
    """Median latency of each request kind, against the hover target (an editor waits on each)."""
    if isinstance(requests, str):
        return [("completion, documentSymbol", "n/a", "")]
    return [
        (
            f"{kind}, median of {len(values)}",
            fmt_time(quantile(values, 0.5)),
            verdict(quantile(values, 0.5), TARGET_HOVER_S, "ms"),
        )
        for kind, values in requests.items()
    ]


def chart_rows(chart: ChartFigures | str, hover_median: Figure) -> list[tuple[str, str, str]]:
    """chartData's time, and the longest a hover waited while it was built (the target: never blocked), against the
    hover median; and a hover that came after the chart's answer in the stream, less this client's decode of it."""
    if isinstance(chart, str):
        return [("chartData", "n/a", "")]
    worst = max(chart.hovers_s) if chart.hovers_s else "no hover answered meanwhile"
    queued = max(chart.queued_s) if chart.queued_s else "none"
    return [
        ("chartData: sent -> answered", fmt_time(chart.seconds), ""),
        (f"  hovers while built: median of {len(chart.hovers_s)}", fmt_time(quantile(chart.hovers_s, 0.5)), ""),
        ("  hovers while built: longest", fmt_time(worst), verdict(worst, TARGET_HOVER_S, "ms")),
        ("  longest / hover median without chart", fmt_ratio(ratio(worst, hover_median)), ""),
        ("  hover queued behind the answer", fmt_time(queued), "(its transfer; this client's decode taken off)"),
    ]


def fmt_ratio(value: Figure) -> str:
    return "n/a" if isinstance(value, str) else f"{value:.2f}x"


def main(argv: list[str]) -> int:
    parser = benchmark_parser(__doc__, "dataset written by make_synthetic.py (generated with defaults if missing)")
    parser.add_argument(
        "--set",
        choices=sorted(DATA_SETS),
        default="large",
        help="which synthetic set (large: one rank, 4 calls; tp8: 8 train ranks; decode: 256 decode "
        "steps); --data-dir defaults to benchmarks/data/<set>",
    )
    parser.add_argument("--entries", type=int, default=60_000, help="mapping entries in the workspace (60000)")
    parser.add_argument("--saves", type=int, default=15, help="timed didSave round trips (15)")
    parser.add_argument("--hovers", type=int, default=50, help="hover requests (50)")
    parser.add_argument(
        "--timeout", type=float, default=900.0, help="seconds for a cold CLI run or the server's first findings (900)"
    )
    parser.add_argument(
        "--step-timeout", type=float, default=120.0, help="seconds for one save or hover round trip (120)"
    )
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="rca-bench-server-"))
    try:
        dataset = DATA_SETS[args.set]
        data_dir = args.data_dir if args.data_dir != DEFAULT_DATA_DIR else dataset.default_dir
        workspace, paths, logs = prepare(data_dir.resolve(), work, args.entries, dataset)
    except Exception as error:  # noqa: BLE001 - one line, no traceback
        print(f"setup failed: {type(error).__name__}: {error}", file=sys.stderr)
        shutil.rmtree(work, ignore_errors=True)
        return 1
    try:
        refs = run_references(paths, work, logs, args.timeout)
        figures = asyncio.run(run_server(workspace, logs, args))
        report(refs, figures, workspace, args.saves, args.hovers)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def prepare(data_dir: Path, work: Path, entries: int, spec: DataSet) -> tuple[Workspace, DatasetPaths, Path]:
    """The data set (generated if missing), the workspace, the three CLI inputs (page cache warm), the log folder."""
    dataset = ensure_dataset(data_dir, spec)
    logs = data_dir / "bench_server"
    logs.mkdir(exist_ok=True)
    (work / "ws").mkdir()
    workspace = make_workspace(work / "ws", data_dir, dataset.mapping_key, entries)
    paths = DatasetPaths(dataset.train_dump, dataset.rollout_dump, workspace.mapping, dataset.train_ranks)
    warm_caches(paths)
    return workspace, paths, logs


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
