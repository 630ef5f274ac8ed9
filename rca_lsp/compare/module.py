"""Module-level verdict for one mapping group: output, inputs, parameters, kwargs, and the seed's bucket.

Verdicts come from `quick_verdict` for every group; the detailed per-statistic comparisons (hover, report,
output_3) are built on first access, so an analysis of 10^5 groups does not build 10^6 objects it never shows.
"""

from __future__ import annotations

import math
from typing import Sequence

from rca_lsp.base.cached import cached_property
from rca_lsp.compare.calls import CallSummary, fold_calls
from rca_lsp.compare.elementwise import MISMATCH, SlotEvidence
from rca_lsp.compare.groupform import (
    PlainTargets,
    SpecTuple,
    TargetSpec,
    common_parameters,
    is_fused_experts,
    paired_kwargs,
    pairwise,
    routers_of_other_forms,
)
from rca_lsp.compare.residual import BranchFacts, StreamReading, branch_reading, stream_reading
from rca_lsp.compare.statistics import (
    NONFINITE_BOTH,
    Consistency,
    GroupConsistency,
    PlainVerdict,
    TargetComparison,
    Verdict,
    compare_target,
    quick_verdict,
)
from rca_lsp.dumps.dump import Disagreement, ModuleEntry
from rca_lsp.model.stats import TensorStats, aggregate, relative_error
from rca_lsp.model.tolerance import Tolerances, normalise_dtype

_FUSED_QKV_TRAIN = ("linear_q_down_proj", "linear_kv_down_proj")
RANK_DISAGREEMENT_BUCKET = "rank_replica_disagreement"
CALL_DISAGREEMENT_BUCKET = "call_parameter_disagreement"
PARAMETER_BUCKET = "parameter_sync_mismatch"  # inputs aligned, parameters differ
_FUSED_QKV_ROLLOUT = "fused_qkv_a_proj"


def _combined(parts: Sequence[ModuleEntry], pick: str) -> TensorStats | None:
    if len(parts) == 1:
        return getattr(parts[0], pick)
    stats = [getattr(p, pick) for p in parts]
    if any(s is None for s in stats):
        return None
    return aggregate(stats)  # type: ignore[arg-type]


def _join(keys: Sequence[str]) -> str:
    return keys[0] if len(keys) == 1 else "+".join(keys)


ALL_PARAMETERS = "*"  # every parameter of a side together (fused experts)
_FUSED_EXPERTS_NOTE = (
    "per-expert modules against one module holding every expert: compared through their "
    "parameters together (the MoE layer's output compares the activations)"
)


_OTHER_BATCHES_NOTE = (
    "expert-parallel ranks read their own batches and every expert got routed tokens of all of them: its "
    "activations (left out by the rank merge) are not one batch's; compared through the parameters"
)
_ROUTER_NOTE = (
    "routers of two implementations return different forms (probabilities + routing map against "
    "logits + top-k scores and indices): their outputs are not compared, their weights and inputs are"
)


def _summarise(states: Sequence[Consistency]) -> Consistency:
    if "mismatch" in states:
        return "mismatch"
    return "aligned" if "aligned" in states else "missing"


def _summarise_parameters(states: Sequence[Consistency]) -> GroupConsistency:
    """Like _summarise, but "partial" when some parameters could not be compared (e.g. a repacked, unobservable
    weight next to an observable bias): "aligned" would claim what the dumps do not show."""
    if "mismatch" in states:
        return "mismatch"
    if "missing" in states:
        return "partial" if "aligned" in states else "missing"
    return "aligned"


def _labelled(train_id: str, rollout_id: str, side: str, label: str) -> tuple[str, str]:
    return (train_id + label, rollout_id) if side == "train" else (train_id, rollout_id + label)


def _bucket(
    train_keys: Sequence[str],
    rollout_keys: Sequence[str],
    output: str,
    shape_numel_mismatch: bool,
    inputs: str,
    params: str,
    kwargs: str,
    disagreements: Sequence[Disagreement],
) -> tuple[str, int, str]:
    inputs_ok = inputs == "aligned" and kwargs in ("aligned", "partial", "not_applicable", "missing")
    inputs_bad = inputs == "mismatch" or kwargs == "mismatch"
    params_ok = params in ("aligned", "not_applicable")
    if disagreements and not inputs_bad:
        bucket = RANK_DISAGREEMENT_BUCKET if disagreements[0].across == "ranks" else CALL_DISAGREEMENT_BUCKET
        return bucket, 1, "; ".join(d.describe() for d in disagreements)
    if output == "missing":
        return "insufficient_output_evidence", 3, "output not comparable on both sides"
    if output == "aligned":
        if params_ok and inputs_ok:
            return "normal_aligned", 4, "output, inputs and parameters aligned"
        if params == "mismatch" and inputs_ok:
            # the weights are not in sync, whatever the output shows: in bf16 a desync of a few percent stays
            # within the output's tolerance here and surfaces modules later as what looks like another cause
            return PARAMETER_BUCKET, 1, "inputs aligned, parameters differ; the output is still within its tolerance"
        if params in ("missing", "partial") or kwargs in ("missing", "partial") or inputs == "missing":
            return (
                "comparison_premise_abnormal_but_output_aligned",
                5,
                "output aligned; some inputs or parameters could not be compared",
            )
        return "internal_difference_but_output_aligned", 5, "output aligned although inputs or parameters differ"
    if not inputs_bad and len(train_keys) == 1 and len(rollout_keys) == 1:
        if any(t in train_keys[0] for t in _FUSED_QKV_TRAIN) and _FUSED_QKV_ROLLOUT in rollout_keys[0]:
            return "fused_qkv_structural_mismatch", 5, "one part of a fused projection mapped 1:1 onto the fused module"
        if shape_numel_mismatch:
            return (
                "structural_shape_mismatch",
                5,
                "outputs have different sizes: the pair is probably one part of a fused/split group (map it 1:N or N:1)",
            )
    if inputs_bad:
        if params == "mismatch":
            return "systemic_misalignment", 2, "inputs and parameters both differ"
        return "upstream_propagation_or_amplification", 2, "inputs already differ"
    if params == "mismatch":
        return PARAMETER_BUCKET, 1, "inputs aligned, parameters differ, output differs"
    note = "" if params_ok else " (parameters could not be compared)"
    return "module_impl_mismatch", 1, f"inputs and parameters aligned, output differs{note}"


class ModuleComparison:
    """Verdicts of one mapping group, with the detailed comparisons built lazily."""

    # what the targets' tensors (or hashes) say, set by with_tensor_evidence: a class default, so the 10^5
    # comparisons of a statistics-mode analysis carry no attribute more
    tensor_evidence: tuple[SlotEvidence, ...] = ()
    # what __init__ sets for every group and of_plain_pair leaves as here: a plain pair has no calls joined, no
    # reading in another form, no disagreeing copies and, mostly, no kwargs or errors worth keeping
    train_calls: Sequence[CallSummary] = ()
    rollout_calls: Sequence[CallSummary] = ()
    _errors: list[float] | tuple[()] = ()
    _reading: StreamReading | None = None
    _parameter_names: list[str] | tuple[()] = ()
    _kwarg_pairs: list[tuple[str, ModuleEntry, ModuleEntry]] | tuple[()] = ()
    kwargs_consistency: GroupConsistency = "not_applicable"
    output_nonfinite_both = False
    _output_dtypes: tuple[str | None, str | None] = (None, None)  # set with dtype_path
    _fused_experts = _routers = _other_batches = False
    # made by of_plain_pair: the pair's dump positions (its targets are rows of the dumps' columns, dumps.columns)
    plain_positions: tuple[int, int] | None = None
    train_disagreements: tuple[Disagreement, ...] = ()
    disagreements: tuple[Disagreement, ...] = ()

    def __init__(
        self,
        train: Sequence[ModuleEntry],
        rollout: Sequence[ModuleEntry],
        tol: Tolerances,
        branch: BranchFacts | None = None,
    ) -> None:
        self._tol = tol
        self.train_keys = tuple([t.key for t in train])
        self.rollout_keys = tuple([r.key for r in rollout])
        # Calls of one module are parts along the sequence: joined first, then parts of a fused module combine.
        train, self.train_calls = fold_calls(train, tol)
        rollout, self.rollout_calls = fold_calls(rollout, tol)
        self._train = tuple(train)
        self._rollout = tuple(rollout)
        # see judged_errors: those of the judged pairs, and those of parameters across the joined calls
        self._errors = [
            error for summary in (*self.train_calls, *self.rollout_calls) for error in summary.differences_within
        ]
        judge = self._judge
        reading = stream_reading(train[0], rollout[0], judge) if len(train) == len(rollout) == 1 else None
        if reading is None and branch is not None and len(train) == len(rollout) == 1:
            reading = branch_reading(train[0], rollout[0], branch, judge)
        self._reading = reading
        if reading is not None:
            self._output_train, self._output_rollout = reading.output
        else:
            self._output_train = _combined(train, "output")
            self._output_rollout = _combined(rollout, "output")
        self.output_consistency: Consistency
        self.input_args_consistency: Consistency
        self.parameter_consistency: GroupConsistency
        self.kwargs_consistency: GroupConsistency
        output_verdict = judge(self._output_train, self._output_rollout)
        self.output_consistency, flags, _ = output_verdict
        self.output_nonfinite_both = bool(flags & NONFINITE_BOTH)
        pairs = pairwise(train, rollout)
        if reading is not None:
            self.input_args_consistency = judge(*reading.input)[0]
        elif pairs:
            self.input_args_consistency = _summarise([judge(t.input, r.input)[0] for t, r in pairs])
        else:
            self.input_args_consistency = judge(_combined(train, "input"), _combined(rollout, "input"))[0]
        names = common_parameters(train, rollout)
        self._parameter_names = names or []
        if names is None:
            self.parameter_consistency = "not_applicable"
        elif not names:
            self.parameter_consistency = "missing"
        else:
            self.parameter_consistency = _summarise_parameters(
                [judge(*self._parameter_stats(n), True)[0] for n in names]
            )
        kwarg_pairs, any_kwargs, names_differ = paired_kwargs(pairs)
        self._kwarg_pairs = kwarg_pairs
        if not any_kwargs:
            self.kwargs_consistency = "not_applicable"
        elif not kwarg_pairs:
            self.kwargs_consistency = "missing"
        else:
            state = _summarise([judge(t.kwargs[n], r.kwargs[n])[0] for n, t, r in kwarg_pairs])
            self.kwargs_consistency = "partial" if names_differ and state == "aligned" else state
        self._judge_dtype_path()
        self._fused_experts = is_fused_experts(train, rollout)
        if self._fused_experts:
            self._compare_fused_experts()
        self._routers = routers_of_other_forms(train, rollout)
        if self._routers:  # the parameters and inputs still compare
            self._output_by_parameters()
        self._other_batches = any(part.other_batches for part in (*train, *rollout))
        if self._other_batches:  # its activations were left out: judged by the parameters, as fused experts are
            self._output_by_parameters()
        # the relative error of the output: one point of the run's error-along-depth series (a module's input is
        # the output of the one before, already a point of it)
        self.output_error = self._output_error(output_verdict)
        self._conclude()

    @classmethod
    def of_plain_pair(
        cls,
        train: ModuleEntry,
        rollout: ModuleEntry,
        tol: Tolerances,
        targets: PlainTargets,
        verdict: PlainVerdict,
    ) -> "ModuleComparison":
        """The comparison of a plain pair (groupform.plain_rows) whose targets (`plain_targets`) say `verdict`
        (records judge every plain pair of an analysis at once): what __init__ makes of the pair. Only what differs
        from the class's defaults is set (10^5 plain pairs in an analysis)."""
        self = object.__new__(cls)
        self._tol = tol
        self.plain_positions = train.position, rollout.position
        self.train_keys, self.rollout_keys = (train.key,), (rollout.key,)
        self._train, self._rollout = (train,), (rollout,)
        self._output_train, self._output_rollout = train.output, rollout.output
        self.output_consistency, self.input_args_consistency, self.parameter_consistency = verdict[:3]
        if targets.parameter_names is not None:
            self._parameter_names = targets.parameter_names
        if targets.any_kwargs:
            self._kwarg_pairs = targets.kwarg_pairs
            self.kwargs_consistency = verdict.kwargs
        if verdict.errors:
            self._errors = verdict.errors
        if verdict.output_nonfinite_both:
            self.output_nonfinite_both = True
        self.output_error = verdict.output_error
        self.dtype_path = verdict.dtype_path is not None
        if verdict.dtype_path is not None:
            self._output_dtypes = verdict.dtype_path
        self._reason()
        return self

    def _judge_dtype_path(self) -> None:
        self.dtype_path = self._dtype_path_differs()
        if self.dtype_path:
            self._output_dtypes = (self._output_train.dtype, self._output_rollout.dtype)  # type: ignore[union-attr]
            if self.output_consistency == "aligned":
                self.output_consistency = "mismatch"

    def _conclude(self) -> None:
        """The disagreements, bucket and reasoning, once every target is judged."""
        self.train_disagreements = tuple(d for part in self._train for d in part.disagreements)
        self.disagreements = self.train_disagreements + tuple(d for part in self._rollout for d in part.disagreements)
        self._apply_disagreements()
        self._reason()

    def _reason(self) -> None:
        """The bucket and its reasoning, with what was read in another form."""
        self.module_bucket, self.module_priority_rank, self.reasoning = self._bucketed()
        if self._reading is not None:
            self.reasoning += f"; {self._reading.note}"
        if self._fused_experts:
            self.reasoning += f"; {_FUSED_EXPERTS_NOTE}"
        if self._routers:
            self.reasoning += f"; {_ROUTER_NOTE}"
        if self._other_batches:
            self.reasoning += f"; {_OTHER_BATCHES_NOTE}"
        if self.dtype_path:  # the dtypes as judged: a router's outputs are dropped after (_output_by_parameters)
            self.reasoning += (
                f"; the output dtype differs ({self._output_dtypes[0]} vs {self._output_dtypes[1]}) while the "
                "inputs' agree: a numeric-path difference inside this module (autocast, a different compute dtype)"
            )

    def _bucketed(self) -> tuple[str, int, str]:
        t_numel = self._output_train.numel if self._output_train is not None else None
        r_numel = self._output_rollout.numel if self._output_rollout is not None else None
        return _bucket(
            self.train_keys,
            self.rollout_keys,
            self.output_consistency,
            self.output_consistency == "mismatch" and None not in (t_numel, r_numel) and t_numel != r_numel,
            self.input_args_consistency,
            self.parameter_consistency,
            self.kwargs_consistency,
            self.disagreements,
        )

    def with_tensor_evidence(self, evidence: tuple[SlotEvidence, ...]) -> "ModuleComparison":
        """This comparison with what its targets' tensors (or hashes) say: a target they find different while its
        statistics agree is a mismatch (statistics cannot see order, nor differences below their resolution), and
        the bucket follows; statistics that differ stay a mismatch (cosine alone misses a scaled weight)."""
        copy = object.__new__(ModuleComparison)
        copy.__dict__.update({k: v for k, v in self.__dict__.items() if k not in ("_details", "kwargs")})
        copy.tensor_evidence = evidence
        flipped = []
        for found in evidence:
            if found.verdict != MISMATCH:
                continue
            target = found.target
            if target == "output.0" and copy.output_consistency != "mismatch":
                copy.output_consistency = "mismatch"
            elif target == "input_args.0" and copy.input_args_consistency != "mismatch":
                copy.input_args_consistency = "mismatch"
            elif target.startswith("parameters.") and copy.parameter_consistency != "mismatch":
                copy.parameter_consistency = "mismatch"
            else:
                continue
            flipped.append(f"{target}: statistics agree but {found.describe()}")
        if not flipped:
            return copy
        bucket, rank, reasoning = copy._bucketed()
        copy.module_bucket, copy.module_priority_rank = bucket, rank
        notes = self.reasoning[len(self._bucketed()[2]) :]  # what __init__ appended to the bucket's own reasoning
        copy.reasoning = "; ".join([reasoning + notes, *flipped])
        return copy

    @property
    def order_findings(self) -> list[str]:
        """The reorderings the tensors name, per target: what a finding says instead of a bare "differs"."""
        return [f"{e.target} {e.permutation}" for e in self.tensor_evidence if e.permutation and e.verdict == MISMATCH]

    def _dtype_path_differs(self) -> bool:
        """The output dtype differs while the inputs' dtypes agree: the module itself changes precision."""
        t_out, r_out = self._output_train, self._output_rollout
        if t_out is None or r_out is None or self._reading is not None:
            return False
        if normalise_dtype(t_out.dtype) == normalise_dtype(r_out.dtype) or None in (t_out.dtype, r_out.dtype):
            return False
        inputs = [(t.input, r.input) for t, r in pairwise(self._train, self._rollout)] or [
            (_combined(self._train, "input"), _combined(self._rollout, "input"))
        ]
        return all(
            t is not None
            and r is not None
            and t.dtype is not None
            and normalise_dtype(t.dtype) == normalise_dtype(r.dtype)
            for t, r in inputs
        )

    def _output_by_parameters(self) -> None:
        """Outputs that are not the same tensor on both sides: not compared; the module's output differs when its
        weights do."""
        self._output_train = self._output_rollout = None
        self.output_consistency = "mismatch" if self.parameter_consistency == "mismatch" else "missing"

    def _compare_fused_experts(self) -> None:
        """Per-expert modules against one module holding every expert's weights (HF MixtralExperts, vLLM FusedMoE):
        their activations are different tensors (each expert sees its routed tokens), their weights together are
        the same elements. The weights are compared; a weight difference makes the experts' contribution differ."""
        self._parameter_names = [ALL_PARAMETERS]
        self.parameter_consistency = _summarise_parameters(
            [self._judge(*self._parameter_stats(ALL_PARAMETERS), True)[0]]
        )
        self._output_by_parameters()
        self.input_args_consistency = "missing"
        self.kwargs_consistency = "not_applicable"
        self._kwarg_pairs = []

    def _judge(self, train: TensorStats | None, rollout: TensorStats | None, parameter: bool = False) -> Verdict:
        verdict = quick_verdict(train, rollout, self._tol, parameter)
        if verdict[2] and verdict[0] != "mismatch":
            self._errors.append(verdict[2])  # type: ignore[union-attr]  # a list once __init__ set it
        return verdict

    def judged_under(self, tol: Tolerances) -> "ModuleComparison":
        """This comparison with its detailed comparisons (output_3, hover) made under other tolerances; only for
        tolerances under which no verdict changes (see `judged_errors`)."""
        copy = object.__new__(ModuleComparison)
        state = copy.__dict__
        state.update(self.__dict__)
        state.pop("_details", None)  # built under our tolerances: built again under `tol` when asked
        state.pop("kwargs", None)
        copy._tol = tol
        return copy

    @property
    def judged_errors(self) -> Sequence[float]:
        """The largest relative error of each pair of statistics judged whose verdict tighter tolerances could
        change: not a mismatch (which stays one), not of equal statistics (an error of 0, within any tolerance);
        and the differences of parameters across joined calls within the tolerance (a tighter one could make them
        a disagreement). What decides whether the verdicts hold under calibrated tolerances (records'
        `Comparator._share_alike`)."""
        return self._errors

    @property
    def tolerances(self) -> Tolerances:
        """What the detailed comparisons (output_3, hover) judge by."""
        return self._tol

    @property
    def output_dtype(self) -> str | None:
        stats = self._output_train or self._output_rollout
        return stats.dtype if stats is not None else None

    def _output_error(self, verdict: Verdict) -> float | None:
        """model.stats.relative_error of the output, None where it is infinite; taken from the output's verdict when
        that measured every statistic (aligned, each finite): the same number (tests/test_target_table.py)."""
        if self._output_train is not None and verdict[0] == "aligned" and not verdict[1]:
            return verdict[2]
        error = relative_error(self._output_train, self._output_rollout)
        return None if error == math.inf else error

    def _apply_disagreements(self) -> None:
        """A slot whose copies disagree (across ranks, or a parameter across calls) is not one tensor: mismatch."""
        for disagreement in self.disagreements:
            slot = disagreement.slot
            if slot.startswith("parameters."):
                self.parameter_consistency = "mismatch"
            elif slot == "output":
                self.output_consistency = "mismatch"
            elif slot == "input":
                self.input_args_consistency = "mismatch"
            elif slot.startswith("input_kwargs."):
                self.kwargs_consistency = "mismatch"

    @property
    def joins_calls(self) -> bool:
        """Whether either side joined several calls (`calls_note` says how): asked of every record, built for few."""
        return bool(self.train_calls or self.rollout_calls)

    @property
    def calls_note(self) -> str:
        """How many calls each side joined (decode steps, micro-batches), for the report and hover."""
        notes = [
            f"{side}: {summary.describe()}"
            for side, summaries in (("train", self.train_calls), ("rollout", self.rollout_calls))
            for summary in summaries[:1]
        ]
        return "; ".join(notes)

    def _parameter_stats(self, name: str) -> tuple[TensorStats | None, TensorStats | None]:
        if name == ALL_PARAMETERS:  # a side without any (a fused module dumped without its weights): none
            train = [p for t in self._train for p in t.parameters.values()]
            rollout = [p for r in self._rollout for p in r.parameters.values()]
            return aggregate(train) if train else None, aggregate(rollout) if rollout else None
        return (
            aggregate([t.parameters[name] for t in self._train]),
            aggregate([r.parameters[name] for r in self._rollout]),
        )

    @property
    def train_key(self) -> str:
        return self.train_keys[0]

    @property
    def rollout_key(self) -> str:
        return self.rollout_keys[0]

    @property
    def aggregated(self) -> bool:
        return len(self.train_keys) > 1 or len(self.rollout_keys) > 1

    @property
    def cardinality(self) -> str:
        return f"{'1' if len(self.train_keys) == 1 else 'N'}:{'1' if len(self.rollout_keys) == 1 else 'N'}"

    @property
    def dtype_mismatch(self) -> bool:
        t, r = self._output_train, self._output_rollout
        return (
            t is not None
            and r is not None
            and t.dtype is not None
            and r.dtype is not None
            and normalise_dtype(t.dtype) != normalise_dtype(r.dtype)
        )

    def target_specs(self) -> list[TargetSpec]:
        """What is compared: output (combined over parts), each part's input, each common parameter."""
        return [TargetSpec._make(spec) for spec in self.spec_tuples()]

    def spec_tuples(self) -> list[SpecTuple]:
        """target_specs as plain tuples (output_3 and the chart read 10^6 of them)."""
        if self.plain_positions is not None:  # each side's own slots: what the rest makes of a plain pair, directly
            t, r = self._train[0], self._rollout[0]
            specs = [("output.0", t.key, r.key, t.output, r.output, False)]
            specs.append(("input_args.0", t.key, r.key, t.input, r.input, False))
            parameters = t.parameters, r.parameters
            return specs + [
                (f"parameters.{n}", t.key, r.key, parameters[0][n], parameters[1][n], False)
                for n in self._parameter_names
            ]
        train_id, rollout_id = _join([t.key for t in self._train]), _join([r.key for r in self._rollout])
        aggregated = self.aggregated
        reading = self._reading
        if reading is not None:
            output_ids = _labelled(train_id, rollout_id, reading.stream_side, reading.output_label)
            input_ids = _labelled(train_id, rollout_id, reading.stream_side, reading.input_label)
            return [
                ("output.0", *output_ids, *reading.output, False),
                ("input_args.0", *input_ids, *reading.input, False),
            ] + [
                (f"parameters.{name}", train_id, rollout_id, *self._parameter_stats(name), False)
                for name in self._parameter_names
            ]
        specs = [("output.0", train_id, rollout_id, self._output_train, self._output_rollout, aggregated)]
        pairs = pairwise(self._train, self._rollout)
        if self._fused_experts:
            pass  # the inputs are different tensors: only the parameters are compared
        elif pairs:
            specs += [("input_args.0", t.key, r.key, t.input, r.input, False) for t, r in pairs]
        else:
            specs.append(
                (
                    "input_args.0",
                    train_id,
                    rollout_id,
                    _combined(self._train, "input"),
                    _combined(self._rollout, "input"),
                    True,
                )
            )
        specs += [
            (f"parameters.{name}", train_id, rollout_id, *self._parameter_stats(name), aggregated)
            for name in self._parameter_names
        ]
        return specs

    def compare_targets(self) -> list[TargetComparison]:
        """Detailed comparisons of every target, not kept (output files stream through these)."""
        tol = self._tol
        return [
            compare_target(target, train_key, rollout_key, train, rollout, tol, aggregated)
            for target, train_key, rollout_key, train, rollout, aggregated in self.spec_tuples()
        ]

    @cached_property
    def _details(self) -> list[TargetComparison]:
        return self.compare_targets()

    @property
    def output(self) -> TargetComparison:
        return self._details[0]

    @property
    def inputs(self) -> tuple[TargetComparison, ...]:
        return tuple(t for t in self._details if t.target == "input_args.0")

    @property
    def parameters(self) -> tuple[TargetComparison, ...]:
        return tuple(t for t in self._details if t.target.startswith("parameters."))

    @cached_property
    def kwargs(self) -> tuple[TargetComparison, ...]:
        return tuple(
            compare_target(f"input_kwargs.{name}", t.key, r.key, t.kwargs[name], r.kwargs[name], self._tol)
            for name, t, r in self._kwarg_pairs
        )


def compare_module(
    train: Sequence[ModuleEntry],
    rollout: Sequence[ModuleEntry],
    tol: Tolerances,
    branch: BranchFacts | None = None,
) -> ModuleComparison:
    return ModuleComparison(train, rollout, tol, branch)
