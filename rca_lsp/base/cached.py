"""cached_property: a value computed once per object, then stored on it, with no lock.

It is functools.cached_property as Python 3.12 has it. Python 3.11's takes one lock per property while computing,
shared by every object of the class, and the language server forks (base.forkpart: the chart, a dump's loader) while
its other threads work: a child forked while another thread computed, say, `Dump.columns` of some dump inherits that
lock held by a thread it does not have, and waits forever at its first `Dump.columns` of any dump. Without the lock,
two threads computing the same value at once each compute it and the last one stored stays: the values cached here
are the same whichever thread computes them."""

from __future__ import annotations

from typing import Any, Callable, Generic, TypeVar, overload

T = TypeVar("T")


class cached_property(Generic[T]):  # named as the functools descriptor it stands for
    def __init__(self, func: Callable[[Any], T]) -> None:
        self.func = func
        self.name = func.__name__
        self.__doc__ = func.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, instance: None, owner: type | None = None) -> cached_property[T]: ...

    @overload
    def __get__(self, instance: object, owner: type | None = None) -> T: ...

    def __get__(self, instance: object | None, owner: type | None = None) -> T | cached_property[T]:
        if instance is None:
            return self
        # stored in the object's __dict__, which a later lookup finds before this (non-data) descriptor
        value = instance.__dict__[self.name] = self.func(instance)
        return value
