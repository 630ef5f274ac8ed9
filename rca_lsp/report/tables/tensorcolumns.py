"""output_3's element-wise columns, written only when the analysed dumps carry tensors or md5 hashes (a
statistics-mode run's tables keep their columns): per compared target, the evidence both sides had and what it
says beside the statistics."""

from __future__ import annotations

from typing import Any, Sequence

from rca_lsp.compare.elementwise import SlotEvidence
from rca_lsp.compare.records import ModuleRecord

TENSOR_COLUMNS = (
    "evidence",  # tensors | md5 | statistics: the best both sides had
    "element_verdict",  # aligned | mismatch | "" (not compared element-wise)
    "cosine",
    "max_abs_err",
    "max_rel_err",
    "rel_l2_err",
    "bitwise_equal",
    "differing_elements",  # integer tensors
    "layout",  # how the two were made comparable
    "permutation",  # the reordering that makes them equal, when one does
    "evidence_note",
)
_NONE = ("statistics", "", None, None, None, None, None, None, "", "", "")


def has_tensor_evidence(records: Sequence[ModuleRecord]) -> bool:
    return any(record.comparison.tensor_evidence for record in records)


def evidence_by_target(evidence: Sequence[SlotEvidence]) -> dict[tuple[str, str, str], SlotEvidence]:
    return {(e.target, e.train_key, e.rollout_key): e for e in evidence}


def tensor_cells(found: SlotEvidence | None) -> tuple[Any, ...]:
    if found is None:
        return _NONE
    m = found.metrics
    measures = (
        (m.cosine, m.max_abs, m.max_rel, m.rel_l2, m.bitwise_equal, m.differing)
        if m is not None
        else (None, None, None, None, True if found.verdict == "aligned" and found.source == "md5" else None, None)
    )
    return (found.source, found.verdict, *measures, found.layout, found.permutation, found.note)
