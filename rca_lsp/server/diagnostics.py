"""Analysis results -> LSP diagnostics on the mapping-key entries they concern."""

from __future__ import annotations

from collections import Counter
from functools import lru_cache
from pathlib import Path
from typing import Callable

from lsprotocol import types

from rca_lsp.base.display import shown
from rca_lsp.diagnose.analysis import Analysis
from rca_lsp.diagnose.between import one_sided_activations
from rca_lsp.diagnose.rootcause import MISSING_OP, UPSTREAM, Suspect
from rca_lsp.dumps.dump import Dump
from rca_lsp.mapping.model import MappingEntry, MappingIssue, ParsedMapping
from rca_lsp.server import codes
from rca_lsp.server.documents import FindingMemo, MappingDocument, Place
from rca_lsp.server.pairing import Unpaired
from rca_lsp.server.positions import Positions, top_of_file
from rca_lsp.server.settings import Settings
from rca_lsp.suggest import Candidate

SUMMARY = "notShown"  # data of a diagnostic that stands for the ones of its code left out (no entry: no quick fix)
SeverityOf = Callable[[str, types.DiagnosticSeverity], types.DiagnosticSeverity | None]


def severity_resolver(settings: Settings) -> SeverityOf:
    def resolve(code: str, default: types.DiagnosticSeverity) -> types.DiagnosticSeverity | None:
        override = settings.severity.get(code)
        if override == "off":
            return None
        return codes.SEVERITY_BY_NAME.get(override or "", default)

    return resolve


def _diagnostic(
    code: str,
    message: str,
    range_: types.Range,
    severity: SeverityOf,
    default: types.DiagnosticSeverity | None = None,
    related: list[types.DiagnosticRelatedInformation] | None = None,
    data: object = None,
) -> types.Diagnostic | None:
    level = severity(code, default or codes.DEFAULT_SEVERITY[code])
    if level is None:
        return None
    return types.Diagnostic(
        range=range_,
        message=shown(message),  # keys in it: no line break or bidi control shown as it is
        severity=level,
        code=code,
        source=codes.SOURCE,
        related_information=related or None,
        data=data,
    )


class KindCap:
    """At most `limit` diagnostics of each code in one publish (a pasted file of 10^5 wrong keys must not become
    one message of 10^5 diagnostics); what was left out is counted, and said by one summary per code."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.counts: Counter[str] = Counter()

    def take(self, code: str) -> bool:
        """Whether one more diagnostic of `code` is published (counted either way)."""
        self.counts[code] += 1
        return self.counts[code] <= self.limit

    def summaries(self, severity: SeverityOf) -> list[types.Diagnostic | None]:
        return [
            _diagnostic(
                code,
                f"{count - self.limit} more {code} diagnostics in this file are not shown (at most {self.limit} of "
                "each kind are published)",
                top_of_file(),
                severity,
                types.DiagnosticSeverity.Information,
                data={SUMMARY: count - self.limit},
            )
            for code, count in self.counts.items()
            if count > self.limit
        ]


def issue_diagnostics(
    issues: list[MappingIssue], positions: Positions, severity: SeverityOf, cap: KindCap
) -> list[types.Diagnostic]:
    found = []
    for issue in issues:
        if not cap.take(issue.code):
            continue
        data = {"suggestions": list(issue.suggestions), "key": issue.key}
        diagnostic = _diagnostic(issue.code, issue.message, positions.range(issue.span), severity, data=data)
        if diagnostic is not None:
            found.append(diagnostic)
    return found


RELATED_PER_FINDING = 3  # dump modules a finding points at


def related_dump_keys(suspect: Suspect) -> tuple[list[str], list[str]]:
    """(train keys, rollout keys) in the dumps that a suspect's finding points at, to look up in one pass."""
    if suspect.classification == MISSING_OP:
        side, ops = one_sided_activations(suspect.between)
        return ([], ops[:RELATED_PER_FINDING]) if side == "rollout" else (ops[:RELATED_PER_FINDING], [])
    if suspect.classification == UPSTREAM and suspect.credible_origin:
        keys = (suspect.between.train + suspect.between.rollout)[:RELATED_PER_FINDING]
        return [k for k in keys if k in suspect.between.train], [k for k in keys if k not in suspect.between.train]
    return [], []


@lru_cache(maxsize=256)
def _file_uri(file: str) -> str:
    return Path(file).as_uri()


def _dump_location(dump: Dump, key: str) -> types.Location | None:
    """The key's entry in its dump file (one rank's file for a merged dump)."""
    found = dump.location_of(key)
    if found is None:
        return None
    file, line = found
    return types.Location(
        uri=_file_uri(file),
        range=types.Range(start=types.Position(line=line, character=0), end=types.Position(line=line, character=0)),
    )


def _related(location: types.Location | None, message: str) -> list[types.DiagnosticRelatedInformation]:
    return [types.DiagnosticRelatedInformation(location=location, message=message)] if location else []


class FindingBuilder:
    """Findings of one analysis placed on the entries of the current text (which may be newer than the analysis)."""

    def __init__(
        self,
        analysis: Analysis,
        current: ParsedMapping,
        positions: Positions,
        uri: str,
        severity: SeverityOf,
        memo: FindingMemo | None = None,
    ) -> None:
        self.analysis = analysis
        self.current = current
        self.entries = current.effective()
        self.positions = positions
        self.uri = uri
        self.severity = severity
        self.memo = memo if memo is not None and positions.char_columns else FindingMemo()
        self._key_ranges: dict[MappingEntry, types.Range] = {}

    def _place(self, *entries: MappingEntry | None) -> Place:
        lines, place = self.current.lines, []
        for entry in entries:
            if entry is None:
                place.append((-1, -1))
            else:
                start, end = self.current.key_span(entry)
                place += [lines.position(start), lines.position(end)]
        return tuple(place)

    def _entry(self, train_keys: tuple[str, ...]) -> MappingEntry | None:
        return next((self.entries[k] for k in train_keys if k in self.entries), None)

    def _key_range(self, entry: MappingEntry) -> types.Range:
        """The range of an entry's key (one boundary is the place of many findings: its range is made once)."""
        found = self._key_ranges.get(entry)
        if found is None:
            found = self._key_ranges[entry] = self.positions.range(self.current.spans(entry).key)
        return found

    def _mapping_location(self, entry: MappingEntry) -> types.Location:
        return types.Location(uri=self.uri, range=self._key_range(entry))

    def suspect(self, suspect: Suspect) -> list[types.Diagnostic]:
        entry = self._entry(suspect.record.comparison.train_keys)
        if entry is None:
            return []
        boundary_entry = self._entry(suspect.boundary.comparison.train_keys) if suspect.boundary else None
        place = self._place(entry, boundary_entry)
        found = self.memo.get(suspect, place)
        if found is None:
            found = self._suspect(suspect, entry, boundary_entry)
            self.memo.put(suspect, place, found)
        return found

    def _suspect(
        self, suspect: Suspect, entry: MappingEntry, boundary_entry: MappingEntry | None
    ) -> list[types.Diagnostic]:
        code = codes.CLASSIFICATION_CODES[suspect.classification]
        # Findings that follow from an earlier divergence are hints: the origin must stand out, not drown.
        default = None if suspect.credible_origin else types.DiagnosticSeverity.Hint
        prefix = "" if suspect.credible_origin else "(follows from an earlier divergence) "
        related: list[types.DiagnosticRelatedInformation] = []
        found: list[types.Diagnostic | None] = []
        if suspect.classification == MISSING_OP:
            side, ops = one_sided_activations(suspect.between)
            dump = self.analysis.rollout if side == "rollout" else self.analysis.train
            for op in ops[:RELATED_PER_FINDING]:
                related += _related(_dump_location(dump, op), f"{side}-only op {op}")
            other = "train" if side == "rollout" else "rollout"
            message = (
                f"{prefix}missing/extra op: {side} runs {', '.join(ops[:3])} between the last aligned boundary "
                f"and this module, {other} does not; this module's input differs from here on"
            )
            if boundary_entry is not None:
                related.append(
                    types.DiagnosticRelatedInformation(
                        location=self._mapping_location(boundary_entry), message="last aligned boundary"
                    )
                )
                found.append(
                    _diagnostic(
                        codes.BOUNDARY,
                        f"last aligned boundary before the {side}-only op "
                        f"{ops[0] if ops else ''}; the mismatch starts after it at {entry.train_key}",
                        self._key_range(boundary_entry),
                        self.severity,
                        related=[
                            types.DiagnosticRelatedInformation(
                                location=self._mapping_location(entry), message="first mismatch"
                            )
                        ],
                    )
                )
        else:
            message = f"{prefix}{suspect.classification.replace('_', ' ')}: {suspect.rationale}"
            if suspect.classification == UPSTREAM and suspect.credible_origin:
                for key in (suspect.between.train + suspect.between.rollout)[:RELATED_PER_FINDING]:
                    dump = self.analysis.train if key in self.analysis.train.entries else self.analysis.rollout
                    related += _related(_dump_location(dump, key), f"unmapped module {key}")
        key_range = self._key_range(entry)
        found.insert(0, _diagnostic(code, message, key_range, self.severity, default, related))
        output = suspect.record.comparison.output
        if output.nonfinite_one_side:
            found.append(_diagnostic(codes.NAN_INF, output.reason, key_range, self.severity))
        return [d for d in found if d is not None]

    def structural(self, cap: KindCap) -> list[types.Diagnostic]:
        found = []
        for record in self.analysis.structural:
            entry = self._entry(record.comparison.train_keys)
            if entry is not None and cap.take(codes.FUSED_STRUCTURAL):
                diagnostic = _diagnostic(
                    codes.FUSED_STRUCTURAL,
                    f"fused/structural pair: {record.comparison.reasoning}",
                    self.positions.range(self.current.spans(entry).value),
                    self.severity,
                )
                found += [diagnostic] if diagnostic else []
        return found

    def unmapped(self, counterparts: dict[str, Candidate], cap: KindCap) -> list[types.Diagnostic]:
        found = []
        for train_key, unmapped in self.analysis.unmapped_between.items():
            entry = self.entries.get(train_key)
            mappable = [key for key in unmapped if key in counterparts]
            if entry is None or not mappable or not cap.take(codes.UNMAPPED_TRAIN):
                continue
            names = ", ".join(mappable[:3]) + (f" and {len(mappable) - 3} more" if len(mappable) > 3 else "")
            data = {
                "unmapped": [
                    {"train": key, "rollout": counterparts[key].keys, "reason": counterparts[key].reason}
                    for key in mappable[:10]
                ]
            }
            diagnostic = _diagnostic(
                codes.UNMAPPED_TRAIN,
                f"train modules next to this entry have no mapping, though a rollout counterpart exists: {names}",
                self._key_range(entry),
                self.severity,
                data=data,
            )
            found += [diagnostic] if diagnostic else []
        return found

    def all(self, limit: int, counterparts: dict[str, Candidate], cap: KindCap) -> list[types.Diagnostic]:
        """Findings (at most `limit` of them, credible origins first and always; a note says how many more), then
        the structural and unmapped-module hints (at most `cap` of each)."""
        found: list[types.Diagnostic] = []
        shown = 0
        for suspect in self.analysis.suspects:  # credible origins come first
            if not suspect.credible_origin and len(found) >= limit:
                break
            found += self.suspect(suspect)
            shown += 1
        hidden = len(self.analysis.suspects) - shown
        found += self.structural(cap) + self.unmapped(counterparts, cap)
        if hidden > 0:
            note = _diagnostic(
                codes.UPSTREAM_CODE,
                f"{hidden} more propagated mismatches are not shown (see the report: rcaLsp.server.writeOutputs)",
                top_of_file(),
                self.severity,
                types.DiagnosticSeverity.Information,
            )
            found += [note] if note else []
        return found


def document_diagnostics(
    doc: MappingDocument, settings: Settings, positions: Positions | None
) -> list[types.Diagnostic]:
    """Everything published for one mapping file: pairing and dump problems at the top, the mapping's own issues,
    and the findings of its last good analysis (each code's severity as the settings say, "off" left out)."""
    parsed = doc.parsed
    if parsed is None or positions is None:
        return []
    severity = severity_resolver(settings)
    cap = KindCap(settings.max_per_kind)
    found: list[types.Diagnostic | None] = []
    if isinstance(doc.pair, Unpaired) and not doc.pair.problem:
        found.append(
            _diagnostic(
                codes.UNPAIRED,
                "rca-lsp: no dumps paired with this mapping file; looked for " + "; ".join(doc.pair.looked_for),
                top_of_file(),
                severity,
            )
        )
    found += [_diagnostic(codes.DUMP_PROBLEM, problem, top_of_file(), severity) for problem in doc.problems]
    choice = doc.last_good.comparator.data_choice if doc.last_good is not None else None
    if choice is not None and not isinstance(doc.pair, Unpaired):
        found.append(_diagnostic(codes.TRAIN_DATA_GROUP, f"rca-lsp: {choice.describe()}", top_of_file(), severity))
    analysis = doc.analysis if doc.analysis is not None and doc.analysis.mapping is parsed else None
    found += issue_diagnostics(analysis.issues if analysis is not None else parsed.issues, positions, severity, cap)
    if doc.last_good is not None and not (isinstance(doc.pair, Unpaired) and not doc.pair.problem):
        if doc.findings.settings is not settings:
            doc.findings = FindingMemo(settings)
        builder = FindingBuilder(doc.last_good, parsed, positions, doc.uri, severity, doc.findings)
        found += builder.all(settings.max_findings, doc.counterparts, cap)
        doc.findings.published()
    found += cap.summaries(severity)
    return [d for d in found if d is not None and d.severity is not None]
