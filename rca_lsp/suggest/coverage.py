"""The coverage report of a suggested mapping, as plain text for a terminal or an editor panel."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from rca_lsp.base.display import shown
from rca_lsp.compare.calls import is_all_calls_key
from rca_lsp.model.keys import parse_module_key

if TYPE_CHECKING:
    from rca_lsp.suggest.result import SuggestionResult

EXAMPLES_PER_CLASS = 3
LISTED_ROWS = 10


def render_coverage(result: SuggestionResult) -> str:
    lines = [
        f"train modules mapped: {result.train_total - len(result.unmatched_train)} of {result.train_total} "
        f"({len(result.accepted)} suggested; {result.kept} entries kept from the existing mapping)",
        f"rollout modules mapped: {result.rollout_total - len(result.unmatched_rollout)} of {result.rollout_total}",
    ]
    lines += _groups(result)
    lines += _low_confidence(result)
    lines += _by_class("unmatched train modules", result.unmatched_train)
    lines += _by_class("unmatched rollout modules", result.unmatched_rollout)
    return "\n".join(map(shown, lines)) + "\n"  # keys: no line break or bidi control shown as it is


def _groups(result: SuggestionResult) -> list[str]:
    counts = {kind: sum(group.kind == kind for group in result.groups) for kind in ("1:N", "N:1")}
    lines = [
        f"groups: {counts['1:N']} 1:N (one train module, split rollout modules), "
        f"{counts['N:1']} N:1 (split train modules, one rollout module)"
    ]
    for group in result.groups[:LISTED_ROWS]:
        lines.append(f"  {group.kind}  {' + '.join(group.train_keys)}")
        lines.append(f"       -> {' + '.join(group.rollout_keys)}")
    lines += _more(len(result.groups))
    return lines


def _low_confidence(result: SuggestionResult) -> list[str]:
    if not result.low_confidence:
        return []
    lines = [f"low-confidence suggestions, not written: {len(result.low_confidence)}"]
    for suggestion in result.low_confidence[:LISTED_ROWS]:
        lines.append(f"  {suggestion.confidence:.2f}  {suggestion.train_key}")
        lines.append(f"        -> {' + '.join(suggestion.rollout_keys)}: {suggestion.reason}")
    lines += _more(len(result.low_confidence))
    return lines


def _by_class(title: str, keys: list[str]) -> list[str]:
    if not keys:
        return [f"{title}: none"]
    by_class: dict[str, list[str]] = defaultdict(list)
    for key in keys:
        parsed = parse_module_key(key[:-1] + "0" if is_all_calls_key(key) else key)  # forward.*: every call
        by_class[parsed.class_name if parsed else "?"].append(key)
    lines = [f"{title}: {len(keys)}, by module class"]
    for class_name, members in sorted(by_class.items(), key=lambda item: (-len(item[1]), item[0])):
        examples = ", ".join(members[:EXAMPLES_PER_CLASS])
        more = f", ... ({len(members) - EXAMPLES_PER_CLASS} more)" if len(members) > EXAMPLES_PER_CLASS else ""
        lines.append(f"  {class_name} ({len(members)}): {examples}{more}")
    return lines


def _more(total: int) -> list[str]:
    return [f"  ... and {total - LISTED_ROWS} more"] if total > LISTED_ROWS else []
