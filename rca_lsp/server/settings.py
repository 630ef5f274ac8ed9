"""Client settings (`rcaLsp` section / initializationOptions) as a typed dataclass."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rca_lsp.core.msprobe_columns import COLUMN_STYLES
from rca_lsp.core.tolerance import Tolerances, checked_tolerance

SEVERITY_NAMES = ("error", "warning", "information", "hint", "off")


@dataclass(frozen=True)
class PairSetting:
    mapping_key: str
    train: str
    rollout: str
    step: int | None = None  # the step<N> folder, when a dump directory holds several
    parallel: str | None = None  # the train run's rank layout, e.g. "tp=2,pp=2" (default: inferred)
    rollout_parallel: str | None = None
    rollout_step: int | str | None = None  # a step, "all" or a span "A-B" of the rollout's steps joined as calls


@dataclass(frozen=True)
class Settings:
    pairs: tuple[PairSetting, ...] = ()
    tolerances: Tolerances = field(default_factory=Tolerances)
    severity: dict[str, str] = field(default_factory=dict)  # diagnostic code -> error|warning|information|hint|off
    out_dir: str = "rca_out"
    columns: str = "rca"  # output_3's column names: rca | msprobe (msprobe compare's)
    max_findings: int = 500  # findings published per file; credible origins are always included

    @classmethod
    def from_client(cls, raw: Any) -> tuple["Settings", list[str]]:
        """Settings from the client's object, and a message for each part that had to be ignored."""
        problems: list[str] = []
        if not isinstance(raw, dict):
            return cls(), ([] if raw is None else [f"rcaLsp settings must be an object, got {type(raw).__name__}"])
        raw = raw.get("rcaLsp", raw) if isinstance(raw.get("rcaLsp"), dict) else raw
        pairs = []
        for index, item in enumerate(raw.get("pairs") or []):
            if not (
                isinstance(item, dict) and all(isinstance(item.get(k), str) for k in ("mappingKey", "train", "rollout"))
            ):
                problems.append(f"rcaLsp.pairs[{index}] needs string fields mappingKey, train and rollout")
            elif item.get("step") is not None and not (isinstance(item["step"], int) and item["step"] >= 0):
                problems.append(f"rcaLsp.pairs[{index}].step must be a step number (0, 1, ...)")
            elif item.get("rolloutStep") is not None and not (
                isinstance(item["rolloutStep"], str)
                or (isinstance(item["rolloutStep"], int) and item["rolloutStep"] >= 0)
            ):
                problems.append(f'rcaLsp.pairs[{index}].rolloutStep must be a step number, "all" or a span "0-4"')
            elif any(item.get(k) is not None and not isinstance(item[k], str) for k in ("parallel", "rolloutParallel")):
                problems.append(f'rcaLsp.pairs[{index}].parallel must be text such as "tp=2,pp=2"')
            else:
                pairs.append(
                    PairSetting(
                        item["mappingKey"],
                        item["train"],
                        item["rollout"],
                        item.get("step"),
                        item.get("parallel"),
                        item.get("rolloutParallel"),
                        item.get("rolloutStep"),
                    )
                )
        tolerances: dict[str, float] = {}
        raw_tolerances = raw.get("tolerances") or {}
        if not isinstance(raw_tolerances, dict):
            problems.append('rcaLsp.tolerances must be an object such as {"bfloat16": 0.03}')
            raw_tolerances = {}
        for name, value in raw_tolerances.items():
            if value is None:
                continue  # the default
            try:
                dtype, tolerance = checked_tolerance(str(name), value)
            except ValueError as error:
                problems.append(f"rcaLsp.tolerances.{name}: {error}; ignored")
            else:
                tolerances[dtype] = tolerance
        severity = {}
        for code, level in (raw.get("severity") or {}).items():
            if level in SEVERITY_NAMES:
                severity[code] = level
            else:
                problems.append(f"rcaLsp.severity.{code} must be one of {', '.join(SEVERITY_NAMES)}")
        out_dir = raw.get("outDir") if isinstance(raw.get("outDir"), str) and raw.get("outDir") else "rca_out"
        columns = raw.get("columns") or "rca"
        if columns not in COLUMN_STYLES:
            problems.append(f"rcaLsp.columns must be one of {', '.join(COLUMN_STYLES)}; using rca")
            columns = "rca"
        settings = cls(tuple(pairs), Tolerances.with_overrides(tolerances), severity, out_dir, columns)
        return settings, problems
