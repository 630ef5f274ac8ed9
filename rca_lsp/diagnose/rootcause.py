"""Root-cause evidence (output_5): suspects, their aligned boundary, what lies between, and a classification.
The suspects and their classifications are defined in `evidence`, with the bookkeeping that reuses a call's evidence
after an edit; users of the root cause import them from here."""

from __future__ import annotations

from typing import Sequence

from rca_lsp.compare.datagroups import input_differs
from rca_lsp.compare.module import CALL_DISAGREEMENT_BUCKET, PARAMETER_BUCKET, RANK_DISAGREEMENT_BUCKET
from rca_lsp.compare.records import ModuleRecord
from rca_lsp.diagnose.between import (
    Between,
    UnmatchedPositions,
    collect_between,
    is_placeholder,
    one_sided_activations,
    reads_model_input,
)
from rca_lsp.diagnose.evidence import (
    CALL_DISAGREEMENT,
    IN_MODULE,
    INPUT_DATA,
    MANUAL,
    MISSING_OP,
    PARAMETER,
    RANK_DISAGREEMENT,
    UPSTREAM,
    Basis,
    CallEvidence,
    CallIndex,
    Classification,
    Suspect,
    call_evidence,
    updated_evidence,
)
from rca_lsp.diagnose.tensorfindings import differing_parameters, input_account, parameter_account
from rca_lsp.dumps.dump import Dump
from rca_lsp.model.keys import is_activation_like, parse_module_key

_DISAGREEMENT_CLASSIFICATION: dict[str, Classification] = {
    RANK_DISAGREEMENT_BUCKET: RANK_DISAGREEMENT,
    CALL_DISAGREEMENT_BUCKET: CALL_DISAGREEMENT,
}
MAX_LISTED = 200  # keys listed per "between" list; the count is always complete
MAX_SCAN = 20_000  # dump keys scanned back from a suspect for unmatched modules

LAYOUT_NOTE = (
    "statistics (Max/Min/Mean/Norm) cannot see layout or permutation differences, e.g. a fused qkv "
    "weight converted in a different head order"
)
NO_WINDOW = (0, 0)


class RootCauseAnalysis:
    def __init__(
        self,
        train: Dump,
        rollout: Dump,
        unmatched: tuple[UnmatchedPositions, UnmatchedPositions],
        data_note: str | None = None,
    ) -> None:
        self.train = train
        self.rollout = rollout
        self.unmatched = unmatched  # (train, rollout)
        self.data_note = data_note  # which train data-parallel group is compared and why, when there are several
        self._windows = (NO_WINDOW, NO_WINDOW)

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
            self.train,
            self.unmatched[0].positions,
            train_start,
            record,
            boundary,
            train_bounds,
            record.train_paths,
            "train",
        )
        rollout_between, rollout_inside = self._collect(
            self.rollout,
            self.unmatched[1].positions,
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
            call_start = max(starts.get(call, self._call_start(dump, call_end)), call_end - MAX_SCAN)
            found_between, found_inside = collect_between(
                dump, unmatched, call_start, call_end, boundary_paths, suspect_paths, placed
            )
            between += found_between
            inside += found_inside
            self._widen(side, call_start + 1)  # a call the boundary is not in is scanned from its own start
        return between, inside

    def _widen(self, side: str, low: int) -> None:
        """The window a suspect's lists scanned on one side reaches down to `low` (what an edit must look at)."""
        (train_low, train_high), (rollout_low, rollout_high) = self._windows
        if side == "train":
            self._windows = ((min(train_low, low), train_high), (rollout_low, rollout_high))
        else:
            self._windows = ((train_low, train_high), (min(rollout_low, low), rollout_high))

    def suspect(self, call: CallIndex, index: int) -> tuple[Suspect, Basis]:
        """The suspect of the record at `index` of its call, and what it was derived from."""
        self._windows = (NO_WINDOW, NO_WINDOW)
        suspect, start, previous_index, boundary_index = self._suspect(call, index)
        (train_low, train_high), (rollout_low, rollout_high) = self._windows
        return suspect, (index, start, previous_index, boundary_index, train_low, train_high, rollout_low, rollout_high)

    def _suspect(self, call: CallIndex, index: int) -> tuple[Suspect, int, int, int]:
        record = call.records[index]
        comparison = record.comparison
        start = call.children_start(index)
        previous_index = int(call.last_comparable[start - 1]) if start > 0 else -1
        boundary_index = int(call.last_aligned[start - 1]) if start > 0 else -1
        previous = call.records[previous_index] if previous_index >= 0 else None
        boundary = call.records[boundary_index] if boundary_index >= 0 else None
        child_index = int(call.next_mismatch[start])
        child = call.records[child_index] if child_index < index else None
        inputs_differ = comparison.input_args_consistency == "mismatch" or comparison.kwargs_consistency == "mismatch"
        if inputs_differ:
            return self._input_divergence(record, previous, boundary, child), start, previous_index, boundary_index
        inside = self._inside_divergence(record, boundary, child, start < index)
        return inside, start, previous_index, boundary_index

    def _input_divergence(
        self,
        record: ModuleRecord,
        previous: ModuleRecord | None,
        boundary: ModuleRecord | None,
        child: ModuleRecord | None,
    ) -> Suspect:
        differs = _how_it_differs(previous) if previous is not None else None
        if previous is not None and differs is not None:
            return Suspect(
                record,
                UPSTREAM,
                f"inputs were already divergent before this module (the preceding mapped module {previous.train_key} "
                f"{differs})",
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
        self, record: ModuleRecord, boundary: ModuleRecord | None, child: ModuleRecord | None, has_children: bool
    ) -> Suspect:
        """`has_children`: mapped modules ran inside it (`child`: the first of them that diverges, if one does)."""
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
        elif comparison.module_bucket == PARAMETER_BUCKET:
            classification, rationale = PARAMETER, "parameters diverged while inputs remained aligned"
            mismatched = [p.target for p in comparison.parameters if p.consistency == "mismatch"]
            mismatched += [t for t in differing_parameters(comparison) if t not in mismatched]
            notes.append(f"mismatched: {', '.join(mismatched)}")
            account = parameter_account(comparison)
            if account:
                notes.append(account)
            if comparison.output_consistency == "aligned":
                notes.append("its output is still within its tolerance, which hides a desync of a few percent in bf16")
        elif comparison.module_bucket == "module_impl_mismatch":
            classification = IN_MODULE
            if parameters_unseen(comparison.parameter_consistency):
                rationale = (
                    f"inputs aligned, but outputs diverged inside the module; {_UNSEEN_PARAMETERS}, so this "
                    "is an in-module difference or a parameter desync the dumps cannot tell apart"
                )
            else:
                rationale = "inputs and parameters aligned, but outputs diverged inside the module"
            if has_children and child is None and comparison.parameter_consistency == "not_applicable":
                notes.append(_ALIGNED_INSIDE)
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
        if earlier is None:
            return call_evidence(records, self.suspect)
        return updated_evidence(earlier, records, changed, train_positions, rollout_positions, self.suspect)


def _how_it_differs(record: ModuleRecord) -> str | None:
    """How a module before a suspect already differs, when it does: its output, or (its output just within
    tolerance) the parameters it ran on, which what follows carries."""
    comparison = record.comparison
    if comparison.output_consistency == "mismatch":
        return "already differs"
    if comparison.module_bucket == PARAMETER_BUCKET:
        return "runs on other parameters, its output just within tolerance"
    return None


def _short(key: str) -> str:
    parsed = parse_module_key(key)
    return f"{parsed.path}.{parsed.call_index}" if parsed else key


# a container (no parameters of its own) whose output differs while every mapped module inside it agrees
_ALIGNED_INSIDE = (
    "it holds no parameters of its own and the mapped modules inside it all agree within their tolerances: the "
    "difference arises in code inside it that is not mapped, or in one of them by less than its tolerance (in bf16, "
    "e.g. a shard or one expert of a weight off by a few percent)"
)
_UNSEEN_PARAMETERS = (
    "its parameters could not all be compared (e.g. weights repacked by the rollout backend are "
    "dumped without statistics)"
)


def parameters_unseen(consistency: str) -> bool:
    return consistency in ("missing", "partial")
