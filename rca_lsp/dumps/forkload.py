"""One dump loaded by a forked child while this process does other work (the CLI: the other dump, the mapping).

Parsing and indexing a dump is CPU-bound; on two cores the second dump costs only its transfer: the child sends
the index as MessagePack, which msgspec writes and reads back in C, into Structs of the same fields that skip the
statistics' normalisation (done in the child), in ~20% of the time a load takes. If the child fails for any
reason, the dump is loaded here instead, so errors read exactly as usual.
The rank files of one logical dump go another way (BackgroundRanks): the child compares the later ranks with the
first and sends only where they differ.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.process
import os
import select
from concurrent.futures import Future
from functools import partial
from pathlib import Path
from threading import Thread
from types import MappingProxyType
from typing import Any, Callable, Iterable, Sequence

import msgspec

from rca_lsp.base.forkpart import Channel, ForkedBytes, can_fork
from rca_lsp.base.gcpause import paused_gc
from rca_lsp.base.inputfile import read_regular_file
from rca_lsp.dumps.columns import EntryColumns, packed_columns, unpacked_columns
from rca_lsp.dumps.dump import Disagreement, Dump, JoinedSteps, ModuleEntry, ParallelInfo, load_dump_file
from rca_lsp.dumps.load import load_source
from rca_lsp.dumps.rankload import Differences, FirstRank, RankTexts, load_rank_files
from rca_lsp.dumps.sources import DumpSource, check_unchanged, signatures
from rca_lsp.model.stats import TensorStats

ColumnsHook = Callable[[Sequence[ModuleEntry]], EntryColumns | None]  # Dump.received_columns


class _SentStats(msgspec.Struct, gc=False):
    """TensorStats as sent: its fields (and wire names) without its __post_init__, which msgspec runs on every
    decode and which normalised these statistics already in the child (half the time of reading the transfer back:
    ~0.7 s for 3x10^5 tensors). Made TensorStats once read (see _as_loaded)."""

    dtype: Any = None
    shape: tuple[Any, ...] | None = None  # a tuple once loaded (its items as they were), read back as one
    max: Any = msgspec.field(default=None, name="Max")
    min: Any = msgspec.field(default=None, name="Min")
    mean: Any = msgspec.field(default=None, name="Mean")
    norm: Any = msgspec.field(default=None, name="Norm")
    numel: int | None = None
    observable: bool = False


class _SentEntry(msgspec.Struct, gc=False):
    """ModuleEntry as sent: its fields, its statistics as _SentStats. Not frozen as ModuleEntry is: a frozen Struct
    refuses the class assignment that makes it one (see _as_loaded)."""

    key: str
    position: int
    path: str
    class_name: str
    call_index: int
    input: _SentStats | None
    input_source: str
    kwargs: dict[str, _SentStats]
    output: _SentStats | None
    parameters: dict[str, _SentStats]
    stream_input: _SentStats | None = None
    stream_output: _SentStats | None = None
    disagreements: tuple[Disagreement, ...] = ()
    other_batches: bool = False


class _Transfer(msgspec.Struct, array_like=True, gc=False):
    path: str
    task: Any
    level: Any
    framework: Any
    skipped_keys: int
    entries: list[ModuleEntry]
    parallel: ParallelInfo | None
    null_keys: list[str]
    joined_steps: JoinedSteps | None


def _plain_mapping(value: Any) -> Any:
    if isinstance(value, MappingProxyType):
        return dict(value)
    raise NotImplementedError(f"cannot send {type(value).__name__}")


_ENCODER = msgspec.msgpack.Encoder(enc_hook=_plain_mapping)


class _Received(_Transfer, array_like=True, gc=False):
    """_Transfer as read back: its entries as _SentEntry (the field keeps its place)."""

    entries: list[_SentEntry]  # type: ignore[assignment]


_DECODER = msgspec.msgpack.Decoder(_Received)


# A dump loaded by a child comes back encoded (MessagePack there, decoded here): about half of what loading it here
# costs. The child pays only when this process has at least that much work of its own meanwhile.
TRANSFER_SHARE = 0.5


def worth_loading_apart(own_bytes: int, child_bytes: int) -> bool:
    """Whether a child loading `child_bytes` of dump files pays, while this process reads `own_bytes` of files itself
    (its dump, the mapping): not when the transfer back would cost more than this process has to do meanwhile."""
    return own_bytes >= TRANSFER_SHARE * child_bytes


def files_bytes(paths: Iterable[Path]) -> int:
    """The files' sizes summed (one that cannot be read counts 0: its load reports why)."""
    total = 0
    for path in paths:
        try:
            total += path.stat().st_size
        except OSError:
            pass
    return total


class BackgroundDump:
    """Starts loading `source` in a child at once; `load(source)` returns it (the loader for DumpCache.get)."""

    def __init__(self, source: DumpSource, threaded: bool = False) -> None:
        """`threaded` for callers with threads (the server): a plain fork (base.forkpart.ForkedBytes), whose child
        takes no lock another thread may hold and writes nowhere this process writes (multiprocessing's child first
        closes sys.stdin, which waits forever for the lock the server's reading thread holds)."""
        self._source = source
        self._signature = signatures(source)
        self._closed = False
        self._forked: ForkedBytes | None = None
        self._child: multiprocessing.process.BaseProcess | None = None
        self._receiver: Channel | None = None
        if threaded:
            loaded: list[Dump] = []  # the child's, for its second piece of work
            self._forked = ForkedBytes(lambda: _packed(source, loaded), lambda: packed_columns(loaded[0].columns))
        else:
            context = multiprocessing.get_context("fork")
            self._receiver = Channel()
            self._child = context.Process(target=_load_and_send, args=(source, self._receiver), daemon=True)
            self._child.start()
            self._receiver.close_writing()

    @property
    def source(self) -> DumpSource:
        return self._source

    @property
    def pid(self) -> int | None:
        """The child's process id (None once it is done with)."""
        return self._forked.pid if self._forked is not None else self._child.pid if self._child is not None else None

    def load(self, source: DumpSource, meanwhile: Callable[[], object] | None = None) -> Dump:
        """The dump. The child then gathers and sends its columns while this process reads the dump back and goes
        on: a threaded caller's child's are read by a thread meanwhile, a child process's when first asked for
        (`Dump.columns`) while this context is open. `meanwhile`: work of this process's to do while the child
        works: now if the child is still loading, else once the dump is read (the child waits for that to go on)."""
        if source != self._source:
            return load_source(source)
        if meanwhile is not None and not self._sending():
            meanwhile()
            meanwhile = None
        try:
            data = self._received()
            if data and meanwhile is not None:
                meanwhile()
            if not data:  # the child failed: load here, which reports the problem
                self.close()
                return load_source(source)
            check_unchanged(source, self._signature)  # DumpCache.get checks only from when it asked
            with paused_gc():
                dump = _unpack(data)
        except BaseException:
            self.close()
            raise
        if self._forked is not None:  # the columns read by a thread, which then ends the child
            forked, self._forked = self._forked, None
            later: Future[bytes | None] = Future()
            Thread(target=_read_later, args=(forked, later), name="rca-columns", daemon=True).start()
            dump.received_columns = _in_this_process(partial(_columns_from, later))
        else:
            dump.received_columns = _in_this_process(self._received_columns)
        return dump

    def _received_columns(self, entries: Sequence[ModuleEntry]) -> EntryColumns | None:
        """The columns the child gathered after sending the dump (None if it failed or this context closed)."""
        if self._receiver is None or self._child is None or self._child.pid is None or self._closed:
            return None
        try:
            data = self._receiver.receive(self._child.pid)
            with paused_gc():
                return unpacked_columns(data, entries) if data else None
        finally:
            self.close()

    def _sending(self) -> bool:
        """Whether the child has begun to send the dump (a look, no wait)."""
        found = self._forked if self._forked is not None else self._receiver
        return found is not None and bool(select.select([found], [], [], 0)[0])

    def _received(self) -> bytes | bytearray | None:
        """What the child sent; None if it failed or is stopped (see Channel)."""
        if self._forked is not None:
            return self._forked.result()
        assert self._receiver is not None and self._child is not None and self._child.pid is not None
        return self._receiver.receive(self._child.pid)

    def close(self) -> None:
        self._closed = True
        if self._receiver is not None:
            self._receiver.close_reading()
        if self._forked is not None:
            self._forked.close()
        if self._child is not None:
            if self._child.exitcode is None:
                self._child.kill()
            self._child.join()

    def __enter__(self) -> "BackgroundDump":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _in_this_process(columns: ColumnsHook) -> ColumnsHook:
    """`columns` for this process only. The child that loaded the dump sends them to this process: a process forked
    from it meanwhile (the chart's, the report's) would wait forever for the thread that reads them here (it has only
    the thread that forked), or take the message from this process's pipe; it gathers its own."""
    owner = os.getpid()

    def here(entries: Sequence[ModuleEntry]) -> EntryColumns | None:
        return columns(entries) if os.getpid() == owner else None

    return here


def _read_later(forked: ForkedBytes, later: Future[bytes | None]) -> None:
    """The child's second message into `later` (None if it sends none: the columns are then gathered here)."""
    try:
        data = forked.later()
    except Exception:  # the pipe failed: as a child that sent nothing
        data = None
    later.set_result(data)


def _columns_from(later: Future[bytes | None], entries: Sequence[ModuleEntry]) -> EntryColumns | None:
    data = later.result()
    return unpacked_columns(data, entries) if data is not None else None


def _packed(source: DumpSource, loaded: list[Dump]) -> bytes:
    """The dump, appended to `loaded` (the child of a threaded caller then gathers its columns)."""
    dump = load_source(source)
    loaded.append(dump)
    with paused_gc():
        return _pack(dump)


def _load_and_send(source: DumpSource, channel: Channel) -> None:
    """The dump, then its columns (gathered while the parent reads the dump back and goes on)."""
    channel.close_reading()  # the parent's end: held here too, a dead parent's pipe would never break (EPIPE)
    try:
        dump = load_source(source)
        with paused_gc():
            channel.send(_pack(dump))
            channel.send(packed_columns(dump.columns))
    except Exception:  # not sent: the parent loads the dump, or gathers the columns, itself
        pass
    finally:
        channel.close_writing()


def _pack(dump: Dump) -> bytes:
    return _ENCODER.encode(
        _Transfer(
            dump.path,
            dump.task,
            dump.level,
            dump.framework,
            dump.skipped_keys,
            list(dump.entries.values()),
            dump.parallel,
            sorted(dump.null_keys),
            dump.joined_steps,
        )
    )


def _unpack(data: bytes | bytearray) -> Dump:
    sent = _DECODER.decode(data)
    entries = {entry.key: entry for entry in _as_loaded(sent.entries)}
    dump = Dump(
        sent.path,
        sent.task,
        sent.level,
        sent.framework,
        list(entries),
        entries,
        sent.skipped_keys,
        sent.parallel,
        frozenset(sent.null_keys),
        sent.joined_steps,
    )
    return dump


def _as_loaded(entries: list[_SentEntry]) -> list[ModuleEntry]:
    """The received entries turned, in place, into the ModuleEntry and TensorStats objects they were: the same
    fields in the same layout (tests/test_forkload.py checks the classes agree), so only their class changes."""
    for entry in entries:
        for stats in (entry.input, entry.output, entry.stream_input, entry.stream_output):
            if stats is not None:
                stats.__class__ = TensorStats  # type: ignore[assignment]
        for stats in entry.kwargs.values():
            stats.__class__ = TensorStats  # type: ignore[assignment]
        for stats in entry.parameters.values():
            stats.__class__ = TensorStats  # type: ignore[assignment]
        entry.__class__ = ModuleEntry  # type: ignore[assignment]
    return entries  # type: ignore[return-value]


def load_files_forked(paths: Sequence[Path]) -> list[Dump]:
    """Several dump files (the ranks of one logical dump), read on both cores (BackgroundRanks). Single-threaded
    callers only."""
    if len(paths) < 2 or not can_fork():
        return load_rank_files(paths)
    with BackgroundRanks(paths) as background:
        return background.load(paths)


class BackgroundRanks:
    """Starts comparing the later rank files with the first (rankload) in a forked child at once; `load(paths)`
    then loads the first here and builds each later rank from the differences the child sends, which are small:
    most entries of a rank are the first rank's. If the child fails, its files are loaded here (same errors).
    Single-threaded callers only."""

    def __init__(self, paths: Sequence[Path]) -> None:
        self._paths = list(paths)
        context = multiprocessing.get_context("fork")
        self._receiver = Channel()
        self._child = context.Process(target=_compare_and_send, args=(self._paths, self._receiver), daemon=True)
        self._child.start()
        self._receiver.close_writing()

    def load(self, paths: Sequence[Path]) -> list[Dump]:
        """The dumps of `paths` (load_rank_files's), read with the child's help when they are its files."""
        if list(paths) != self._paths:
            return load_rank_files(paths)
        try:
            first = FirstRank(load_dump_file(paths[0]), paths[0])
            loaded = [first.dump]
            given_up = False
            assert self._child.pid is not None
            for path in paths[1:]:
                data = None if given_up else self._receiver.receive(self._child.pid)
                given_up = data is None  # the child ended (e.g. a broken file) or is stopped: no more from it
                # nothing sent: loaded here, which reports any problem
                loaded.append(first.peer_from(path, _DIFFERENCES.decode(data) if data else None))
            return loaded
        finally:
            self.close()

    def close(self) -> None:
        self._receiver.close_reading()
        if self._child.exitcode is None:
            self._child.kill()
        self._child.join()

    def __enter__(self) -> "BackgroundRanks":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


_DIFFERENCES = msgspec.msgpack.Decoder(Differences)


def _compare_and_send(paths: list[Path], channel: Channel) -> None:
    """The differences of paths[1:] from paths[0], all computed before any is sent: the parent reads the pipe only
    after its own load, and a send would block on the full pipe meanwhile. An empty message for a file that does
    not scan."""
    channel.close_reading()  # as in _load_and_send: a send to a parent that died must fail, not block
    packed: list[bytes] = []
    try:
        reference = RankTexts(read_regular_file(paths[0], "dump"))
        for path in paths[1:]:
            differences = reference.differences(read_regular_file(path, "dump"))
            packed.append(_ENCODER.encode(differences) if differences is not None else b"")
    except Exception:  # the parent loads what was not sent and reports the problem
        pass
    try:
        for data in packed:
            channel.send(data)
    except OSError:
        pass
    finally:
        channel.close_writing()
