"""Recall and precision of `suggest-mapping` against the fixtures' hand-written (true) mappings, one line per fixture.

    .venv/bin/python benchmarks/suggest_recall.py [GLOB ...]      # default: fsdp*

The train side is read as the CLI reads it (the data-parallel group that read the rollout's data), the rollout
with the fixture's rca-lsp.toml options.
"""

from __future__ import annotations

import sys
import tomllib

import orjson
from bench_common import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT))

from rca_lsp.diagnose.run import SideOptions, with_data_group  # noqa: E402
from rca_lsp.dumps.load import DumpCache  # noqa: E402
from rca_lsp.dumps.sources import parse_step  # noqa: E402
from rca_lsp.suggest import suggest_mapping  # noqa: E402
from rca_lsp.suggest.agreement import compare_mappings  # noqa: E402

FIXTURES = REPO_ROOT / "fixtures"


def rollout_options(folder) -> SideOptions:
    config = folder / "rca-lsp.toml"
    if not config.is_file():
        return SideOptions()
    (pair,) = tomllib.loads(config.read_text())["pair"]
    return SideOptions(parse_step(pair.get("rollout_step")))


def main(patterns: list[str]) -> None:
    cache = DumpCache()
    folders = sorted({p.parent for pattern in patterns for p in FIXTURES.glob(f"{pattern}/mapping_key.json")})
    worst = 1.0
    for folder in folders:
        source = SideOptions().resolve(folder / "train")
        rollout = cache.get(rollout_options(folder).resolve(folder / "rollout"))
        train, _ = with_data_group(cache, source, cache.get(source), rollout)
        reference = orjson.loads((folder / "mapping_key.json").read_bytes())
        agreement = compare_mappings(suggest_mapping(train, rollout).mapping, reference)
        worst = min(worst, agreement.recall)
        print(f"{folder.name:32s} {agreement.summary()}")
    print(f"lowest recall: {worst:.3f} over {len(folders)} fixtures")


if __name__ == "__main__":
    main(sys.argv[1:] or ["fsdp*"])
