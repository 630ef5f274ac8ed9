"""output_5_root_cause_report.png: a static image of the divergence chart for the Markdown report, drawn by
matplotlib when the optional `chart` extra is installed (`pip install 'rca-lsp[chart]'`); without it there is no
image and the Markdown says how to get one.

The image shows the calls that matter, one panel each (small multiples, stacked): the call the report's first
divergence is in (the interactive chart opens on it), the earliest call with a credible divergence of its own when
that is another one, and the first call as the reference the run departs from (a clean prefill before a decode-only
fault, a clean micro-batch); at most three. Each panel is titled with its call, the calls the rollout joined into
it (a decoding rollout's prefill and decode steps) and its role."""

from __future__ import annotations

import io
import math
from typing import NamedTuple

from rca_lsp.base.gcpause import cycles_collected
from rca_lsp.report.chart_schema import ChartCall, ChartData, Number

_TOP_DECADE = 300
LOWEST = 1e-10  # exact agreement is drawn here (a log axis has no 0), as the interactive chart does
_COLOURS = {"output": "#1f77b4", "input": "#e07b00", "parameters": "#8e44ad"}
_PANEL_HEIGHT = 3.6  # inches per call panel
_WIDTH, _DPI = 12.0, 110


class Panel(NamedTuple):
    call: int  # index into ChartData.calls
    title: str


def matplotlib_available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def image_panels(chart: ChartData) -> list[Panel]:
    """The calls the image shows, in call order, with their titles (see the module doc); [] when nothing was
    compared."""
    calls = chart.calls
    drawn = [i for i, call in enumerate(calls) if call.modules.train_key]
    if not drawn:
        return []
    default = chart.default_call if chart.default_call in drawn else drawn[0]
    earliest = next((i for i in drawn if calls[i].first_divergence is not None), None)
    roles: dict[int, str] = {}
    if calls[default].first_divergence is not None:
        roles[default] = f"first divergence: {_marked(chart, calls[default])}"
    if earliest is not None and earliest not in roles:
        roles[earliest] = f"earliest call diverging: {_marked(chart, calls[earliest])}"
    if drawn[0] not in roles:
        clean = calls[drawn[0]].first_divergence is None
        roles[drawn[0]] = "reference, every module within the noise" if clean else "first call"
    return [Panel(i, _title(calls[i], roles[i])) for i in sorted(roles)]


def _marked(chart: ChartData, call: ChartCall) -> str:
    marker = call.first_divergence
    assert marker is not None
    layer = call.modules.layer[marker.index]
    return chart.strings[call.modules.label[marker.index]] + (f" (layer {layer})" if layer is not None else "")


def _title(call: ChartCall, role: str) -> str:
    joined = f" ({call.note})" if call.note else ""
    return f"call {call.label}{joined}: {role}"


def image_caption(chart: ChartData) -> str:
    """What the image shows, for the Markdown's alt text: its panels' titles."""
    return "; ".join(panel.title for panel in image_panels(chart))


def _plain(text: str) -> str:
    """Dump-derived text drawn as it is: matplotlib reads a pair of `$` as mathematics (and fails on a bad one)."""
    return text.replace("$", r"\$")


def _value(value: Number | None, top: float) -> float:
    if value is None:
        return math.nan
    number = float(value)
    if math.isnan(number) or math.isinf(number):
        return top
    return max(number, LOWEST)


def render_png(chart: ChartData) -> bytes | None:
    """The chart's image as PNG bytes, one panel per call that matters; None without matplotlib or with nothing
    compared."""
    panels = image_panels(chart)
    if not matplotlib_available() or not panels:
        return None
    # the figure (its artists, axes and transforms refer to each other) and the parses of its mathtext tick labels
    # (pyparsing's exceptions, holding their frames): ~12,000 objects in reference cycles per image, drawn at each
    # writeOutputs of the language server
    with cycles_collected():
        return _drawn(chart, panels)


def _drawn(chart: ChartData, panels: list[Panel]) -> bytes:
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    figure = Figure(figsize=(_WIDTH, 0.6 + _PANEL_HEIGHT * len(panels)), dpi=_DPI, layout="constrained")
    figure.suptitle("Relative error per mapped module, in execution order", fontsize=10)
    for axes, panel in zip(figure.subplots(len(panels), 1, squeeze=False)[:, 0], panels):
        _draw(axes, chart.calls[panel.call], chart, _plain(panel.title))
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def _draw(axes, call: ChartCall, chart: ChartData, title: str) -> None:  # type: ignore[no-untyped-def]
    strings, thresholds = chart.strings, chart.thresholds
    modules = call.modules
    count = len(modules.train_key)
    x = range(count)
    finite = [float(v) for kind in _COLOURS for v in getattr(modules, kind).error if v is not None]
    finite = [v for v in finite if math.isfinite(v) and v > 0]
    # a float, a decade above the largest error, within the float range (an error of 1e300 is drawn at the top)
    top = 10.0 ** min(math.ceil(math.log10(max(finite + [1.0]))) + 1, _TOP_DECADE)
    floor = [math.nan if v is None else max(thresholds[v], LOWEST) for v in modules.noise_floor]
    tolerance = [math.nan if v is None else thresholds[v] for v in modules.output.tolerance]
    axes.fill_between(x, floor, tolerance, color="#b7950b", alpha=0.15, label="noise floor .. tolerance", step="mid")
    axes.plot(x, tolerance, color="#b7950b", linewidth=0.8, linestyle="--", drawstyle="steps-mid")
    for kind, colour in _COLOURS.items():
        values = [_value(v, top) for v in getattr(modules, kind).error]
        style = {"linestyle": "none"} if kind == "parameters" else {"linewidth": 1.0}
        axes.plot(x, values, color=colour, marker="o", markersize=2.5 if count < 2000 else 0.8, label=kind, **style)
    axes.set_yscale("log")
    axes.set_ylim(bottom=LOWEST / 2, top=top * 2)
    axes.set_xlim(-0.5, count - 0.5)
    axes.set_ylabel("relative error (log)")
    if call.boundary is not None:
        axes.axvline(call.boundary.index, color="#2ca02c", linestyle="--", linewidth=1.5, label="aligned boundary")
    if call.first_divergence is not None:
        fd = call.first_divergence
        axes.axvline(fd.index, color="#d62728", linewidth=2, label="first divergence")
        axes.annotate(
            _plain(f"first divergence: {strings[modules.label[fd.index]]}"),
            (fd.index, top),
            textcoords="offset points",
            xytext=(4, -12),
            color="#d62728",
            fontsize=8,
        )
    ops = [op.after + 0.5 for op in call.one_sided]
    if ops:
        axes.plot(ops, [LOWEST] * len(ops), linestyle="none", marker="^", color="#6e7781", label="one-sided op")
    spans = call.layers
    step = max(1, math.ceil(len(spans) / 30))
    shown = spans[::step]
    axes.set_xticks([s.start for s in shown], [_plain(s.label) for s in shown], rotation=30, ha="right", fontsize=7)
    axes.grid(True, which="major", alpha=0.25)
    axes.legend(loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=7)
    axes.set_title(title, fontsize=9, loc="left")
