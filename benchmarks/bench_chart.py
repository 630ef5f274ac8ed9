"""How long the divergence chart takes to render 10^5 modules in headless Chromium.

Builds a synthetic chart of `--modules` mapped modules over `--layers` layers (report/chart_schema.ChartData: fp32-like noise
of ~1e-7, a jump to ~1e-2 at the middle layer that stays up, a one-sided activation per layer, parameters on half of
the modules), writes it as the HTML report (report_html.render_html, the same page `analyze` writes) to
benchmarks/data/chart/, and drives Debian's Chromium through playwright-core (from editors/vscode/node_modules) with
benchmarks/chart_render.mjs, which prints, per run (a fresh page each):
The statistics and keys are compact as report/chart.py writes them (string table, rounded numbers).
- mount -> drawn: the chart's own figure (data-rendered: from RcaChart.mount to the end of the first draw, zoomed
  out: one point per bucket of a layer);
- page -> drawn: from navigation start (HTML parse, the inlined JSON, the bundle) to the first draw;
- zoom to detail: a drag over 3000 modules until that window is drawn module by module;
- with `--ranks N` (a train side of N tensor-parallel ranks: every module held by every rank, a third of them with
  a sharded output the ranks' views leave out, a few modules per rank whose copy differs): the rank views' share
  of the page, against the dense per-rank arrays the chart carried before (one error per module, kind and rank),
  and the time from choosing the "worst rank" view (computed then, from the sparse views) to its drawn frame.
The target (issue 13): 10^5 modules render in under a second (mount -> drawn, and page -> drawn).

    .venv/bin/python benchmarks/bench_chart.py [--modules 100000] [--layers 60] [--repeat 5] [--ranks 8]
"""

from __future__ import annotations

import argparse
import base64
import gzip
import random
import shutil
import subprocess
import sys
from pathlib import Path

import msgspec

from rca_lsp.report.chart import _Stats, _Strings, _Thresholds
from rca_lsp.report.chart_schema import (
    CHART_VERSION,
    TARGET_KINDS,
    CalibrationLine,
    ChartCall,
    ChartData,
    ChartModules,
    ChartRank,
    LayerSpan,
    Marker,
    OneSidedOp,
    RankCopies,
    SharedCopies,
    TargetSeries,
)
from rca_lsp.report.html import render_html

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
TOLERANCE, FLOOR = 9.5e-7, 1.2e-7


def synthetic_chart(modules: int, layers: int, seed: int = 0) -> ChartData:
    rng = random.Random(seed)
    per_layer = max(1, modules // layers)
    fault = (layers // 2) * per_layer + per_layer // 3
    strings = _Strings()
    series = [TargetSeries([], [], [], []) for _ in range(3)]
    m = ChartModules([], [], [], [], [], [], [], *series, [], [], {})
    stats = _Stats(strings)
    thresholds = _Thresholds()
    tolerance, floor = thresholds(TOLERANCE), thresholds(FLOOR)
    shape = strings("4096x1x2048")
    dtype = strings("torch.float32")
    for index in range(modules):
        layer = min(index // per_layer, layers - 1)
        local = index - layer * per_layer
        name = f"mlp.experts.local_experts.{local // 2}.linear_fc{1 + local % 2}"
        m.train_key.append(strings.key(f"Module.module.module.decoder.layers.{layer}.{name}.Linear.forward.0", name))
        m.rollout_key.append(strings.key(f"Module.model.layers.{layer}.{name}.Linear.forward.0", name))
        m.label.append(strings(name))
        m.layer.append(layer)
        diverged = index >= fault
        m.bucket.append(strings("upstream_propagation_or_amplification" if diverged else "normal_aligned"))
        m.suspect.append(strings("upstream_propagation") if diverged and index > fault else None)
        m.noise_floor.append(floor)
        error = float(f"{rng.uniform(1e-2, 8e-2) if diverged else rng.uniform(0, 1.1e-7):.4g}")
        for kind, value, present in (
            (series[0], error, True),
            (series[1], error if index > fault else float(f"{rng.uniform(0, 1e-7):.4g}"), True),
            (series[2], float(f"{rng.uniform(0, 1e-7):.4g}"), index % 2 == 0),
        ):
            kind.error.append(value if present else None)
            kind.tolerance.append(tolerance)
            verdict = ("mismatch" if value > TOLERANCE else "aligned") if present else "not_applicable"
            kind.consistency.append(strings(verdict))
            kind.target.append(strings("output.0") if present else None)
        # statistics of a module's output, the rollout's equal to the digits shown while aligned
        train = (
            dtype,
            shape,
            round(rng.uniform(2, 6), 4),
            -round(rng.uniform(2, 6), 4),
            round(rng.gauss(0, 0.01), 6),
            round(rng.uniform(50, 900), 2),
        )
        rollout = (
            train
            if not diverged
            else (*train[:2], round(train[2] * 1.03, 4), train[3], train[4], round(train[5] * 0.98, 2))
        )
        m.output_train.append(stats.add(train))
        m.output_rollout.append(stats.add(rollout))
    spans = [LayerSpan(f"layer {i}", i, i * per_layer, min(modules, (i + 1) * per_layer)) for i in range(layers)]
    spans[-1].end = modules
    ops = [
        OneSidedOp("rollout", f"Module.model.layers.{i}.mlp.act_fn.SiluAndMul.forward.0", s.start, False)
        for i, s in enumerate(spans)
    ]
    marker, before = (Marker(i, key_of(strings, m.train_key[i]), "", None) for i in (fault, fault - 1))
    call = ChartCall(0, "forward.0", "", m, spans, marker, before, ops, [], [])
    calibration = {"float32": CalibrationLine(FLOOR, TOLERANCE, 1e-4, False)}
    return ChartData(
        CHART_VERSION, "mapping_key.json", "train", "rollout", "mapping_key.json", "bench", "synthetic",
        calibration, [call], 0, [], strings.table(), stats.table(), thresholds.values,
    )  # fmt: skip


def with_ranks(chart: ChartData, ranks: int, seed: int = 0) -> ChartData:
    """The chart with the views of `ranks` tensor-parallel train ranks (see the module doc)."""
    rng = random.Random(seed)
    call = chart.calls[0]
    modules = call.modules
    count = len(modules.label)
    sharded = list(range(0, count, 3))
    call.shared = [SharedCopies("train", sharded, *([None] * len(sharded) for _ in TARGET_KINDS))]  # type: ignore[arg-type]
    chart.ranks = [ChartRank("train", rank, f"tp={rank}", "rollout merged") for rank in range(ranks)]
    call.ranks = []
    for rank in range(ranks):
        changed = sorted(rng.sample(range(count), max(1, count // 1000)))
        values = [[float(f"{rng.uniform(1e-7, 1e-1):.4g}") for _ in changed] for _ in TARGET_KINDS]
        call.ranks.append(RankCopies(rank, [0, count], changed, *values, changed[:1]))
    return chart


def dense_ranks(chart: ChartData) -> list[dict[str, object]]:
    """The same rank views as the chart carried them before: every rank's error of every module and kind."""
    call = chart.calls[0]
    dense = []
    for copies in call.ranks:
        series = {kind: list(getattr(call.modules, kind).error) for kind in TARGET_KINDS}
        for overlay in (*call.shared, copies):
            for at, index in enumerate(overlay.changed):
                for kind in TARGET_KINDS:
                    series[kind][index] = getattr(overlay, kind)[at]
        dense.append({"rank": copies.rank, **series, "mismatch": copies.mismatch})
    return dense


def packed_size(document: object) -> tuple[int, int]:
    """JSON bytes, and bytes in the page (gzip'd, base64) as report/html.py packs a block."""
    raw = msgspec.json.encode(document)
    return len(raw), len(base64.b64encode(gzip.compress(raw, compresslevel=6, mtime=0)))


def key_of(strings: _Strings, key: list[int]) -> str:
    table = strings.table()
    return "".join(table[i] for i in key)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--modules", type=int, default=100_000)
    parser.add_argument("--layers", type=int, default=60)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    parser.add_argument("--ranks", type=int, default=0, help="add the views of N tensor-parallel train ranks")
    args = parser.parse_args()
    if shutil.which("node") is None or not (REPO / "editors" / "vscode" / "node_modules" / "playwright-core").is_dir():
        print("bench_chart: needs node and editors/vscode/node_modules (npm ci in editors/vscode)", file=sys.stderr)
        return 2
    out = HERE / "data" / "chart"
    out.mkdir(parents=True, exist_ok=True)
    page = out / f"chart_{args.modules}.html"
    chart = synthetic_chart(args.modules, args.layers)
    if args.ranks:
        page = out / f"chart_{args.modules}_ranks{args.ranks}.html"
        chart = with_ranks(chart, args.ranks)
        call = chart.calls[0]
        sparse = packed_size({"ranks": chart.ranks, "copies": call.ranks, "shared": call.shared})
        dense = packed_size(dense_ranks(chart))
        print(
            f"rank views of {args.ranks} ranks: {sparse[0] / 2**10:.0f} KiB of JSON, {sparse[1] / 2**10:.0f} KiB in "
            f"the page; as dense per-rank arrays (before): {dense[0] / 2**20:.1f} MiB of JSON, "
            f"{dense[1] / 2**20:.2f} MiB in the page"
        )
    page.write_text(render_html(chart), encoding="utf-8")
    print(f"{args.modules} modules over {args.layers} layers: {page} ({page.stat().st_size / 2**20:.1f} MiB)")
    command = ["node", str(HERE / "chart_render.mjs"), str(page), str(args.repeat), args.chromium]
    return subprocess.run(command, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
