"""Tolerance overrides: one rule for the command line and the server's settings."""

from __future__ import annotations

import math

import pytest

from rca_lsp.model.tolerance import checked_tolerance
from rca_lsp.server.settings import Settings


@pytest.mark.parametrize("value", [-1, 0, 0.0, math.nan, math.inf, -math.inf, True, "0.1", None])
def test_non_positive_non_finite_and_non_numbers_are_refused(value: object) -> None:
    with pytest.raises(ValueError, match="must be a positive number"):
        checked_tolerance("float32", value)


def test_known_dtypes_and_their_aliases_are_accepted() -> None:
    assert checked_tolerance("float32", 0.1) == ("float32", 0.1)
    assert checked_tolerance("bf16", 1) == ("bfloat16", 1.0)
    assert checked_tolerance("torch.float16", 5e-3) == ("float16", 5e-3)
    with pytest.raises(ValueError, match="unknown dtype 'flaot32'"):
        checked_tolerance("flaot32", 0.1)


def test_the_server_applies_the_same_rule() -> None:
    settings, problems = Settings.from_client(
        {"tolerances": {"float32": 0.1, "bfloat16": 0, "float16": math.inf, "flaot32": 1e-3, "float64": None}}
    )
    assert settings.tolerances.by_dtype["float32"] == 0.1
    assert settings.tolerances.by_dtype["bfloat16"] == 3e-2 and settings.tolerances.by_dtype["float16"] == 5e-3
    assert len(problems) == 3 and all(p.startswith("rcaLsp.tolerances.") for p in problems)
    assert any("unknown dtype 'flaot32'" in p for p in problems)
    assert Settings.from_client({"tolerances": [1]})[1] == [
        'rcaLsp.tolerances must be an object such as {"bfloat16": 0.03}'
    ]
