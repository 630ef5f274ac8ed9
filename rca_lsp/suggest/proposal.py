"""A candidate pairing of train module(s) with rollout module(s), assessed; and how to build one from two indexes."""

from __future__ import annotations

from dataclasses import dataclass

from rca_lsp.suggest.confidence import Assessment, NameEvidence, assess, name_evidence
from rca_lsp.suggest.evidence import ModuleView, compare, group_view, module_view
from rca_lsp.suggest.index import SideIndex
from rca_lsp.suggest.rules import NamingRules


@dataclass(slots=True)  # not frozen: built per module on the hot path, and frozen __init__ is slow
class Proposal:
    train_keys: tuple[str, ...]  # several only for split train modules sharing one fused rollout module (N:1)
    rollout_keys: tuple[str, ...]  # several for one train module and its split rollout modules (1:N)
    assessment: Assessment

    @property
    def confidence(self) -> float:
        return self.assessment.confidence


class Assessor:
    """Builds assessed proposals for (train keys, rollout keys) of one dump pair."""

    def __init__(self, train: SideIndex, rollout: SideIndex, rules: NamingRules) -> None:
        self.train = train
        self.rollout = rollout
        self._rules = rules

    def by_name(self, train_keys: tuple[str, ...], rollout_keys: tuple[str, ...]) -> Proposal:
        """A pair whose canonical paths agree: the name evidence follows from the paths."""
        train_paths = [self.train.entries[key].path for key in train_keys]
        rollout_paths = [self.rollout.entries[key].path for key in rollout_keys]
        name = name_evidence(
            [self.train.names[key] for key in train_keys],
            [self.rollout.names[key] for key in rollout_keys],
            train_paths == rollout_paths,
        )
        return self.with_name(train_keys, rollout_keys, name)

    def with_name(self, train_keys: tuple[str, ...], rollout_keys: tuple[str, ...], name: NameEvidence) -> Proposal:
        evidence = compare(self._view(self.train, train_keys), self._view(self.rollout, rollout_keys))
        return Proposal(train_keys, rollout_keys, assess(name, evidence))

    def _view(self, side: SideIndex, keys: tuple[str, ...]) -> ModuleView:
        if len(keys) == 1:
            return module_view(side.entries[keys[0]], self._rules)
        return group_view([side.entries[key] for key in keys], self._rules)
