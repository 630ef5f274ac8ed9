"""Per mapping-file state: latest parse, last good analysis, and the generation that guards against stale results."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

from lsprotocol import types

from rca_lsp.diagnose.analysis import Analysis
from rca_lsp.diagnose.rootcause import Suspect
from rca_lsp.mapping.model import ParsedMapping
from rca_lsp.server.pairing import DumpLayout, Pair, Unpaired
from rca_lsp.server.protocol import CommandError
from rca_lsp.suggest import Candidate

Place = tuple[tuple[int, int], ...]  # (line, column) of the entry keys a finding is drawn on


class FindingMemo:
    """The diagnostics of each suspect at the last publish: a suspect that an edit left unchanged (the analysis
    reuses the object) and whose entries did not move gets the same diagnostics without building them again."""

    def __init__(self, settings: object = None) -> None:
        self.settings = settings  # the diagnostics depend on the severities in force
        self._previous: dict[int, tuple[Suspect, Place, list[types.Diagnostic]]] = {}
        self._current: dict[int, tuple[Suspect, Place, list[types.Diagnostic]]] = {}

    def get(self, suspect: Suspect, place: Place) -> list[types.Diagnostic] | None:
        found = self._previous.get(id(suspect))
        if found is None or found[0] is not suspect or found[1] != place:
            return None
        self._current[id(suspect)] = found
        return found[2]

    def put(self, suspect: Suspect, place: Place, diagnostics: list[types.Diagnostic]) -> None:
        self._current[id(suspect)] = (suspect, place, diagnostics)

    def published(self) -> None:
        """Keep what this publish used; forget the rest."""
        self._previous, self._current = self._current, {}


@dataclass
class MappingDocument:
    uri: str
    path: Path
    generation: int = 0  # bumped by every scheduled run; a run publishes only if it is still the newest
    pending: asyncio.TimerHandle | None = None
    pending_parse: asyncio.TimerHandle | None = None
    parsed: ParsedMapping | None = None
    unsaved_view: ParsedMapping | None = None  # parse of edits not analysed yet, for positions in requests
    unsaved_parse: tuple[str, asyncio.Future[ParsedMapping]] | None = None  # a text's parse under way (unsaved_view)
    last_reusable: ParsedMapping | None = None  # the newest parse of a valid text
    analysis: Analysis | None = None  # newest analysis, possibly of a file with syntax errors
    last_good: Analysis | None = None  # newest analysis of a syntactically valid file: its findings keep showing
    counterparts: dict[str, Candidate] = field(default_factory=dict)  # unmapped train key -> suggested rollout keys
    findings: FindingMemo = field(default_factory=FindingMemo)  # diagnostics of the last publish, for reuse
    symbols: tuple[ParsedMapping, list[types.DocumentSymbol]] | None = None  # of the parse they were built from
    pair: Pair | Unpaired | None = None
    good_layout: DumpLayout | None = None  # the dumps the last analysis read: those that vanish since are a problem
    accept_layout: bool = False  # the pairing saved or set since: the next run takes the dumps as they are
    problems: list[str] = field(default_factory=list)  # dump or pairing problems to show at the top

    def latest_parse(self) -> ParsedMapping | None:
        """The newest parse the next parse can start from (a parse of a broken text cannot: then the last one of a
        valid text, so that typing through an error re-reads only the entries typed in)."""
        return next(
            (p for p in (self.unsaved_view, self.parsed, self.last_reusable) if p is not None and p.reusable), None
        )

    def remember(self, parsed: ParsedMapping) -> None:
        if parsed.reusable:
            self.last_reusable = parsed

    def commanded_analysis(self) -> Analysis:
        """The analysis a command works on: the newest (the last good one while the file does not parse). None yet:
        a CommandError saying why, the dump or pairing problem shown at the top of the file when there is one."""
        analysis = self.last_good or self.analysis
        if analysis is not None:
            return analysis
        if self.problems:
            raise CommandError(f"{self.path} has no analysis: {self.problems[0]}")
        raise CommandError(f"{self.path} has not been analysed yet (is it paired with dumps?)")

    def dump_roots(self) -> set[Path]:
        """The dump roots a change below (or of) which concerns this file: the current pair's and the last good's."""
        pairs = [p for p in (self.pair, self.good_layout and self.good_layout.pair) if isinstance(p, Pair)]
        return {root for pair in pairs for root in pair.roots()}

    def next_generation(self) -> int:
        self.generation += 1
        return self.generation
