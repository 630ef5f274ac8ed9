"""The settings contract: `Settings.from_client` on the cases the VS Code client is tested on too
(tests/settings_cases.json: the same settings kept and the same problems reported on both sides), and the rules
file both read agrees with the analysis' own tables."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rca_lsp.model.tolerance import DEFAULT_TOLERANCES, normalise_dtype
from rca_lsp.server.codes import DEFAULT_SEVERITY
from rca_lsp.server.settings import RULES, PairSetting, Settings

CASES = json.loads((Path(__file__).with_name("settings_cases.json")).read_text())


def client_shape(pair: PairSetting) -> dict[str, Any]:
    """A kept pair in the client's camelCase shape, optional fields only when set."""
    shaped: dict[str, Any] = {"mappingKey": pair.mapping_key, "train": pair.train, "rollout": pair.rollout}
    optional = {
        "step": pair.step,
        "parallel": pair.parallel,
        "rolloutParallel": pair.rollout_parallel,
        "rolloutStep": pair.rollout_step,
        "trainRank": pair.train_rank,
    }
    return shaped | {k: v for k, v in optional.items() if v is not None}


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_the_shared_cases(case: dict[str, Any]) -> None:
    for raw in (case["raw"], {"rcaLsp": case["raw"]}):  # the section itself or an object holding it
        settings, problems = Settings.from_client(raw)
        assert problems == case["problems"]
        want = case["settings"]
        assert [client_shape(p) for p in settings.pairs] == want["pairs"]
        assert settings.tolerances.by_dtype == DEFAULT_TOLERANCES | want["tolerances"]
        assert settings.severity == want["severity"]
        assert settings.out_dir == want["outDir"]
        assert settings.columns == want.get("columns", RULES["columnStyles"][0])


def test_not_an_object() -> None:
    assert Settings.from_client(None) == (Settings(), [])
    assert Settings.from_client(["x"])[1] == ["rcaLsp settings must be an object, got list"]


def test_the_rules_file_names_the_column_styles_the_outputs_write() -> None:
    from rca_lsp.report.tables.columns import COLUMN_STYLES

    assert RULES["columnStyles"] == list(COLUMN_STYLES)


def test_the_rules_file_names_the_analysis_dtypes_and_aliases() -> None:
    assert RULES["dtypes"] == list(DEFAULT_TOLERANCES)
    for alias, dtype in RULES["dtypeAliases"].items():
        assert normalise_dtype(alias) == dtype and normalise_dtype(f"torch.{alias.upper()}") == dtype
    assert {normalise_dtype(n) for n in ("torch.bfloat16", "BFloat16", "mindspore.Float32")} == {"bfloat16", "float32"}


def test_every_code_may_be_given_every_severity() -> None:
    raw = {"severity": {code: level for code, level in zip(DEFAULT_SEVERITY, RULES["severities"] * 5)}}
    settings, problems = Settings.from_client(raw)
    assert problems == [] and settings.severity == raw["severity"]
