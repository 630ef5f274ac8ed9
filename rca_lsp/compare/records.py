"""Mapping groups (1:1, 1:N, N:1) built from the entries, and one module record per group."""

from __future__ import annotations

from collections import Counter
from itertools import chain
from operator import attrgetter
from typing import Iterable, NamedTuple
from weakref import WeakValueDictionary

import numpy as np

from rca_lsp.base.cached import cached_property
from rca_lsp.compare.datagroups import DataGroupChoice
from rca_lsp.compare.groupform import PlainTargets, plain_rows, plain_targets
from rca_lsp.compare.module import ModuleComparison, compare_module
from rca_lsp.compare.residual import branch_facts, branch_roles
from rca_lsp.compare.statistics import PlainVerdict
from rca_lsp.compare.targettable import PlainForms, TableSide, listed_side, plain_verdicts
from rca_lsp.compare.tensorpass import TensorPass
from rca_lsp.dumps.dump import Dump, ModuleEntry
from rca_lsp.mapping.validate import Suggestions
from rca_lsp.model.keys import block_of, layer_index
from rca_lsp.model.stats import TensorStats
from rca_lsp.model.tolerance import Tolerances

Group = tuple[tuple[str, ...], tuple[str, ...]]  # a mapping group: its train keys and its rollout keys


class ModuleRecord(NamedTuple):  # a NamedTuple built with tuple.__new__: 10^5 are made per analysis
    comparison: ModuleComparison
    train_position: int  # dump position of the group's last train module (it completes the group's work)
    rollout_position: int
    train_first_position: int  # ... and of its first: ops interleaved with a split group's parts lie inside its span
    rollout_first_position: int
    call_index: int
    train_paths: tuple[str, ...]
    rollout_paths: tuple[str, ...]
    train_prefixes: tuple[str, ...]  # "<path>." of each: what a module running inside this one starts with
    rollout_prefixes: tuple[str, ...]

    @property
    def train_key(self) -> str:
        return self.comparison.train_key

    @property
    def rollout_key(self) -> str:
        return self.comparison.rollout_key

    @property
    def layer_index(self) -> int | None:
        return layer_index(self.train_key)

    @property
    def block(self) -> str:
        return block_of(self.train_key)

    def contains(self, other: "ModuleRecord") -> bool:
        """`other` runs inside this module (its path is below ours on either side)."""
        for path in other.train_paths:
            if path.startswith(self.train_prefixes):
                return True
        for path in other.rollout_paths:
            if path.startswith(self.rollout_prefixes):
                return True
        return False


_new = tuple.__new__
_POSITION = attrgetter("position")


def _paths(entries: list[ModuleEntry]) -> tuple[str, ...]:
    """Each module once (a group over decode steps has every call of a module: one path, hundreds of entries)."""
    return (entries[0].path,) if len(entries) == 1 else tuple(dict.fromkeys(e.path for e in entries))


def _prefixes(paths: tuple[str, ...]) -> tuple[str, ...]:
    return (paths[0] + ".",) if len(paths) == 1 else tuple(p + "." for p in paths)


def build_groups(
    mapping: dict[str, tuple[str, ...]], train: Dump, rollout: Dump
) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    """Connected train/rollout key sets: a rollout key named by several train keys joins them (N:1)."""
    shared_keys = _named_twice(list(chain.from_iterable(mapping.values())))
    groups: list[tuple[tuple[str, ...], tuple[str, ...]]] = []
    shared: dict[str, tuple[str, ...]] = {}
    for train_key, rollout_keys in mapping.items():
        if shared_keys.isdisjoint(rollout_keys):
            groups.append(
                ((train_key,), rollout_keys if len(rollout_keys) == 1 else _by_position(rollout_keys, rollout))
            )
        else:
            shared[train_key] = rollout_keys
    groups += _joined_groups(shared, train, rollout)
    groups.sort(key=lambda g: train.entries[g[0][-1]].position)
    return groups


def _named_twice(keys: list[str]) -> set[str]:
    """The keys that occur more than once (none, mostly: one set in C tells; a decode group names hundreds of
    calls)."""
    if len(set(keys)) == len(keys):
        return set()
    return {key for key, count in Counter(keys).items() if count > 1}


Owners = dict[str, list[str]]  # rollout key -> the train keys naming it; lists are never mutated once shared


def owners_of(mapping: dict[str, tuple[str, ...]]) -> Owners:
    owners: Owners = {}
    for train_key, rollout_keys in mapping.items():
        for rollout_key in rollout_keys:
            owners.setdefault(rollout_key, []).append(train_key)
    return owners


def updated_owners(
    owners: Owners, old: dict[str, tuple[str, ...]], new: dict[str, tuple[str, ...]], changed: Iterable[str]
) -> Owners:
    """`owners` of `old` turned into those of `new`, which differ only at the `changed` train keys."""
    updated = owners.copy()  # .copy(): dict() takes the slow path once a key was deleted
    for train_key in changed:
        for rollout_key in old.get(train_key, ()):
            rest = [k for k in updated[rollout_key] if k != train_key]
            if rest:
                updated[rollout_key] = rest
            else:
                del updated[rollout_key]
        for rollout_key in new.get(train_key, ()):
            updated[rollout_key] = updated.get(rollout_key, []) + [train_key]
    return updated


def regroup(
    changed: Iterable[str],
    mapping: dict[str, tuple[str, ...]],
    owners: Owners,
    old_records: dict[str, "ModuleRecord"],
    train: Dump,
    rollout: Dump,
) -> tuple[set[str], list[tuple[tuple[str, ...], tuple[str, ...]]]]:
    """After the mapping changed at some train keys: the train keys whose group may differ (the changed ones, those
    sharing a rollout key with them now, and the members of their old groups), and their new groups."""
    dirty: set[str] = set()
    pending = list(changed)
    while pending:
        key = pending.pop()
        if key in dirty:
            continue
        dirty.add(key)
        old = old_records.get(key)
        if old is not None:
            pending += old.comparison.train_keys
        for rollout_key in mapping.get(key, ()):
            pending += owners[rollout_key]
    return dirty, build_groups({k: mapping[k] for k in dirty if k in mapping}, train, rollout)


def _by_position(keys: Iterable[str], dump: Dump) -> tuple[str, ...]:
    """The keys in dump order (positions looked up once each; keys already in that order, as a module's calls over
    decode steps are, taken as they are after one linear check)."""
    entries = dump.entries
    given = tuple(keys)
    positions = [entries[k].position for k in given]
    if positions == sorted(positions):
        return given
    return tuple([k for _, k in sorted(zip(positions, given))])  # positions are distinct: keys never compared


def _joined_groups(
    mapping: dict[str, tuple[str, ...]], train: Dump, rollout: Dump
) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    """Union-find over the entries that share a rollout key."""
    parent: dict[str, str] = {}

    def find(key: str) -> str:
        while parent[key] != key:
            parent[key] = parent[parent[key]]
            key = parent[key]
        return key

    owner: dict[str, str] = {}
    for train_key, rollout_keys in mapping.items():
        parent.setdefault(train_key, train_key)
        for rollout_key in rollout_keys:
            if rollout_key in owner:
                parent[find(train_key)] = find(owner[rollout_key])
            else:
                owner[rollout_key] = train_key
    members: dict[str, tuple[list[str], set[str]]] = {}
    for train_key, rollout_keys in mapping.items():
        train_keys, rollout_set = members.setdefault(find(train_key), ([], set()))
        train_keys.append(train_key)
        rollout_set.update(rollout_keys)
    return [(_by_position(t, train), _by_position(r, rollout)) for t, r in members.values()]


class Comparator:
    """Compares groups for one (train, rollout, tolerances) triple, remembering results across mapping edits."""

    def __init__(
        self,
        train: Dump,
        rollout: Dump,
        tolerances: Tolerances,
        base: "Comparator | None" = None,
        data_choice: DataGroupChoice | None = None,
        element_wise: bool = True,
    ) -> None:
        """`element_wise=False`: statistics only, even for tensor- or md5-mode dumps (the server's first screen);
        `element_wise_later` then says an element-wise comparator would add evidence."""
        self.train = train
        self.rollout = rollout
        self.tolerances = tolerances
        # which data-parallel group of the train side is compared, and why (None: one group)
        self.data_choice: DataGroupChoice | None = base.data_choice if base is not None else data_choice
        self._cache: dict[Group, ModuleRecord] = {}
        self.suggestions: Suggestions = base.suggestions if base is not None else {}  # fuzzy lookups, unknown keys
        self._base = base
        # A base record none of whose errors lies between the tightest new and the loosest old tolerance of the
        # tightened dtypes keeps every verdict under these tolerances (below: aligned, above: mismatch, either way).
        tightened = [
            (value, base.tolerances.by_dtype[dtype])
            for dtype, value in tolerances.by_dtype.items()
            if base is not None and value < base.tolerances.by_dtype.get(dtype, value)
        ]
        self._changes_between = (
            min((new for new, _ in tightened), default=float("inf")),
            max((old for _, old in tightened), default=float("inf")),
        )
        # kept while in use (an analysis holds its comparator): a derived comparator holds this one (`_base`), and
        # holding it back would make the two a cycle, which outlives them for good once gc.freeze (base.gcpause) has
        # moved it out of the collector's reach: each comparator replaced (the dumps rewritten, tolerances set)
        # would keep its dumps in the language server
        self._derived: WeakValueDictionary[tuple[tuple[str, float], ...], Comparator] = WeakValueDictionary()
        # tensor- or md5-mode dumps: evidence beyond statistics, judged under the fixed tolerances of the first
        # comparator (calibration tightens the statistics' thresholds, not what counts as the same tensor)
        self.element_wise_later = False
        if base is not None:
            self.tensors: TensorPass | None = base.tensors
            self.element_wise_later = base.element_wise_later
        else:
            tensors = TensorPass(train, rollout, tolerances)
            usable = tensors if tensors.active or tensors.notes else None
            self.tensors = usable if element_wise else None
            self.element_wise_later = not element_wise and tensors.active

    def with_tolerances(self, tolerances: Tolerances) -> "Comparator":
        """The same dumps judged under other (calibrated) tolerances; records whose verdicts cannot change are
        shared with this comparator."""
        if tolerances.key() == self.tolerances.key():
            return self
        found = self._derived.get(tolerances.key())
        if found is None:
            found = self._derived[tolerances.key()] = Comparator(self.train, self.rollout, tolerances, self)
        return found

    @cached_property
    def train_calls(self) -> dict[int, list[int]]:
        """Dump positions of each call index's train keys, ascending."""
        calls: dict[int, list[int]] = {}
        for position, entry in enumerate(self.train.ordered_entries):
            calls.setdefault(entry.call_index, []).append(position)
        return calls

    @cached_property
    def _branch_roles(self) -> tuple[np.ndarray, np.ndarray] | None:
        """Each side's entries (by position) that hand on or take a branch output; None when no module does (then
        branch_facts finds none)."""
        if not (self.train.branch_outputs.returns or self.rollout.branch_outputs.returns):
            return None
        return branch_roles(self.train), branch_roles(self.rollout)

    def records(self, groups: Iterable[Group]) -> list[ModuleRecord]:
        """A record per group, each compared once; under calibrated tolerances, the base comparator's record
        wherever none of its verdicts can change (`_share_alike`)."""
        groups = list(groups)
        cache = self._cache
        if self._base is not None:
            self._share_alike(self._base, [group for group in groups if group not in cache])
        self._compare([group for group in groups if group not in cache])
        return [cache[group] for group in groups]

    def _compare(self, groups: list[Group]) -> None:
        """Records of `groups`, cached: the plain 1:1 pairs (groupform.plain_rows, no branch output on either side,
        statistics only) judged together, as arrays; the others one by one."""
        others: list[Group] = []
        pairs: list[Group] = []
        if self.tensors is None or not self.tensors.active:
            for group in groups:
                (pairs if len(group[0]) == 1 and len(group[1]) == 1 else others).append(group)
        else:
            others = groups
        if pairs:
            others += self._compare_plain(pairs)
        for group in others:
            self._compared(group)

    def _compare_plain(self, pairs: list[Group]) -> list[Group]:
        """Records of the plain ones of the 1:1 `pairs`, judged from the dumps' columns at once; the pairs that are
        not plain are returned."""
        train, rollout = self.train, self.rollout
        train_entries = [train.entries[group[0][0]] for group in pairs]
        rollout_entries = [rollout.entries[group[1][0]] for group in pairs]
        train_positions = np.fromiter(map(_POSITION, train_entries), dtype=np.int64, count=len(pairs))
        rollout_positions = np.fromiter(map(_POSITION, rollout_entries), dtype=np.int64, count=len(pairs))
        found = plain_rows(train.columns, rollout.columns, train_positions, rollout_positions)
        plain = np.zeros(len(pairs), dtype=np.bool_)
        plain[found.by_rows] = plain[found.with_kwargs] = True
        if self._branch_roles is not None:  # branch_facts of a 1:1 pair: facts when either side has a role
            plain &= ~(self._branch_roles[0][train_positions] | self._branch_roles[1][rollout_positions])
        count = len(found.by_rows)
        verdicts = plain_verdicts(
            TableSide(train.columns.stats, found.train_rows),
            TableSide(rollout.columns.stats, found.rollout_rows),
            found.starts,
            PlainForms(found.parameter_counts, np.full(count, -1), np.zeros(count, dtype=np.bool_)),
            self.tolerances,
        )
        keep = plain[found.by_rows].tolist()
        self._keep_plain(pairs, train_entries, rollout_entries, found.by_rows.tolist(), keep, found.targets, verdicts)
        # tensor kwargs are paired by name: their statistics gathered from the objects
        with_kwargs = [index for index in found.with_kwargs.tolist() if plain[index]]
        forms: list[PlainTargets] = []
        train_stats: list[TensorStats | None] = []
        rollout_stats: list[TensorStats | None] = []
        starts = [0]
        for index in with_kwargs:
            forms.append(plain_targets(train_entries[index], rollout_entries[index], train_stats, rollout_stats))
            starts.append(len(train_stats))
        verdicts = plain_verdicts(
            listed_side(train_stats),
            listed_side(rollout_stats),
            np.array(starts, dtype=np.int64),
            PlainForms(
                np.array([form.parameter_count for form in forms], dtype=np.int64),
                np.array([form.kwarg_count for form in forms], dtype=np.int64),
                np.array([form.kwarg_names_differ for form in forms], dtype=np.bool_),
            ),
            self.tolerances,
        )
        self._keep_plain(pairs, train_entries, rollout_entries, with_kwargs, [True] * len(forms), forms, verdicts)
        return [pairs[index] for index in np.flatnonzero(~plain).tolist()]

    def _keep_plain(
        self,
        pairs: list[Group],
        train_entries: list[ModuleEntry],
        rollout_entries: list[ModuleEntry],
        indexes: list[int],
        keep: list[bool],
        forms: list[PlainTargets],
        verdicts: list[PlainVerdict],
    ) -> None:
        """The records of pairs[indexes[i]] (of forms[i], verdicts[i]) where keep[i], cached."""
        tolerances, cache, of_plain_pair = self.tolerances, self._cache, ModuleComparison.of_plain_pair
        for index, kept, form, verdict in zip(indexes, keep, forms, verdicts):
            if kept:
                train_entry, rollout_entry = train_entries[index], rollout_entries[index]
                comparison = of_plain_pair(train_entry, rollout_entry, tolerances, form, verdict)
                cache[pairs[index]] = _pair_record(comparison, train_entry, rollout_entry)

    def _share_alike(self, base: Comparator, groups: list[Group]) -> None:
        """Takes on the base's records of `groups` whose verdicts are the same under these tolerances: none of the
        errors that could change a verdict of theirs (`ModuleComparison.judged_errors`, measured as they were
        judged) lies between the tightest new and the loosest old tolerance (`_changes_between`): each is within
        the tighter tolerance too, or was beyond the looser one already. Calibration re-judges every group of an
        analysis: this costs a pass over their errors, not a comparison each."""
        if not groups:
            return
        low, high = self._changes_between
        shared = base.records(groups)
        errors = [record.comparison.judged_errors for record in shared]
        counts = list(map(len, errors))
        measured = np.fromiter(chain.from_iterable(errors), dtype=np.float64, count=sum(counts))
        changes = np.zeros(len(shared), dtype=np.bool_)
        changes[np.repeat(np.arange(len(shared)), counts)[(measured > low) & (measured <= high)]] = True
        for group, record, changed in zip(groups, shared, changes.tolist()):
            if not changed:  # the same verdicts, reported under our tolerances
                comparison = record.comparison.judged_under(self.tolerances)
                self._cache[group] = _new(ModuleRecord, (comparison, *record[1:]))

    def _compared(self, group: Group) -> None:
        train_keys, rollout_keys = group
        train_entries = [self.train.entries[k] for k in train_keys]
        rollout_entries = [self.rollout.entries[k] for k in rollout_keys]
        comparison = compare_module(
            train_entries,
            rollout_entries,
            self.tolerances,
            branch_facts(self.train, self.rollout, train_keys, rollout_keys),
        )
        if self.tensors is not None and self.tensors.active:
            comparison = comparison.with_tensor_evidence(self.tensors.evidence(comparison))
        self._cache[group] = _record(comparison, train_entries, rollout_entries)


def _record(comparison: ModuleComparison, train: list[ModuleEntry], rollout: list[ModuleEntry]) -> ModuleRecord:
    if len(train) == 1 and len(rollout) == 1:
        return _pair_record(comparison, train[0], rollout[0])
    train_paths, rollout_paths = _paths(train), _paths(rollout)
    return _new(
        ModuleRecord,
        (
            comparison,
            train[-1].position,
            rollout[-1].position,
            train[0].position,
            rollout[0].position,
            train[0].call_index,
            train_paths,
            rollout_paths,
            _prefixes(train_paths),
            _prefixes(rollout_paths),
        ),
    )


def _pair_record(comparison: ModuleComparison, train: ModuleEntry, rollout: ModuleEntry) -> ModuleRecord:
    """_record of a 1:1 group (10^5 plain pairs in an analysis)."""
    train_path, rollout_path = train.path, rollout.path
    return _new(
        ModuleRecord,
        (
            comparison,
            train.position,
            rollout.position,
            train.position,
            rollout.position,
            train.call_index,
            (train_path,),
            (rollout_path,),
            (train_path + ".",),
            (rollout_path + ".",),
        ),
    )
