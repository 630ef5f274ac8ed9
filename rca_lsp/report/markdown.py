"""output_5_root_cause_report.md: the structured evidence written out for a person."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from rca_lsp.diagnose.rootcause import (
    CALL_DISAGREEMENT,
    IN_MODULE,
    INPUT_DATA,
    MANUAL,
    MISSING_OP,
    PARAMETER,
    RANK_DISAGREEMENT,
    UPSTREAM,
    Suspect,
)
from rca_lsp.dumps.stepjoin import steps_joined
from rca_lsp.model.keys import is_activation_like
from rca_lsp.report.mdtext import md_code, md_text
from rca_lsp.report.root_cause import confidence_text, root_cause_report

if TYPE_CHECKING:
    from rca_lsp.diagnose.analysis import Analysis

MAX_ROWS = 20

_MECHANISM = {
    MISSING_OP: (
        "an operation (typically an activation) runs on one side only between two aligned points",
        "{train_ops}",
        "{rollout_ops}",
    ),
    PARAMETER: ("the same module computes with different weights", "weights as trained", "weights as synced/loaded"),
    IN_MODULE: (
        "the module computes differently from identical inputs and weights",
        "the train implementation/config",
        "the rollout implementation/config",
    ),
    UPSTREAM: (
        "data diverges in modules the mapping does not cover (a one-sided op, or a layout statistics cannot see)",
        "the unmapped train modules listed",
        "the unmapped rollout modules listed",
    ),
    MANUAL: ("not determined automatically", "-", "-"),
    RANK_DISAGREEMENT: (
        "ranks hold different copies of a tensor that must be identical on every rank",
        "the copy on the reference rank",
        "the copy on the other ranks",
    ),
    CALL_DISAGREEMENT: (
        "a parameter changes between calls of one module",
        "the weights of the first call",
        "the weights of later calls",
    ),
    INPUT_DATA: (
        "the two sides were fed different data (the model's input differs)",
        "the batch the analysed train rank read",
        "the batch the rollout ran",
    ),
}


def _confidence(analysis: "Analysis") -> str:
    credible = [s for s in analysis.suspects if s.credible_origin]
    if not credible:
        return "low"
    first = credible[0]
    if first.classification == INPUT_DATA:
        return "high"  # the model inputs differ: certain, and nothing after it can be judged
    if first.classification == MANUAL or (
        first.classification == UPSTREAM and not first.between.train + first.between.rollout
    ):
        return "low"
    if len(credible) > 1 or first.classification == UPSTREAM or first.boundary is None:
        return "medium"
    return "high"


NOTHING_COMPARED = (
    "nothing was compared: no mapped module pair (the mapping is empty, or none of its entries names "
    "a module of both dumps)"
)


def _judgement(analysis: "Analysis", report: dict[str, Any]) -> list[str]:
    if not analysis.records:
        return [f"{NOTHING_COMPARED[0].upper()}{NOTHING_COMPARED[1:]}. No root-cause hypothesis."]
    if not analysis.suspects:
        return [
            "No credible divergence: every compared module pair is aligned within the dtype tolerances "
            "(or only premise problems remain, listed below). No root-cause hypothesis."
        ]
    first = analysis.suspects[0]
    lines = [
        f"- Most likely root cause: **{md_text(report['top_hypothesis'])}**",
        f"- At: {md_code(_group_key(first.record.comparison.train_keys))} ↔ "
        f"{md_code(_group_key(first.record.comparison.rollout_keys))} ({md_text(_calls(first))}), "
        f"classified {md_code(first.classification)}",
        f"- Confidence: {_confidence(analysis)}",
        f"- Why this is the first credible divergence: {md_text(first.rationale)}.",
    ]
    for side in ("train", "rollout"):
        holders = (report["first_divergence"] or {}).get(f"{side}_ranks")
        if holders is not None:
            named = "" if holders["key"] == getattr(first.record, f"{side}_key") else f" (as {md_code(holders['key'])})"
            lines.append(
                f"- In the {side} rank files: rank{'s' if len(holders['ranks']) > 1 else ''} "
                f"{', '.join(map(str, holders['ranks']))}{named}"
            )
    verdicts = (report["first_divergence"] or {}).get("rank_by_rank")
    if verdicts:  # both sides merged from the same ranks: which rank carries the divergence
        lines.append(f"- Rank by rank: {md_text('; '.join(verdicts))}")
    if first.boundary is not None:
        lines.append(
            f"- Last aligned boundary before it: {md_code(first.boundary.train_key)} ↔ "
            f"{md_code(first.boundary.rollout_key)}"
        )
    if report["top_evidence"]:
        lines.append("- Evidence keys: " + ", ".join(md_code(k) for k in report["top_evidence"][:8]))
    return lines


def _evidence_chain(analysis: "Analysis") -> list[str]:
    lines = [
        f"- Candidates reviewed: {len(analysis.records)} mapped module groups; "
        f"{len(analysis.suspects)} suspects (priority rank 1-2)."
    ]
    lines.append(
        f"- Dismissed as fused/structural: {len(analysis.structural)}"
        + (": " + ", ".join(md_code(r.train_key) for r in analysis.structural[:5]) if analysis.structural else "")
    )
    if analysis.suspects:
        first = analysis.suspects[0]
        between = first.between
        lines.append(
            f"- Last aligned boundary: {md_code(first.boundary.train_key) if first.boundary else 'none (start of call)'}"
        )
        lines.append(
            f"- Unmatched train modules between: {len(between.train)}"
            + (": " + ", ".join(md_code(k) for k in between.train[:6]) if between.train else "")
        )
        lines.append(
            f"- Unmatched rollout modules between: {len(between.rollout)}"
            + (": " + ", ".join(md_code(k) for k in between.rollout[:6]) if between.rollout else "")
        )
        activations = [k for k in between.train + between.rollout if is_activation_like(k)]
        implication = (
            "an activation-like op exists on one side only, exactly where the data starts to differ"
            if activations
            else "no one-sided activation between; see the classification"
        )
        lines.append(f"- What they imply: {implication}")
    return lines


def _suspect_table(suspects: list[Suspect]) -> list[str]:
    if not suspects:
        return ["(none)"]
    lines = ["| # | suspect (call) | classification | evidence | reading |", "|---|---|---|---|---|"]
    for number, suspect in enumerate(suspects[:MAX_ROWS], 1):
        c = suspect.record.comparison
        evidence = "; ".join(
            [c.output.reason] + [t.reason for t in (*c.inputs, *c.parameters) if t.consistency == "mismatch"][:2]
        )
        reading = (
            "first credible divergence"
            if suspect.credible_origin
            else (
                f"explained by {md_text(suspect.explained_by, in_table=True)}"
                if suspect.explained_by
                else "follows from an earlier divergence"
            )
        )
        lines.append(
            f"| {number} | {md_code(suspect.train_key, in_table=True)} ({suspect.record.call_index}) | "
            f"{suspect.classification} | {md_text(evidence.replace('|', '/'), in_table=True)} | {reading} |"
        )
    if len(suspects) > MAX_ROWS:
        lines.append(f"\n… and {len(suspects) - MAX_ROWS} more in output_5_root_cause_report.json")
    return lines


def _excluded(analysis: "Analysis") -> list[str]:
    lines = [f"- {md_code(r.train_key)}: {md_text(r.comparison.reasoning)}" for r in analysis.structural[:MAX_ROWS]]
    later = [s for s in analysis.suspects[1:] if not s.credible_origin][:MAX_ROWS]
    lines += [f"- {md_code(s.train_key)}: {md_text(s.rationale)}" for s in later]
    return lines or ["(none)"]


def _expert(analysis: "Analysis") -> list[str]:
    if not analysis.suspects:
        return ["(no divergence to explain)"]
    first = analysis.suspects[0]
    mechanism, train_path, rollout_path = _MECHANISM[first.classification]
    ops = {
        side: ", ".join(md_code(k) for k in keys if is_activation_like(k))
        or "no separate activation module: check "
        "that the activation is applied inside the neighbouring module (config flag, fused kernel)"
        for side, keys in (("train_ops", first.between.train), ("rollout_ops", first.between.rollout))
    }
    train_path, rollout_path = train_path.format(**ops), rollout_path.format(**ops)
    return [
        f"- Implementation/config to inspect: {md_code(first.train_key)} and {md_code(first.record.rollout_key)}",
        f"- Expected train path: {train_path}",
        f"- Expected rollout path: {rollout_path}",
        f"- Mismatch mechanism: {mechanism}",
    ]


def _notes(analysis: "Analysis", report: dict[str, Any]) -> list[str]:
    credible = [s for s in analysis.suspects if s.credible_origin]
    lines = []
    if len(credible) > 1:
        lines.append(
            "- Alternatives: other independent divergences: " + ", ".join(md_code(s.train_key) for s in credible[1:6])
        )
    if analysis.issues:
        lines.append(
            f"- Mapping problems ({len(analysis.issues)}) limit what was compared: "
            + "; ".join(f"line {analysis.mapping.line_of(i.span)}: {i.code}" for i in analysis.issues[:5])
        )
    premise = sum(1 for r in analysis.records if r.comparison.module_priority_rank == 3)
    if premise:
        lines.append(f"- Missing evidence: {premise} mapped pairs had no comparable output.")
    if report.get("nonfinite_on_both_sides"):
        lines.append(f"- Non-finite statistics on both sides: {len(report['nonfinite_on_both_sides'])} modules.")
    lines.append("- Statistics (Max/Min/Mean/Norm) cannot reveal permutations or layouts of equal values.")
    return lines


def _provenance(analysis: "Analysis", report: dict[str, Any]) -> list[str]:
    """Calibration, ranks merged and calls joined: how the compared statistics were made and judged."""
    lines = [f"- Calibration: {md_text(summary['summary'])}" for summary in report["calibration"].values()]
    first, stated = report["first_divergence"], confidence_text(report)
    if first is not None and stated is not None:
        lines.append(
            f"- Confidence: {md_text(stated)}; "
            f"other credible origins: {', '.join(map(md_code, first['confidence']['alternatives'])) or 'none'}"
        )
    lines += _element_wise(report.get("element_wise"))
    for side, joined in report["joined_steps"].items():
        lines.append(f"- {side.capitalize()}: {md_text(steps_joined(joined['steps']))}")
    if report["train_data_group"] is not None:
        lines.append(f"- Train data-parallel group compared: {md_text(report['train_data_group']['why'])}")
    for side, summary in report["parallel"].items():
        lines.append(f"- {side.capitalize()}: {len(summary['ranks'])} ranks merged, {md_text(summary['layout'])}")
        lines += [f"  - {md_text(note)}" for note in summary["notes"]]
    for row in report["disagreements"][:MAX_ROWS]:
        lines.append(f"- Disagreement ({row['side']}) {md_code(row['key'])}: {md_text(row['message'])}")
    joined = [r for r in analysis.records if r.comparison.joins_calls]
    if joined:
        lines.append(
            f"- {len(joined)} mapped groups join several calls along the sequence, e.g. "
            f"{md_code(joined[0].train_key)}: {md_text(joined[0].comparison.calls_note)}"
        )
    return lines


def _element_wise(summary: dict[str, Any] | None) -> list[str]:
    """Tensor- or md5-mode dumps: what the element-wise comparison used and found (output_3's evidence columns)."""
    if summary is None:
        return []
    modes = summary["modes"]
    lines = [
        f"- Element-wise evidence: train dumped in {modes['train']} mode, rollout in {modes['rollout']} mode; each "
        "pair uses the best evidence both sides have (output_3's `evidence` column)"
    ]
    lines += [f"  - {note}" for note in summary["notes"]]
    lines += [f"  - unreadable: {problem}" for problem in summary["unreadable_files"][:MAX_ROWS]]
    lines += [f"  - at the first divergence: {found}" for found in summary["first_divergence"]]
    return lines


CHART_HTML = "output_5_root_cause_report.html"
CHART_PNG = "output_5_root_cause_report.png"


def _chart(chart_image: str | None, drawn: bool, caption: str) -> list[str]:
    if not drawn:
        return ["Not drawn in this run (`--no-chart`); run the analysis without it for the chart and its image."]
    interactive = f"[{CHART_HTML}]({CHART_HTML}) (hover for each module's statistics, zoom, calls and ranks)"
    if chart_image is None:
        return [
            "No image: drawing it needs matplotlib, the optional `chart` extra (`pip install 'rca-lsp[chart]'`); "
            "run the analysis again after installing it.",
            "",
            f"The interactive chart: {interactive}.",
        ]
    shown = f"The image shows {md_text(caption)}." if caption else ""
    return [
        f"![Relative error of each mapped module along execution order]({chart_image})",
        "",
        *([shown, ""] if shown else []),
        f"Interactive: {interactive}.",
    ]


def render_markdown(
    analysis: "Analysis",
    run_id: str | None = None,
    chart_image: str | None = None,
    chart: bool = True,
    report: dict[str, Any] | None = None,
    chart_caption: str = "",
) -> str:
    """The report; `run_id`: the run writing it, named in the Context (see manifest); `chart_image`: the file name
    of the chart's image next to the report (None: it could not be drawn, the report says how to get it); `chart`:
    whether the run drew the chart at all; `report`: the analysis's root_cause_report when the caller has it;
    `chart_caption`: which calls the image's panels show (png.image_caption)."""
    if report is None:
        report = root_cause_report(analysis)
    sections = [
        (
            "Context",
            [
                f"- Train dump: {md_code(analysis.train.path)} ({len(analysis.train.keys)} forward modules)",
                f"- Rollout dump: {md_code(analysis.rollout.path)} ({len(analysis.rollout.keys)} forward modules)",
                f"- Mapping: {md_code(analysis.mapping.path)} ({len(analysis.records)} groups compared)",
                *([f"- Run: {md_code(run_id)} (see output_manifest.json)"] if run_id else []),
            ],
        ),
        *([("Calibration, ranks and calls", provenance)] if (provenance := _provenance(analysis, report)) else []),
        ("Final judgement", _judgement(analysis, report)),
        *([("Divergence chart", _chart(chart_image, chart, chart_caption))] if analysis.records else []),
        ("Evidence chain", _evidence_chain(analysis)),
        ("Key suspects", _suspect_table(analysis.suspects)),
        ("Excluded candidates", _excluded(analysis)),
        ("Expert hypothesis", _expert(analysis)),
        ("Next checks", [f"- {md_text(c)}" for c in report["next_checks"]]),
        ("Notes", _notes(analysis, report)),
    ]
    body = "\n\n".join(f"## {title}\n\n" + "\n".join(lines) for title, lines in sections)
    return f"# Root-cause report\n\n{body}\n"


def _group_key(keys: Sequence[str]) -> str:
    """A record's keys on one side as its mapping entry names them: one key, the calls of one module joined along
    the sequence as `<module>.forward.*`, else the first part of a fused/split group."""
    module = keys[0].rpartition(".")[0]
    if len(keys) > 1 and all(key.rpartition(".")[0] == module for key in keys):
        return module + ".*"
    return keys[0]


def _calls(suspect: Suspect) -> str:
    """The call a suspect is of, and the calls its record joined along the sequence when it did."""
    note = suspect.record.comparison.calls_note
    return f"call {suspect.record.call_index}" + (f"; {note}" if note else "")
