"""A rank whose statistics are null (msprobe wrote no Max/Min/Mean/Norm) is missing data, never a mismatch: not read
as a data-parallel replica of other data, no "ranks disagree by inf", no rank-disagreement root cause, for ranks as
for mapped pairs. Built from real TP=2 / TP=2 x DP=2 dumps with one rank's statistics nulled."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import FIXTURES

from rca_lsp.compare.module import RANK_DISAGREEMENT_BUCKET
from rca_lsp.diagnose.run import analyze_paths
from rca_lsp.dumps.dump import Dump
from rca_lsp.dumps.load import DumpCache
from rca_lsp.dumps.sources import resolve_dump_source
from rca_lsp.model.stats import TensorStats, copy_difference
from rca_lsp.report.root_cause import root_cause_report

STATISTICS = ("Max", "Min", "Mean", "Norm")


def _null(node: object, only: str | None = None) -> None:
    """Every statistic below `node` set to null (only under keys of `only`: "parameters", "output", ...)."""
    if isinstance(node, dict):
        for name, value in node.items():
            if name in STATISTICS and only is None:
                node[name] = None
            elif only is not None and name == only:
                _null(value)
            else:
                _null(value, only)
    elif isinstance(node, list):
        for item in node:
            _null(item, only)


def _nulled(variant: str, rank: int, into: Path, only: str | None = None) -> Path:
    shutil.copytree(FIXTURES / variant, into / variant)
    path = into / variant / "train" / "step0" / f"rank{rank}" / "dump.json"
    document = json.loads(path.read_text())
    _null(document["data"], only)
    path.write_text(json.dumps(document, indent=1))
    return into / variant


def _merged(folder: Path) -> Dump:
    return DumpCache().get(resolve_dump_source(folder / "train"))


def _disagreements(dump: Dump) -> list[str]:
    return [d.describe() for entry in dump.entries.values() for d in entry.disagreements]


def test_null_statistics_are_no_difference_between_copies() -> None:
    known = TensorStats("torch.float32", [4], 1.0, -1.0, 0.0, 2.0)
    unknown = TensorStats("torch.float32", [4], None, None, None, None)
    assert copy_difference(known, unknown) is None and copy_difference(unknown, known) is None
    half = TensorStats("torch.float32", [4], 1.0, -1.0, None, None)  # Max and Min known: compared on those
    assert copy_difference(known, half) == 0.0


@pytest.mark.parametrize("rank", [0, 1])
def test_a_tp2_rank_with_null_statistics_is_missing_not_a_disagreement(tmp_path: Path, rank: int) -> None:
    folder = _nulled("tp2_healthy", rank, tmp_path)
    dump = _merged(folder)
    assert dump.parallel is not None
    assert dump.parallel.layout.startswith("tp=2, pp=1, ep=1, dp=1"), dump.parallel.layout
    assert _disagreements(dump) == []
    assert any(f"rank {rank} wrote no statistics" in note for note in dump.parallel.notes), dump.parallel.notes
    sharded = next(k for k in dump.keys if "linear_fc1" in k)
    assert dump.entries[sharded].output is not None and not dump.entries[sharded].output.observable
    analysis = analyze_paths(folder / "train", folder / "rollout", folder / "mapping_key.json")
    assert not any(s.classification == RANK_DISAGREEMENT_BUCKET for s in analysis.suspects)
    report = root_cause_report(analysis)
    assert report["disagreements"] == [] and "disagree" not in (report["top_hypothesis"] or "")
    assert any(r.comparison.output_consistency == "missing" for r in analysis.records)


def test_null_weights_of_a_rank_are_no_disagreement(tmp_path: Path) -> None:
    folder = _nulled("tp2_healthy", 1, tmp_path, only="parameters")
    dump = _merged(folder)
    assert dump.parallel is not None and dump.parallel.layout.startswith("tp=2, pp=1, ep=1, dp=1")
    assert _disagreements(dump) == []


def test_a_dp_replica_with_null_statistics_is_no_disagreement(tmp_path: Path) -> None:
    """TP=2 x DP=2: rank 3 (the second group's peer of rank 1) wrote nulls; its weights cannot disagree."""
    folder = _nulled("tp2_dp2_healthy", 3, tmp_path)
    dump = _merged(folder)
    assert _disagreements(dump) == []
    healthy = _merged(FIXTURES / "tp2_dp2_healthy")
    assert dump.parallel is not None and healthy.parallel is not None
    assert dump.parallel.layout == healthy.parallel.layout
