"""Hover text for a mapping entry: verdicts, statistics side by side, boundary, unmatched ops, next checks. Text
from the dumps is Markdown-escaped (report.mdtext): a key cannot add markup or reorder the hover (bidi controls)."""

from __future__ import annotations

import math

from rca_lsp.base.digits import is_ascii_digits
from rca_lsp.compare.rankview import held_by, merged_slots, per_rank_rows, rank_by_rank
from rca_lsp.compare.records import ModuleRecord
from rca_lsp.compare.statistics import TargetComparison
from rca_lsp.diagnose.analysis import Analysis
from rca_lsp.diagnose.hypothesis import next_checks
from rca_lsp.diagnose.rootcause import Suspect
from rca_lsp.dumps.dump import slot_label
from rca_lsp.model.keys import parse_module_key
from rca_lsp.report.mdtext import md_code, md_text
from rca_lsp.report.root_cause import confidence, confidence_words

_STATS = ("max", "min", "mean", "norm")


def _number(value: float | None) -> str:
    if value is None:
        return "–"
    if not math.isfinite(value):
        return str(value)
    return f"{value:.6g}"


def _stats_table(targets: list[TargetComparison]) -> list[str]:
    lines = ["| target | side | dtype | shape | Max | Min | Mean | Norm |", "|---|---|---|---|---|---|---|---|"]
    for target in targets:
        for side, stats in (("train", target.train), ("rollout", target.rollout)):
            if stats is None:
                lines.append(f"| {md_text(target.target, in_table=True)} | {side} | – | – | – | – | – | – |")
                continue
            shape = "×".join(str(d) for d in stats.shape) if stats.shape else "–"
            values = " | ".join(_number(getattr(stats, name)) for name in _STATS)
            lines.append(
                f"| {md_text(target.target, in_table=True)}{' (aggregated)' if target.aggregated else ''} | {side} | "
                f"{md_text((stats.dtype or '–').replace('torch.', ''), in_table=True)} | {shape} | {values} |"
            )
        errors = {s.name: s for s in target.stats}
        if errors:
            cells = " | ".join(
                f"{_number(errors[n].rel_err)} {errors[n].status}" if n in errors else "–"
                for n in ("Max", "Min", "Mean", "Norm")
            )
            lines.append(f"| | rel. err (tol {target.tolerance:g}) | | {target.shape_relation} | {cells} |")
    return lines


def _verdicts(record: ModuleRecord) -> str:
    c = record.comparison
    return (
        f"output **{c.output_consistency}** · input **{c.input_args_consistency}** · "
        f"parameters **{c.parameter_consistency}** · kwargs {c.kwargs_consistency} · "
        f"bucket `{c.module_bucket}` (rank {c.module_priority_rank}) · {c.cardinality}"
    )


def _suspect_lines(suspect: Suspect) -> list[str]:
    lines = [
        f"**{suspect.classification}**" + ("" if suspect.credible_origin else " (follows from an earlier divergence)"),
        "",
        md_text(suspect.rationale),
        "",
    ]
    if suspect.boundary is not None:
        lines.append(f"Last aligned boundary: {md_code(suspect.boundary.train_key)}")
    else:
        lines.append("Last aligned boundary: none in this call")
    between = [("train-only", suspect.between.train), ("rollout-only", suspect.between.rollout)]
    for label, keys in between:
        if keys:
            named = ", ".join(map(md_code, keys[:5])) + (f" … (+{len(keys) - 5})" if len(keys) > 5 else "")
            lines.append(f"Unmatched {label} between: {named}")
    lines += ["", "Next checks:"] + [f"- {md_text(check)}" for check in next_checks([suspect])]
    return lines


def _name(key: str) -> str:
    """The module's own name; a numbered container (a decoder layer) by its class and number."""
    parsed = parse_module_key(key)
    if parsed is None:
        return key
    last = parsed.path.rsplit(".", 1)[-1]
    return f"{parsed.class_name} {last}" if is_ascii_digits(last) else last


def provenance_notes(analysis: Analysis, record: ModuleRecord) -> list[str]:
    """Where the compared statistics come from: calls joined along the sequence, ranks merged."""
    notes = []
    if record.comparison.calls_note:
        notes.append(f"Calls joined along the sequence: {md_text(record.comparison.calls_note)}")
    for side, dump, keys in (
        ("train", analysis.train, record.comparison.train_keys),
        ("rollout", analysis.rollout, record.comparison.rollout_keys),
    ):
        if dump.parallel is None:
            continue
        merged = list(dict.fromkeys(dump.parallel.merges[k] for k in keys if k in dump.parallel.merges))
        how = "; ".join(merged[:3]) if merged else "every slot replicated (identical on all ranks)"
        ranks = sorted({r for k in keys if (held := held_by(dump, k)) is not None for r in held["ranks"]})
        notes.append(
            f"{side.capitalize()} merged from rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))} of "
            f"{dump.parallel.rank_count} ({md_text(dump.parallel.layout)}): {md_text(how)}"
        )
    return notes


def _confidence_lines(analysis: Analysis, suspect: Suspect) -> list[str]:
    """The confidence in a credible origin, worded as the report words the first divergence's."""
    found = confidence(analysis, suspect)
    if found["above_noise"] is None:
        return []
    comparison = suspect.record.comparison
    decided = any(e.verdict == "mismatch" for e in comparison.tensor_evidence)
    stated = confidence_words("this divergence", found, comparison.module_bucket, decided)
    others = ", ".join(map(md_code, found["alternatives"])) or "none"
    return [
        f"Confidence: {md_text(stated)} ({found['noise_floor']:.2g} in this run; a difference is more than "
        f"{found['threshold']:.2g}); other credible origins: {others}",
        "",
    ]


def _per_rank_lines(analysis: Analysis, record: ModuleRecord) -> list[str]:
    """Each rank's statistics of the merged slots of a divergence, and rank-by-rank verdicts when both sides were
    merged from the same number of ranks: which rank carries it."""
    lines = []
    tolerances = analysis.comparator.tolerances
    for side, dump, keys in (
        ("train", analysis.train, record.comparison.train_keys),
        ("rollout", analysis.rollout, record.comparison.rollout_keys),
    ):
        slots = merged_slots(dump, keys)[:3]
        rows = per_rank_rows(dump, keys, slots, tolerances) if slots else []
        if rows:
            lines += [
                f"Per-rank statistics ({side}):",
                "",
                "| slot | rank | Max | Min | Mean | Norm |",
                "|---|---|---|---|---|---|",
            ]
            lines += [
                f"| {md_text(slot_label(slot), in_table=True)} | {rank} | "
                + " | ".join(_number(v) for v in values)
                + " |"
                for slot, rank, values in rows
            ] + [""]
    verdicts = rank_by_rank(
        analysis.train, analysis.rollout, record.comparison.train_keys, record.comparison.rollout_keys, tolerances
    )
    if verdicts:
        lines += ["Rank by rank: " + md_text("; ".join(verdicts)), ""]
    return lines


def hover_markdown(analysis: Analysis, train_key: str, rollout_index: int | None) -> str | None:
    record = analysis.by_train_key.get(train_key)
    if record is None:
        row_missing = train_key not in analysis.train.entries
        return (
            "Not in the train dump."
            if row_missing
            else "Not compared: none of the mapped rollout keys is in the rollout dump."
        )
    c = record.comparison
    rollout_names = ", ".join(dict.fromkeys(md_text(_name(k)) for k in c.rollout_keys))
    header = f"### {md_text(_name(record.train_key))} ↔ {rollout_names} (call {record.call_index})"
    lines = [header, "", _verdicts(record), ""]
    notes = provenance_notes(analysis, record)
    choice = analysis.comparator.data_choice  # set only when the train side has several data-parallel groups
    if choice is not None:
        notes.append(f"Train data-parallel group: {md_text(choice.describe())}")
    if notes:
        lines += [f"{note}  " for note in notes] + [""]
    suspect = analysis.suspect_by_train_key.get(train_key)
    if suspect is not None:
        lines += _suspect_lines(suspect) + [""]
        if suspect.credible_origin:
            lines += _confidence_lines(analysis, suspect) + _per_rank_lines(analysis, record)
    elif c.module_priority_rank >= 3:
        lines += [md_text(c.reasoning), ""]
    inputs = list(c.inputs)
    if rollout_index is not None and len(inputs) > 1 and rollout_index < len(inputs):
        inputs = [inputs[rollout_index]]
    lines += _stats_table([c.output, *inputs[:3], *c.parameters])
    lines += _element_wise_lines(record)
    return "\n".join(lines)


def _element_wise_lines(record: ModuleRecord) -> list[str]:
    """What the tensors (or md5 hashes) of each target say, beside the statistics above."""
    evidence = record.comparison.tensor_evidence
    if not evidence:
        return []
    lines = ["", "Element-wise:", ""]
    lines += [f"- `{e.target}` {e.verdict or 'not compared'}: {e.describe()}" for e in evidence[:8]]
    return lines
