"""The matcher against the hand-written mappings of the real fixture pairs (every fixtures/<variant>/ with one)."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest
from conftest import rollout_options

from rca_lsp.core.dump import DumpCache
from rca_lsp.suggest import suggest_mapping
from rca_lsp.suggest.agreement import compare_mappings

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
VARIANTS = sorted(path.parent.name for path in FIXTURES.glob("*/mapping_key.json"))
CACHE = DumpCache()

MIN_RECALL = 0.95
MIN_PRECISION = 0.98
MAX_EXTRA_SHARE = 0.10


def _known_gap(variant: str) -> str | None:
    """The `known_gap` of the variant's expected.json (what the analysis does not read right yet), if any."""
    expected = FIXTURES / variant / "expected.json"
    return json.loads(expected.read_text()).get("known_gap") if expected.is_file() else None


AGREEMENT_VARIANTS = [
    pytest.param(v, marks=pytest.mark.xfail(strict=True, reason=gap)) if (gap := _known_gap(v)) else v for v in VARIANTS
]


@pytest.mark.parametrize("variant", AGREEMENT_VARIANTS)
def test_suggestions_agree_with_the_hand_written_mapping(variant: str) -> None:
    folder = FIXTURES / variant
    reference = orjson.loads((folder / "mapping_key.json").read_bytes())
    result = suggest_mapping(
        CACHE.get(folder / "train"), CACHE.get(rollout_options(variant).resolve(folder / "rollout"))
    )
    agreement = compare_mappings(result.mapping, reference)
    details = f"{variant}: {agreement.summary()}; wrong {agreement.wrong}; missed {agreement.missed}"
    assert agreement.recall >= MIN_RECALL, details
    assert agreement.precision >= MIN_PRECISION, details
    assert agreement.extra_share <= MAX_EXTRA_SHARE, details


@pytest.mark.parametrize("variant", VARIANTS)
def test_existing_entries_leave_the_rest_unchanged(variant: str) -> None:
    folder = FIXTURES / variant
    train, rollout = CACHE.get(folder / "train"), CACHE.get(rollout_options(variant).resolve(folder / "rollout"))
    full = suggest_mapping(train, rollout)
    half = dict(list(full.mapping.items())[::2])
    resumed = suggest_mapping(train, rollout, existing=half)
    assert resumed.mapping == full.mapping
    assert resumed.kept == len(half)
    assert {s.train_key for s in resumed.suggestions}.isdisjoint(half)


@pytest.mark.parametrize("variant", ["decode_healthy", "microbatch_healthy", "tp2_sp_healthy", "moe_ep2_healthy"])
def test_the_suggested_mapping_of_a_clean_pair_analyses_clean(variant: str, tmp_path: Path) -> None:
    from rca_lsp.core.run import analyze_paths
    from rca_lsp.suggest.cli import write_mapping

    folder = FIXTURES / variant
    result = suggest_mapping(
        CACHE.get(folder / "train"), CACHE.get(rollout_options(variant).resolve(folder / "rollout"))
    )
    write_mapping(tmp_path / "mapping_key.json", result.mapping)
    analysis = analyze_paths(
        folder / "train", folder / "rollout", tmp_path / "mapping_key.json", rollout_options=rollout_options(variant)
    )
    assert analysis.issues == [] and analysis.suspects == [] and len(analysis.records) >= len(result.mapping) // 2
