"""The mapping matcher, built once per dump pair and reused by quick fixes and completion."""

from __future__ import annotations

import threading

from rca_lsp.dumps.dump import Dump
from rca_lsp.suggest import Matcher


class MatcherCache:
    def __init__(self) -> None:
        self._current: tuple[Dump, Dump, Matcher] | None = None
        self._lock = threading.Lock()

    def has(self, train: Dump, rollout: Dump) -> bool:
        current = self._current
        return current is not None and current[0] is train and current[1] is rollout

    def get(self, train: Dump, rollout: Dump) -> Matcher:
        with self._lock:
            current = self._current
            if current is None or current[0] is not train or current[1] is not rollout:
                current = (train, rollout, Matcher(train, rollout))
                self._current = current
            return current[2]
