"""The one way a test waits: for a condition, with a bound, never for a span of time.

A test that sleeps two ticks and then asserts passes only while the machine is slow enough (or
fast enough); waiting for the state it asserts passes on both. :func:`wait_for` polls ``check``
until it returns something truthy, returns that value, and fails naming what it waited for, the
bound and the last value otherwise.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["wait_for"]

T = TypeVar("T")


def wait_for(
    what: str,
    check: Callable[[], T],
    timeout_s: float = 10.0,
    *,
    every_s: float = 0.05,
    context: Callable[[], str] | None = None,
) -> T:
    """Poll ``check`` every ``every_s`` until it returns a truthy value, and return it.

    Raises AssertionError after ``timeout_s`` naming ``what``, the last value and, when given,
    ``context()`` (e.g. a process's log tail). The check runs once more at the deadline, so a
    condition reached during the last pause is not reported as missed.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            extra = f"\n{context()}" if context is not None else ""
            raise AssertionError(f"{what}: not within {timeout_s:g} s (last value: {value!r}){extra}")
        time.sleep(every_s)
