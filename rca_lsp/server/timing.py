"""Wall time of the stages of one server run, for the log."""

from __future__ import annotations

import time


class Laps:
    def __init__(self) -> None:
        self._last = self._start = time.perf_counter()
        self._laps: list[tuple[str, float]] = []

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self._laps.append((name, now - self._last))
        self._last = now

    def __str__(self) -> str:
        stages = ", ".join(f"{name} {seconds * 1000:.0f} ms" for name, seconds in self._laps)
        return f"{(self._last - self._start) * 1000:.0f} ms ({stages})"
