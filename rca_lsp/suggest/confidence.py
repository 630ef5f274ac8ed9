"""Turning what names and dumps say about a candidate pair into one confidence (0..1) and a reason."""

from __future__ import annotations

from dataclasses import dataclass

from rca_lsp.suggest.canonical import CanonicalName
from rca_lsp.suggest.evidence import Evidence, ShapeRelation, StatsRelation

ACCEPT_THRESHOLD = 0.6  # suggestions below this are listed, not written

# How much each kind of name agreement is worth before the dumps confirm or refute it.
IDENTICAL_PATH = 0.7
CANONICAL_PATH = 0.6
MODEL_ROOT = 0.4  # both paths are only wrappers: any two whole-model modules look alike by name
SAME_PLACE = 0.3  # no name agreement, but the same position among a layer's unmatched modules
NO_NAME = 0.0

_OUTPUT_SHAPE = {ShapeRelation.SAME: 0.1, ShapeRelation.PERMUTED: 0.1, ShapeRelation.FLATTENED: 0.1,
                 ShapeRelation.NUMEL: 0.03, ShapeRelation.DIFFERENT: -0.4, ShapeRelation.UNKNOWN: 0.0}
_INPUT_SHAPE = {ShapeRelation.SAME: 0.05, ShapeRelation.PERMUTED: 0.05, ShapeRelation.FLATTENED: 0.05,
                ShapeRelation.NUMEL: 0.0, ShapeRelation.DIFFERENT: -0.15, ShapeRelation.UNKNOWN: 0.0}
_WEIGHT_SHAPE = {ShapeRelation.SAME: 0.05, ShapeRelation.PERMUTED: 0.05, ShapeRelation.FLATTENED: 0.0,
                 ShapeRelation.NUMEL: -0.1, ShapeRelation.DIFFERENT: -0.3, ShapeRelation.UNKNOWN: 0.0}
_OUTPUT_STATS_EQUAL = 0.25
_INPUT_STATS_EQUAL = 0.1
_SAME_KIND = 0.05
_OTHER_KIND = -0.25


@dataclass(frozen=True, slots=True)
class NameEvidence:
    score: float
    text: str


@dataclass(frozen=True, slots=True)
class Assessment:
    confidence: float
    reason: str

    @property
    def accepted(self) -> bool:
        return self.confidence >= ACCEPT_THRESHOLD


def name_evidence(trains: list[CanonicalName], rollouts: list[CanonicalName], train_paths: list[str],
                  rollout_paths: list[str]) -> NameEvidence:
    """How far names alone say the two sides are the same module(s); their canonical paths already agree."""
    if train_paths == rollout_paths:
        return NameEvidence(IDENTICAL_PATH, "identical module path")
    if not trains[0].path:
        return NameEvidence(MODEL_ROOT, f"both are whole-model modules ({trains[0].wrapper} / {rollouts[0].wrapper})")
    renames = _renames(trains, rollouts)
    if renames:
        return NameEvidence(CANONICAL_PATH, f"naming rules {', '.join(renames)}")
    return NameEvidence(CANONICAL_PATH, f"same path under wrappers {trains[0].wrapper or '-'} / {rollouts[0].wrapper or '-'}")


def _renames(trains: list[CanonicalName], rollouts: list[CanonicalName]) -> list[str]:
    """The raw names that differ, segment by segment (the last segment joined over a group's members)."""
    pairs = [f"{train_raw}↔{rollout_raw}"
             for (_, train_raw), (_, rollout_raw) in zip(trains[0].sources[:-1], rollouts[0].sources[:-1])
             if train_raw != rollout_raw]
    train_last, rollout_last = _last_names(trains), _last_names(rollouts)
    if train_last != rollout_last:
        pairs.append(f"{train_last}↔{rollout_last}")
    return pairs


def _last_names(names: list[CanonicalName]) -> str:
    return "+".join(name.sources[-1][1] for name in names if name.sources)


def assess(name: NameEvidence, evidence: Evidence) -> Assessment:
    if evidence.conflict is not None:
        return Assessment(0.0, f"{name.text}; not paired: {evidence.conflict}")
    score = name.score
    notes = [name.text]
    score += _OUTPUT_SHAPE[evidence.output_shape] + _INPUT_SHAPE[evidence.input_shape]
    score += _WEIGHT_SHAPE[evidence.weight_shape]
    if evidence.output_shape is ShapeRelation.DIFFERENT:
        notes.append(f"output shapes differ ({_dims(evidence.shapes[0])} vs {_dims(evidence.shapes[1])})")
    elif evidence.output_shape is not ShapeRelation.UNKNOWN:
        notes.append(f"outputs: {evidence.output_shape.value}")
    if evidence.weight_shape in (ShapeRelation.DIFFERENT, ShapeRelation.NUMEL):
        notes.append("weight shapes differ")
    if evidence.output_stats is StatsRelation.EQUAL:
        score += _OUTPUT_STATS_EQUAL
        notes.append("output statistics equal")
    elif evidence.input_stats is StatsRelation.EQUAL:
        score += _INPUT_STATS_EQUAL
        notes.append("input statistics equal, output statistics differ")
    elif StatsRelation.DIFFERENT in (evidence.output_stats, evidence.input_stats):
        notes.append("statistics differ")
    if evidence.same_kind is not None:
        score += _SAME_KIND if evidence.same_kind else _OTHER_KIND
        if not evidence.same_kind:
            notes.append("module classes of different kinds")
    return Assessment(round(min(max(score, 0.0), 0.99), 3), "; ".join(notes))


def _dims(shape: tuple[int, ...] | None) -> str:
    return "?" if shape is None else "[" + ",".join(map(str, shape)) + "]"
