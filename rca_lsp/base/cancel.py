"""Stopping long work early when its caller no longer wants the result (a request the client cancelled)."""

from __future__ import annotations

from typing import Callable

ShouldStop = Callable[[], bool]


class Cancelled(Exception):
    """Raised inside work whose `should_stop` said yes; nothing it was producing is kept."""


def never() -> bool:
    return False


def stop_if(should_stop: ShouldStop) -> None:
    if should_stop():
        raise Cancelled()
