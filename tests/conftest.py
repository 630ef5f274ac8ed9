"""Shared test helpers: where the committed real fixtures live."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def variants() -> list[str]:
    return sorted(p.parent.name for p in FIXTURES.glob("*/expected.json") if (p.parent / "mapping_key.json").is_file())


def expected(variant: str) -> dict:
    return json.loads((FIXTURES / variant / "expected.json").read_text())


@pytest.fixture
def workspace(tmp_path: Path):
    """Copy a fixture variant into a fresh folder: `workspace("missing_activation")` -> its mapping file."""

    def make(variant: str) -> Path:
        target = tmp_path / variant
        shutil.copytree(FIXTURES / variant, target)
        return target / "mapping_key.json"

    return make
