"""Naming rules (which module names mean the same thing across frameworks), loaded from TOML files."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Sequence

from rca_lsp.base.errors import InputError
from rca_lsp.base.inputfile import read_regular_file
from rca_lsp.model.keys import is_wrapper_class, unwrapped_class

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
    class_kinds: tuple[tuple[str, tuple[str, ...]], ...]  # (kind, lower-case words of class names)
    aliases: tuple[Alias, ...]  # in the order they are tried
    _kinds_seen: dict[str, str | None] = field(default_factory=dict, compare=False, hash=False, repr=False)

    @classmethod
    def default(cls) -> NamingRules:
        return _default_rules()

    @classmethod
    def from_files(cls, paths: Sequence[str | Path], include_default: bool = True) -> NamingRules:
        """Rules from `paths` (earlier files take precedence), extended by the built-in rules."""
        sources = [(str(path), _read_rules_file(Path(path))) for path in paths]
        if include_default:
            sources.append(_default_source())
        return _compile(sources)

    def class_kind(self, class_name: str) -> str | None:
        """What the class does ("norm", "linear", ..., "identity" for placeholders, "wrapper" for a wrapper of
        another module), from words in its name (FSDP2's `FSDP` class prefix left out)."""
        if class_name not in self._kinds_seen:
            self._kinds_seen[class_name] = self._find_kind(class_name)
        return self._kinds_seen[class_name]

    def _find_kind(self, class_name: str) -> str | None:
        """The kind whose word ends rightmost in the class name, i.e. its head noun: Qwen2MoeDecoderLayer is a layer."""
        if is_wrapper_class(class_name):
            return "wrapper"  # repeats the module it wraps, which is the one to pair
        class_name = unwrapped_class(class_name)
        if class_name in self.identity_classes:
            return "identity"
        lowered = class_name.lower()
        best: tuple[int, int] = (0, 0)
        found = None
        for kind, words in self.class_kinds:
            for word in words:
                start = lowered.rfind(word)
                if start >= 0 and (start + len(word), len(word)) > best:
                    best, found = (start + len(word), len(word)), kind
        return found


@cache
def _default_rules() -> NamingRules:
    return _compile([_default_source()])


def _default_source() -> tuple[str, dict[str, Any]]:
    resource = resources.files("rca_lsp").joinpath("data", "naming_rules.toml")
    return str(resource), tomllib.loads(resource.read_text(encoding="utf-8"))


def _read_rules_file(path: Path) -> dict[str, Any]:
    data = read_regular_file(path, "naming rules")
    try:
        return tomllib.loads(data.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise InputError(str(path), f"invalid naming rules TOML: {error}") from None


_TOP_KEYS = ("wrappers", "identity_classes", "class_kinds", "rename", "fused")
_RULE_KEYS = {"rename": ("canonical", "names", "inside"), "fused": ("canonical", "names", "parts", "inside")}


def _compile(sources: list[tuple[str, dict[str, Any]]]) -> NamingRules:
    wrappers: set[str] = set()
    identity: set[str] = set()
    kinds: dict[str, tuple[str, ...]] = {}
    aliases: list[Alias] = []
    for path, document in sources:
        try:
            _known_keys(document, _TOP_KEYS, "the file")
            wrappers.update(_strings(document.get("wrappers", []), "wrappers"))
            identity.update(_strings(document.get("identity_classes", []), "identity_classes"))
            class_kinds = document.get("class_kinds", {})
            if not isinstance(class_kinds, dict):
                raise ValueError(f"class_kinds must be a table ([class_kinds], kind = [words]), got {class_kinds!r}")
            for kind, words in class_kinds.items():
                kinds.setdefault(kind, tuple(word.lower() for word in _strings(words, f"class_kinds.{kind}")))
            for section in _RULE_KEYS:
                for where, rule in _rules(document, section):
                    aliases += _aliases(rule, _strings(rule.get("names", []), f"{where}: names"), None, where)
                    parts = rule.get("parts", [])
                    if not isinstance(parts, list) or not all(isinstance(names, list) for names in parts):
                        raise ValueError(f"{where}: parts must be a list of lists of names, got {parts!r}")
                    aliases += [
                        alias
                        for names in parts
                        for position, name in enumerate(_strings(names, f"{where}: parts"))
                        for alias in _aliases(rule, [name], position, where)
                    ]
        except ValueError as error:
            raise InputError(path, f"invalid naming rules: {error}") from None
    # Conditional rules first, then longer dotted names; otherwise file order (stable sort).
    aliases.sort(key=lambda alias: (not alias.inside, -len(alias.names)))
    return NamingRules(frozenset(wrappers), frozenset(identity), tuple(kinds.items()), tuple(aliases))


def _known_keys(table: dict[str, Any], known: tuple[str, ...], where: str) -> None:
    """A misspelt key (`name` for `names`, `[[renames]]`) would leave the user's rules out without a word."""
    unknown = [key for key in table if key not in known]
    if unknown:
        raise ValueError(f"unknown key {unknown[0]!r} in {where} (expected {', '.join(known)})")


def _rules(document: dict[str, Any], section: str) -> list[tuple[str, dict[str, Any]]]:
    """The `[[rename]]` or `[[fused]]` tables, each with the words naming it in messages (`rename rule 2`)."""
    rules = document.get(section, [])
    if not isinstance(rules, list) or not all(isinstance(rule, dict) for rule in rules):
        raise ValueError(f"{section} must be an array of tables, each under its own [[{section}]] line")
    named = [(f"{section} rule {number}", rule) for number, rule in enumerate(rules, 1)]
    for where, rule in named:
        _known_keys(rule, _RULE_KEYS[section], where)
        if not rule.get("names") and not rule.get("parts"):
            raise ValueError(f"{where}: no names (names = [...]) to give the canonical name to")
    return named


def _aliases(rule: dict[str, Any], names: list[str], part: int | None, where: str) -> list[Alias]:
    canonical = rule.get("canonical")
    if not isinstance(canonical, str) or not canonical:
        raise ValueError(f"{where}: a rule without a canonical name (names {names})")
    inside = frozenset(_strings(rule.get("inside", []), f"{where}: inside"))
    return [Alias(tuple(name.split(".")), canonical, part, inside) for name in names]


def _strings(values: Any, what: str) -> list[str]:
    if not isinstance(values, list) or not all(isinstance(value, str) for value in values):
        raise ValueError(f"{what} must be a list of strings, got {values!r}")
    return values
