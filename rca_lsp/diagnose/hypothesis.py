"""The words of a finding: the seed's top_hypothesis for the first suspect, extended to the cases the seed could
not tell apart, and the next checks an engineer should make. Every report and the server say them alike."""

from __future__ import annotations

from typing import Sequence

from rca_lsp.compare.datagroups import DIFFERENT_DATA
from rca_lsp.diagnose.between import is_placeholder, one_sided_activations
from rca_lsp.diagnose.rootcause import (
    CALL_DISAGREEMENT,
    IN_MODULE,
    INPUT_DATA,
    MISSING_OP,
    PARAMETER,
    RANK_DISAGREEMENT,
    UPSTREAM,
    Suspect,
    parameters_unseen,
)
from rca_lsp.diagnose.tensorfindings import input_account, parameter_account


def hypothesis(first: Suspect | None) -> tuple[str, list[str]]:
    """The seed's top_hypothesis wording, extended to the cases the seed could not tell apart."""
    if first is None:
        return "", []
    if first.classification == INPUT_DATA:
        return (
            f"{DIFFERENT_DATA}: the model's input (the first module's input, e.g. the token ids) differs between "
            "train and rollout, so the comparison cannot locate a numeric fault",
            [first.train_key],
        )
    if first.classification == MISSING_OP:
        side, acts = one_sided_activations(first.between)
        other = "train" if side == "rollout" else "rollout"
        return (
            f"{other} may be missing an activation-like operation that exists on {side} between the last aligned "
            "boundary and the first downstream mismatch",
            acts,
        )
    if first.classification == PARAMETER:
        account = parameter_account(first.record.comparison)
        return "parameter sync or checkpoint alignment issue" + (f": {account}" if account else ""), [first.train_key]
    if first.classification == RANK_DISAGREEMENT:
        return (
            "ranks disagree on a tensor that should be identical on every rank (a desynced replicated weight or "
            "a non-deterministic reduction)",
            [first.train_key],
        )
    if first.classification == CALL_DISAGREEMENT:
        return "a parameter changed between calls of the same module (weights updated mid-generation)", [
            first.train_key
        ]
    if first.classification == IN_MODULE and parameters_unseen(first.record.comparison.parameter_consistency):
        return (
            "in-module implementation or numeric path mismatch, or a parameter desync (the parameters are not "
            "observable on both sides)",
            [first.train_key],
        )
    if first.classification == IN_MODULE:
        return "in-module implementation or numeric path mismatch", [first.train_key]
    if first.classification == UPSTREAM and first.credible_origin and first.boundary is None:
        account = input_account(first.record.comparison)
        if account:
            return f"{account}: the divergence enters with the data, at the first mapped module", [first.train_key]
    if first.classification == UPSTREAM and first.credible_origin:
        unmatched = sorted(first.between.train + first.between.rollout, key=is_placeholder)
        if unmatched:
            return (
                "the divergence arises between the last aligned boundary and the first mismatch, in modules the "
                "mapping does not cover (a missing/extra op or a layout difference statistics cannot see)",
                unmatched,
            )
        return (
            "the inputs of the first mismatching module differ with nothing between it and the aligned boundary: "
            "the mapped inputs are probably not the same tensor (mapping, fused residual or layout)",
            [first.train_key],
        )
    if first.classification == UPSTREAM:
        return "upstream mismatch is propagating into this module", [first.train_key]
    return "", []


def next_checks(suspects: Sequence[Suspect]) -> list[str]:
    if not suspects:
        return ["no credible divergence: nothing to check beyond the listed premise problems, if any"]
    first = suspects[0]
    checks = list(NEXT_CHECKS.get(first.classification, NEXT_CHECKS[UPSTREAM]))
    if first.classification == IN_MODULE and parameters_unseen(first.record.comparison.parameter_consistency):
        checks += NEXT_CHECKS[PARAMETER]
    return checks


NEXT_CHECKS = {
    INPUT_DATA: [
        "dump the rollout and the trainer on the same batch: find the train rank that received the rollout's "
        "samples (data-parallel ranks each read their own) and pass --train-rank N (setting `train_rank`)",
        "check the sample order and padding/packing between rollout and trainer (the ids must be the same tokens)",
    ],
    MISSING_OP: [
        "verify implementation/config of any activation-like unmatched module",
        "confirm whether the missing or extra op is expected to be fused, hidden, or disabled by config",
        "if activation is expected on both sides, compare the actual implementation and bridge/config flags next",
    ],
    PARAMETER: [
        "compare the checkpoint/weight-sync path for the mismatched parameter (conversion, resharding, dtype cast)",
        "check that the rollout engine received the latest weights (sync step, version) before this forward",
    ],
    IN_MODULE: [
        "compare the module's implementation and config on both sides (eps, scaling, kernel choice, fusion flags)",
        "check the dtype/precision path inside the module (upcasts, accumulation dtype)",
    ],
    RANK_DISAGREEMENT: [
        "compare the named ranks' copies of the tensor: a replicated weight loaded or updated on some ranks only",
        "check the weight broadcast / resharding step of the trainer and any non-deterministic reduction",
    ],
    CALL_DISAGREEMENT: [
        "check whether a weight sync reached the rollout engine while it was generating (between these calls)",
    ],
    UPSTREAM: [
        "inspect the unmapped or one-sided modules between the aligned boundary and this module",
        "check tensor layouts and fused weight orders (e.g. qkv head order, gate/up order) that statistics cannot see",
        "add mapping entries for the modules in between to narrow the divergence down",
    ],
}
