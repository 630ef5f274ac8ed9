"""How far a suggested mapping agrees with a reference (hand-written) mapping."""

from __future__ import annotations

from dataclasses import dataclass

from rca_lsp.suggest.result import MappingValue, mapping_keys


@dataclass(frozen=True)
class Agreement:
    reference_size: int
    suggested_size: int
    correct: list[str]  # reference train keys given exactly the reference's rollout key(s)
    wrong: list[str]  # reference train keys given other rollout key(s)
    missed: list[str]  # reference train keys the suggestion leaves out
    extras: list[str]  # suggested train keys the reference leaves out

    @property
    def recall(self) -> float:
        return len(self.correct) / self.reference_size if self.reference_size else 1.0

    @property
    def precision(self) -> float:
        judged = len(self.correct) + len(self.wrong)
        return len(self.correct) / judged if judged else 1.0

    @property
    def extra_share(self) -> float:
        return len(self.extras) / self.suggested_size if self.suggested_size else 0.0

    def summary(self) -> str:
        return (
            f"recall {self.recall:.3f}, precision {self.precision:.3f}, extras {len(self.extras)}/"
            f"{self.suggested_size} ({self.extra_share:.1%}) against {self.reference_size} reference entries"
        )


def compare_mappings(suggested: dict[str, MappingValue], reference: dict[str, MappingValue]) -> Agreement:
    correct, wrong, missed = [], [], []
    for train_key, value in reference.items():
        if train_key not in suggested:
            missed.append(train_key)
        elif mapping_keys(suggested[train_key]) == mapping_keys(value):
            correct.append(train_key)
        else:
            wrong.append(train_key)
    extras = [train_key for train_key in suggested if train_key not in reference]
    return Agreement(len(reference), len(suggested), correct, wrong, missed, extras)
