"""Turning what names and dumps say about a candidate pair into one confidence (0..1) and a reason."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from rca_lsp.suggest.canonical import CanonicalName, NameTemplate
from rca_lsp.suggest.evidence import SHAPE_WORDS, Evidence

ACCEPT_THRESHOLD = 0.6  # suggestions below this are listed, not written

# How much each kind of name agreement is worth before the dumps confirm or refute it.
IDENTICAL_PATH = 0.7
CANONICAL_PATH = 0.6
MODEL_ROOT = 0.4  # both paths are only wrappers: any two whole-model modules look alike by name
SAME_PLACE = 0.25  # no name agreement, but the same position among a layer's unpaired modules
NO_NAME = 0.0

_OUTPUT_SHAPE = {"same": 0.1, "permuted": 0.1, "flattened": 0.1, "numel": 0.03, "different": -0.4, "unknown": 0.0}
_INPUT_SHAPE = {"same": 0.05, "permuted": 0.05, "flattened": 0.05, "numel": 0.0, "different": -0.15, "unknown": 0.0}
_WEIGHT_SHAPE = {"same": 0.05, "permuted": 0.05, "flattened": 0.0, "numel": -0.1, "different": -0.3, "unknown": 0.0}
_OUTPUT_STATS_EQUAL = 0.25
_INPUT_STATS_EQUAL = 0.1
_SAME_KIND = 0.05
_OTHER_KIND = -0.25
_SCALES_OTHERWISE = -0.25  # output/input element ratios differ: another operation at that name


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


def name_evidence(trains: list[CanonicalName], rollouts: list[CanonicalName], identical_paths: bool) -> NameEvidence:
    """How far names alone say the two sides are the same module(s); their canonical paths already agree."""
    if identical_paths:
        return _IDENTICAL
    return _name_evidence(tuple(name.template for name in trains), tuple(name.template for name in rollouts))


_IDENTICAL = NameEvidence(IDENTICAL_PATH, "identical module path")


@lru_cache(maxsize=4096)
def _name_evidence(trains: tuple[NameTemplate, ...], rollouts: tuple[NameTemplate, ...]) -> NameEvidence:
    if trains[0].is_root:
        return NameEvidence(MODEL_ROOT, f"both are whole-model modules ({trains[0].wrapper} / {rollouts[0].wrapper})")
    renames = _renames(trains, rollouts)
    if renames:
        return NameEvidence(CANONICAL_PATH, f"naming rules {', '.join(renames)}")
    wrappers = f"{trains[0].wrapper or '-'} / {rollouts[0].wrapper or '-'}"
    return NameEvidence(CANONICAL_PATH, f"same path under wrappers {wrappers}")


def _renames(trains: tuple[NameTemplate, ...], rollouts: tuple[NameTemplate, ...]) -> list[str]:
    """The raw names that differ, segment by segment (the last segment joined over a group's members)."""
    pairs = [
        f"{train_raw}↔{rollout_raw}"
        for (_, train_raw), (_, rollout_raw) in zip(trains[0].sources[:-1], rollouts[0].sources[:-1])
        if train_raw != rollout_raw
    ]
    train_last, rollout_last = _last_names(trains), _last_names(rollouts)
    if train_last != rollout_last:
        pairs.append(f"{train_last}↔{rollout_last}")
    return pairs


def _last_names(names: tuple[NameTemplate, ...]) -> str:
    return "+".join(name.sources[-1][1] for name in names if name.sources)


def assess(name: NameEvidence, evidence: Evidence) -> Assessment:
    if evidence.conflict is not None:
        return Assessment(0.0, f"{name.text}; not paired: {evidence.conflict}")
    assessment = _assess(
        name,
        evidence.output_shape,
        evidence.input_shape,
        evidence.weight_shape,
        evidence.output_stats,
        evidence.input_stats,
        evidence.same_kind,
        evidence.scales_alike,
    )
    if evidence.output_shape != "different":
        return assessment
    train_shape, rollout_shape = evidence.output_shapes
    return Assessment(
        assessment.confidence,
        f"{assessment.reason}; output shapes differ ({_dims(train_shape)} vs {_dims(rollout_shape)})",
    )


@lru_cache(maxsize=8192)
def _assess(
    name: NameEvidence,
    output_shape: str,
    input_shape: str,
    weight_shape: str,
    output_stats: str,
    input_stats: str,
    same_kind: bool | None,
    scales_alike: bool | None,
) -> Assessment:
    """Name score plus what the dumps add, with the reason (few distinct combinations: shared instances)."""
    score = name.score + _OUTPUT_SHAPE[output_shape] + _INPUT_SHAPE[input_shape] + _WEIGHT_SHAPE[weight_shape]
    notes = [name.text]
    if output_shape not in ("different", "unknown"):
        notes.append(f"outputs: {SHAPE_WORDS[output_shape]}")
    if weight_shape in ("different", "numel"):
        notes.append("weight shapes differ")
    if output_stats == "equal":
        score += _OUTPUT_STATS_EQUAL
        notes.append("output statistics equal")
    elif input_stats == "equal":
        score += _INPUT_STATS_EQUAL
        notes.append("input statistics equal, output statistics differ")
    elif "different" in (output_stats, input_stats):
        notes.append("statistics differ")
    if same_kind is not None:
        score += _SAME_KIND if same_kind else _OTHER_KIND
        if not same_kind:
            notes.append("module classes of different kinds")
    if scales_alike is False:
        score += _SCALES_OTHERWISE
        notes.append("output elements per input element differ (another operation)")
    return Assessment(round(min(max(score, 0.0), 0.99), 3), "; ".join(notes))


def _dims(shape: tuple[int, ...] | None) -> str:
    return "?" if shape is None else "[" + ",".join(map(str, shape)) + "]"
