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
        if (
            evidence.conflict is None
            and len(train_keys) == len(rollout_keys) == 1
            and self._roots(*train_keys, *rollout_keys)
        ):
            evidence.conflict = self._ends_apart(train_keys[0], rollout_keys[0])
        return Proposal(train_keys, rollout_keys, assess(name, evidence))

    def _roots(self, train_key: str, rollout_key: str) -> bool:
        """Both are whole-model modules (nothing but wrappers in their paths)."""
        return self.train.names[train_key].template.is_root and self.rollout.names[rollout_key].template.is_root

    def _ends_apart(self, train_key: str, rollout_key: str) -> str | None:
        """Why two whole-model modules do not compute the same thing: each returns, unchanged, the output of an
        innermost module of its own, and the two are of different kinds (a model returning its output layer's logits
        against a backbone returning its final norm's hidden states, as SGLang's Qwen2Model does)."""
        ends = []
        for side, key in ((self.train, train_key), (self.rollout, rollout_key)):
            end = side.returned_from(key)
            while end is not None and (inner := side.returned_from(end)) is not None:
                end = inner
            if end is None:
                return None
            entry = side.entries[end]
            ends.append((entry.path, self._rules.class_kind(entry.class_name)))
        (train_path, train_kind), (rollout_path, rollout_kind) = ends
        if train_kind is None or rollout_kind is None or train_kind == rollout_kind:
            return None
        return (
            f"the train side returns the output of its {train_path} ({train_kind}), the rollout side that of its "
            f"{rollout_path} ({rollout_kind})"
        )

    def _view(self, side: SideIndex, keys: tuple[str, ...]) -> ModuleView:
        if len(keys) == 1:
            return module_view(side.entries[keys[0]], self._rules)
        return group_view([side.entries[key] for key in keys], self._rules)
