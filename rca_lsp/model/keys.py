"""What a msprobe module key says: framework prefix, module path, class, direction and call index."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import NamedTuple

MODULE_PREFIXES = ("Module.", "Cell.")
_LAYER_RE = re.compile(r"\.layers\.(\d+)(?:\.|$)")


class ModuleKey(NamedTuple):  # parsed for every key of both dumps: a tuple builds 3x faster than a dataclass
    prefix: str  # "Module" or "Cell"
    path: str  # dotted module path, e.g. "model.layers.0.mlp"
    class_name: str
    direction: str  # "forward" or "backward"
    call_index: int


@lru_cache(maxsize=1 << 18)
def parse_module_key(key: str) -> ModuleKey | None:
    """Split `Module.<path>.<Class>.forward.<n>`; None for API-level or malformed keys."""
    if not key.startswith(MODULE_PREFIXES):
        return None
    head, _, index = key.rpartition(".")
    head, _, direction = head.rpartition(".")
    if not index.isdigit() or direction not in ("forward", "backward"):
        return None
    prefix_and_path, _, class_name = head.rpartition(".")
    prefix, _, path = prefix_and_path.partition(".")
    if not class_name or not path:
        return None
    return ModuleKey(prefix, path, class_name, direction, int(index))


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


@lru_cache(maxsize=1 << 16)
def is_activation_like(key: str) -> bool:
    """Activation-like module: its own name or class has an activation token (act_fn, SiluAndMul, GELU...).

    Tokens, not substrings: the seed's substring test flags `multi_head` or `cumulative` as activations.
    """
    parsed = parse_module_key(key)
    name = f"{parsed.path.rpartition('.')[2]} {parsed.class_name}" if parsed else key
    return any(token.lower() in ACTIVATION_TOKENS for token in _TOKEN_RE.findall(name))


ALL_CALLS = "*"  # `Module.<path>.<Class>.forward.*` in a mapping: every call of that module
