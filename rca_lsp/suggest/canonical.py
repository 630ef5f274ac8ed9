"""Canonical module paths: the same module gets the same path whatever framework named it."""

from __future__ import annotations

from dataclasses import dataclass

from rca_lsp.suggest.rules import TOP_LEVEL, Alias, NamingRules

_NUMBER = "#"


@dataclass(frozen=True, slots=True)
class CanonicalName:
    path: str  # e.g. "layers.0.attn.qkv"; a split part ends in "[i]": "layers.0.attn.qkv[1]"
    group: str | None  # for a split part: the canonical path of the fused module it is part of
    part: int | None  # for a split part: its position among the fused module's parts
    layer: int | None  # the number after the canonical "layers" segment
    wrapper: str  # the dropped leading wrapper segments, e.g. "module.module.decoder"
    sources: tuple[tuple[str, str], ...]  # (canonical segment, raw text it came from), numbers left out


@dataclass(frozen=True, slots=True)
class _Template:
    """Canonical form of a path whose numbers are replaced by placeholders; numbers are filled in per key."""

    segments: tuple[str, ...]
    part: int | None
    layer_number: int | None  # which number (0-based, in path order) is the layer index
    wrapper: str
    sources: tuple[tuple[str, str], ...]


class Canonicalizer:
    def __init__(self, rules: NamingRules) -> None:
        self._wrappers = rules.wrappers
        self._aliases: dict[str, list[Alias]] = {}
        for alias in rules.aliases:
            self._aliases.setdefault(alias.names[0], []).append(alias)
        self._templates: dict[tuple[str, ...], _Template] = {}

    def canonical(self, path: str) -> CanonicalName:
        raw = path.split(".")
        numbers = [segment for segment in raw if segment.isdigit()]
        shape = tuple(_NUMBER if segment.isdigit() else segment for segment in raw)
        template = self._templates.get(shape)
        if template is None:
            template = self._templates[shape] = self._template(shape)
        filled = iter(numbers)
        segments = [next(filled) if segment == _NUMBER else segment for segment in template.segments]
        canonical_path = ".".join(segments)
        group = None
        if template.part is not None:
            group = canonical_path.rpartition("[")[0]
        layer = int(numbers[template.layer_number]) if template.layer_number is not None else None
        return CanonicalName(canonical_path, group, template.part, layer, template.wrapper, template.sources)

    def _template(self, raw: tuple[str, ...]) -> _Template:
        start = 0
        while start < len(raw) and raw[start] in self._wrappers:
            start += 1
        segments: list[str] = []
        sources: list[tuple[str, str]] = []
        part: int | None = None
        index = start
        while index < len(raw):
            alias = self._match(raw, index, segments)
            if alias is None:
                segments.append(raw[index])
                if raw[index] != _NUMBER:
                    sources.append((raw[index], raw[index]))
                index += 1
                continue
            index += len(alias.names)
            is_last = index == len(raw)
            part = alias.part if is_last else None
            segment = alias.canonical if alias.part is None else f"{alias.canonical}[{alias.part}]"
            segments.append(segment)
            sources.append((segment, alias.text))
        layer_number = None
        for position, segment in enumerate(segments[:-1]):
            if segment == "layers" and segments[position + 1] == _NUMBER:
                layer_number = segments[:position + 1].count(_NUMBER)
                break
        return _Template(tuple(segments), part, layer_number, ".".join(raw[:start]), tuple(sources))

    def _match(self, raw: tuple[str, ...], index: int, above: list[str]) -> Alias | None:
        for alias in self._aliases.get(raw[index], ()):
            width = len(alias.names)
            if raw[index:index + width] != alias.names:
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
