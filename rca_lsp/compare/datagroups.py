"""Which data-parallel group of the train side read the rollout's data.

Data-parallel ranks (Megatron DP groups, FSDP ranks) each read their own batch, while the rollout ran one of them.
Only the group whose model input equals the rollout's can be compared with it: any other has other activations
everywhere. The model input is the first module's input on each side (in dump order: the embedding, whose input is
the token ids), its calls joined as the logical dump joins them; equal means the same number of elements and the
same statistics (exact for integer ids; within the dtype's tolerance for float inputs). The group is found here,
where both sides are known; the train dump is then merged from that group (dumps/ranks, a source's `data_rank`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from rca_lsp.compare.calls import fold_calls
from rca_lsp.dumps.dump import Dump, ModuleEntry, raw_entry
from rca_lsp.dumps.rankfile import read_raw_entry
from rca_lsp.model.stats import TensorStats, dtype_pair, is_integer_dtype, relative_error
from rca_lsp.model.tolerance import Tolerances

DIFFERENT_DATA = "the two sides were fed different data"


def input_differs(data_note: str | None) -> str:
    """Why the first module of both dumps is the finding when its input (the model's input) differs; `data_note`:
    which data-parallel group was compared and why."""
    rationale = (
        f"{DIFFERENT_DATA}: this is the first module of both dumps and its input (the model's input, e.g. the token "
        "ids) differs, so every difference after it follows from the data"
    )
    return f"{rationale}; {data_note}" if data_note else rationale


@dataclass(frozen=True)
class GroupInput:
    ranks: tuple[int, ...]  # the group's ranks (its first holds the model input)
    stats: TensorStats | None  # its model input, None when unreadable
    distance: float  # largest relative difference of a statistic from the rollout's (inf: other size or unknown)
    matches: bool


@dataclass(frozen=True)
class DataGroupChoice:
    """The data-parallel group analysed and why."""

    group: int  # index into `groups`
    groups: tuple[GroupInput, ...]
    given: bool  # chosen by the user (--train-rank / `train_rank`), not by the data
    train_key: str  # the model-input modules compared
    rollout_key: str
    rollout_input: TensorStats

    @property
    def rank(self) -> int:
        return self.groups[self.group].ranks[0]

    @property
    def matching(self) -> list[int]:
        """The first rank of every group whose model input equals the rollout's, in rank order."""
        return [g.ranks[0] for g in self.groups if g.matches]

    @property
    def matched(self) -> bool:
        return self.groups[self.group].matches

    def describe(self) -> str:
        analysed = self.groups[self.group]
        ranks = _ranks(analysed.ranks)
        what = f"model input (the input of {_short(self.train_key)}; the rollout's: of {_short(self.rollout_key)})"
        rollout = describe_input(self.rollout_input)
        if self.given:
            verdict = "equals" if analysed.matches else "differs from"
            return (
                f"train rank {self.rank} analysed as asked (--train-rank / `train_rank`; data-parallel group: "
                f"{ranks}): its {what} {verdict} the rollout's ({rollout})"
            )
        matching = self.matching
        if not matching:
            return (
                f"{DIFFERENT_DATA}: the {what} differs on every data-parallel group (rollout: {rollout}; "
                + "; ".join(f"rank {g.ranks[0]}: {describe_input(g.stats)}" for g in self.groups)
                + f"); analysed the closest, rank {self.rank} ({ranks})"
            )
        others = [g.ranks[0] for g in self.groups if not g.matches]
        text = (
            f"train rank {self.rank} analysed (data-parallel group: {ranks}): its {what} equals the rollout's "
            f"({rollout})"
        )
        if len(matching) > 1:
            text += f"; ranks {', '.join(map(str, matching))} all read that data: the first was taken"
        if others:
            text += f"; rank{'s' if len(others) > 1 else ''} {', '.join(map(str, others))} read other data"
        return text


def describe_input(stats: TensorStats | None) -> str:
    if stats is None:
        return "not dumped"
    shown = [f"shape {list(stats.shape) if stats.shape is not None else '?'}"]
    shown += [f"{name} {value:.6g}" for name, value in _stats(stats) if value is not None]
    return ", ".join(shown)


def _stats(stats: TensorStats) -> tuple[tuple[str, float | None], ...]:
    return (("Max", stats.max), ("Min", stats.min), ("Mean", stats.mean), ("Norm", stats.norm))


def _short(key: str) -> str:
    return key.removeprefix("Module.")


def _ranks(ranks: Sequence[int]) -> str:
    return f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"


def choose_data_group(
    train: Dump, rollout: Dump, given_rank: int | None = None, tolerances: Tolerances | None = None
) -> DataGroupChoice | None:
    """The group to analyse: `given_rank`'s when given; else the first whose model input equals the rollout's;
    else the closest. None when the train side has one data-parallel group, or no model input to compare."""
    info = train.parallel
    if info is None or len(info.data_groups) < 2 or train.joined_steps is not None or not train.keys:
        return None
    if not rollout.keys:
        return None
    tolerances = tolerances or Tolerances()
    train_key, rollout_key = train.keys[0], rollout.keys[0]
    theirs = _model_input([rollout.entries[k] for k in _calls(rollout, rollout_key)], tolerances)
    if theirs is None or not theirs.observable:
        return None
    groups = []
    for members in info.data_groups:
        ours = _model_input(_rank_entries(Path(info.files[members[0]]), _calls(train, train_key)), tolerances)
        distance = _distance(ours, theirs)
        groups.append(
            GroupInput(
                tuple(info.ranks[i] for i in members), ours, distance, _equal(ours, theirs, distance, tolerances)
            )
        )
    if all(g.stats is None for g in groups) or not _same_form(groups, theirs):
        return None
    if given_rank is not None:
        chosen = next(i for i, g in enumerate(groups) if given_rank in g.ranks)
    else:
        matching = [i for i, g in enumerate(groups) if g.matches]
        chosen = matching[0] if matching else min(range(len(groups)), key=lambda i: groups[i].distance)
    return DataGroupChoice(chosen, tuple(groups), given_rank is not None, train_key, rollout_key, theirs)


def _calls(dump: Dump, key: str) -> list[str]:
    """Every call of the key's module, in call order (a decoding rollout's prefill and decode steps)."""
    return dump.calls_of(key.rpartition(".")[0] + ".*") or [key]


def _rank_entries(path: Path, keys: Sequence[str]) -> list[ModuleEntry]:
    found = []
    for key in keys:
        value = read_raw_entry(path, key)
        entry = raw_entry(key, value) if value is not None else None
        if entry is not None:
            found.append(entry)
    return found


def _model_input(entries: list[ModuleEntry], tolerances: Tolerances) -> TensorStats | None:
    if not entries:
        return None
    folded, _ = fold_calls(entries, tolerances)
    return folded[0].input


def _distance(ours: TensorStats | None, theirs: TensorStats) -> float:
    if ours is None or not ours.observable or ours.numel != theirs.numel:
        return math.inf
    error = relative_error(ours, theirs)
    return math.inf if error is None else error


def _equal(ours: TensorStats | None, theirs: TensorStats, distance: float, tolerances: Tolerances) -> bool:
    if ours is None or math.isinf(distance):
        return False
    if is_integer_dtype(ours.dtype) or is_integer_dtype(theirs.dtype):
        return distance == 0.0  # token ids: the same batch has the same statistics exactly
    return distance <= tolerances.for_dtypes(ours.dtype, theirs.dtype)


def _same_form(groups: list[GroupInput], theirs: TensorStats) -> bool:
    """Both sides' model inputs are of one kind (ids and ids, floats and floats): else the first modules are not
    counterparts and nothing can be said."""
    return any(g.stats is not None and dtype_pair(g.stats.dtype, theirs.dtype)[1] for g in groups)
