"""Ranked candidates for one key, for the server's quick fixes and completions."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rapidfuzz import fuzz, process

from rca_lsp.core.keys import parse_module_key
from rca_lsp.suggest.confidence import NO_NAME, NameEvidence
from rca_lsp.suggest.index import SideIndex
from rca_lsp.suggest.proposal import Proposal
from rca_lsp.suggest.result import Candidate

if TYPE_CHECKING:
    from rca_lsp.suggest.matcher import Matcher

SPELLING_CUTOFF = 60.0  # rapidfuzz ratio (0..100) below which a key is not offered as a respelling
HINT_WEIGHT = 0.5  # with a text hint, the score is this much spelling similarity and the rest match confidence
SAME_MODULE_BY_RULES = 0.95  # similarity given to a key that the naming rules make the same module as the hint


def rank_rollout(matcher: Matcher, train_key: str, limit: int, text_hint: str | None) -> list[Candidate]:
    """Rollout keys (or split groups) for `train_key`: name matches, modules under the same canonical parent, and
    respellings of `text_hint`; ordered by match confidence, blended with closeness to the hint when there is one."""
    proposals: dict[tuple[str, ...], Proposal] = {}
    similar = hint_matches(matcher.rollout, text_hint, limit) if text_hint else {}
    if train_key in matcher.train.names:
        for proposal in matcher.name_proposals(train_key):
            proposals.setdefault(proposal.rollout_keys, proposal)
        nearby = matcher.rollout.siblings(matcher.train.names[train_key], matcher.train.entry(train_key).call_index)
        for key in [*nearby, *similar]:
            if (key,) not in proposals:
                proposals[(key,)] = matcher.assessor.with_name((train_key,), (key,), NameEvidence(NO_NAME, "no naming rule"))
    candidates = [_rollout_candidate(proposal, similar, text_hint) for proposal in proposals.values()]
    candidates += [Candidate([key], similarity, note) for key, (similarity, note) in similar.items() if (key,) not in proposals]
    return _best(candidates, limit)


def rank_train(matcher: Matcher, text_hint: str, limit: int) -> list[Candidate]:
    """Train keys close to `text_hint` (a misspelt or foreign-named train key), closest first."""
    return _best([Candidate([key], similarity, note)
                  for key, (similarity, note) in hint_matches(matcher.train, text_hint, limit).items()], limit)


def hint_matches(side: SideIndex, text: str, limit: int) -> dict[str, tuple[float, str]]:
    """Keys of `side` spelt like `text`, or naming the same module under the naming rules: key -> (0..1, why)."""
    found: dict[str, tuple[float, str]] = {}
    parsed = parse_module_key(text)
    if parsed is not None:
        for key in side.by_path.get((side.canonical_path(parsed.path), parsed.call_index), ()):
            found[key] = (SAME_MODULE_BY_RULES, "the same module under the naming rules")
    for key, ratio, _ in process.extract(text, side.dump.keys, scorer=fuzz.ratio, limit=limit,
                                         score_cutoff=SPELLING_CUTOFF):
        if ratio / 100 > found.get(key, (0.0, ""))[0]:
            found[key] = (ratio / 100, f"spelt like {text!r} ({ratio:.0f}%)")
    return found


def _rollout_candidate(proposal: Proposal, similar: dict[str, tuple[float, str]], text_hint: str | None) -> Candidate:
    keys = list(proposal.rollout_keys)
    if not text_hint:
        return Candidate(keys, proposal.confidence, proposal.assessment.reason)
    similarity, note = max((similar.get(key, (0.0, "")) for key in keys), key=lambda match: match[0])
    score = HINT_WEIGHT * similarity + (1 - HINT_WEIGHT) * proposal.confidence
    reason = f"{proposal.assessment.reason}; {note}" if note else proposal.assessment.reason
    return Candidate(keys, round(score, 3), reason)


def _best(candidates: list[Candidate], limit: int) -> list[Candidate]:
    candidates.sort(key=lambda candidate: -candidate.score)
    return candidates[:limit]
