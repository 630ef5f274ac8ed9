"""msprobe dump.json loading into a compact per-module index, with a cache keyed by (path, size, mtime)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Iterable, Mapping, Sequence, Union

import msgspec

from rca_lsp.base.cached import cached_property
from rca_lsp.base.errors import InputError
from rca_lsp.base.gcpause import paused_gc
from rca_lsp.base.inputfile import read_regular_file
from rca_lsp.base.jsonload import (
    first_invalid_utf8,
    invalid_utf8_error,
    loads_lenient,
    nesting_reported,
    quote_literals,
)
from rca_lsp.dumps.branches import BranchOutputs, branch_outputs
from rca_lsp.dumps.columns import EntryColumns, entry_columns
from rca_lsp.dumps.keylines import find_lines
from rca_lsp.model.keys import split_module_key
from rca_lsp.model.stats import TensorStats, is_integer_dtype, leading_size

_EMPTY: Mapping[str, "TensorStats"] = MappingProxyType({})


# Every JSON value fits: objects decode as TensorStats (tensor or not), and so do the items of argument lists;
# lists nested deeper stay plain (rare: first_tensor converts their dicts).
_Item = Union[TensorStats, list[Any], int, float, str, bool, None]
_Node = Union[list[_Item], TensorStats, int, float, str, bool, None]
_NodeMap = Union[dict[str, _Node], list[Any], int, float, str, bool, None]


class _RawEntry(msgspec.Struct, gc=False):
    input_args: _Node = None
    input_kwargs: _NodeMap = None
    output: _Node = None
    parameters: _NodeMap = None


RawValue = Union[_RawEntry, list[Any], int, float, str, bool, None]  # one key's value under "data", decoded


class _RawDump(msgspec.Struct, gc=False):
    data: dict[str, RawValue]
    task: Any = None
    level: Any = None
    framework: Any = None


_DUMP_DECODER = msgspec.json.Decoder(_RawDump)
_NOT_A_DUMP = 'not an msprobe dump: expected an object with a "data" object of module entries'


class Disagreement(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """Copies of one slot that should be the same tensor but are not: a replicated tensor on several ranks, or a
    parameter across the calls of one module (weights changed mid-generation)."""

    slot: str  # output.0 | input_args.0 | input_kwargs.<name> | parameters.<name>
    across: str  # "ranks" | "calls"
    reference: int  # the rank (or call) the others are compared with
    members: tuple[int, ...]  # the ranks (or calls) whose copy differs from the reference's
    rel_err: float  # the largest relative difference of a statistic

    def describe(self) -> str:
        others = ", ".join(map(str, self.members))
        noun = "rank" if self.across == "ranks" else "call"
        what = (
            "a tensor that should be identical on these ranks (replicas)"
            if self.across == "ranks"
            else "a parameter that should be the same in every call (did the weights change mid-generation?)"
        )
        return f"{slot_label(self.slot)}: {noun}s {self.reference} and {others} disagree (by {self.rel_err:.3g} relative) on {what}"


def slot_label(slot: str) -> str:
    """An entry slot as the comparisons name their targets (output.0, input_args.0, parameters.weight, ...)."""
    return {"input": "input_args.0", "output": "output.0"}.get(slot, slot)


class ModuleEntry(msgspec.Struct, frozen=True, gc=False):
    """One forward call of one module, as the analysis reads it (a Struct: built ~10^5 times per dump, in C)."""

    key: str
    position: int  # index among the dump's forward module keys, in dump (completion) order
    path: str
    class_name: str
    call_index: int
    input: TensorStats | None  # first positional tensor, else the hidden_states kwarg
    input_source: str
    kwargs: Mapping[str, TensorStats]
    output: TensorStats | None  # first tensor of the output
    parameters: Mapping[str, TensorStats]
    # The residual stream of modules that take and return it separately (vLLM's fused-residual RMSNorm:
    # (x, residual) -> (norm(x + residual), x + residual); its decoder layer: (h, residual) -> (mlp_out, residual)):
    # the float tensor of the primary input's shape right after it, and the output's second tensor of its shape.
    stream_input: TensorStats | None = None
    stream_output: TensorStats | None = None
    disagreements: tuple[Disagreement, ...] = ()
    # Set by the rank merge on the experts of expert-parallel ranks that read their own batches: every expert got
    # routed tokens of every rank's batch, so its activations (left out) are not those of a run of one batch; the
    # parameters are the expert's own and still compare.
    other_batches: bool = False


class ParallelInfo(msgspec.Struct, gc=False):
    """How a logical dump was merged from the ranks of a parallel run (see dumps/ranks)."""

    files: tuple[str, ...]  # rank order
    ranks: tuple[int, ...]
    layout: str  # e.g. "tp=2, pp=1, ep=1, dp=1 (inferred)"
    sequence_parallel: bool
    notes: list[str]  # what was decided and what could not be, for the report
    merges: dict[str, str]  # logical key -> how its slots were merged, for keys with a sharded or disagreeing slot
    origins: dict[str, tuple[int, str]]  # logical key -> (file index, key in that file), when not (0, same key)
    dropped: dict[str, str]  # keys left out of the logical dump -> why (e.g. a rank lacks them)
    # file index -> the file indexes whose copies of its keys were merged (its tensor-parallel peers in the analysed
    # data-parallel group, itself included; pipeline stages and other data-parallel groups hold other tensors)
    peers: dict[int, tuple[int, ...]] = {}
    # logical keys whose merged ranks' copies differ in a slot that was not merged as shards (replicas differing
    # within noise or disagreeing, expert-parallel partial results): there a rank's own copy is not the merged
    # entry's; elsewhere every rank's copy of a replicated slot is the merged entry's (what the chart's per-rank
    # series reads without reading the rank files again)
    varied: frozenset[str] = frozenset()
    # file indexes of each data-parallel group's ranks (rank order of the groups; within one, its first stage's
    # ranks first, so a group's first file holds the model's input), and which group was analysed
    data_groups: tuple[tuple[int, ...], ...] = ()
    analysed_group: int = 0

    @property
    def rank_count(self) -> int:
        """The ranks merged (steps joined each hold them all: `files` then has one per rank and step)."""
        return len(set(self.ranks))


class JoinedSteps(msgspec.Struct, gc=False):
    """How a logical dump was joined from several steps of one dump directory, as successive calls (stepjoin).
    Steps of several ranks each were merged first: the rank files and the keys' names in them are the dump's
    ParallelInfo's."""

    steps: tuple[int, ...]
    files: tuple[str, ...]  # one per step, in step order: its dump file, or its folder when its ranks were merged
    origins: dict[str, tuple[int, str]]  # logical key -> (index into steps, key in that step's dump)


@dataclass
class Dump:
    path: str
    task: str | None
    level: str | None
    framework: str | None
    keys: list[str]
    entries: dict[str, ModuleEntry]
    skipped_keys: int  # API-level, backward and parameters_grad keys
    parallel: ParallelInfo | None = None  # set when merged from several ranks
    null_keys: frozenset[str] = frozenset()  # forward keys whose entry is null: no data, so not in `entries`
    joined_steps: JoinedSteps | None = None  # set when joined from several steps
    _line_cache: dict[str, tuple[str, int] | None] = field(default_factory=dict, repr=False)
    # entries read back from the rank files on demand (rankview), by logical key: a hover asks again and again
    rank_entry_cache: dict[str, Any] = field(default_factory=dict, repr=False)
    # the columns the child that loaded this dump gathers meanwhile (forkload): None if it could not
    received_columns: Callable[[Sequence[ModuleEntry]], EntryColumns | None] | None = field(default=None, repr=False)

    @cached_property
    def ordered_entries(self) -> list[ModuleEntry]:
        """The entries in dump order, for passes over all of them: looking each key up again costs several times a
        pass (10^5 keys scattered through memory)."""
        return list(map(self.entries.__getitem__, self.keys))

    @cached_property
    def columns(self) -> EntryColumns:
        """The entries' statistics and forms as columns (dumps.columns), gathered once for every comparison."""
        received = self.received_columns(self.ordered_entries) if self.received_columns is not None else None
        self.received_columns = None
        return received if received is not None else entry_columns(self.ordered_entries)

    @cached_property
    def _calls(self) -> dict[str, list[str]]:
        """`Module.<path>.<Class>.forward` -> its call keys in call order."""
        calls: dict[str, list[str]] = {}
        last_call: dict[str, int] = {}  # each module's latest call index so far: dump order is call order, mostly
        unordered: set[str] = set()  # the modules with a call found out of order
        found = calls.get
        for key, entry in zip(self.keys, self.ordered_entries):
            head = key.rpartition(".")[0]
            keys = found(head)
            if keys is None:
                calls[head] = [key]
            else:
                keys.append(key)
                if entry.call_index < last_call[head]:
                    unordered.add(head)
            last_call[head] = entry.call_index
        entries = self.entries
        for head in unordered:  # an odd dump's
            calls[head].sort(key=lambda k: entries[k].call_index)
        return calls

    @cached_property
    def branch_outputs(self) -> BranchOutputs:
        """Where a module hands on a branch output, the residual stream carried outside its outputs (SGLang's
        decoder layers return their MLP's output; the residual is added by the next fused-residual norm): see
        dumps.branches."""
        return branch_outputs(self.entries, self.ordered_entries)

    @cached_property
    def earlier_call_before(self) -> list[int]:
        """For each position, the last earlier position whose key belongs to an earlier call (-1 if none): where a
        call's modules start, for scans that must not run into the previous call."""
        calls = [entry.call_index for entry in self.ordered_entries]
        found: list[int] = []
        stack: list[int] = []  # positions with increasing call indexes: the previous smaller element
        for position, call in enumerate(calls):
            while stack and calls[stack[-1]] >= call:
                stack.pop()
            found.append(stack[-1] if stack else -1)
            stack.append(position)
        return found

    @cached_property
    def tokens_per_call(self) -> dict[int, int]:
        """Tokens each call holds: the most any 2-D or 3-D float activation of the call spans (all dims but the
        last: sequence x batch, or tokens). Micro-batches and decode steps are told apart by these."""
        found: dict[int, int] = {}
        for entry in self.ordered_entries:
            for stats in (entry.input, entry.output):
                if (
                    stats is not None
                    and stats.shape
                    and len(stats.shape) in (2, 3)
                    and not is_integer_dtype(stats.dtype)
                ):
                    size = leading_size(stats)
                    if size >= found.get(entry.call_index, 0):  # a call's first size is kept even when 0
                        found[entry.call_index] = size
        return dict(sorted(found.items()))

    def typical_calls(self) -> int:
        """How many calls most modules have: 1 for one forward, 1 + steps for a decode (a module called several
        times inside one forward, like a shared rotary embedding or per-expert activations, does not count)."""
        counts = Counter(map(len, self._calls.values()))
        return counts.most_common(1)[0][0] if counts else 1

    def calls_of(self, key: str) -> list[str]:
        """The keys a mapping key names: every call for `....forward.*`, else the key itself if present."""
        if key.endswith(".*"):
            return self._calls.get(key[:-2], []) if key[:-2].endswith(".forward") else []
        return [key] if key in self.entries else []

    def file_key(self, key: str) -> tuple[str, str]:
        """The file that holds a logical key and its name there (renamed for pipeline stages, experts and calls of
        joined steps)."""
        if self.parallel is not None:  # merged from ranks (of each joined step)
            index, original = self.parallel.origins.get(key, (0, key))
            return self.parallel.files[index], original
        if self.joined_steps is not None:
            index, original = self.joined_steps.origins.get(key, (0, key))
            return self.joined_steps.files[index], original
        return self.path, key

    def line_of(self, key: str) -> int | None:
        """0-based line of `"key":` in its dump file (dumps carry no positions: looked up on demand)."""
        location = self.location_of(key)
        return location[1] if location is not None else None

    def location_of(self, key: str) -> tuple[str, int] | None:
        """(file, 0-based line) of the key's entry."""
        if key not in self._line_cache:
            self.prefetch_lines([key])
        return self._line_cache[key]

    def prefetch_lines(self, keys: Iterable[str]) -> None:
        """Find the lines of many keys in one pass over each file: keys are searched in dump order."""
        wanted = sorted(
            {k for k in keys if k not in self._line_cache},
            key=lambda k: self.entries[k].position if k in self.entries else -1,
        )
        by_file: dict[str, list[tuple[str, str]]] = {}
        for key in wanted:
            file, original = self.file_key(key)
            by_file.setdefault(file, []).append((key, original))
        for file, pairs in by_file.items():
            for (key, _), line in zip(pairs, find_lines(file, [original for _, original in pairs])):
                self._line_cache[key] = (file, line) if line is not None else None


def _tensor(node: Any) -> TensorStats | None:
    """The node as a tensor: decoded ones as they are, plain dicts (inside nested lists) converted."""
    if type(node) is TensorStats:
        return node if node.is_tensor else None
    if type(node) is dict:
        try:
            return _tensor(msgspec.convert(node, TensorStats))
        except msgspec.ValidationError:
            return None
    return None


def first_tensor(value: Any) -> TensorStats | None:
    """The first tensor node in a (possibly nested) argument/output structure."""
    if type(value) is not list:
        return _tensor(value)
    for item in value:
        if type(item) is TensorStats:
            if item.dtype is not None:  # item.is_tensor, inlined: called for every argument of every module
                return item
        elif type(item) is list or type(item) is dict:
            stats = first_tensor(item)
            if stats is not None:
                return stats
    return None


def _primary_input(args: Any) -> TensorStats | None:
    """The first floating-point positional tensor: vLLM passes (positions, hidden_states, ...) to its layers."""
    first = first_tensor(args)
    if first is None or not is_integer_dtype(first.dtype) or type(args) is not list:
        return first
    for item in args[1:]:
        stats = first_tensor(item)
        if stats is not None and not is_integer_dtype(stats.dtype):
            return stats
    return first


def _after_first_float(items: Any) -> TensorStats | None:
    """In a flat list of tensors: the float tensor right after the first float one, if it has the same shape."""
    if type(items) is not list or len(items) < 2 or (len(items) == 2 and items[1] is None):
        return None  # ... and Megatron's (output, None) pairs, the common case
    first: TensorStats | None = None
    for item in items:
        stats = _tensor(item) if type(item) is not list else None
        if stats is None or is_integer_dtype(stats.dtype):
            if first is not None:
                return None
            continue
        if first is None:
            first = stats
        else:
            return stats if stats.shape == first.shape else None
    return None


def _tensor_map(nodes: Any) -> Mapping[str, TensorStats]:
    if type(nodes) is not dict or not nodes:
        return _EMPTY
    # the common case first: every node a decoded tensor (a module's parameters), kept as it is
    found = {name: node for name, node in nodes.items() if type(node) is TensorStats and node.dtype is not None}
    if len(found) < len(nodes):
        found = {name: stats for name, node in nodes.items() if (stats := first_tensor(node)) is not None}
    return found or _EMPTY


def _entry(key: str, position: int, raw: Any) -> ModuleEntry | None:
    parsed = split_module_key(key)
    if parsed is None or parsed.direction != "forward" or type(raw) is not _RawEntry:
        return None
    kwargs = _tensor_map(raw.input_kwargs)
    args, output = raw.input_args, raw.output
    primary = _primary_input(args)
    source = "input_args.0"
    if primary is None and kwargs:
        source, primary = next(
            ((f"input_kwargs.{n}", kwargs[n]) for n in ("hidden_states", "x", "input") if n in kwargs),
            (f"input_kwargs.{next(iter(kwargs))}", next(iter(kwargs.values()))),
        )
    return ModuleEntry(
        key=key,
        position=position,
        path=parsed.path,
        class_name=parsed.class_name,
        call_index=parsed.call_index,
        input=primary,
        input_source=source,
        kwargs=kwargs,
        output=first_tensor(output),
        parameters=_tensor_map(raw.parameters),
        stream_input=_after_first_float(args) if source == "input_args.0" else None,
        stream_output=_after_first_float(output),
    )


def raw_entry(key: str, value: dict[str, Any]) -> ModuleEntry | None:
    """One entry from its parsed JSON object (a rank file's entry read on demand)."""
    try:
        raw = msgspec.convert(value, _RawEntry)
    except msgspec.ValidationError:
        return None
    return _entry(key, 0, raw)


def entries_with_slots(path: str, keys: Iterable[str]) -> dict[str, tuple[ModuleEntry, dict[str, Any]]]:
    """Some keys' entries of one dump file, each with its decoded slots (input_args, input_kwargs, output,
    parameters) in which the entry's statistics are the very nodes: what names its tensors as msprobe does."""
    data = read_regular_file(path, "dump")
    with nesting_reported(data, path), paused_gc():
        document = decode_dump(data, path)
        if type(document) is not _RawDump:
            try:
                document = msgspec.convert(document, _RawDump)
            except msgspec.ValidationError:
                raise InputError(path, _NOT_A_DUMP) from None
        found: dict[str, tuple[ModuleEntry, dict[str, Any]]] = {}
        for key in keys:
            raw = document.data.get(key)
            entry = _entry(key, 0, raw)
            if entry is not None:
                found[key] = (entry, {name: getattr(raw, name) for name in _RawEntry.__struct_fields__})
        return found


def build_dump(path: str, document: Any) -> Dump:
    """The index of a decoded dump (or of any parsed JSON document, checked to be one)."""
    if type(document) is not _RawDump:
        try:
            document = msgspec.convert(document, _RawDump)
        except msgspec.ValidationError:
            raise InputError(path, _NOT_A_DUMP) from None
    return index_entries(path, document.data, document.task, document.level, document.framework)


def index_entries(path: str, data: Mapping[str, RawValue | ModuleEntry], task: Any, level: Any, framework: Any) -> Dump:
    """The index of a dump's decoded "data" values; a value may be the ModuleEntry another dump's identical text
    gave (a rank's replica of the first rank's entry, see rankload): it is taken as it is, at this dump's position."""
    keys: list[str] = []
    entries: dict[str, ModuleEntry] = {}
    skipped = 0
    null_keys = []
    for key, raw in data.items():
        if type(raw) is ModuleEntry:
            key = raw.key  # the same text, one object: key lists and lookups across ranks compare by identity
            entry: ModuleEntry | None = (
                raw if raw.position == len(keys) else msgspec.structs.replace(raw, position=len(keys))
            )
        else:
            entry = _entry(key, len(keys), raw)
        if entry is None:
            skipped += 1
            if raw is None and (parsed := split_module_key(key)) is not None and parsed.direction == "forward":
                null_keys.append(key)
            continue
        keys.append(key)
        entries[key] = entry
    if not keys:
        raise InputError(path, "no Module./Cell. forward entries in this dump (was it made at level L0 or mix?)")
    return Dump(path, task, level, framework, keys, entries, skipped, null_keys=frozenset(null_keys))


def decode_dump(data: bytes, path: str) -> Any:
    """The dump's JSON decoded into its entries' statistics; NaN/Infinity literals accepted."""
    # msgspec passes over the name of a field it does not read unchecked: a `"Ma\xffx"` lost that statistic unsaid
    bad = first_invalid_utf8(data)
    if bad is not None:
        raise invalid_utf8_error(data, path, bad)
    try:
        return _decoded(data, path)
    except msgspec.DecodeError:
        pass
    quoted = quote_literals(data)
    if quoted is not data:
        try:
            return _decoded(quoted, path)
        except msgspec.DecodeError:
            pass
    return loads_lenient(data, path)  # raises with the line and column of the problem


def _decoded(data: bytes, path: str) -> _RawDump:
    try:
        return _DUMP_DECODER.decode(data)
    except msgspec.ValidationError as error:  # the schema takes any JSON below "data": the file is not a dump,
        if str(error).startswith("Number out of range"):  # unless a number is beyond a double (1e400)
            raise  # a DecodeError: located by loads_lenient
        raise InputError(path, _NOT_A_DUMP) from None


def load_dump_file(path: Path) -> Dump:
    data = read_regular_file(path, "dump")
    with nesting_reported(data, str(path)), paused_gc():  # nested ~1000 levels deep: decoding or indexing recursed
        return build_dump(str(path), decode_dump(data, str(path)))


def combined_dump(
    label: str,
    parts: Sequence[Dump],
    keys: list[str],
    entries: dict[str, ModuleEntry],
    parallel: ParallelInfo | None,
    null_keys: frozenset[str],
    joined_steps: JoinedSteps | None = None,
) -> Dump:
    """One logical dump made of several (ranks merged, steps joined): the first part's task, level and framework."""
    first = parts[0]
    skipped = sum(d.skipped_keys for d in parts)
    return Dump(
        label, first.task, first.level, first.framework, keys, entries, skipped, parallel, null_keys, joined_steps
    )
