"""Tensor files of a tensor-mode msprobe dump, read safely: a `.pt` is a pickle, so it is loaded only by torch's
restricted unpickler (`weights_only=True`), which refuses anything but tensors and plain containers without running
it, and only a tensor is accepted; a `.npy` only without pickles. Files are read next to their `dump.json`
(`dump_tensor_data/<data_name>`, as msprobe compare does), never through the absolute `dump_data_dir` written at dump
time. torch is an optional extra (`pip install 'rca-lsp[tensor]'`): without it a tensor-mode dump is analysed from
its statistics, and `tensor_support()` says how to get more. Imports of torch and numpy are lazy: statistics mode
never loads them."""

from __future__ import annotations

import importlib.util
import os
import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator, NamedTuple, Union

import msgspec

from rca_lsp.base.errors import InputError
from rca_lsp.base.inputfile import open_regular_file, read_regular_file
from rca_lsp.base.jsonload import as_float, quote_literals
from rca_lsp.model.stats import TensorStats

TENSOR_DIR = "dump_tensor_data"
INSTALL_HINT = "install the tensor extra (pip install 'rca-lsp[tensor]': torch, numpy) to compare them element-wise"


class TensorNode(msgspec.Struct, gc=False):
    """A tensor node of a dump entry as the element-wise pass needs it: its statistics (what tells it among the
    entry's nodes), its file (`data_name`, tensor mode) and its hash (`md5`, md5 summary mode). Read only for dumps
    of those modes, so the statistics' TensorStats stay as small as they are."""

    dtype: Any = None
    shape: Any = None
    max: Any = msgspec.field(default=None, name="Max")
    min: Any = msgspec.field(default=None, name="Min")
    mean: Any = msgspec.field(default=None, name="Mean")
    norm: Any = msgspec.field(default=None, name="Norm")
    data_name: Any = None
    md5: Any = None

    def same_as(self, stats: TensorStats) -> bool:
        """The node the statistics were taken from (their values equal; NaN statistics compare by position)."""
        shape = tuple(self.shape) if type(self.shape) is list else self.shape
        if self.dtype != stats.dtype or shape != stats.shape:
            return False
        mine = (as_float(self.max), as_float(self.min), as_float(self.mean), as_float(self.norm))
        return mine == (stats.max, stats.min, stats.mean, stats.norm)


_Leaf = Union[TensorNode, list[Any], int, float, str, bool, None]
_Slot = Union[list[_Leaf], TensorNode, int, float, str, bool, None]
_Map = Union[dict[str, _Slot], list[Any], int, float, str, bool, None]


class NodeEntry(msgspec.Struct, gc=False):
    input_args: _Slot = None
    input_kwargs: _Map = None
    output: _Slot = None
    parameters: _Map = None


class _Nodes(msgspec.Struct, gc=False):
    data: dict[str, Union[NodeEntry, list[Any], int, float, str, bool, None]]


_NODES = msgspec.json.Decoder(_Nodes)


def entry_nodes(dump_file: str) -> dict[str, Any]:
    """Every entry of a dump file with its tensor nodes' files and hashes (NaN literals accepted); an empty dict
    for a file that cannot be read as a dump (the statistics' reading reports it)."""
    try:
        data = read_regular_file(dump_file, "dump")
        try:
            return _NODES.decode(data).data
        except msgspec.DecodeError:
            return _NODES.decode(quote_literals(data)).data
    except (OSError, ValueError, msgspec.MsgspecError, InputError):
        return {}


def _tensors(value: Any) -> Iterator[TensorNode]:
    if type(value) is TensorNode:
        if value.dtype is not None:
            yield value
    elif type(value) is list:
        for item in value:
            yield from _tensors(item)
    elif type(value) is dict:  # nested deeper than the schema: plain JSON
        try:
            yield from _tensors(msgspec.convert(value, TensorNode) if "dtype" in value else list(value.values()))
        except msgspec.ValidationError:
            return


def slot_node(entry: Any, slot: str, stats: TensorStats) -> TensorNode | None:
    """The node of `entry` (a NodeEntry) the analysis's statistics `stats` of `slot` ("output", "input_args" - the
    primary input, positional or keyword - or a parameter's name) were taken from."""
    if type(entry) is not NodeEntry:
        return None
    if slot == "output":
        candidates = list(_tensors(entry.output))
    elif slot == "input_args":
        kwargs = entry.input_kwargs if type(entry.input_kwargs) is dict else {}
        candidates = list(_tensors(entry.input_args)) + [n for v in kwargs.values() for n in _tensors(v)]
    else:
        parameters = entry.parameters if type(entry.parameters) is dict else {}
        candidates = list(_tensors(parameters.get(slot)))
    return next((node for node in candidates if node.same_as(stats)), None)


def hashes_in(dump_file: str) -> bool:
    """Whether the dump was made in md5 summary mode (its first tensor nodes carry an "md5")."""
    try:
        with open_regular_file(dump_file, "dump") as handle:
            return b'"md5":' in handle.read(1 << 18)
    except (OSError, InputError):
        return False


class TensorRead(NamedTuple):
    """A tensor read from its file (a CPU torch tensor), or why not (one line naming the file)."""

    tensor: Any
    problem: str


@lru_cache(maxsize=1)
def tensor_support() -> str:
    """ "" when tensor files can be read here, else the one note saying how to get that (torch is found, not
    imported: its import costs seconds, paid only when a tensor is read)."""
    if importlib.util.find_spec("torch") is None or importlib.util.find_spec("numpy") is None:
        return f"tensor files were not read (torch is not installed): {INSTALL_HINT}"
    return ""


def tensor_path(dump_file: str, data_name: str) -> Path | None:
    """Where a dump's tensor file lies: `dump_tensor_data/<data_name>` beside its dump.json; None for a name that
    would lead elsewhere (a path, `..`)."""
    if not data_name or os.path.basename(data_name) != data_name or data_name in (".", ".."):
        return None
    if "/" in data_name or "\\" in data_name:
        return None
    return Path(dump_file).parent / TENSOR_DIR / data_name


def read_tensor(dump_file: str, data_name: str) -> TensorRead:
    """The tensor `data_name` of the dump `dump_file`, loaded without running any code from the file."""
    path = tensor_path(dump_file, data_name)
    if path is None:
        return TensorRead(None, f"{dump_file}: tensor file name {data_name!r} is not a plain file name; not read")
    if not path.is_file():
        return TensorRead(None, f"{path}: tensor file missing; that slot is compared by its statistics")
    try:
        tensor = _load_npy(path) if path.suffix == ".npy" else _load_pt(path)
    except _Refused as refused:
        return TensorRead(None, f"{path}: {refused}; not read, that slot is compared by its statistics")
    except Exception as error:  # torch/numpy raise many kinds for a cut or corrupt file: each is one line
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return TensorRead(None, f"{path}: unreadable tensor file ({reason[:160]}); compared by its statistics")
    return TensorRead(tensor, "")


class _Refused(Exception):
    """A file that holds something other than one tensor."""


def _load_pt(path: Path) -> Any:
    import pickle

    import torch

    try:
        # weights_only: torch's restricted unpickler, which admits tensors, storages and plain containers and raises
        # on any other global (a pickled callable is refused before it could run). mmap: the tensor's bytes are
        # read from the file as they are used, not copied in first.
        try:
            value = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as error:
            if "mmap" not in str(error):
                raise
            value = torch.load(path, map_location="cpu", weights_only=True)  # a legacy (non-zip) file
    except pickle.UnpicklingError as error:
        found = re.search(r"(?:unsupported|Unsupported global:) GLOBAL ([\w.]+)", str(error))
        what = f"a pickled {found.group(1)}" if found else "a pickled object"
        raise _Refused(f"holds {what}, not only a tensor (refused by torch's safe loader, not run)") from None
    if not isinstance(value, torch.Tensor):
        raise _Refused(f"holds a {type(value).__name__}, not a tensor")
    return value


def _load_npy(path: Path) -> Any:
    import numpy
    import torch

    try:
        array = numpy.load(path, allow_pickle=False, mmap_mode="r")
    except ValueError as error:
        if "allow_pickle" in str(error):
            raise _Refused("holds pickled objects, not a numeric array") from None
        raise
    if not isinstance(array, numpy.ndarray):
        raise _Refused("holds several arrays, not one tensor")
    return torch.from_numpy(numpy.ascontiguousarray(array))
