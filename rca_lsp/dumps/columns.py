"""A dump's statistics as columns: every entry's output, primary input and parameters in float64 arrays, with what
decides whether a mapped pair is compared target by target (its form), as integer codes.

The comparison judges 10^5 pairs of entries; reading their statistics out of the objects pair by pair cost as much
as judging them. Gathered here once per dump, in dump order, a pair's targets are rows of these arrays
(`compare.groupform.plain_rows` selects them, `compare.targettable` judges them), and the objects are read again
only for the few rows the arrays cannot judge (a side missing, a statistic null or not finite)."""

from __future__ import annotations

from itertools import chain, repeat
from operator import attrgetter, is_not, methodcaller
from typing import Mapping, NamedTuple, Protocol, Sequence

import msgspec
import numpy as np

from rca_lsp.model.stats import TensorStats

_ABSENT = TensorStats()  # a missing slot: every statistic, the numel and the dtype None
_NUMBERS = attrgetter("max", "min", "mean", "norm", "numel")
_ROW = np.dtype([(name, np.float64) for name in ("max", "min", "mean", "norm", "numel")])
_DTYPE = attrgetter("dtype")
_OUTPUT, _INPUT, _PARAMETERS = attrgetter("output"), attrgetter("input"), attrgetter("parameters")
_CLASS, _KWARGS, _STREAM_OUTPUT = attrgetter("class_name"), attrgetter("kwargs"), attrgetter("stream_output")
_DISAGREEMENTS, _OTHER_BATCHES = attrgetter("disagreements"), attrgetter("other_batches")
_VALUES = methodcaller("values")


class EntryFields(Protocol):
    """What a dump entry (dumps.dump.ModuleEntry) gives the columns."""

    @property
    def output(self) -> TensorStats | None: ...
    @property
    def input(self) -> TensorStats | None: ...
    @property
    def parameters(self) -> Mapping[str, TensorStats]: ...
    @property
    def kwargs(self) -> Mapping[str, TensorStats]: ...
    @property
    def class_name(self) -> str: ...
    @property
    def stream_output(self) -> TensorStats | None: ...
    @property
    def disagreements(self) -> tuple[object, ...]: ...
    @property
    def other_batches(self) -> bool: ...


class StatColumns(NamedTuple):
    """Statistics in rows: `objects[i]` (None for a missing slot) gathered into arrays."""

    objects: list[TensorStats | None]
    values: np.ndarray  # (n, 4) Max, Min, Mean, Norm; NaN where the slot or the statistic is missing, or NaN
    numels: np.ndarray  # NaN where the shape is unknown or the slot missing
    dtype_codes: np.ndarray  # index into dtypes
    dtypes: list[str | None]  # each dtype met once (None: the slot missing, or no dtype)


def stat_columns(objects: list[TensorStats | None]) -> StatColumns:
    """The statistics of `objects` as columns: the numbers in one pass over the objects (in C), the dtypes in
    another."""
    present = [s if s is not None else _ABSENT for s in objects]
    count = len(present)
    try:  # five numbers a row in one pass, in C (a pass per statistic costs a touch of every object each)
        rows = np.fromiter(map(_NUMBERS, present), dtype=_ROW, count=count).view(np.float64).reshape(count, 5)
    except TypeError:  # a statistic msprobe wrote as null, or a numel unknown: NaN, as np.array makes None
        rows = np.array(list(map(_NUMBERS, present)), dtype=np.float64).reshape(count, 5)
    values, numels = rows[:, :4], rows[:, 4]  # views: read by fancy indexing, copied only when sent
    dtype_list = list(map(_DTYPE, present))
    dtypes = list(dict.fromkeys(dtype_list))
    code_of = {name: code for code, name in enumerate(dtypes)}.__getitem__
    codes = np.fromiter(map(code_of, dtype_list), dtype=np.int32, count=count)
    return StatColumns(objects, values, numels, codes, dtypes)


def joined(base: StatColumns, extra: StatColumns) -> StatColumns:
    """`base`'s rows, then `extra`'s."""
    dtypes = list(dict.fromkeys(base.dtypes + extra.dtypes))
    code_of = {name: code for code, name in enumerate(dtypes)}
    extra_codes = np.array([code_of[name] for name in extra.dtypes], dtype=np.int32)[extra.dtype_codes]
    return StatColumns(
        base.objects + extra.objects,
        np.concatenate([base.values, extra.values]),
        np.concatenate([base.numels, extra.numels]),
        np.concatenate([base.dtype_codes, extra_codes]),
        dtypes,
    )


class EntryColumns(NamedTuple):
    """A dump's entries in dump order (position i: entry i) and their statistics as rows of `stats`: outputs at
    rows 0..n-1, primary inputs at n..2n-1, then each entry's parameters in its own order (entry i's from row
    2n + parameter_start[i] to 2n + parameter_start[i + 1])."""

    stats: StatColumns
    parameter_start: np.ndarray  # (n + 1,)
    signature: np.ndarray  # (n,) index into signatures: the entry's parameter names in order; -1: none
    signatures: list[tuple[str, ...]]
    class_code: np.ndarray  # (n,) index into classes
    classes: list[str]
    has_stream_output: np.ndarray  # (n,) bool: a residual stream returned apart (dump.ModuleEntry.stream_output)
    odd: np.ndarray  # (n,) bool: copies that disagree, or activations of other batches: never compared as plain
    has_kwargs: np.ndarray  # (n,) bool: tensor kwargs, paired by name (compared one pair at a time)

    @property
    def entry_count(self) -> int:
        return len(self.class_code)


def entry_columns(entries: Sequence[EntryFields]) -> EntryColumns:
    """The columns of `entries` (a dump's, in dump order): a pass over them per column, each in C."""
    count = len(entries)
    parameters = list(map(_PARAMETERS, entries))
    sizes = np.fromiter(map(len, parameters), dtype=np.int64, count=count)
    starts = np.zeros(count + 1, dtype=np.int64)
    np.cumsum(sizes, out=starts[1:])
    names = list(map(tuple, parameters))
    signatures = [n for n in dict.fromkeys(names) if n]
    signature_of = {n: code for code, n in enumerate(signatures)}
    signature_of[()] = -1
    class_names = list(map(_CLASS, entries))
    classes = list(dict.fromkeys(class_names))
    class_of = {name: code for code, name in enumerate(classes)}.__getitem__
    odd = np.fromiter(map(bool, map(_DISAGREEMENTS, entries)), dtype=np.bool_, count=count)
    odd |= np.fromiter(map(_OTHER_BATCHES, entries), dtype=np.bool_, count=count)
    return EntryColumns(
        stats=stat_columns(_stat_objects(entries, parameters)),
        parameter_start=starts,
        signature=np.fromiter(map(signature_of.__getitem__, names), dtype=np.int32, count=count),
        signatures=signatures,
        class_code=np.fromiter(map(class_of, class_names), dtype=np.int32, count=count),
        classes=classes,
        has_stream_output=np.fromiter(
            map(is_not, map(_STREAM_OUTPUT, entries), repeat(None)), dtype=np.bool_, count=count
        ),
        odd=odd,
        has_kwargs=np.fromiter(map(bool, map(_KWARGS, entries)), dtype=np.bool_, count=count),
    )


def _stat_objects(
    entries: Sequence[EntryFields], parameters: list[Mapping[str, TensorStats]]
) -> list[TensorStats | None]:
    """The statistics the columns' rows hold, in their order: outputs, primary inputs, then parameters."""
    objects: list[TensorStats | None] = list(map(_OUTPUT, entries))
    objects += map(_INPUT, entries)
    objects += chain.from_iterable(map(_VALUES, parameters))
    return objects


class _SentColumns(msgspec.Struct, array_like=True, gc=False):
    """EntryColumns as a forked loader sends them (dumps.forkload): the arrays as their bytes, without the objects."""

    entries: int
    values: bytes
    numels: bytes
    dtype_codes: bytes
    dtypes: list[str | None]
    parameter_start: bytes
    signature: bytes
    signatures: list[tuple[str, ...]]
    class_code: bytes
    classes: list[str]
    has_stream_output: bytes
    odd: bytes
    has_kwargs: bytes


# EntryColumns' per-entry arrays and their dtypes (entry_columns'), as sent
_ARRAYS: dict[str, type[np.generic]] = {
    "parameter_start": np.int64,
    "signature": np.int32,
    "class_code": np.int32,
    "has_stream_output": np.bool_,
    "odd": np.bool_,
    "has_kwargs": np.bool_,
}


def packed_columns(columns: EntryColumns) -> bytes:
    """`columns` as bytes for another process (`unpacked_columns`)."""
    stats = columns.stats
    return msgspec.msgpack.encode(
        _SentColumns(
            columns.entry_count,
            stats.values.tobytes(),  # in C order, whatever the view
            stats.numels.tobytes(),
            stats.dtype_codes.tobytes(),
            stats.dtypes,
            signatures=columns.signatures,
            classes=columns.classes,
            **{name: getattr(columns, name).tobytes() for name in _ARRAYS},
        )
    )


def unpacked_columns(data: bytes | bytearray, entries: Sequence[EntryFields]) -> EntryColumns | None:
    """The columns `packed_columns` sent of the dump whose entries (in dump order) are `entries`, the statistics'
    objects read from these; None when `data` is not such columns, of as many entries and statistics."""
    try:
        sent = msgspec.msgpack.decode(data, type=_SentColumns)
        values = np.frombuffer(sent.values, dtype=np.float64)
        arrays: dict[str, np.ndarray] = {
            name: np.frombuffer(getattr(sent, name), dtype=dtype) for name, dtype in _ARRAYS.items()
        }
        numels = np.frombuffer(sent.numels, dtype=np.float64)
        dtype_codes = np.frombuffer(sent.dtype_codes, dtype=np.int32)
    except (msgspec.DecodeError, ValueError):  # not columns, or arrays of a partial item
        return None
    objects = _stat_objects(entries, list(map(_PARAMETERS, entries)))
    rows, count = len(objects), len(entries)
    if (
        sent.entries != count
        or (values.size, numels.size, dtype_codes.size) != (4 * rows, rows, rows)
        or any(array.size != count + (name == "parameter_start") for name, array in arrays.items())
    ):
        return None
    stats = StatColumns(objects, values.reshape(len(objects), 4), numels, dtype_codes, sent.dtypes)
    return EntryColumns(stats=stats, signatures=sent.signatures, classes=sent.classes, **arrays)
