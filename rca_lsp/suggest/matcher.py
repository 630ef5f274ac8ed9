"""The matcher: proposes rollout modules for train modules of one dump pair, for the CLI and the server."""

from __future__ import annotations

from dataclasses import replace

from rca_lsp.base.cancel import ShouldStop, never, stop_if
from rca_lsp.base.gcpause import paused_gc
from rca_lsp.compare.calls import joined_calls_view, partition_calls, regrouped_view
from rca_lsp.dumps.dump import Dump
from rca_lsp.model.tolerance import Tolerances
from rca_lsp.suggest.align import align_leftovers
from rca_lsp.suggest.canonical import Canonicalizer
from rca_lsp.suggest.experts import fused_expert_proposals
from rca_lsp.suggest.index import SideIndex
from rca_lsp.suggest.proposal import Assessor, Proposal
from rca_lsp.suggest.ranking import rank_rollout, rank_train
from rca_lsp.suggest.resolve import build_result, find_groups
from rca_lsp.suggest.result import Candidate, MappingValue, SuggestionResult, as_mapping_value, mapping_keys
from rca_lsp.suggest.rules import NamingRules

STOP_CHECK_EVERY = 1024  # train keys between two looks at should_stop


class Matcher:
    """Indexes of one (train, rollout) dump pair, built once; cache one per pair and call it interactively."""

    def __init__(self, train: Dump, rollout: Dump, rules: NamingRules | None = None) -> None:
        self._members: dict[str, list[str]] = {}  # a view key -> the rollout keys it stands for
        self._rollout_keys = rollout.keys
        if train.typical_calls() == 1 < rollout.typical_calls():
            # A decoding rollout (prefill + a call per step) against one train forward: match the train modules
            # with every call of their counterparts joined, and propose `forward.*` values.
            rollout = joined_calls_view(rollout, Tolerances())
        elif 1 < train.typical_calls() != rollout.typical_calls():
            # Train micro-batches against rollout calls: each micro-batch against the calls holding its tokens.
            groups = partition_calls(train.tokens_per_call, rollout.tokens_per_call)
            if groups is not None:
                rollout, self._members = regrouped_view(rollout, groups, Tolerances())
        self.rules = rules or NamingRules.default()
        self.canonicalizer = Canonicalizer(self.rules)
        with paused_gc():
            self.train = SideIndex(train, self.canonicalizer)
            self.rollout = SideIndex(rollout, self.canonicalizer)
        self.assessor = Assessor(self.train, self.rollout, self.rules)

    def name_proposals(self, train_key: str) -> list[Proposal]:
        """Rollout module(s) whose canonical path and call index agree with the train module's, best first."""
        name = self.train.names[train_key]
        call = self.train.entries[train_key].call_index
        single = (train_key,)
        proposals = [self.assessor.by_name(single, (key,)) for key in self.rollout.by_path.get((name.path, call), ())]
        if name.group is None:
            split = self.rollout.group_parts(name.path, call)
            if split:
                proposals.append(self.assessor.by_name(single, split))
        else:
            train_split = self.train.group_parts(name.group, call)
            if train_key in train_split:
                proposals += [
                    self.assessor.by_name(train_split, (key,))
                    for key in self.rollout.by_path.get((name.group, call), ())
                ]
        proposals.sort(key=lambda proposal: -proposal.confidence)
        return proposals

    def suggest(
        self, existing: dict[str, MappingValue] | None = None, should_stop: ShouldStop = never
    ) -> SuggestionResult:
        """Raises Cancelled once `should_stop` says so."""
        with paused_gc():
            result = self._suggest(dict(existing or {}), should_stop)
        return self._in_dump_keys(result) if self._members else result

    def _in_dump_keys(self, result: SuggestionResult) -> SuggestionResult:
        """Proposals made against grouped calls, written with the rollout keys of those calls."""

        def keys(view_keys: list[str]) -> list[str]:
            return [key for view_key in view_keys for key in self._members.get(view_key, [view_key])]

        mapping = {
            train_key: as_mapping_value(keys(mapping_keys(value))) for train_key, value in result.mapping.items()
        }
        suggestions = [replace(s, rollout_keys=keys(s.rollout_keys)) for s in result.suggestions]
        mapped = {key for value in mapping.values() for key in mapping_keys(value)}
        rollout_keys = self._rollout_keys
        return SuggestionResult(
            mapping,
            suggestions,
            [s for s in suggestions if not s.accepted],
            result.unmatched_train,
            [k for k in rollout_keys if k not in mapped],
            find_groups(mapping),
            result.kept,
            result.train_total,
            len(rollout_keys),
        )

    def _suggest(self, existing: dict[str, MappingValue], should_stop: ShouldStop) -> SuggestionResult:
        claimed_train = set(existing)
        claimed_rollout = {key for value in existing.values() for key in mapping_keys(value)}
        seen: set[tuple[tuple[str, ...], tuple[str, ...]]] = set()
        proposals: list[Proposal] = []
        for index, key in enumerate(self.train.dump.keys):
            if index % STOP_CHECK_EVERY == 0:
                stop_if(should_stop)
            if key in claimed_train:
                continue
            for proposal in self.name_proposals(key):
                identity = (proposal.train_keys, proposal.rollout_keys)
                if identity not in seen:
                    seen.add(identity)
                    proposals.append(proposal)
        stop_if(should_stop)
        existing_owners: dict[str, list[str]] = {}
        for train_key, value in existing.items():
            for rollout_key in mapping_keys(value):
                existing_owners.setdefault(rollout_key, []).append(train_key)
        accepted, rejected = _claim(proposals, claimed_train, claimed_rollout, self.train, existing_owners)
        experts = fused_expert_proposals(self.train, self.rollout, claimed_train, claimed_rollout, existing_owners)
        for proposal in experts:  # each names its own container and unclaimed experts: no contest between them
            (accepted if proposal.assessment.accepted else rejected).append(proposal)
            if proposal.assessment.accepted:
                claimed_train.update(proposal.train_keys)
                claimed_rollout.update(proposal.rollout_keys)
        aligned = align_leftovers(self.assessor, accepted, claimed_train, claimed_rollout)
        accepted += aligned.accepted
        return build_result(self.train, self.rollout, existing, accepted, rejected + aligned.rejected)

    def rank_rollout_candidates(self, train_key: str, limit: int = 5, text_hint: str | None = None) -> list[Candidate]:
        by_name = self.name_proposals(train_key) if train_key in self.train.names else []
        return rank_rollout(self.train, self.rollout, self.assessor, by_name, train_key, limit, text_hint)

    def rank_train_candidates(self, text_hint: str, limit: int = 5) -> list[Candidate]:
        return rank_train(self.train, text_hint, limit)


def _claim(
    proposals: list[Proposal],
    claimed_train: set[str],
    claimed_rollout: set[str],
    train: SideIndex,
    existing_owners: dict[str, list[str]],
) -> tuple[list[Proposal], list[Proposal]]:
    """Accept confident proposals, strongest first; a module already claimed makes a later proposal lose, except
    by the existing mapping for the proposal itself: an N:1 group the mapping holds some parts of (q_proj -> qkv_proj
    written, k_proj and v_proj not) is completed, its written parts kept as they are."""
    proposals.sort(key=lambda proposal: (-proposal.confidence, train.entries[proposal.train_keys[0]].position))
    accepted: list[Proposal] = []
    rejected: list[Proposal] = []
    for proposal in proposals:
        written = _written_parts(proposal, existing_owners)
        taken = claimed_train.intersection(proposal.train_keys).difference(written) or (
            not written and claimed_rollout.intersection(proposal.rollout_keys)
        )
        if not proposal.assessment.accepted or taken:
            rejected.append(proposal)
            continue
        claimed_train.update(proposal.train_keys)
        claimed_rollout.update(proposal.rollout_keys)
        accepted.append(proposal)
    return accepted, rejected


def _written_parts(proposal: Proposal, existing_owners: dict[str, list[str]]) -> set[str]:
    """The train keys of an N:1 proposal the existing mapping already maps to its rollout module, when that module
    has no other owner (empty otherwise: the proposal is then judged like any other)."""
    if len(proposal.train_keys) < 2 or len(proposal.rollout_keys) != 1:
        return set()
    owners = set(existing_owners.get(proposal.rollout_keys[0], ()))
    return owners if owners < set(proposal.train_keys) else set()
