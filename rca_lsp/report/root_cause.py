"""output_5_root_cause_report.json: the seed's schema and field names, with the evidence of each suspect, the
calibration, the ranks merged and the calls joined; and the hypothesis and next checks the other outputs share."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rca_lsp.compare.module import PARAMETER_BUCKET
from rca_lsp.compare.rankview import held_by, merged_slots, per_rank_rows, rank_by_rank
from rca_lsp.compare.records import ModuleRecord
from rca_lsp.diagnose.hypothesis import hypothesis, next_checks
from rca_lsp.diagnose.rootcause import (
    MAX_LISTED,
    Suspect,
)
from rca_lsp.dumps.dump import Dump, slot_label
from rca_lsp.model.keys import is_activation_like
from rca_lsp.model.tolerance import normalise_dtype

if TYPE_CHECKING:
    from rca_lsp.diagnose.analysis import Analysis

MAX_REPORTED_SUSPECTS = 1000  # the report lists the first ones (origins first); output_4 has every record


def record_summary(record: ModuleRecord) -> dict[str, Any]:
    c = record.comparison
    return {
        "train_key": c.train_key,
        "rollout_key": c.rollout_key,
        "train_keys": list(c.train_keys),
        "rollout_keys": list(c.rollout_keys),
        "output_consistency": c.output_consistency,
        "parameter_consistency": c.parameter_consistency,
        "input_args_consistency": c.input_args_consistency,
        "module_bucket": c.module_bucket,
        "module_priority_rank": c.module_priority_rank,
    }


def suspect_json(suspect: Suspect) -> dict[str, Any]:
    c = suspect.record.comparison
    b = suspect.between
    rollout_acts = [k for k in b.rollout if is_activation_like(k)]
    train_acts = [k for k in b.train if is_activation_like(k)]
    return {
        "train_key": c.train_key,
        "rollout_key": c.rollout_key,
        "train_keys": list(c.train_keys),
        "rollout_keys": list(c.rollout_keys),
        "call_index": suspect.record.call_index,
        "module_priority_rank": c.module_priority_rank,
        "module_bucket": c.module_bucket,
        "classification": suspect.classification,
        "rationale": suspect.rationale,
        "credible_origin": suspect.credible_origin,
        "explained_by": suspect.explained_by,
        "previous_aligned_boundary": record_summary(suspect.boundary) if suspect.boundary else None,
        "unmatched_train_between_boundary": b.train[:MAX_LISTED],
        "unmatched_rollout_between_boundary": b.rollout[:MAX_LISTED],
        "unmatched_train_between_count": len(b.train),
        "unmatched_rollout_between_count": len(b.rollout),
        "unmatched_train_inside": b.inside_train[:MAX_LISTED],
        "unmatched_rollout_inside": b.inside_rollout[:MAX_LISTED],
        "likely_missing_train_activation": rollout_acts,
        "likely_missing_rollout_activation": train_acts,
        "output_reason": c.output.reason,
        "input_reasons": [t.reason for t in c.inputs if t.consistency == "mismatch"],
        "parameter_reasons": [t.reason for t in c.parameters if t.consistency == "mismatch"],
        "calls": c.calls_note,
        "disagreements": [d.describe() for d in c.disagreements],
    }


def root_cause_report(analysis: Analysis) -> dict[str, Any]:
    """output_5_root_cause_report.json: the seed's schema and field names, with richer evidence per suspect."""
    first = analysis.suspects[0] if analysis.suspects else None
    top_hypothesis, top_evidence = hypothesis(first)
    nonfinite = [r.train_key for r in analysis.records if r.comparison.output_nonfinite_both]
    return {
        "train_path": analysis.train.path,
        "rollout_path": analysis.rollout.path,
        "mapping_key_path": analysis.mapping.path,
        "structural_false_positives": [
            {
                **{k: v for k, v in record_summary(r).items() if k in ("train_key", "rollout_key", "module_bucket")},
                "skip_reason": r.comparison.reasoning,
            }
            for r in analysis.structural
        ],
        "root_cause_suspects": [suspect_json(s) for s in analysis.suspects[:MAX_REPORTED_SUSPECTS]],
        "root_cause_suspects_total": len(analysis.suspects),
        "top_hypothesis": top_hypothesis,
        "top_evidence": top_evidence,
        "first_divergence": _with_ranks(analysis, suspect_json(first), first)
        if first and first.credible_origin
        else None,
        "nonfinite_on_both_sides": nonfinite,
        "mapping_issues": [
            {"code": i.code, "line": analysis.mapping.line_of(i.span), "message": i.message, "key": i.key}
            for i in analysis.issues
        ],
        "counts": {
            "train_forward_keys": len(analysis.train.keys),
            "rollout_forward_keys": len(analysis.rollout.keys),
            "mapped_groups": len(analysis.records),
            "suspects": len(analysis.suspects),
        },
        "next_checks": next_checks(analysis.suspects),
        "calibration": calibration_summary(analysis),
        "parallel": {
            side: parallel_summary(dump)
            for side, dump in (("train", analysis.train), ("rollout", analysis.rollout))
            if dump.parallel is not None
        },
        "train_data_group": data_group_summary(analysis),
        "joined_steps": {
            side: {"steps": list(dump.joined_steps.steps), "files": list(dump.joined_steps.files)}
            for side, dump in (("train", analysis.train), ("rollout", analysis.rollout))
            if dump.joined_steps is not None
        },
        "disagreements": disagreement_rows(analysis),
        **({"element_wise": element_wise_summary(analysis, first)} if analysis.comparator.tensors else {}),
    }


def confidence_text(report: dict[str, Any]) -> str | None:
    """How far above the noise the first divergence is, in words (the CLI summary and the Markdown report)."""
    first = report["first_divergence"]
    if first is None or first["confidence"]["above_noise"] is None:
        return None
    found = first["confidence"]
    decided = bool((report.get("element_wise") or {}).get("first_divergence"))
    return confidence_words("the first divergence", found, first["module_bucket"], decided)


def confidence_words(subject: str, found: dict[str, Any], bucket: str, decided_element_wise: bool) -> str:
    """What `confidence` found of a divergence (`subject`), in words: one whose statistics agree is said to be decided
    element-wise (tensor- or md5-mode evidence), one whose output is within the noise but whose parameters differ
    is said to be decided by them; else how far above the noise floor its output is."""
    above, threshold, error = found["above_noise"], found["threshold"], found["error"]
    if decided_element_wise and above < 1:
        return f"{subject}'s statistics agree within the noise ({above:.3g}x the floor): decided element-wise"
    if bucket == PARAMETER_BUCKET and threshold is not None and error is not None and error <= threshold:
        return (
            f"{subject}'s output is still within the noise ({above:.3g}x the floor): decided by its "
            "parameters, which differ"
        )
    return f"{subject} is {above:.3g}x the noise floor"


def element_wise_summary(analysis: Analysis, first: Suspect | None) -> dict[str, Any]:
    """Tensor- or md5-mode dumps: the modes, what could not be read, and what decided the first divergence."""
    tensors = analysis.comparator.tensors
    assert tensors is not None
    decided = [
        f"{e.target}: {e.describe()}"
        for e in (first.record.comparison.tensor_evidence if first else ())
        if e.verdict == "mismatch"
    ]
    return {
        "modes": {"train": tensors.modes[0], "rollout": tensors.modes[1]},
        "notes": tensors.notes,
        "unreadable_files": tensors.problems,
        "first_divergence": decided,
    }


def confidence(analysis: Analysis, suspect: Suspect) -> dict[str, Any]:
    """How far above the run's noise a divergence is, and which other credible origins remain."""
    comparison = suspect.record.comparison
    calibrated = analysis.calibration.by_dtype.get(normalise_dtype(comparison.output_dtype) or "")
    error = comparison.output_error
    above = None
    if calibrated is not None and error is not None:
        above = calibrated.times_the_floor(error)
    alternatives = [s.train_key for s in analysis.suspects if s.credible_origin and s is not suspect][:5]
    return {
        "error": error,
        "noise_floor": calibrated.floor if calibrated else None,
        "above_noise": above,
        "threshold": calibrated.threshold if calibrated else None,
        "alternatives": alternatives,
        "dtype_path": comparison.dtype_path,
    }


def _with_ranks(analysis: Analysis, found: dict[str, Any], suspect: Suspect) -> dict[str, Any]:
    """The first divergence with its confidence, each rank's statistics of its merged slots, and rank-by-rank
    verdicts."""
    found["confidence"] = confidence(analysis, suspect)
    record = suspect.record
    tolerances = analysis.comparator.tolerances
    for side, dump, keys in (
        ("train", analysis.train, record.comparison.train_keys),
        ("rollout", analysis.rollout, record.comparison.rollout_keys),
    ):
        holders = held_by(dump, keys[0])
        if holders is not None:
            found[f"{side}_ranks"] = holders
        slots = merged_slots(dump, keys)
        if slots:
            found[f"{side}_per_rank"] = [
                {"slot": slot_label(slot), "rank": rank, "Max": v[0], "Min": v[1], "Mean": v[2], "Norm": v[3]}
                for slot, rank, v in per_rank_rows(dump, keys, slots, tolerances)
            ]
    verdicts = rank_by_rank(
        analysis.train, analysis.rollout, record.comparison.train_keys, record.comparison.rollout_keys, tolerances
    )
    if verdicts:
        found["rank_by_rank"] = verdicts
    return found


def calibration_summary(analysis: Analysis) -> dict[str, Any]:
    """The noise floor, threshold and first jump per dtype, as the records were judged."""
    return {
        dtype: {
            "pairs": c.pairs,
            "noise_floor": c.floor,
            "threshold": c.threshold,
            "fixed_tolerance": c.ceiling,
            "first_jump": c.jump_key,
            "jump_factor": c.jump_factor,
            "fallback": c.fallback,
            "summary": c.describe(),
        }
        for dtype, c in analysis.calibration.by_dtype.items()
    }


def data_group_summary(analysis: Analysis) -> dict[str, Any] | None:
    """Which train data-parallel group was compared with the rollout, and why (None: the train side has one)."""
    choice = analysis.comparator.data_choice
    if choice is None:
        return None
    return {
        "rank": choice.rank,
        "ranks": list(choice.groups[choice.group].ranks),
        "given": choice.given,
        "matched": choice.matched,
        "matching_ranks": choice.matching,
        "model_input": {"train_key": choice.train_key, "rollout_key": choice.rollout_key},
        "why": choice.describe(),
    }


def parallel_summary(dump: Dump) -> dict[str, Any]:
    """How a logical dump was merged from ranks, for the report."""
    info = dump.parallel
    assert info is not None
    return {
        "ranks": list(dict.fromkeys(info.ranks)),  # joined steps hold them all
        "files": list(info.files),
        "layout": info.layout,
        "sequence_parallel": info.sequence_parallel,
        "notes": info.notes,
        "dropped_keys": len(info.dropped),
    }


def disagreement_rows(analysis: Analysis) -> list[dict[str, Any]]:
    """Every slot whose copies disagree (across ranks, or a parameter across calls), mapped or not, in dump order."""
    rows = []
    for side, dump in (("train", analysis.train), ("rollout", analysis.rollout)):
        # the few entries with disagreements among 10^5, looked at without a lookup of each key
        for key, entry in [pair for pair in zip(dump.keys, dump.ordered_entries) if pair[1].disagreements]:
            for found in entry.disagreements:
                rows.append(
                    {
                        "side": side,
                        "key": key,
                        "slot": found.slot,
                        "across": found.across,
                        "reference": found.reference,
                        "members": list(found.members),
                        "rel_err": found.rel_err,
                        "message": found.describe(),
                    }
                )
    for record in [record for record in analysis.records if record.comparison.disagreements]:
        for found in record.comparison.disagreements:
            if found.across == "calls":
                rows.append(
                    {
                        "side": "train" if found in record.comparison.train_disagreements else "rollout",
                        "key": record.train_key,
                        "slot": found.slot,
                        "across": "calls",
                        "reference": found.reference,
                        "members": list(found.members),
                        "rel_err": found.rel_err,
                        "message": found.describe(),
                    }
                )
    return rows
