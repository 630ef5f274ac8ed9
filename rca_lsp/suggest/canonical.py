"""Canonical module paths: the same module gets the same path whatever framework named it."""

from __future__ import annotations

from dataclasses import dataclass

from rca_lsp.base.digits import is_ascii_digits
from rca_lsp.model.keys import WRAPPER_SEGMENTS
from rca_lsp.suggest.rules import TOP_LEVEL, Alias, NamingRules

_NUMBER = "#"


@dataclass(frozen=True, slots=True, eq=False)
class NameTemplate:
    """The canonical form of every path that differs only in its numbers (compared by identity: one per form)."""

    segments: tuple[str, ...]  # canonical segments, numbers replaced by "#"
    part: int | None  # for a split part: its position among the fused module's parts
    layer_number: int | None  # which of the path's numbers (0-based) is the layer index
    wrapper: str  # the dropped leading wrapper segments, e.g. "module.module.decoder"
    sources: tuple[tuple[str, str], ...]  # (canonical segment, raw text it came from), numbers left out

    @property
    def is_root(self) -> bool:
        """Nothing but wrappers: the whole model."""
        return not self.segments


@dataclass(slots=True)  # not frozen: built per module on the hot path, and frozen __init__ is slow
class CanonicalName:
    path: str  # e.g. "layers.0.attn.qkv"; a split part ends in "[i]": "layers.0.attn.qkv[1]"
    group: str | None  # for a split part: the canonical path of the fused module it is part of
    layer: int | None  # the number after the canonical "layers" segment
    template: NameTemplate

    @property
    def part(self) -> int | None:
        return self.template.part


class Canonicalizer:
    def __init__(self, rules: NamingRules) -> None:
        self._wrappers = rules.wrappers
        self._aliases: dict[str, list[Alias]] = {}
        for alias in rules.aliases:
            self._aliases.setdefault(alias.names[0], []).append(alias)
        self._templates: dict[tuple[str, ...], NameTemplate] = {}
        self._names: dict[str, CanonicalName] = {}

    def canonical(self, path: str) -> CanonicalName:
        name = self._names.get(path)
        if name is None:
            name = self._names[path] = self._canonical(path)
        return name

    def _canonical(self, path: str) -> CanonicalName:
        raw = path.split(".")
        numbers = [segment for segment in raw if is_ascii_digits(segment)]  # other digits: part of a name
        form = tuple(_NUMBER if is_ascii_digits(segment) else segment for segment in raw)
        template = self._templates.get(form)
        if template is None:
            template = self._templates[form] = self._template(form)
        filled = iter(numbers)
        canonical_path = ".".join(next(filled) if segment == _NUMBER else segment for segment in template.segments)
        group = canonical_path.rpartition("[")[0] if template.part is not None else None
        layer = int(numbers[template.layer_number]) if template.layer_number is not None else None
        return CanonicalName(canonical_path, group, layer, template)

    def _template(self, raw: tuple[str, ...]) -> NameTemplate:
        start = 0
        while start < len(raw) and raw[start] in self._wrappers:
            start += 1
        segments: list[str] = []
        sources: list[tuple[str, str]] = []
        part: int | None = None
        index = start
        while index < len(raw):
            if raw[index] in WRAPPER_SEGMENTS:  # FSDP1 / checkpoint / compile wrappers inside the path: transparent
                index += 1
                continue
            alias = self._match(raw, index, segments)
            if alias is None:
                segments.append(raw[index])
                if raw[index] != _NUMBER:
                    sources.append((raw[index], raw[index]))
                index += 1
                continue
            index += len(alias.names)
            part = alias.part if index == len(raw) else None
            segment = alias.canonical if alias.part is None else f"{alias.canonical}[{alias.part}]"
            segments.append(segment)
            sources.append((segment, alias.text))
        layer_number = None
        for position, segment in enumerate(segments[:-1]):
            if segment == "layers" and segments[position + 1] == _NUMBER:
                layer_number = segments[: position + 1].count(_NUMBER)
                break
        return NameTemplate(tuple(segments), part, layer_number, ".".join(raw[:start]), tuple(sources))

    def _match(self, raw: tuple[str, ...], index: int, above: list[str]) -> Alias | None:
        for alias in self._aliases.get(raw[index], ()):
            if raw[index : index + len(alias.names)] != alias.names:
                continue
            if alias.inside and not _is_inside(alias.inside, above):
                continue
            return alias
        return None


def _is_inside(scope: frozenset[str], above: list[str]) -> bool:
    named = [segment for segment in above if segment != _NUMBER]
    if not named:
        return TOP_LEVEL in scope
    return any(segment in scope for segment in named)
