"""Per mapping-file state: latest parse, last good analysis, and the generation that guards against stale results."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

from lsprotocol import types

from rca_lsp.core.analysis import Analysis
from rca_lsp.core.mapping import ParsedMapping
from rca_lsp.server.diagnostics import FindingMemo
from rca_lsp.server.pairing import Pair, Unpaired
from rca_lsp.suggest import Candidate


@dataclass
class MappingDocument:
    uri: str
    path: Path
    generation: int = 0  # bumped by every scheduled run; a run publishes only if it is still the newest
    pending: asyncio.TimerHandle | None = None
    pending_parse: asyncio.TimerHandle | None = None
    parsed: ParsedMapping | None = None
    unsaved_view: ParsedMapping | None = None  # parse of edits not analysed yet, for positions in requests
    analysis: Analysis | None = None  # newest analysis, possibly of a file with syntax errors
    last_good: Analysis | None = None  # newest analysis of a syntactically valid file: its findings keep showing
    counterparts: dict[str, Candidate] = field(default_factory=dict)  # unmapped train key -> suggested rollout keys
    findings: FindingMemo = field(default_factory=FindingMemo)  # diagnostics of the last publish, for reuse
    symbols: tuple[ParsedMapping, list[types.DocumentSymbol]] | None = None  # of the parse they were built from
    pair: Pair | Unpaired | None = None
    analysed_version: int | None = None
    problems: list[str] = field(default_factory=list)  # dump or pairing problems to show at the top

    def latest_parse(self) -> ParsedMapping | None:
        """The parse of the newest text seen: what the next parse can start from."""
        return self.unsaved_view or self.parsed

    def next_generation(self) -> int:
        self.generation += 1
        return self.generation
