"""Pairs whose residual stream is carried apart on one side: vLLM's fused-residual norms take and return
`(x, residual)`, SGLang's decoder layers hand on a branch output and leave the residual add to the next norm. Such a
pair is compared as what both sides hold in common (a sum, Mean only), or said not comparable, never as a mismatch."""

from __future__ import annotations

from typing import Callable, NamedTuple, Sequence

import numpy as np

from rca_lsp.compare.statistics import Verdict
from rca_lsp.dumps.dump import Dump, ModuleEntry
from rca_lsp.model.stats import TensorStats, sum_of


class StreamReading(NamedTuple):
    """What a pair with a separately carried residual stream on one side is compared as (see ModuleEntry)."""

    output: tuple[TensorStats | None, TensorStats | None]  # (train, rollout)
    input: tuple[TensorStats | None, TensorStats | None]
    output_label: str  # appended to the stream side's key in the detailed comparisons
    input_label: str
    stream_side: str  # train | rollout
    note: str


Judge = Callable[[TensorStats | None, TensorStats | None], Verdict]  # quick_verdict, errors kept


def stream_reading(train: ModuleEntry, rollout: ModuleEntry, judge: Judge) -> StreamReading | None:
    """How to compare a pair when one side carries the residual stream separately; None when plainly, as usual.

    The output is read as `output.0` when that matches, else as `output.0 + output.1` (a layer returning (branch,
    residual)); the input as `input_args.0` when that matches, else as `output.1` when that matches (a fused-residual
    norm returns input + residual), else as `input + residual` when the module takes a residual. Of a sum only the
    Mean is known: such a reading can show a difference, never agreement (its verdict is then "missing")."""
    if (train.stream_output is None) == (rollout.stream_output is None):
        return None
    on_rollout = rollout.stream_output is not None
    plain, stream = (train, rollout) if on_rollout else (rollout, train)

    def oriented(
        plain_stats: TensorStats | None, stream_stats: TensorStats | None
    ) -> tuple[TensorStats | None, TensorStats | None]:
        return (plain_stats, stream_stats) if on_rollout else (stream_stats, plain_stats)

    def first_aligned(reference: TensorStats | None, candidates: list[tuple[TensorStats | None, str]]) -> int | None:
        return next(
            (i for i, (stats, _label) in enumerate(candidates) if judge(*oriented(reference, stats))[0] == "aligned"),
            None,
        )

    outputs = [(stream.output, ""), (sum_of(stream.output, stream.stream_output), _SUM_OUTPUT)]
    inputs = [(stream.input, ""), (stream.stream_output, _NORM_INPUT)]
    if stream.stream_input is not None:
        inputs.append((sum_of(stream.input, stream.stream_input), _SUM_INPUT))
    output = 0 if first_aligned(plain.output, outputs[:1]) == 0 else 1
    input_ = first_aligned(plain.input, inputs[:2])
    if input_ is None:
        input_ = 2 if stream.stream_input is not None else 0
    if input_ == 0 and output == 0:
        return None
    side = "rollout" if on_rollout else "train"
    notes = {
        _SUM_OUTPUT: f"{side} returns (branch output, residual): only the Mean of their sum is comparable",
        _NORM_INPUT: f"{side} adds the residual inside this module and returns it: its input is compared as "
        "that sum (output.1)",
        _SUM_INPUT: f"{side} takes the residual separately: only the Mean of input + residual is comparable",
    }
    labels = [outputs[output][1], inputs[input_][1]]
    return StreamReading(
        oriented(plain.output, outputs[output][0]),
        oriented(plain.input, inputs[input_][0]),
        labels[0],
        labels[1],
        side,
        "; ".join(notes[label] for label in labels if label),
    )


class BranchFacts(NamedTuple):
    """Per side, where a pair's module hands on or takes a branch output (see dumps.branches): the module whose
    output its output is (`*_returns`), the module whose branch output its input is (`*_takes`); None where not."""

    train_returns: str | None = None
    rollout_returns: str | None = None
    train_takes: str | None = None
    rollout_takes: str | None = None


def branch_facts(
    train: Dump, rollout: Dump, train_keys: Sequence[str], rollout_keys: Sequence[str]
) -> BranchFacts | None:
    """Where a pair's modules hand on or take a branch output (dumps.branches), each side one module (the keys
    being its calls) that does so in every call; None when neither side does."""

    def source(found: dict[str, str], keys: Sequence[str]) -> str | None:
        if not found:
            return None
        if len(keys) == 1:  # most pairs: one module, one call
            return found.get(keys[0])
        sources = [found.get(key) for key in keys]
        return sources[0] if None not in sources and len({key.rpartition(".")[0] for key in keys}) == 1 else None

    train_found, rollout_found = train.branch_outputs, rollout.branch_outputs
    if not (train_found.returns or rollout_found.returns):
        return None  # no module hands on a branch output (every `takes` names one of `returns`)
    facts = (
        source(train_found.returns, train_keys),
        source(rollout_found.returns, rollout_keys),
        source(train_found.takes, train_keys),
        source(rollout_found.takes, rollout_keys),
    )
    return BranchFacts._make(facts) if any(facts) else None


def branch_roles(dump: Dump) -> np.ndarray:
    """Whether each entry (by dump position) hands on or takes a branch output: the 1:1 pairs `branch_facts` finds
    facts for are those with such an entry on either side."""
    roles = np.zeros(len(dump.keys), dtype=np.bool_)
    found = dump.branch_outputs
    roles[[dump.entries[key].position for key in (*found.returns, *found.takes)]] = True
    return roles


def branch_reading(train: ModuleEntry, rollout: ModuleEntry, facts: BranchFacts, judge: Judge) -> StreamReading | None:
    """How to compare a pair one side of which returns (or takes) a branch output where the other returns (takes)
    the residual stream's sum: that side's output (input) is not comparable, when it differs (None when neither)."""
    output, input_ = (train.output, rollout.output), (train.input, rollout.input)
    labels, notes, sides = ["", ""], [], set()
    for index, (stats, own, label) in enumerate(
        (
            (output, (facts.train_returns, facts.rollout_returns), _BRANCH_OUTPUT),
            (input_, (facts.train_takes, facts.rollout_takes), _BRANCH_INPUT),
        )
    ):
        if (own[0] is None) == (own[1] is None) or judge(*stats)[0] == "aligned":
            continue
        side = "train" if own[0] is not None else "rollout"
        source = own[0] or own[1]
        sides.add(side)
        labels[index] = label
        if index == 0:
            output = (None, rollout.output) if side == "train" else (train.output, None)
            notes.append(
                f"{side} returns the output of {source} unchanged, a branch output (its residual stream is added "
                "outside it, in the next fused-residual norm): not comparable with a residual block's output"
            )
        else:
            input_ = (None, rollout.input) if side == "train" else (train.input, None)
            notes.append(f"{side}'s input is the branch output of {source}: not comparable with the residual stream")
    if len(sides) != 1:
        return None  # nothing to read otherwise, or (never seen) both sides' in opposite slots: compared plainly
    return StreamReading(output, input_, labels[0], labels[1], sides.pop(), "; ".join(notes))


_BRANCH_OUTPUT = " [branch output, not comparable]"


_BRANCH_INPUT = " [input is a branch output, not comparable]"


_SUM_OUTPUT = " [output.0 + output.1, Mean only]"


_NORM_INPUT = " [output.1 = input + residual]"


_SUM_INPUT = " [input + residual, Mean only]"
