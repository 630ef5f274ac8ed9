"""Shared test helpers: where the committed real fixtures live."""

from __future__ import annotations

import json
import shutil
import tomllib
from pathlib import Path

import pytest

from rca_lsp.diagnose.run import SideOptions
from rca_lsp.dumps.sources import parse_step

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def rollout_options(variant: str) -> SideOptions:
    """How a fixture's rollout is read: the `rollout_step` of its rca-lsp.toml (the file the server pairs by), e.g.
    "all" for a rollout dumped one msprobe step per engine step; else the defaults."""
    config = FIXTURES / variant / "rca-lsp.toml"
    if not config.is_file():
        return SideOptions()
    (pair,) = tomllib.loads(config.read_text())["pair"]
    return SideOptions(parse_step(pair.get("rollout_step")))


def variants() -> list[str]:
    return sorted(p.parent.name for p in FIXTURES.glob("*/expected.json") if (p.parent / "mapping_key.json").is_file())


def train_without_weights(variant: str, into: Path) -> Path:
    """A copy of a fixture's train ranks with every module's parameters removed (a dump made without weights)."""
    shutil.copytree(FIXTURES / variant / "train", into)
    for path in into.glob("step0/rank*/dump.json"):
        document = json.loads(path.read_text())
        for entry in document["data"].values():
            entry.pop("parameters", None)
        path.write_text(json.dumps(document))
    return into


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
