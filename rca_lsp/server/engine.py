"""Blocking analysis work with its caches: parsed dumps and per-pair comparison results (run off the event loop)."""

from __future__ import annotations

import logging
import threading
from functools import partial
from typing import Callable, Iterable

from rca_lsp.base.errors import InputError
from rca_lsp.compare.rankview import rank_parts
from rca_lsp.compare.records import Comparator
from rca_lsp.diagnose.analysis import Analysis, analyze
from rca_lsp.diagnose.rootcause import Suspect
from rca_lsp.diagnose.run import with_data_group
from rca_lsp.dumps.dump import Dump
from rca_lsp.dumps.forkload import BackgroundDump, files_bytes, worth_loading_apart
from rca_lsp.dumps.load import DumpCache
from rca_lsp.dumps.sources import DumpSource
from rca_lsp.mapping.model import ParsedMapping
from rca_lsp.model.tolerance import Tolerances
from rca_lsp.server.diagnostics import related_dump_keys
from rca_lsp.server.matching import MatcherCache
from rca_lsp.server.pairing import Pair
from rca_lsp.suggest import Candidate

log = logging.getLogger(__name__)
COUNTERPART_MIN_SCORE = 0.6
MAX_FINDINGS_LOCATED = 1000  # at most Settings.max_findings are published
MAX_ORIGINS_PER_RANK_READ = 3  # credible origins whose per-rank statistics are read before their hover asks
MAX_COUNTERPART_LOOKUPS = 300


def _child_side(pair: Pair) -> DumpSource:
    """The dump a child loads while this process parses the mapping and loads the other: the larger one, when what
    this process reads meanwhile is worth its transfer back (forkload.worth_loading_apart, the CLI's rule); else the
    smaller one, which costs little to send (a small train dump against a rollout of hundreds of decode steps)."""
    train, rollout = files_bytes(pair.train.files), files_bytes(pair.rollout.files)
    larger, smaller = (pair.train, pair.rollout) if train > rollout else (pair.rollout, pair.train)
    own = min(train, rollout) + files_bytes([pair.mapping])
    return larger if worth_loading_apart(own, max(train, rollout)) else smaller


class Engine:
    def __init__(self) -> None:
        self.dumps = DumpCache()
        self._comparators: dict[tuple[DumpSource, DumpSource], Comparator] = {}
        self._lock = threading.Lock()
        self._pending: tuple[Pair, BackgroundDump] | None = None  # a dump loading in a child (start_loading)
        self.matchers = MatcherCache()
        self._best_of: tuple[object, dict[str, Candidate | None]] = (None, {})
        # dump keys the findings of the last analysis point at, by suspect (an edit keeps most suspects)
        self._related: dict[int, tuple[Suspect, tuple[list[str], list[str]]]] = {}

    def keep_only(self, pairs: Iterable[Pair]) -> None:
        """Forget the dumps and comparators of every other pair (the pairs the documents have now)."""
        current = {(pair.train, pair.rollout) for pair in pairs}
        self.dumps.keep_only({source.files for sources in current for source in sources})
        with self._lock:
            for gone in [sources for sources in self._comparators if sources not in current]:
                del self._comparators[gone]

    def needs_loading(self, pair: Pair) -> bool:
        return not (self.dumps.is_current(pair.train) and self.dumps.is_current(pair.rollout))

    def start_loading(self, pair: Pair) -> None:
        """When neither dump is loaded yet, one starts loading in a child process now (`_child_side`), while the
        caller parses the mapping and then loads the other one here (two cores; `load` takes it up). The larger one
        where that pays: this process also gathers its own dump's columns and reads the child's dump back
        (MessagePack, ~30% of a load) while the child gathers and sends its own columns; measured, the first findings
        come 0.1-0.4 s sooner than with the smaller one in the child (benchmarks/README, thirteenth session)."""
        with self._lock:
            if self._pending is not None and self._pending[0] == pair:
                return
            self._drop_pending()
            if self.dumps.is_current(pair.train) or self.dumps.is_current(pair.rollout) or pair.train == pair.rollout:
                return
            try:
                self._pending = (pair, BackgroundDump(_child_side(pair), threaded=True))
            except (OSError, InputError):  # no child process: `load` loads both here
                pass

    def _drop_pending(self) -> None:
        if self._pending is not None:
            self._pending[1].close()
            self._pending = None

    def load(self, pair: Pair) -> tuple[Dump, Dump]:
        """Both dumps; when neither is loaded yet, one of them in a child process meanwhile (start_loading)."""
        if self.dumps.is_current(pair.train) or self.dumps.is_current(pair.rollout) or pair.train == pair.rollout:
            return self._get(pair.train), self._get(pair.rollout)
        with self._lock:
            pending, self._pending = self._pending, None
        if pending is not None and pending[0] != pair:
            pending[1].close()
            pending = None
        try:
            background = pending[1] if pending is not None else BackgroundDump(_child_side(pair), threaded=True)
        except (OSError, InputError):  # no child process: load both here (which reports any problem with the files)
            return self._get(pair.train), self._get(pair.rollout)
        with background:  # while the child works, what the comparison reads of this one is gathered
            if background.source == pair.train:
                rollout = self._get(pair.rollout)
                return self._get(pair.train, partial(background.load, meanwhile=lambda: rollout.columns)), rollout
            train = self._get(pair.train)
            return train, self._get(pair.rollout, partial(background.load, meanwhile=lambda: train.columns))

    def _get(self, source: DumpSource, loader: Callable[[DumpSource], Dump] | None = None) -> Dump:
        """A dump from the cache; any failure to load it is an InputError naming it: an error the readers do not
        foresee (a RecursionError, a MemoryError) is still about this dump, and the server shows it as such over
        the last good analysis instead of failing the run (logged with its traceback)."""
        try:
            return self.dumps.get(source, loader)
        except InputError:
            raise
        except Exception as error:
            log.error("loading %s failed", source.label, exc_info=error)
            raise InputError(source.label, f"cannot be loaded: {type(error).__name__}: {error}") from None

    def comparator(self, pair: Pair, tolerances: Tolerances, element_wise: bool = False) -> Comparator:
        """The pair's comparator under these tolerances: statistics only at first for tensor- or md5-mode dumps (the
        first findings do not wait for the tensors), the element-wise one once asked for (then kept)."""
        train, rollout = self.load(pair)
        train, choice = with_data_group(self.dumps, pair.train, train, rollout)
        with self._lock:
            current = self._comparators.get((pair.train, pair.rollout))
            if (
                current is None
                or current.train is not train
                or current.rollout is not rollout
                or current.tolerances.key() != tolerances.key()
                or (element_wise and current.element_wise_later)
            ):
                current = Comparator(train, rollout, tolerances, data_choice=choice, element_wise=element_wise)
                self._comparators[(pair.train, pair.rollout)] = current
            return current

    def analyse(
        self,
        pair: Pair,
        mapping: ParsedMapping,
        tolerances: Tolerances,
        previous: Analysis | None = None,
        element_wise: bool = False,
    ) -> Analysis:
        """`previous`: the last analysis of this mapping file; reused where the dumps and tolerances are the same.
        `element_wise`: with the tensors' (or hashes') evidence (see comparator)."""
        return analyze(mapping, self.comparator(pair, tolerances, element_wise), previous)

    def has_matcher(self, analysis: Analysis) -> bool:
        return self.matchers.has(analysis.train, analysis.rollout)

    def counterparts(self, analysis: Analysis) -> dict[str, Candidate]:
        """Unmapped train modules (between mapped neighbours) that have a confident, still unmapped counterpart."""
        matcher = self.matchers.get(analysis.train, analysis.rollout)
        if self._best_of[0] is not matcher:
            self._best_of = (matcher, {})
        best_of = self._best_of[1]  # the matcher's answer does not depend on the mapping: remember it
        mapped_rollout = analysis.matched_rollout
        found: dict[str, Candidate] = {}
        lookups = 0
        for unmapped in analysis.unmapped_between.values():
            for key in unmapped:
                if lookups >= MAX_COUNTERPART_LOOKUPS:
                    return found
                lookups += 1
                if key not in best_of:
                    ranked = matcher.rank_rollout_candidates(key, limit=1)
                    best_of[key] = ranked[0] if ranked and ranked[0].score >= COUNTERPART_MIN_SCORE else None
                best = best_of[key]
                if best is not None and mapped_rollout.isdisjoint(best.keys):
                    found[key] = best
        return found

    def prefetch_locations(self, analysis: Analysis) -> None:
        """Dump lines of the modules findings point at, found in one pass per dump, off the event loop."""
        # one read of each dump file for every module the findings point at, not one per finding
        earlier, self._related = self._related, {}
        for suspect in analysis.suspects[:MAX_FINDINGS_LOCATED]:
            kept = earlier.get(id(suspect))
            self._related[id(suspect)] = (
                kept if kept is not None and kept[0] is suspect else (suspect, related_dump_keys(suspect))
            )
        related = [keys for _, keys in self._related.values()]
        analysis.train.prefetch_lines(k for train, _ in related for k in train)
        analysis.rollout.prefetch_lines(k for _, rollout in related for k in rollout)
        for suspect in [s for s in analysis.suspects if s.credible_origin][:MAX_ORIGINS_PER_RANK_READ]:
            rank_parts(analysis.train, suspect.record.comparison.train_keys)  # what their hover shows per rank
            rank_parts(analysis.rollout, suspect.record.comparison.rollout_keys)  # (every call), read once
