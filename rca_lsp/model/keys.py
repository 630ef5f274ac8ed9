"""What a msprobe module key says: framework prefix, module path, class, direction and call index."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import NamedTuple

from rca_lsp.base.digits import is_ascii_digits

MODULE_PREFIXES = ("Module.", "Cell.")
_LAYER_RE = re.compile(r"\.layers\.(\d+)(?:\.|$)")


class ModuleKey(NamedTuple):  # parsed for every key of both dumps: a tuple builds 3x faster than a dataclass
    prefix: str  # "Module" or "Cell"
    path: str  # dotted module path, e.g. "model.layers.0.mlp"
    class_name: str
    direction: str  # "forward" or "backward"
    call_index: int


def split_module_key(key: str) -> ModuleKey | None:
    """Split `Module.<path>.<Class>.forward.<n>`; None for API-level or malformed keys (n in ASCII digits, as msprobe
    writes it). What loading a dump calls once per key: the part before the call index is split once (a dump's keys
    repeat it in every call of a module: 256 decode steps, or 8 micro-batches, share one), the index read each time."""
    head, _, index = key.rpartition(".")
    if not is_ascii_digits(index):
        return None
    module = _MODULES.get(head)
    if module is None:
        if len(_MODULES) >= _MODULES_LIMIT:
            _MODULES.clear()
        module = _MODULES[head] = _split_head(head)
    # tuple.__new__: what ModuleKey(...) ends in, without its Python-level __new__ (half the time of this function)
    return tuple.__new__(ModuleKey, (*module, int(index))) if module else None


def _split_head(head: str) -> tuple[str, str, str, str] | tuple[()]:
    """(prefix, path, class, direction) of a key without its call index; () when it is not a module's."""
    if not head.startswith(MODULE_PREFIXES):
        return ()
    head, _, direction = head.rpartition(".")
    if direction not in ("forward", "backward"):
        return ()
    prefix_and_path, _, class_name = head.rpartition(".")
    prefix, _, path = prefix_and_path.partition(".")
    if not class_name or not path:
        return ()
    return prefix, path, class_name, direction


# Split heads by their text: a dump has ~10^3-10^5 distinct modules; an odd one with more starts the table again
_MODULES: dict[str, tuple[str, str, str, str] | tuple[()]] = {}
_MODULES_LIMIT = 1 << 18


parse_module_key = lru_cache(maxsize=1 << 18)(split_module_key)  # split_module_key, for keys asked about repeatedly


def layer_index(key: str) -> int | None:
    """The integer after `.layers.` (the seed's definition)."""
    match = _LAYER_RE.search(key)
    return int(match.group(1)) if match else None


def block_of(key: str) -> str:
    """The seed's block: first match of mlp, attn, norm, embed, else other."""
    lowered = key.lower()
    if ".mlp." in lowered:
        return "mlp"
    if "self_attn" in lowered or "self_attention" in lowered or "attention" in lowered:
        return "attn"
    if "norm" in lowered:
        return "norm"
    if "embed" in lowered:
        return "embed"
    return "other"


def is_descendant_path(path: str, ancestor: str) -> bool:
    return path.startswith(ancestor + ".")


ACTIVATION_TOKENS = frozenset(
    {"act", "activation", "silu", "swiglu", "gelu", "geglu", "relu", "mul", "sigmoid", "tanh"}
)
_TOKEN_RE = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")


def is_activation_like(key: str) -> bool:
    """Activation-like module: its own name or class has an activation token (act_fn, SiluAndMul, GELU...).

    Tokens, not substrings: the seed's substring test flags `multi_head` or `cumulative` as activations.
    """
    head, _, index = key.rpartition(".")
    if not is_ascii_digits(index):
        return _activation_like(key)
    # a call index is a token of digits, never an activation's: the answer is its head's, in every call (asked of
    # every key between a suspect and its boundary: hundreds of decode steps' calls of the same modules)
    found = _ACTIVATION_BY_HEAD.get(head)
    if found is None:
        if len(_ACTIVATION_BY_HEAD) >= _MODULES_LIMIT:
            _ACTIVATION_BY_HEAD.clear()
        found = _ACTIVATION_BY_HEAD[head] = _activation_like(key)
    return found


_ACTIVATION_BY_HEAD: dict[str, bool] = {}


def _activation_like(key: str) -> bool:
    parsed = split_module_key(key)
    return _has_activation_token(f"{parsed.path.rpartition('.')[2]} {parsed.class_name}" if parsed else key)


@lru_cache(maxsize=1 << 16)
def _has_activation_token(name: str) -> bool:
    """Per name and class (a few hundred in a model, repeated in every layer and call): its tokens read once."""
    return any(token.lower() in ACTIVATION_TOKENS for token in _TOKEN_RE.findall(name))


ALL_CALLS = "*"  # `Module.<path>.<Class>.forward.*` in a mapping: every call of that module


# Wrappers that rename a module without changing what it computes: FSDP1 (`FullyShardedDataParallel` keeps its
# module as `_fsdp_wrapped_module`), activation checkpointing (`CheckpointWrapper`, `_checkpoint_wrapped_module`),
# torch.compile (`OptimizedModule`, `_orig_mod`), DDP (`module.`), and FSDP2, which renames a sharded module's class
# `FSDP<Class>`. Names are matched without them; keys written keep the dump's own names.
WRAPPER_SEGMENTS = frozenset({"_fsdp_wrapped_module", "_checkpoint_wrapped_module", "_orig_mod"})
WRAPPER_CLASSES = frozenset(
    {"FullyShardedDataParallel", "CheckpointWrapper", "OptimizedModule", "DistributedDataParallel"}
)
_FSDP2_CLASS = re.compile(r"FSDP(?=[A-Z])")


def unwrapped_class(class_name: str) -> str:
    """`FSDPQwen2DecoderLayer` -> `Qwen2DecoderLayer` (FSDP2's class of a sharded module); others unchanged."""
    return class_name[4:] if _FSDP2_CLASS.match(class_name) else class_name


def is_wrapper_class(class_name: str) -> bool:
    """A module that only wraps another (its record repeats the wrapped module's input and output)."""
    return unwrapped_class(class_name) in WRAPPER_CLASSES


def unwrapped_path(path: str) -> str:
    """A module path without wrapper segments anywhere, nor a DDP `module.` in front (when more follows)."""
    parts = [part for part in path.split(".") if part not in WRAPPER_SEGMENTS]
    while len(parts) > 1 and parts[0] == "module":
        parts.pop(0)
    return ".".join(parts)


@lru_cache(maxsize=1 << 16)
def unwrapped_key(key: str) -> str:
    """The key as its module would be named without wrappers (for matching names only); the key itself when it is
    not a module key."""
    parsed = parse_module_key(key)
    if parsed is None:
        return key
    path, class_name = unwrapped_path(parsed.path), unwrapped_class(parsed.class_name)
    return f"{parsed.prefix}.{path}.{class_name}.{parsed.direction}.{parsed.call_index}"


_WRAPPER_TEXT = re.compile(r"\.(?:" + "|".join(sorted(WRAPPER_SEGMENTS)) + r")(?=\.|$)|(?<=\.)FSDP(?=[A-Z])")


@lru_cache(maxsize=1 << 17)
def unwrapped_text(text: str) -> str:
    """Any part of a key (what a user typed) without wrapper segments and FSDP class prefixes."""
    return _WRAPPER_TEXT.sub("", text)


def matches_typed(typed: str, key: str) -> bool:
    """`typed` appears in `key`, with or without the wrappers either names (completion's filter)."""
    return typed in key or unwrapped_text(typed) in unwrapped_text(key)


def same_module(a: str, b: str) -> bool:
    """Two keys naming one module, with or without wrappers."""
    return unwrapped_key(a) == unwrapped_key(b)


def wrapper_parts(key: str) -> list[str]:
    """The wrapper path segments and class prefixes a key holds, for messages."""
    parsed = parse_module_key(key)
    if parsed is None:
        return []
    found = [part for part in parsed.path.split(".") if part in WRAPPER_SEGMENTS]
    if unwrapped_class(parsed.class_name) != parsed.class_name:
        found.append("FSDP class prefix")
    return list(dict.fromkeys(found))
