"""msprobe dump.json loading into a compact per-module index, with a cache keyed by (path, size, mtime)."""

from __future__ import annotations

import math
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Iterable, Mapping

from rca_lsp.core.errors import InputError
from rca_lsp.core.gcpause import paused_gc
from rca_lsp.core.jsonload import as_float, loads_lenient
from rca_lsp.core.keys import parse_module_key

_EMPTY: Mapping[str, "TensorStats"] = MappingProxyType({})
_DUMP_GLOBS = ("step*/rank*/dump.json", "step*/proc*/dump.json", "rank*/dump.json", "proc*/dump.json", "*/dump.json")


class TensorStats:
    """Statistics of one tensor as msprobe summarised it (None where it wrote null)."""

    __slots__ = ("dtype", "shape", "max", "min", "mean", "norm", "numel", "observable")

    def __init__(self, dtype: str | None, shape: tuple[int, ...] | None, max: float | None, min: float | None,
                 mean: float | None, norm: float | None) -> None:
        self.dtype = dtype
        self.shape = shape
        self.max = max
        self.min = min
        self.mean = mean
        self.norm = norm
        self.numel = math.prod(shape) if shape is not None else None
        # False for tensors msprobe saw but could not summarise (e.g. repacked weights of shape [0]).
        self.observable = self.numel != 0 and not (max is None and min is None and mean is None and norm is None)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TensorStats) and all(getattr(self, n) == getattr(other, n) for n in self.__slots__[:6])

    def __repr__(self) -> str:
        return f"TensorStats({', '.join(f'{n}={getattr(self, n)!r}' for n in self.__slots__[:6])})"


@dataclass(frozen=True, slots=True)
class ModuleEntry:
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


@dataclass
class Dump:
    path: str
    task: str | None
    level: str | None
    framework: str | None
    keys: list[str]
    entries: dict[str, ModuleEntry]
    skipped_keys: int  # API-level, backward and parameters_grad keys
    _line_cache: dict[str, int | None] = field(default_factory=dict, repr=False)

    def line_of(self, key: str) -> int | None:
        """0-based line of `"key":` in the dump file (dumps carry no positions: looked up on demand)."""
        if key not in self._line_cache:
            self.prefetch_lines([key])
        return self._line_cache[key]

    def prefetch_lines(self, keys: Iterable[str]) -> None:
        """Find the lines of many keys in one pass over the file: keys are searched in dump order."""
        wanted = sorted({k for k in keys if k not in self._line_cache},
                        key=lambda k: self.entries[k].position if k in self.entries else -1)
        if not wanted:
            return
        try:
            data = Path(self.path).read_bytes()
        except OSError:
            self._line_cache.update(dict.fromkeys(wanted))
            return
        offset = line = 0
        for key in wanted:
            found = data.find(quoted_key(key), offset)
            if found < 0:
                found = data.find(quoted_key(key))  # not where dump order says: search the whole file once
                if found < 0:
                    self._line_cache[key] = None
                    continue
                offset = line = 0
            line += data.count(b"\n", offset, found)
            offset = found
            self._line_cache[key] = line


def quoted_key(key: str) -> bytes:
    return b'"' + key.encode() + b'"'


def _tensor_stats(node: dict[str, Any]) -> TensorStats | None:
    if "dtype" not in node or "shape" not in node:
        return None
    shape = node["shape"]
    dtype = node["dtype"]
    # Statistics are floats in all but odd cases (null, bool, quoted non-finite): skip the conversion call then.
    mx, mn, mean, norm = node.get("Max"), node.get("Min"), node.get("Mean"), node.get("Norm")
    return TensorStats(
        dtype if dtype is None or type(dtype) is str else str(dtype),
        tuple(shape) if type(shape) is list else None,
        mx if type(mx) is float else as_float(mx),
        mn if type(mn) is float else as_float(mn),
        mean if type(mean) is float else as_float(mean),
        norm if type(norm) is float else as_float(norm),
    )


def first_tensor(value: Any) -> TensorStats | None:
    """The first tensor node in a (possibly nested) argument/output structure."""
    if type(value) is dict:
        return _tensor_stats(value)
    if type(value) is list:
        for item in value:
            stats = first_tensor(item)
            if stats is not None:
                return stats
    return None


def _primary_input(args: Any) -> TensorStats | None:
    """The first floating-point positional tensor: vLLM passes (positions, hidden_states, ...) to its layers."""
    first = first_tensor(args)
    if first is None or not _is_integer_dtype(first.dtype) or type(args) is not list:
        return first
    for item in args[1:]:
        stats = first_tensor(item)
        if stats is not None and not _is_integer_dtype(stats.dtype):
            return stats
    return first


def _stream_tensors(args: Any, output: Any) -> tuple[TensorStats | None, TensorStats | None]:
    """(stream input, stream output) of an entry: see ModuleEntry."""
    return _after_first_float(args), _after_first_float(output)


def _after_first_float(items: Any) -> TensorStats | None:
    """In a flat list of tensors: the float tensor right after the first float one, if it has the same shape."""
    if type(items) is not list or len(items) < 2:
        return None
    first: TensorStats | None = None
    for item in items:
        if type(item) is not dict:
            if first is not None:
                return None
            continue
        stats = _tensor_stats(item)
        if stats is None or _is_integer_dtype(stats.dtype):
            if first is not None:
                return None
            continue
        if first is None:
            first = stats
        else:
            return stats if stats.shape == first.shape else None
    return None


def _is_integer_dtype(dtype: str | None) -> bool:
    name = (dtype or "").rpartition(".")[2].lower()
    return name.startswith(("int", "uint", "long", "bool"))


def _tensor_map(nodes: Any) -> Mapping[str, TensorStats]:
    if not isinstance(nodes, dict) or not nodes:
        return _EMPTY
    found = {name: stats for name, node in nodes.items() if (stats := first_tensor(node)) is not None}
    return found or _EMPTY


def _entry(key: str, position: int, raw: dict[str, Any]) -> ModuleEntry | None:
    parsed = parse_module_key(key)
    if parsed is None or parsed.direction != "forward" or not isinstance(raw, dict):
        return None
    kwargs = _tensor_map(raw.get("input_kwargs"))
    primary = _primary_input(raw.get("input_args"))
    source = "input_args.0"
    if primary is None and kwargs:
        source, primary = next(((f"input_kwargs.{n}", kwargs[n]) for n in ("hidden_states", "x", "input") if n in kwargs),
                               (f"input_kwargs.{next(iter(kwargs))}", next(iter(kwargs.values()))))
    args, output = raw.get("input_args"), raw.get("output")
    stream_input, stream_output = _stream_tensors(args, output)
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
        parameters=_tensor_map(raw.get("parameters")),
        stream_input=stream_input if source == "input_args.0" else None,
        stream_output=stream_output,
    )


def build_dump(path: str, document: Any) -> Dump:
    if not isinstance(document, dict) or not isinstance(document.get("data"), dict):
        raise InputError(path, 'not an msprobe dump: expected an object with a "data" object of module entries')
    keys: list[str] = []
    entries: dict[str, ModuleEntry] = {}
    skipped = 0
    for key, raw in document["data"].items():
        entry = _entry(key, len(keys), raw)
        if entry is None:
            skipped += 1
            continue
        keys.append(key)
        entries[key] = entry
    if not keys:
        raise InputError(path, "no Module./Cell. forward entries in this dump (was it made at level L0 or mix?)")
    return Dump(path, document.get("task"), document.get("level"), document.get("framework"), keys, entries, skipped)


def resolve_dump_path(path: str | os.PathLike[str]) -> Path:
    """A dump.json file, or an msprobe dump directory holding exactly one (step*/rank*|proc*/dump.json)."""
    candidate = Path(path)
    if candidate.is_file():
        return candidate
    if not candidate.is_dir():
        raise InputError(str(candidate), "no such dump file or directory")
    if (candidate / "dump.json").is_file():
        return candidate / "dump.json"
    for pattern in _DUMP_GLOBS:
        found = sorted(candidate.glob(pattern))
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            listed = ", ".join(str(p.relative_to(candidate)) for p in found[:4])
            more = f" and {len(found) - 4} more" if len(found) > 4 else ""
            raise InputError(str(candidate), f"{len(found)} dumps found ({listed}{more}); pass one dump.json")
    raise InputError(str(candidate), "no dump.json found (looked for dump.json, step*/rank*/dump.json, step*/proc*/dump.json)")


def load_dump_file(path: Path) -> Dump:
    try:
        data = path.read_bytes()
    except OSError as error:
        raise InputError(str(path), f"cannot read dump: {error.strerror}") from None
    with paused_gc():
        document = loads_lenient(data, str(path))
        del data
        return build_dump(str(path), document)


class DumpCache:
    """Parsed dumps by resolved path, reused while the file's size and mtime are unchanged."""

    def __init__(self) -> None:
        self._dumps: dict[Path, tuple[int, int, Dump]] = {}
        self._locks: dict[Path, threading.Lock] = {}
        self._guard = threading.Lock()

    def get(self, path: str | os.PathLike[str], load: Callable[[Path], Dump] = load_dump_file) -> Dump:
        resolved = resolve_dump_path(path).resolve()
        with self._guard:
            lock = self._locks.setdefault(resolved, threading.Lock())
        with lock:
            before = signature(resolved)
            cached = self._dumps.get(resolved)
            if cached is not None and cached[:2] == before:
                return cached[2]
            dump = load(resolved)
            check_unchanged(resolved, before)
            self._dumps[resolved] = (*before, dump)
            return dump

    def is_current(self, path: str | os.PathLike[str]) -> bool:
        resolved = Path(path).resolve()
        cached = self._dumps.get(resolved)
        return cached is not None and cached[:2] == signature(resolved)

    def forget(self, path: str | os.PathLike[str]) -> None:
        self._dumps.pop(Path(path).resolve(), None)


def check_unchanged(path: Path, before: tuple[int, int]) -> None:
    if signature(path) != before:
        raise InputError(str(path), "the dump changed while it was being read; it is probably being rewritten")


def signature(path: Path) -> tuple[int, int]:
    try:
        info = path.stat()
    except OSError as error:
        raise InputError(str(path), f"cannot read dump: {error.strerror}") from None
    return info.st_size, info.st_mtime_ns
