"""Root-cause evidence (output_5): suspects, their aligned boundary, what lies between, and a classification."""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass, replace
from functools import cached_property
from operator import attrgetter, itemgetter
from typing import Final, Iterable, Literal, NamedTuple, Sequence

from rca_lsp.compare.calibrate import JUMP_FACTOR
from rca_lsp.compare.datagroups import input_differs
from rca_lsp.compare.module import CALL_DISAGREEMENT_BUCKET, RANK_DISAGREEMENT_BUCKET
from rca_lsp.compare.records import ModuleRecord
from rca_lsp.diagnose.between import (
    Between,
    collect_between,
    is_placeholder,
    one_sided_activations,
    reads_model_input,
)
from rca_lsp.diagnose.tensorfindings import differing_parameters, input_account, parameter_account
from rca_lsp.dumps.dump import Dump
from rca_lsp.model.keys import is_activation_like, parse_module_key

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
_DISAGREEMENT_CLASSIFICATION: dict[str, Classification] = {
    RANK_DISAGREEMENT_BUCKET: RANK_DISAGREEMENT,
    CALL_DISAGREEMENT_BUCKET: CALL_DISAGREEMENT,
}
STRUCTURAL_BUCKETS = ("fused_qkv_structural_mismatch", "structural_shape_mismatch")
MAX_LISTED = 200  # keys listed per "between" list; the count is always complete
MAX_SCAN = 20_000  # dump keys scanned back from a suspect for unmatched modules

LAYOUT_NOTE = (
    "statistics (Max/Min/Mean/Norm) cannot see layout or permutation differences, e.g. a fused qkv "
    "weight converted in a different head order"
)


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


class _CallIndex:
    """Records of one call in completion order, with prefix indexes so each suspect costs O(its children)."""

    def __init__(self, records: list[ModuleRecord]) -> None:
        self.records = records

    @cached_property
    def _states(self) -> list[str]:
        return [record.comparison.output_consistency for record in self.records]

    @cached_property
    def last_aligned(self) -> list[int]:
        return list(
            itertools.accumulate((i if state == "aligned" else -1 for i, state in enumerate(self._states)), max)
        )

    @cached_property
    def last_comparable(self) -> list[int]:
        return list(
            itertools.accumulate(
                (i if state in ("aligned", "mismatch") else -1 for i, state in enumerate(self._states)), max
            )
        )

    @cached_property
    def next_mismatch(self) -> list[int]:
        count = len(self.records)
        found = itertools.accumulate(
            (i if state == "mismatch" else count for i, state in zip(range(count - 1, -1, -1), reversed(self._states))),
            min,
            initial=count,
        )
        return list(found)[::-1]

    def children_start(self, index: int) -> int:
        """Start of the run of records just before `index` that ran inside it (children complete first)."""
        record = self.records[index]
        start = index
        while start > 0 and record.contains(self.records[start - 1]):
            start -= 1
        return start


class _Basis(NamedTuple):
    """What one suspect was derived from: indexes into its call's records, and the dump ranges its lists scanned."""

    at: int  # index of the suspect's record in its call
    start: int  # first of the records that ran inside it
    previous: int  # last comparable record before those, or -1
    boundary: int  # last aligned record before those, or -1
    train_window: tuple[int, int]  # [low, high) dump positions; empty when nothing was scanned
    rollout_window: tuple[int, int]

    def saw_any(self, train_positions: Sequence[int], rollout_positions: Sequence[int]) -> bool:
        return _in_window(self.train_window, train_positions) or _in_window(self.rollout_window, rollout_positions)


def _in_window(window: tuple[int, int], positions: Sequence[int]) -> bool:
    return any(window[0] <= p < window[1] for p in positions)


NO_WINDOW = (0, 0)


@dataclass
class CallEvidence:
    """The suspects of one call, what each was derived from, and the dump ranges their "between" lists scanned."""

    records: list[ModuleRecord]  # the call's records in completion order
    suspects: list[Suspect]
    bases: list[_Basis]  # one per suspect, by ascending record index
    structural: list[ModuleRecord]

    @cached_property
    def ranked(self) -> tuple[list[Suspect], list[Suspect], list[Suspect]]:
        """The suspects in the three ranks of `ranked_suspects`."""
        origins: list[Suspect] = []
        explained: list[Suspect] = []
        propagated: list[Suspect] = []
        settled = self._settled()
        if settled and settled[0].classification == INPUT_DATA:
            return [settled[0]], [], []  # other data: every later difference follows from it, none is a finding
        for suspect in settled:
            if suspect.credible_origin:
                origins.append(suspect)
            else:
                (explained if suspect.classification != UPSTREAM else propagated).append(suspect)
        return origins, explained, propagated

    def _settled(self) -> list[Suspect]:
        """The suspects, a later origin demoted when its error does not jump well above the errors downstream of the
        first origin (an in-module reading of what is propagation: the divergence raised the level, it stays up)."""
        first = next((s for s in self.suspects if s.credible_origin), None)
        if first is None:
            return self.suspects
        level = 0.0  # the largest error since the first origin
        errors: dict[int, float] = {}
        started = False
        for record in self.records:
            started = started or record is first.record
            error = record.comparison.output_error
            if started and error is not None:
                errors[id(record)] = level
                level = max(level, error)
        settled = []
        for suspect in self.suspects:
            before = errors.get(id(suspect.record))
            error = suspect.record.comparison.output_error
            if (
                suspect.credible_origin
                and suspect is not first
                and before is not None
                and error is not None
                and error <= JUMP_FACTOR * before
            ):
                suspect = replace(
                    suspect,
                    credible_origin=False,
                    explained_by=first.train_key,
                    rationale=f"{suspect.rationale}; its error ({error:.2g}) does not jump above the "
                    f"level downstream of the first divergence ({before:.2g}): it follows "
                    f"from {first.train_key}",
                )
            settled.append(suspect)
        return settled

    @cached_property
    def windowed(self) -> list[int]:
        """Indexes of the bases that scanned the dumps."""
        return [
            i
            for i, b in enumerate(self.bases)
            if b.train_window[1] > b.train_window[0] or b.rollout_window[1] > b.rollout_window[0]
        ]

    def saw_any(self, train_positions: Sequence[int], rollout_positions: Sequence[int]) -> bool:
        """Whether a change of matched keys at these positions could change this evidence."""
        return any(self.bases[i].saw_any(train_positions, rollout_positions) for i in self.windowed)


class _Reuse:
    """What of an earlier evidence of the same call still holds for a new list of its records. The records before
    and after the changed stretch are the same objects, and a suspect depends only on records before it (its
    children, the previous comparable and the last aligned record) and on the matched keys in its windows."""

    def __init__(
        self,
        earlier: CallEvidence,
        records: list[ModuleRecord],
        changed: tuple[int, int] | None,
        train_positions: Sequence[int],
        rollout_positions: Sequence[int],
    ) -> None:
        """`changed`: the train positions of the first and last record removed or added, None if none was."""
        old = earlier.records
        if changed is None:
            self.head = self.old_tail = self.new_tail = len(old)
        else:
            self.head = bisect.bisect_left(old, changed[0], key=_TRAIN_POSITION)
            self.old_tail = bisect.bisect_right(old, changed[1], key=_TRAIN_POSITION)
            self.new_tail = bisect.bisect_right(records, changed[1], key=_TRAIN_POSITION)
        self.earlier = earlier
        self.changed = changed
        self.shift = self.new_tail - self.old_tail
        self.stale = {i for i in earlier.windowed if earlier.bases[i].saw_any(train_positions, rollout_positions)}

    def evidence(self, analysis: "RootCauseAnalysis", call: "_CallIndex") -> tuple[list[Suspect], list[_Basis]]:
        earlier, index_of = self.earlier, _BASIS_INDEX
        before = bisect.bisect_left(earlier.bases, self.head, key=index_of)
        after = bisect.bisect_left(earlier.bases, self.old_tail, key=index_of)
        suspects, bases = earlier.suspects[:before], earlier.bases[:before]
        for i in sorted(i for i in self.stale if i < before):
            suspects[i], bases[i] = analysis.suspect(call, bases[i].at)
        for index in range(self.head, self.new_tail):
            record = call.records[index]
            if record.comparison.module_priority_rank in (1, 2) and not _is_structural(record):
                suspect, basis = analysis.suspect(call, index)
                suspects.append(suspect)
                bases.append(basis)
        suspects += self._suffix(analysis, call, after, bases)
        return suspects, bases

    def _suffix(
        self, analysis: "RootCauseAnalysis", call: "_CallIndex", after: int, bases: list[_Basis]
    ) -> list[Suspect]:
        """The suspects from earlier position `after` on (their records follow the changed stretch); appends their
        bases. Most hold unchanged: only those reaching back into the stretch, or whose windows saw a change,
        are looked at one by one."""
        earlier, tail, shift = self.earlier, self.old_tail, self.shift
        suspects, moved = earlier.suspects[after:], earlier.bases[after:]
        recheck = [i for i, b in enumerate(moved) if b.start <= tail or b.previous < tail or b.boundary < tail]
        recheck += [i - after for i in self.stale if i >= after]
        if shift:
            moved = [
                _Basis(
                    b.at + shift,
                    b.start + shift,
                    b.previous + shift,
                    b.boundary + shift,
                    b.train_window,
                    b.rollout_window,
                )
                for b in moved
            ]
        for i in sorted(set(recheck)):
            basis = None if i + after in self.stale else self._moved(earlier.bases[i + after], call)
            if basis is None:
                suspects[i], basis = analysis.suspect(call, earlier.bases[i + after].at + shift)
            moved[i] = basis
        bases += moved
        return suspects

    def structural(self, records: list[ModuleRecord]) -> list[ModuleRecord]:
        earlier = self.earlier.structural
        if self.changed is None:
            return earlier
        low, high = self.changed
        before = bisect.bisect_left(earlier, low, key=_TRAIN_POSITION)
        after = bisect.bisect_right(earlier, high, key=_TRAIN_POSITION)
        return earlier[:before] + [r for r in records[self.head : self.new_tail] if _is_structural(r)] + earlier[after:]

    def _moved(self, basis: _Basis, call: "_CallIndex") -> _Basis | None:
        """The basis of an unchanged suspect after the changed stretch, or None if it must be derived again."""
        if basis.start <= self.old_tail:  # its children, or the record before them, changed
            return None
        start = basis.start + self.shift
        previous, boundary = call.last_comparable[start - 1], call.last_aligned[start - 1]
        if not (self._same(previous, basis.previous, call) and self._same(boundary, basis.boundary, call)):
            return None
        return _Basis(basis.at + self.shift, start, previous, boundary, basis.train_window, basis.rollout_window)

    def _same(self, new_index: int, old_index: int, call: "_CallIndex") -> bool:
        if new_index < 0 or old_index < 0:
            return new_index == old_index
        return call.records[new_index] is self.earlier.records[old_index]


_BASIS_INDEX = itemgetter(0)
_TRAIN_POSITION = attrgetter("train_position")


def _is_structural(record: ModuleRecord) -> bool:
    return record.comparison.module_bucket in STRUCTURAL_BUCKETS


class RootCauseAnalysis:
    def __init__(
        self,
        train: Dump,
        rollout: Dump,
        matched_train: set[str],
        matched_rollout: set[str],
        data_note: str | None = None,
    ) -> None:
        self.train = train
        self.rollout = rollout
        self.matched_train = matched_train
        self.matched_rollout = matched_rollout
        self.data_note = data_note  # which train data-parallel group is compared and why, when there are several
        self._windows = (NO_WINDOW, NO_WINDOW)

    @cached_property
    def _unmatched_train(self) -> list[int]:
        return [position for position, key in enumerate(self.train.keys) if key not in self.matched_train]

    @cached_property
    def _unmatched_rollout(self) -> list[int]:
        return [position for position, key in enumerate(self.rollout.keys) if key not in self.matched_rollout]

    def _call_start(self, dump: Dump, record_position: int) -> int:
        """Position before the first key of this call (keys of earlier calls are not 'between')."""
        return max(dump.earlier_call_before[record_position], record_position - MAX_SCAN - 1)

    def _between(self, record: ModuleRecord, boundary: ModuleRecord | None) -> Between:
        if boundary is not None:
            # From the boundary's first part: an op interleaved with split parts (gate, act_fn, up) is between too.
            train_start, rollout_start = boundary.train_first_position, boundary.rollout_first_position
            train_bounds, rollout_bounds = boundary.train_paths, boundary.rollout_paths
        else:
            train_start = self._call_start(self.train, record.train_position)
            rollout_start = self._call_start(self.rollout, record.rollout_position)
            train_bounds = rollout_bounds = ()
        train_start = max(train_start, record.train_position - MAX_SCAN)
        rollout_start = max(rollout_start, record.rollout_position - MAX_SCAN)
        self._windows = ((train_start + 1, record.train_position), (rollout_start + 1, record.rollout_position))
        train_between, train_inside = self._collect(
            self.train, self._unmatched_train, train_start, record, boundary, train_bounds, record.train_paths, "train"
        )
        rollout_between, rollout_inside = self._collect(
            self.rollout,
            self._unmatched_rollout,
            rollout_start,
            record,
            boundary,
            rollout_bounds,
            record.rollout_paths,
            "rollout",
        )
        return Between(train_between, rollout_between, train_inside, rollout_inside)

    def _collect(
        self,
        dump: Dump,
        unmatched: list[int],
        start: int,
        record: ModuleRecord,
        boundary: ModuleRecord | None,
        boundary_paths: Sequence[str],
        suspect_paths: Sequence[str],
        side: str,
    ) -> tuple[list[str], list[str]]:
        """What lies between, call by call when the record joins several calls of a module: in call k, from the
        boundary's part of call k to the record's (a window over all calls would take other layers of later
        calls for "between")."""
        keys = record.comparison.train_keys if side == "train" else record.comparison.rollout_keys
        end = record.train_position if side == "train" else record.rollout_position
        entries = dump.entries
        calls: dict[int, int] = {}
        for key in keys:
            entry = entries[key]
            calls[entry.call_index] = max(calls.get(entry.call_index, -1), entry.position)
        if len(calls) == 1:
            return collect_between(dump, unmatched, start, end, boundary_paths, suspect_paths)
        starts: dict[int, int] = {}
        for key in (
            ()
            if boundary is None
            else boundary.comparison.train_keys
            if side == "train"
            else boundary.comparison.rollout_keys
        ):
            entry = entries[key]
            starts[entry.call_index] = min(starts.get(entry.call_index, entry.position), entry.position)
        between: list[str] = []
        inside: list[str] = []
        placed: dict[str, int] = {}
        for call, call_end in calls.items():
            call_start = starts.get(call, self._call_start(dump, call_end))
            found_between, found_inside = collect_between(
                dump, unmatched, max(call_start, call_end - MAX_SCAN), call_end, boundary_paths, suspect_paths, placed
            )
            between += found_between
            inside += found_inside
        return between, inside

    def suspect(self, call: _CallIndex, index: int) -> tuple[Suspect, _Basis]:
        self._windows = (NO_WINDOW, NO_WINDOW)
        suspect, start, previous_index, boundary_index = self._suspect(call, index)
        return suspect, _Basis(index, start, previous_index, boundary_index, *self._windows)

    def _suspect(self, call: _CallIndex, index: int) -> tuple[Suspect, int, int, int]:
        record = call.records[index]
        comparison = record.comparison
        start = call.children_start(index)
        previous_index = call.last_comparable[start - 1] if start > 0 else -1
        boundary_index = call.last_aligned[start - 1] if start > 0 else -1
        previous = call.records[previous_index] if previous_index >= 0 else None
        boundary = call.records[boundary_index] if boundary_index >= 0 else None
        child_index = call.next_mismatch[start]
        child = call.records[child_index] if child_index < index else None
        inputs_differ = comparison.input_args_consistency == "mismatch" or comparison.kwargs_consistency == "mismatch"
        if inputs_differ:
            return self._input_divergence(record, previous, boundary, child), start, previous_index, boundary_index
        return self._inside_divergence(record, boundary, child), start, previous_index, boundary_index

    def _input_divergence(
        self,
        record: ModuleRecord,
        previous: ModuleRecord | None,
        boundary: ModuleRecord | None,
        child: ModuleRecord | None,
    ) -> Suspect:
        if previous is not None and previous.comparison.output_consistency == "mismatch":
            return Suspect(
                record,
                UPSTREAM,
                f"inputs were already divergent before this module "
                f"(the preceding mapped module {previous.train_key} already differs)",
                boundary,
                Between(),
                False,
                previous.train_key,
            )
        if child is not None:
            return Suspect(
                record,
                UPSTREAM,
                f"its input differs, as does that of a module inside it, which diverges first: {child.train_key}",
                boundary,
                Between(),
                False,
                child.train_key,
            )
        # the same tokens in another order (told by the tensors, below) are not other data
        reordered = input_account(record.comparison)
        if boundary is None and not reordered and reads_model_input(record, self.train, self.rollout):
            return Suspect(record, INPUT_DATA, input_differs(self.data_note), None, Between(), True, None)
        between = self._between(record, boundary)
        where = f"after the aligned boundary {boundary.train_key}" if boundary else "from the start of this call"
        side, acts = one_sided_activations(between)
        if acts:
            rationale = (
                f"{side} has unmatched activation-like intermediate modules between the last aligned boundary "
                f"and this suspect ({', '.join(_short(k) for k in acts[:3])}); the data diverged there: "
                f"statistics are aligned {where}, but this module's input differs"
            )
            return Suspect(record, MISSING_OP, rationale, boundary, between, True, None)
        unmatched = sorted(between.train + between.rollout, key=is_placeholder)
        if unmatched:
            names = ", ".join(_short(k) for k in unmatched[:4]) + (" ..." if len(unmatched) > 4 else "")
            rationale = (
                f"statistics are aligned {where}, yet this module's input differs; only modules without a "
                f"mapping lie between ({names}), so the divergence arises inside them; {LAYOUT_NOTE}"
            )
        else:
            rationale = (
                f"this module's input differs although nothing lies between it and the aligned boundary "
                f"({where}); the two inputs may not be the same tensor (check the mapping, a fused residual "
                f"add, or the tensor layout); {LAYOUT_NOTE}"
            )
        if reordered and boundary is None and not unmatched:  # the first module of the call: where the data enters
            rationale = f"{reordered}; the divergence enters at this module's input, before any other mapped module"
        return Suspect(record, UPSTREAM, rationale, boundary, between, True, None)

    def _inside_divergence(
        self, record: ModuleRecord, boundary: ModuleRecord | None, child: ModuleRecord | None
    ) -> Suspect:
        comparison = record.comparison
        between = self._between(record, boundary) if child is None else Between()
        notes: list[str] = []
        if comparison.module_bucket in _DISAGREEMENT_CLASSIFICATION:
            classification = _DISAGREEMENT_CLASSIFICATION[comparison.module_bucket]
            what = "ranks" if classification == RANK_DISAGREEMENT else "calls"
            rationale = (
                f"its inputs are aligned, but copies that must be identical differ across {what}: "
                f"{comparison.reasoning}"
            )
        elif comparison.module_bucket == "parameter_sync_mismatch":
            classification, rationale = PARAMETER, "parameters diverged while inputs remained aligned"
            mismatched = [p.target for p in comparison.parameters if p.consistency == "mismatch"]
            mismatched += [t for t in differing_parameters(comparison) if t not in mismatched]
            notes.append(f"mismatched: {', '.join(mismatched)}")
            account = parameter_account(comparison)
            if account:
                notes.append(account)
        elif comparison.module_bucket == "module_impl_mismatch":
            classification = IN_MODULE
            if parameters_unseen(comparison.parameter_consistency):
                rationale = (
                    f"inputs aligned, but outputs diverged inside the module; {_UNSEEN_PARAMETERS}, so this "
                    "is an in-module difference or a parameter desync the dumps cannot tell apart"
                )
            else:
                rationale = "inputs and parameters aligned, but outputs diverged inside the module"
        else:
            classification, rationale = MANUAL, "no stronger automatic explanation was found"
        if comparison.input_args_consistency == "missing":
            notes.append("the input could not be compared")
        if comparison.dtype_mismatch:
            notes.append(
                f"output dtype differs ({comparison.output.train.dtype} vs {comparison.output.rollout.dtype}): "  # type: ignore[union-attr]
                "the two sides take different numeric paths"
            )
        if comparison.output.nonfinite_one_side:
            notes.append(comparison.output.reason)
        inside_acts = [k for k in between.inside_train + between.inside_rollout if is_activation_like(k)]
        if inside_acts:
            notes.append(f"unmatched activation-like modules inside: {', '.join(_short(k) for k in inside_acts[:3])}")
        if child is not None:
            notes.append(f"a module inside it diverges first: {child.train_key}")
        if notes:
            rationale += "; " + "; ".join(notes)
        return Suspect(
            record, classification, rationale, boundary, between, child is None, child.train_key if child else None
        )

    def call_evidence(
        self,
        records: list[ModuleRecord],
        earlier: CallEvidence | None = None,
        changed: tuple[int, int] | None = None,
        train_positions: Sequence[int] = (),
        rollout_positions: Sequence[int] = (),
    ) -> CallEvidence:
        """Suspects and structural pairs of one call (its records in train completion order). With `earlier`, the
        evidence of an earlier list of this call's records, what still holds is reused: `changed` gives the train
        positions of the first and last record removed or added since; the positions are those of dump keys whose
        matched state changed."""
        call = _CallIndex(records)
        if earlier is not None:
            reuse = _Reuse(earlier, records, changed, train_positions, rollout_positions)
            suspects, bases = reuse.evidence(self, call)
            return CallEvidence(records, suspects, bases, reuse.structural(records))
        else:
            suspects, bases = [], []
            for index, record in enumerate(records):
                if record.comparison.module_priority_rank in (1, 2) and not _is_structural(record):
                    suspect, basis = self.suspect(call, index)
                    suspects.append(suspect)
                    bases.append(basis)
        structural = [r for r in records if r.comparison.module_bucket in STRUCTURAL_BUCKETS]
        return CallEvidence(records, suspects, bases, structural)


def ranked_suspects(evidence: Iterable[CallEvidence]) -> list[Suspect]:
    """Credible origins first, then other explanations, then propagation; each by call and train order."""
    calls = sorted((e for e in evidence if e.records), key=lambda e: e.records[0].call_index)
    return [suspect for rank in range(3) for e in calls for suspect in e.ranked[rank]]


def _short(key: str) -> str:
    parsed = parse_module_key(key)
    return f"{parsed.path}.{parsed.call_index}" if parsed else key


_UNSEEN_PARAMETERS = (
    "its parameters could not all be compared (e.g. weights repacked by the rollout backend are "
    "dumped without statistics)"
)


def parameters_unseen(consistency: str) -> bool:
    return consistency in ("missing", "partial")
