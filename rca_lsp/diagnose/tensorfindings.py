"""What element-wise evidence (tensor files, md5 hashes) says about a suspect, in the words of a finding: the
weights in another order (a conversion or resharding bug), weights whose bytes differ while their statistics agree,
the same tokens fed in another order (a padding-side bug)."""

from __future__ import annotations

from rca_lsp.compare.elementwise import MISMATCH, SlotEvidence
from rca_lsp.compare.module import ModuleComparison

ORDER_LEAD = "the rollout's weights hold the train's values in another order"
TOKENS_LEAD = "the two sides were fed the same tokens in another order"


def _differing(comparison: ModuleComparison, prefix: str) -> list[SlotEvidence]:
    return [e for e in comparison.tensor_evidence if e.target.startswith(prefix) and e.verdict == MISMATCH]


def differing_parameters(comparison: ModuleComparison) -> list[str]:
    """Parameters the tensors (or hashes) find different."""
    return [e.target for e in _differing(comparison, "parameters.")]


def parameter_account(comparison: ModuleComparison) -> str:
    """How the parameters differ when their statistics could not say: in which order, or by their hashes."""
    found = _differing(comparison, "parameters.")
    ordered = [f"{e.target} {e.permutation}" for e in found if e.permutation]
    if ordered:
        return f"{ORDER_LEAD}: {'; '.join(ordered)}"
    hashed = [e.target for e in found if e.source == "md5"]
    if hashed:
        return (
            f"{', '.join(hashed)}: the md5 hashes differ while the statistics agree, so the weights hold other "
            "bytes (the same values in another order, or a change below the statistics' resolution)"
        )
    if found:
        return f"{found[0].target} differs element-wise ({found[0].describe()})"
    return ""


def input_account(comparison: ModuleComparison) -> str:
    """How the input differs where the tensors show the same tokens in another order (or other tokens)."""
    found = _differing(comparison, "input_args.")
    for evidence in found:
        if evidence.permutation.startswith("tokens"):
            return f"{TOKENS_LEAD}: {evidence.permutation}"
    for evidence in found:
        if evidence.metrics is not None and evidence.metrics.differing is not None:
            return f"the two sides were fed other tokens: {evidence.metrics.describe()}"
    return ""
