"""The divergence chart's data: the relative error of every mapped module along execution order, built from an
analysis (no LSP types). One home for what the chart shows; the HTML report, the static image and the server's
`rcaLsp.server.chartData` command all take it from here.

The data is columnar (one list per field, one element per mapped module) and compact, so 10^5 modules load and
draw in about a second: every string of a column is an index into `ChartData.strings`, and a dump key is three
indexes whose strings concatenate to it (`head + label + tail`: the parts that repeat over a layer's modules, the
module's short label, and the class and call); numbers are rounded for display (errors, tolerances and noise floors
to 4 significant digits, statistics to 5; each distinct tensor summary once in `ChartData.stats`, each tolerance and
noise floor once in `ChartData.thresholds`). Everything is JSON: `encode_chart` writes it; non-finite numbers are
the strings "NaN", "Infinity", "-Infinity" (as in output_3's JSON); `key_text` turns a key's indexes back into the
key.

Per call (`forward.<n>` of the train side: micro-batches, repeated calls; a decoding rollout joined along the
sequence is one call) the chart has:
- `modules`: the mapped modules in train execution (completion) order: train key (what a client reveals in the
  mapping file), rollout key(s), a short label, the layer index, the module bucket and, for suspects, the
  root-cause classification; per target kind (output, input, parameters) the relative error (the largest over the
  kind's targets, judged as the analysis judges it), the tolerance it was judged by, the verdict and the target;
  both sides' statistics of the output; the calibrated noise floor of the output's dtype; and for the marked modules
  (the first divergence, the aligned boundary, every credible origin) both sides' statistics of every target;
- `layers`: consecutive modules of one layer as index ranges (labels per layer);
- `first_divergence` and `boundary`: the call's first credible origin (the module the root-cause report names)
  and its last aligned boundary, as module indexes;
- `one_sided`: unmatched activation-like modules (an op one side runs and the other does not), placed between
  the modules they ran between; `explains` marks those the first divergence's evidence names;
- `ranks` and `shared`: the rank views of a side merged from several rank files (report/chart_ranks.py): each
  merged rank's own copy against the other side, sparse: the modules the rank holds (`held`, pipeline stages hold
  their own), where its errors are not its side's shared ones (`changed`), where it parts from the other ranks
  (`mismatch`); what every rank of a side shows unless it differs is the merged series but where `shared` says
  otherwise (a sharded slot left out). `ChartData.ranks` says which rank each view is, its coordinates in the
  layout and what it is compared with.
"""

from __future__ import annotations

import msgspec

CHART_VERSION = 2


TARGET_KINDS = ("output", "input", "parameters")


Number = float | str  # a finite float, or "NaN" / "Infinity" / "-Infinity"


Key = list[int]  # indexes into ChartData.strings: head, label, tail (a key of several parts: 3 per part)


Stats = tuple[int, int, Number | None, Number | None, Number | None, Number | None]


class TargetSeries(msgspec.Struct):
    """One target kind (output, input or parameters) over the modules of a call; every list has one element per
    module. For several targets of a kind (each part's input of a split group, each parameter) the worst one."""

    error: list[Number | None]  # relative error; null: not comparable (missing on a side, nothing to compare)
    tolerance: list[int | None]  # the threshold the error was judged by (calibrated where the run allowed), as an
    # index into ChartData.thresholds
    consistency: list[int]  # aligned | mismatch | missing | partial | not_applicable (the module's verdict)
    target: list[int | None]  # which target the error is of: output.0, input_args.0, parameters.weight


class TargetStats(msgspec.Struct, array_like=True):
    """Both sides' statistics of one target of a marked module: [target, train, rollout]."""

    target: int
    train: int | None  # index into ChartData.stats
    rollout: int | None


class ChartModules(msgspec.Struct):
    """The mapped modules of one call in train execution order (columnar; strings as indexes)."""

    train_key: list[Key]  # the mapping entry's key: what a client reveals
    rollout_key: list[Key]  # the rollout key, or the keys of a fused/split group (3 indexes each)
    label: list[int]  # short module name (the path below its layer)
    layer: list[int | None]
    bucket: list[int]  # output_4's module_bucket
    suspect: list[int | None]  # root-cause classification when the module is a suspect
    noise_floor: list[int | None]  # the calibrated noise floor of the output's dtype (null: not calibrated), an index
    # into ChartData.thresholds
    output: TargetSeries
    input: TargetSeries
    parameters: TargetSeries
    output_train: list[int | None]  # both sides' statistics of the output (indexes into ChartData.stats)
    output_rollout: list[int | None]
    details: dict[int, list[TargetStats]]  # marked modules (by index): every target's statistics


class LayerSpan(msgspec.Struct):
    label: str  # "layer 3", or the module name for modules outside the layers
    layer: int | None
    start: int  # first module index
    end: int  # one past the last


class Marker(msgspec.Struct):
    index: int  # module index in the call
    train_key: str
    rollout_key: str
    classification: str | None  # for the first divergence: the root-cause classification


class OneSidedOp(msgspec.Struct):
    side: str  # train | rollout: the side that runs it
    key: str
    after: int  # index of the module it ran after (-1: before the first)
    explains: bool  # named by the first divergence's evidence (between its aligned boundary and it)


class ChartRank(msgspec.Struct):
    """A rank the chart can show the own copies of."""

    side: str  # train | rollout | both (a train rank against the same rollout rank: both laid out alike)
    rank: int  # its rank<R> folder
    coordinates: str  # its place in the layout, e.g. "tp=1, pp=0" (dimensions of size > 1; "" when unknown)
    against: str  # what its copies are compared with: "rollout merged", "train merged", "rollout rank 1"


class RankCopies(msgspec.Struct):
    """One rank's copies in a call, sparse: `changed` are module indexes, the error columns one element each."""

    rank: int  # index into ChartData.ranks
    held: list[int]  # the modules it holds a copy of, as flattened [start, end) index ranges
    changed: list[int]  # where its errors are its own, not its side's shared ones (SharedCopies)
    output: list[Number | None]
    input: list[Number | None]
    parameters: list[Number | None]
    mismatch: list[int]  # where it parts from the others: a slot of its copy differs beyond the tolerance while
    # another rank's does not


class SharedCopies(msgspec.Struct):
    """What every rank of a side holding a module shows there unless its RankCopies say otherwise: the module's
    merged errors, but at `changed` (the error columns one element each), e.g. without a sharded slot."""

    side: str  # train | rollout | both
    changed: list[int]
    output: list[Number | None]
    input: list[Number | None]
    parameters: list[Number | None]


class ChartCall(msgspec.Struct):
    call_index: int  # the train side's forward.<n>
    label: str  # "forward.0"
    note: str  # the calls a group joined ("5 calls: prefill of 12 tokens + 4 decode steps"), if any
    modules: ChartModules
    layers: list[LayerSpan]
    first_divergence: Marker | None
    boundary: Marker | None
    one_sided: list[OneSidedOp]
    ranks: list[RankCopies]
    shared: list[SharedCopies]


class CalibrationLine(msgspec.Struct):
    noise_floor: float
    threshold: float
    fixed_tolerance: float
    fallback: bool  # too few pairs: the fixed tolerance applies


class ChartData(msgspec.Struct):
    version: int
    title: str  # the mapping file's name
    train_path: str
    rollout_path: str
    mapping_path: str
    run_id: str | None
    top_hypothesis: str
    calibration: dict[str, CalibrationLine]  # per dtype
    calls: list[ChartCall]
    default_call: int  # index into calls: the call of the first divergence (else 0)
    ranks: list[ChartRank]  # the rank views (ChartCall.ranks index it)
    strings: list[str]  # what the string columns index
    stats: list[Stats]  # what the statistics columns index
    thresholds: list[float]  # what the tolerance and noise floor columns index (a few distinct values)


def key_text(chart: ChartData, key: Key) -> str:
    """A key column's entry as text (the parts of a group joined with " + ")."""
    strings = chart.strings
    return " + ".join("".join(strings[i] for i in key[at : at + 3]) for at in range(0, len(key), 3))


_ENCODER = msgspec.json.Encoder()


def encode_chart(chart: ChartData) -> bytes:
    """The chart as JSON (non-finite numbers already spelt as strings)."""
    return _ENCODER.encode(chart)
