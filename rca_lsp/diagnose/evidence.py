"""The root-cause evidence of one call, kept so that an edit of the mapping re-derives only what it touched.

A call's records carry two columns (each one's verdict and error, as arrays), and its suspects a table of what each
was derived from (a basis: its record, its children, the records it was compared against, the dump windows its
"between" lists scanned). After an edit, the columns and the table are spliced, the suspects whose basis may have
moved are found by array operations, and only those are derived again: a one-line edit of a 10^5-entry mapping costs
the suspects it touches, not a pass over every record and suspect in Python.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field, replace
from operator import attrgetter
from typing import Callable, Final, Iterable, Literal, Sequence

import numpy as np

from rca_lsp.base.cached import cached_property
from rca_lsp.compare.calibrate import JUMP_FACTOR
from rca_lsp.compare.records import ModuleRecord
from rca_lsp.diagnose.between import Between

Classification = Literal[
    "missing_or_extra_op_between_aligned_boundary",
    "parameter_or_checkpoint_issue",
    "in_module_impl_difference",
    "upstream_propagation",
    "needs_manual_review",
    "rank_replica_disagreement",
    "call_parameter_disagreement",
    "input_data_mismatch",
]
MISSING_OP: Final = "missing_or_extra_op_between_aligned_boundary"
PARAMETER: Final = "parameter_or_checkpoint_issue"
IN_MODULE: Final = "in_module_impl_difference"
UPSTREAM: Final = "upstream_propagation"
MANUAL: Final = "needs_manual_review"
RANK_DISAGREEMENT: Final = "rank_replica_disagreement"
CALL_DISAGREEMENT: Final = "call_parameter_disagreement"
INPUT_DATA: Final = "input_data_mismatch"
STRUCTURAL_BUCKETS = ("fused_qkv_structural_mismatch", "structural_shape_mismatch")


@dataclass
class Suspect:
    record: ModuleRecord
    classification: Classification
    rationale: str
    boundary: ModuleRecord | None
    between: Between
    credible_origin: bool  # the divergence starts here (not inherited from an earlier suspect or a child)
    explained_by: str | None

    @property
    def train_key(self) -> str:
        return self.record.train_key


# A basis: the suspect's record index in its call, the first of the records that ran inside it, the last comparable
# and the last aligned record before those (-1: none), and the [low, high) dump positions its lists scanned on each
# side (empty when nothing was scanned). A call's evidence keeps one row of int64 per suspect: its basis, then its
# rank in ranked_suspects (RANK: ORIGIN, EXPLAINED, PROPAGATED) before origins are settled.
AT, START, PREVIOUS, BOUNDARY, TRAIN_LOW, TRAIN_HIGH, ROLLOUT_LOW, ROLLOUT_HIGH, RANK = range(9)
Basis = tuple[int, int, int, int, int, int, int, int]
ORIGIN, EXPLAINED, PROPAGATED = range(3)
_ALIGNED, _MISMATCH, _OTHER = 0, 1, 2
_STATE = {"aligned": _ALIGNED, "mismatch": _MISMATCH}


def _columns(records: Sequence[ModuleRecord]) -> tuple[np.ndarray, np.ndarray]:
    """Each record's output verdict (as _STATE codes) and output error (NaN when it has none)."""
    states = np.fromiter((_STATE.get(r.comparison.output_consistency, _OTHER) for r in records), np.int8, len(records))
    errors = np.fromiter(
        (math.nan if (e := r.comparison.output_error) is None else e for r in records), np.float64, len(records)
    )
    return states, errors


class CallIndex:
    """Records of one call in completion order, with their columns and prefix indexes, so that a suspect costs
    O(its children)."""

    def __init__(self, records: list[ModuleRecord], columns: tuple[np.ndarray, np.ndarray] | None = None) -> None:
        self.records = records
        self.states, self.errors = columns if columns is not None else _columns(records)

    def _last(self, wanted: np.ndarray) -> np.ndarray:
        return np.maximum.accumulate(np.where(wanted, np.arange(len(self.records)), -1))

    @cached_property
    def last_aligned(self) -> np.ndarray:
        """Per record index, the last aligned record at or before it (-1: none)."""
        return self._last(self.states == _ALIGNED)

    @cached_property
    def last_comparable(self) -> np.ndarray:
        return self._last(self.states != _OTHER)

    @cached_property
    def next_mismatch(self) -> np.ndarray:
        """Per record index (and one past the last), the first mismatching record at or after it (len: none)."""
        count = len(self.records)
        found = np.where(self.states == _MISMATCH, np.arange(count), count)
        return np.append(np.minimum.accumulate(found[::-1])[::-1], count)

    def children_start(self, index: int) -> int:
        """Start of the run of records just before `index` that ran inside it (children complete first)."""
        record = self.records[index]
        start = index
        while start > 0 and record.contains(self.records[start - 1]):
            start -= 1
        return start


Derive = Callable[[CallIndex, int], tuple[Suspect, Basis]]  # a suspect from the record at an index of its call


def _rank(suspect: Suspect) -> int:
    if suspect.credible_origin:
        return ORIGIN
    return EXPLAINED if suspect.classification != UPSTREAM else PROPAGATED


def _row(suspect: Suspect, basis: Basis) -> tuple[int, ...]:
    return (*basis, _rank(suspect))


def _rows(rows: list[tuple[int, ...]]) -> np.ndarray:
    return np.array(rows, dtype=np.int64).reshape(-1, RANK + 1)


def _is_structural(record: ModuleRecord) -> bool:
    return record.comparison.module_bucket in STRUCTURAL_BUCKETS


def _is_suspect(record: ModuleRecord) -> bool:
    return record.comparison.module_priority_rank in (1, 2) and not _is_structural(record)


@dataclass
class CallEvidence:
    """The suspects of one call, what each was derived from, and the dump ranges their "between" lists scanned."""

    call: CallIndex
    suspects: list[Suspect]
    bases: np.ndarray  # one row per suspect (its basis and rank), by ascending record index
    structural: list[ModuleRecord]
    # origins demoted by _settled: original suspect's id -> (it, its demoted copy), the earlier evidence's until ranked;
    # a suspect demoted alike again keeps its copy (the server's diagnostics of an unchanged suspect are reused)
    demoted: dict[int, tuple[Suspect, Suspect]] = field(default_factory=dict)

    @property
    def records(self) -> list[ModuleRecord]:
        """The call's records in completion order."""
        return self.call.records

    @cached_property
    def ranked(self) -> tuple[list[Suspect], list[Suspect], list[Suspect]]:
        """The suspects in the three ranks of `ranked_suspects`."""
        settled, ranks = self._settled()
        if settled and settled[0].classification == INPUT_DATA:
            return [settled[0]], [], []  # other data: every later difference follows from it, none is a finding
        suspects = np.empty(len(settled), dtype=object)
        suspects[:] = settled
        origins, explained, propagated = (suspects[ranks == rank].tolist() for rank in (ORIGIN, EXPLAINED, PROPAGATED))
        return origins, explained, propagated

    def _settled(self) -> tuple[list[Suspect], np.ndarray]:
        """The suspects and their ranks, a later origin demoted when its error does not jump well above the errors
        downstream of the first origin (an in-module reading of what is propagation: the divergence raised the level,
        it stays up)."""
        ranks = self.bases[:, RANK].copy()
        origins = np.flatnonzero(ranks == ORIGIN).tolist()
        if not origins:
            return self.suspects, ranks
        first = self.suspects[origins[0]]
        start = int(self.bases[origins[0], AT])
        errors = self.call.errors
        levels = np.fmax.accumulate(errors[start:])  # the largest error from the first origin on (NaN: none yet)
        settled = list(self.suspects)
        earlier, self.demoted = self.demoted, {}
        for i in origins[1:]:
            suspect, at = self.suspects[i], int(self.bases[i, AT])
            error, level = float(errors[at]), float(levels[at - start - 1])
            before = 0.0 if math.isnan(level) else max(0.0, level)
            if math.isnan(error) or error > JUMP_FACTOR * before:
                continue
            rationale = (
                f"{suspect.rationale}; its error ({error:.2g}) does not jump above the level downstream of the first "
                f"divergence ({before:.2g}): it follows from {first.train_key}"
            )
            kept = earlier.get(id(suspect))
            if kept is not None and kept[0] is suspect and kept[1].rationale == rationale:
                settled[i] = kept[1]
            else:
                settled[i] = replace(suspect, credible_origin=False, explained_by=first.train_key, rationale=rationale)
            self.demoted[id(suspect)] = (suspect, settled[i])
            ranks[i] = _rank(settled[i])
        return settled, ranks

    def saw(self, train_positions: Sequence[int], rollout_positions: Sequence[int]) -> np.ndarray:
        """Per suspect, whether its windows held one of these positions (a change of matched keys there could
        change its lists)."""
        bases = self.bases
        return _holds(bases[:, TRAIN_LOW], bases[:, TRAIN_HIGH], train_positions) | _holds(
            bases[:, ROLLOUT_LOW], bases[:, ROLLOUT_HIGH], rollout_positions
        )

    def saw_any(self, train_positions: Sequence[int], rollout_positions: Sequence[int]) -> bool:
        """Whether a change of matched keys at these positions could change this evidence."""
        return bool(self.saw(train_positions, rollout_positions).any())


def _holds(low: np.ndarray, high: np.ndarray, positions: Sequence[int]) -> np.ndarray:
    """Per window [low, high), whether one of the positions lies in it."""
    if not positions:
        return np.zeros(len(low), dtype=bool)
    ordered = np.sort(np.asarray(positions, dtype=np.int64))
    return np.searchsorted(ordered, low, "left") < np.searchsorted(ordered, high, "left")


def call_evidence(records: list[ModuleRecord], derive: Derive) -> CallEvidence:
    """Suspects and structural pairs of one call (its records in train completion order)."""
    call = CallIndex(records)
    suspects, rows = [], []
    for index, record in enumerate(records):
        if _is_suspect(record):
            suspect, basis = derive(call, index)
            suspects.append(suspect)
            rows.append(_row(suspect, basis))
    structural = [r for r in records if _is_structural(r)]
    return CallEvidence(call, suspects, _rows(rows), structural)


_TRAIN_POSITION = attrgetter("train_position")


def updated_evidence(
    earlier: CallEvidence,
    records: list[ModuleRecord],
    changed: tuple[int, int] | None,
    train_positions: Sequence[int],
    rollout_positions: Sequence[int],
    derive: Derive,
) -> CallEvidence:
    """The evidence of a new list of a call's records, from an earlier evidence of the same call: `changed` gives the
    train positions of the first and last record removed or added since (None: none was); the positions are those of
    dump keys whose matched state changed. The records before and after the changed stretch are the same objects, and
    a suspect depends only on records before it (its children, the previous comparable and the last aligned record)
    and on the matched keys in its windows."""
    old = earlier.records
    if changed is None:
        head = old_tail = new_tail = len(old)
    else:
        head = bisect.bisect_left(old, changed[0], key=_TRAIN_POSITION)
        old_tail = bisect.bisect_right(old, changed[1], key=_TRAIN_POSITION)
        new_tail = bisect.bisect_right(records, changed[1], key=_TRAIN_POSITION)
    shift = new_tail - old_tail
    states, errors = _columns(records[head:new_tail])
    call = CallIndex(
        records,
        (
            np.concatenate([earlier.call.states[:head], states, earlier.call.states[old_tail:]]),
            np.concatenate([earlier.call.errors[:head], errors, earlier.call.errors[old_tail:]]),
        ),
    )
    stale = earlier.saw(train_positions, rollout_positions)
    at = earlier.bases[:, AT]
    before, after = int(np.searchsorted(at, head, "left")), int(np.searchsorted(at, old_tail, "left"))

    suspects, prefix = earlier.suspects[:before], earlier.bases[:before].copy()
    for i in np.flatnonzero(stale[:before]).tolist():
        suspects[i], basis = derive(call, int(prefix[i, AT]))
        prefix[i] = _row(suspects[i], basis)
    added, added_rows = [], []
    for index in range(head, new_tail):
        if _is_suspect(records[index]):
            suspect, basis = derive(call, index)
            added.append(suspect)
            added_rows.append(_row(suspect, basis))

    # the suspects after the stretch: most hold unchanged, only those reaching back into it, or whose windows saw a
    # change, are looked at
    tail, moved = earlier.suspects[after:], earlier.bases[after:].copy()
    moved[:, AT:TRAIN_LOW] += shift  # record indexes; previous and boundary are checked below where they may move
    reaches = (earlier.bases[after:, START] <= old_tail) | stale[after:]
    looked = reaches | (earlier.bases[after:, PREVIOUS] < old_tail) | (earlier.bases[after:, BOUNDARY] < old_tail)
    if looked.any():
        rows = np.flatnonzero(looked)
        starts = moved[rows, START]
        previous = np.where(starts > 0, call.last_comparable[starts - 1], -1)
        boundary = np.where(starts > 0, call.last_aligned[starts - 1], -1)
        same = ~reaches[rows]
        same &= previous == _moved_index(earlier.bases[after + rows, PREVIOUS], head, old_tail, shift, old, records)
        same &= boundary == _moved_index(earlier.bases[after + rows, BOUNDARY], head, old_tail, shift, old, records)
        moved[rows, PREVIOUS], moved[rows, BOUNDARY] = previous, boundary
        for i in rows[~same].tolist():
            tail[i], basis = derive(call, int(moved[i, AT]))
            moved[i] = _row(tail[i], basis)

    bases = np.concatenate([prefix, _rows(added_rows), moved])
    structural = _structural(earlier, records, changed, head, new_tail)
    return CallEvidence(call, suspects + added + tail, bases, structural, earlier.demoted)


def _moved_index(
    indexes: np.ndarray, head: int, old_tail: int, shift: int, old: list[ModuleRecord], new: list[ModuleRecord]
) -> np.ndarray:
    """Where the records at these old indexes are in the new list (-1 stays -1; a record of the changed stretch is
    looked up there, -2 when it is gone)."""
    moved = np.where(indexes >= old_tail, indexes + shift, indexes)
    inside = np.flatnonzero((indexes >= head) & (indexes < old_tail))
    if len(inside):
        stretch = {id(r): i for i, r in enumerate(new[head : old_tail + shift], head)}
        moved[inside] = [stretch.get(id(old[i]), -2) for i in indexes[inside].tolist()]
    return moved


def _structural(
    earlier: CallEvidence, records: list[ModuleRecord], changed: tuple[int, int] | None, head: int, new_tail: int
) -> list[ModuleRecord]:
    if changed is None:
        return earlier.structural
    low, high = changed
    before = bisect.bisect_left(earlier.structural, low, key=_TRAIN_POSITION)
    after = bisect.bisect_right(earlier.structural, high, key=_TRAIN_POSITION)
    kept = earlier.structural
    return kept[:before] + [r for r in records[head:new_tail] if _is_structural(r)] + kept[after:]


def ranked_suspects(evidence: Iterable[CallEvidence]) -> list[Suspect]:
    """Credible origins first, then other explanations, then propagation; each by call and train order."""
    calls = sorted((e for e in evidence if e.records), key=lambda e: e.records[0].call_index)
    return [suspect for rank in range(3) for e in calls for suspect in e.ranked[rank]]
