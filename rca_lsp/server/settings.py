"""Client settings (`rcaLsp` section / initializationOptions) as a typed dataclass.

The rules are those of `rca_lsp/data/settings_rules.json`, which the VS Code client applies too (the same
messages for the same values: `tests/settings_cases.json` is run on both sides)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from rca_lsp.dumps.sources import is_step_number
from rca_lsp.model.tolerance import Tolerances, checked_tolerance
from rca_lsp.report.tables.columns import COLUMN_STYLES
from rca_lsp.server.codes import DEFAULT_SEVERITY

RULES: dict[str, Any] = json.loads(resources.files("rca_lsp").joinpath("data", "settings_rules.json").read_text())
SEVERITY_NAMES: tuple[str, ...] = tuple(RULES["severities"])
DEFAULT_OUT_DIR: str = RULES["defaultOutDir"]


@dataclass(frozen=True)
class PairSetting:
    mapping_key: str
    train: str
    rollout: str
    step: int | None = None  # the step<N> folder, when a dump directory holds several
    parallel: str | None = None  # the train run's rank layout, e.g. "tp=2,pp=2" (default: inferred)
    rollout_parallel: str | None = None
    rollout_step: int | str | None = None  # a step, "all" or a span "A-B" of the rollout's steps joined as calls
    train_rank: int | None = None  # analyse the train data-parallel group of this rank (default: chosen by data)


@dataclass(frozen=True)
class Settings:
    pairs: tuple[PairSetting, ...] = ()
    tolerances: Tolerances = field(default_factory=Tolerances)
    severity: dict[str, str] = field(default_factory=dict)  # diagnostic code -> error|warning|information|hint|off
    out_dir: str = DEFAULT_OUT_DIR
    columns: str = COLUMN_STYLES[0]  # output_3's column names in writeOutputs: rca | msprobe (msprobe compare's)
    max_findings: int = 500  # findings published per file; credible origins are always included
    max_per_kind: int = 500  # other diagnostics published per file and code, then one summary of how many more

    @classmethod
    def from_client(cls, raw: Any) -> tuple["Settings", list[str]]:
        """Settings from the client's object (the `rcaLsp` section, or an object holding it), and a message for
        each part that had to be ignored."""
        if not isinstance(raw, dict):
            return cls(), ([] if raw is None else [f"rcaLsp settings must be an object, got {type(raw).__name__}"])
        section = raw.get("rcaLsp")
        if section is not None and not isinstance(section, dict):
            return cls(), [f"rcaLsp settings must be an object, got {_json_kind(section)}"]
        raw = raw if section is None else section
        problems: list[str] = []
        pairs = _pairs(raw.get("pairs"), problems)
        tolerances = _tolerances(raw.get("tolerances"), problems)
        severity = _severity(raw.get("severity"), problems)
        out_dir = _out_dir(raw.get("outDir"), problems)
        columns = _columns(raw.get("columns"), problems)
        return cls(pairs, Tolerances.with_overrides(tolerances), severity, out_dir, columns), problems


def _json_kind(value: object) -> str:
    """What a JSON value is, in the words of the messages (the client words them the same)."""
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, (int, float)):
        return "a number"
    return "a list" if isinstance(value, list) else "an object" if isinstance(value, dict) else "text"


def _text(value: object) -> str | None:
    """A non-blank string, trimmed; None otherwise."""
    return (value.strip() or None) if isinstance(value, str) else None


def _pairs(raw: object, problems: list[str]) -> tuple[PairSetting, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        problems.append("rcaLsp.pairs must be a list of {mappingKey, train, rollout} objects")
        return ()
    pairs = []
    for index, item in enumerate(raw):
        required = [_text(item.get(k)) for k in RULES["pairRequired"]] if isinstance(item, dict) else [None]
        if not all(required):
            problems.append(f"rcaLsp.pairs[{index}] needs string fields mappingKey, train and rollout")
            continue
        step = item.get("step")
        if step is not None and not is_step_number(step):
            problems.append(f"rcaLsp.pairs[{index}].step must be a step number (0, 1, ...)")
            continue
        rollout_step = item.get("rolloutStep")
        if rollout_step is not None and not (isinstance(rollout_step, str) or is_step_number(rollout_step)):
            problems.append(f'rcaLsp.pairs[{index}].rolloutStep must be a step number, "all" or a span "0-4"')
            continue
        train_rank = item.get("trainRank")
        if train_rank is not None and not is_step_number(train_rank):
            problems.append(f"rcaLsp.pairs[{index}].trainRank must be a rank number (0, 1, ...)")
            continue
        layouts = [item.get(k) for k in RULES["pairOptionalText"]]
        if any(value is not None and not isinstance(value, str) for value in layouts):
            problems.append(f'rcaLsp.pairs[{index}].parallel must be text such as "tp=2,pp=2"')
            continue
        mapping_key, train, rollout = required
        parallel, rollout_parallel = (_text(value) for value in layouts)
        pairs.append(
            PairSetting(
                str(mapping_key), str(train), str(rollout), step, parallel, rollout_parallel, rollout_step, train_rank
            )
        )
    return tuple(pairs)


def _tolerances(raw: object, problems: list[str]) -> dict[str, float]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        problems.append('rcaLsp.tolerances must be an object such as {"bfloat16": 0.03}')
        return {}
    tolerances: dict[str, float] = {}
    for name, value in raw.items():
        if value is None:
            continue  # the default
        try:
            dtype, tolerance = checked_tolerance(str(name), value)
        except ValueError as error:
            problems.append(f"rcaLsp.tolerances.{name}: {error}; ignored")
        else:
            tolerances[dtype] = tolerance
    return tolerances


def _severity(raw: object, problems: list[str]) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        problems.append('rcaLsp.severity must be an object such as {"missing-op": "error"}')
        return {}
    severity = {}
    for code, level in raw.items():
        if level not in SEVERITY_NAMES:
            problems.append(f"rcaLsp.severity.{code} must be one of {', '.join(SEVERITY_NAMES)}")
            continue
        if code not in DEFAULT_SEVERITY:
            problems.append(f"rcaLsp.severity.{code}: unknown diagnostic code")
        severity[code] = level
    return severity


def _out_dir(raw: object, problems: list[str]) -> str:
    if raw is not None and not isinstance(raw, str):
        problems.append(f"rcaLsp.outDir must be a folder path, got {_json_kind(raw)}; using {DEFAULT_OUT_DIR}")
    return _text(raw) or DEFAULT_OUT_DIR


def _columns(raw: object, problems: list[str]) -> str:
    styles: list[str] = RULES["columnStyles"]
    if raw is None or raw in styles:
        return str(raw or styles[0])
    problems.append(f"rcaLsp.columns must be one of {', '.join(styles)}; using {styles[0]}")
    return styles[0]
