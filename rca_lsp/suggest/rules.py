"""Naming rules (which module names mean the same thing across frameworks), loaded from TOML files."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Sequence

from rca_lsp.core.errors import InputError

TOP_LEVEL = "^"  # an `inside` entry meaning "no named segment above"


@dataclass(frozen=True, slots=True)
class Alias:
    """One way of writing a canonical segment: `names` (a dotted run of raw segments) -> `canonical`.

    `part` is set for a split part of a fused module (its position in the fused module's parts list).
    """

    names: tuple[str, ...]
    canonical: str
    part: int | None
    inside: frozenset[str]  # empty: applies anywhere

    @property
    def text(self) -> str:
        return ".".join(self.names)


@dataclass(frozen=True)
class NamingRules:
    wrappers: frozenset[str]
    identity_classes: frozenset[str]
    class_kinds: tuple[tuple[str, tuple[str, ...]], ...]  # (kind, class-name words), first match wins
    aliases: tuple[Alias, ...]  # in the order they are tried

    @classmethod
    def default(cls) -> NamingRules:
        return _default_rules()

    @classmethod
    def from_files(cls, paths: Sequence[str | Path], include_default: bool = True) -> NamingRules:
        """Rules from `paths` (earlier files take precedence), extended by the built-in rules."""
        documents = [_read_rules_file(Path(path)) for path in paths]
        if include_default:
            documents.append(_default_document())
        return _compile(documents)

    def class_kind(self, class_name: str) -> str | None:
        if class_name in self.identity_classes:
            return "identity"
        for kind, words in self.class_kinds:
            if any(word in class_name for word in words):
                return kind
        return None


_DEFAULT: NamingRules | None = None


def _default_rules() -> NamingRules:
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = _compile([_default_document()])
    return _DEFAULT


def _default_document() -> dict[str, Any]:
    text = resources.files("rca_lsp").joinpath("data", "naming_rules.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)


def _read_rules_file(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise InputError(str(path), f"cannot read naming rules: {error.strerror}") from None
    except tomllib.TOMLDecodeError as error:
        raise InputError(str(path), f"invalid TOML in naming rules: {error}") from None


def _compile(documents: list[dict[str, Any]]) -> NamingRules:
    wrappers: set[str] = set()
    identity: set[str] = set()
    kinds: dict[str, tuple[str, ...]] = {}
    aliases: list[Alias] = []
    for document in documents:
        wrappers.update(_strings(document, "wrappers"))
        identity.update(_strings(document, "identity_classes"))
        for kind, words in document.get("class_kinds", {}).items():
            kinds.setdefault(kind, tuple(str(word) for word in words))
        for rule in document.get("rename", []):
            aliases.extend(_aliases(rule, rule.get("names", []), part=None))
        for rule in document.get("fused", []):
            aliases.extend(_aliases(rule, rule.get("names", []), part=None))
            for part_names in rule.get("parts", []):
                for position, name in enumerate(part_names):
                    aliases.extend(_aliases(rule, [name], part=position))
    # Conditional rules first, then longer dotted names; otherwise file order (stable sort).
    aliases.sort(key=lambda alias: (not alias.inside, -len(alias.names)))
    return NamingRules(frozenset(wrappers), frozenset(identity), tuple(kinds.items()), tuple(aliases))


def _aliases(rule: dict[str, Any], names: list[str], part: int | None) -> list[Alias]:
    canonical = str(rule["canonical"])
    inside = frozenset(str(name) for name in rule.get("inside", []))
    return [Alias(tuple(str(name).split(".")), canonical, part, inside) for name in names]


def _strings(document: dict[str, Any], field: str) -> list[str]:
    return [str(value) for value in document.get(field, [])]
