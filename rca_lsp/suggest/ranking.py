"""Ranked candidates for one key, for the server's quick fixes and completions."""

from __future__ import annotations

from rapidfuzz import fuzz, process

from rca_lsp.model.keys import parse_module_key
from rca_lsp.suggest.confidence import NO_NAME, NameEvidence
from rca_lsp.suggest.index import SideIndex
from rca_lsp.suggest.proposal import Assessor, Proposal
from rca_lsp.suggest.result import Candidate

SPELLING_CUTOFF = 60.0  # rapidfuzz ratio (0..100) below which a key is not offered as a respelling
CLOSE_SPELLING = 90.0  # a respelling this close within the hint's own layer and call ends the search there
HINT_WEIGHT = 0.5  # with a text hint, the score is this much spelling similarity and the rest match confidence
SAME_MODULE_BY_RULES = 0.95  # similarity given to a key that the naming rules make the same module as the hint
_NO_RULE = NameEvidence(NO_NAME, "no naming rule")


def rank_rollout(
    train: SideIndex,
    rollout: SideIndex,
    assessor: Assessor,
    by_name: list[Proposal],
    train_key: str,
    limit: int,
    text_hint: str | None,
) -> list[Candidate]:
    """Rollout keys (or split groups) for `train_key`: its name proposals (`by_name`) and modules under the same
    canonical parent, plus, when `text_hint` is a whole (misspelt) key, its respellings. Ordered by match confidence,
    blended with closeness to the hint (a typed prefix counts as close) when there is one."""
    proposals: dict[tuple[str, ...], Proposal] = {}
    respelt: dict[str, tuple[float, str]] = {}
    if text_hint and parse_module_key(text_hint) is not None:  # a whole (misspelt) key, not a prefix being typed
        respelt = hint_matches(rollout, text_hint, limit)
    if train_key in train.names:
        for proposal in by_name:
            proposals.setdefault(proposal.rollout_keys, proposal)
        nearby = rollout.siblings(train.names[train_key], train.entries[train_key].call_index)
        for key in [*nearby, *respelt]:
            if (key,) not in proposals:
                proposals[(key,)] = assessor.with_name((train_key,), (key,), _NO_RULE)
    candidates = [_rollout_candidate(proposal, respelt, text_hint) for proposal in proposals.values()]
    candidates += [
        Candidate([key], similarity, note) for key, (similarity, note) in respelt.items() if (key,) not in proposals
    ]
    return _best(candidates, limit)


def rank_train(train: SideIndex, text_hint: str, limit: int) -> list[Candidate]:
    """Train keys close to `text_hint` (a misspelt or foreign-named train key), closest first."""
    return _best(
        [
            Candidate([key], similarity, note)
            for key, (similarity, note) in hint_matches(train, text_hint, limit).items()
        ],
        limit,
    )


def hint_matches(side: SideIndex, text: str, limit: int) -> dict[str, tuple[float, str]]:
    """Keys of `side` naming the same module as the key `text` under the naming rules, or spelt like it:
    key -> (similarity 0..1, why)."""
    found: dict[str, tuple[float, str]] = {}
    parsed = parse_module_key(text)
    nearby: list[str] = []
    if parsed is not None:
        name = side.canonical(parsed.path)
        for key in side.by_path.get((name.path, parsed.call_index), ()):
            found[key] = (SAME_MODULE_BY_RULES, "the same module under the naming rules")
        nearby = side.scopes.get((name.layer, parsed.call_index), [])
    for key, ratio in _respellings(text, nearby, side.dump.keys, limit):
        if ratio / 100 > found.get(key, (0.0, ""))[0]:
            found[key] = (ratio / 100, f"spelt like {text!r} ({ratio:.0f}%)")
    return found


def _respellings(text: str, nearby: list[str], everywhere: list[str], limit: int) -> list[tuple[str, float]]:
    """Closest spellings, looked for among `nearby` keys first (the hint's layer and call), then everywhere."""
    found = process.extract(text, nearby, scorer=fuzz.ratio, limit=limit, score_cutoff=SPELLING_CUTOFF)
    if not found or found[0][1] < CLOSE_SPELLING:
        found = process.extract(text, everywhere, scorer=fuzz.ratio, limit=limit, score_cutoff=SPELLING_CUTOFF)
    return [(key, ratio) for key, ratio, _ in found]


def _rollout_candidate(proposal: Proposal, respelt: dict[str, tuple[float, str]], text_hint: str | None) -> Candidate:
    keys = list(proposal.rollout_keys)
    if not text_hint:
        return Candidate(keys, proposal.confidence, proposal.assessment.reason)
    similarity, note = max((_closeness(key, text_hint, respelt) for key in keys), key=lambda match: match[0])
    score = HINT_WEIGHT * similarity + (1 - HINT_WEIGHT) * proposal.confidence
    return Candidate(keys, round(score, 3), f"{proposal.assessment.reason}; {note}")


def _closeness(key: str, text: str, respelt: dict[str, tuple[float, str]]) -> tuple[float, str]:
    if key.startswith(text):
        return 1.0, f"starts with {text!r}"
    if key in respelt:
        return respelt[key]
    ratio = fuzz.ratio(text, key)
    return ratio / 100, f"spelt like {text!r} ({ratio:.0f}%)"


def _best(candidates: list[Candidate], limit: int) -> list[Candidate]:
    candidates.sort(key=lambda candidate: -candidate.score)
    return candidates[:limit]
