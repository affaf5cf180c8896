"""Time sources. This is the only module that reads a real clock.

Everything below the controller takes ``now_s`` as an argument, so the same
code runs in simulated time (backtests) and wall time (the live loop).
"""

from __future__ import annotations

import time
from typing import Protocol

__all__ = ["Clock", "ManualClock", "UnixClock", "WallClock"]


class Clock(Protocol):
    """A source of the current time in seconds."""

    def now_s(self) -> float:
        """Seconds on this clock's time line (monotonic, never decreasing)."""
        ...


class WallClock:
    """Monotonic wall time, for the live controller."""

    def now_s(self) -> float:
        return time.monotonic()


class UnixClock:
    """Seconds since the Unix epoch, never decreasing: the live controller's time line.

    Monotonic time restarts with the machine and differs between nodes, so cooldown
    clocks persisted by one controller process would mean nothing to its successor;
    epoch seconds survive a restart and read as timestamps in the decision log. An NTP
    step backwards is flattened (the clock holds until real time catches up).
    """

    def __init__(self) -> None:
        self._last_s = 0.0

    def now_s(self) -> float:
        self._last_s = max(self._last_s, time.time())
        return self._last_s


class ManualClock:
    """Simulated time that only moves when told to; used by backtests and tests."""

    def __init__(self, start_s: float = 0.0) -> None:
        self._now_s = float(start_s)

    def now_s(self) -> float:
        return self._now_s

    def advance_to(self, t_s: float) -> None:
        """Move the clock to ``t_s``; pre: ``t_s >= now_s()`` (time never runs backwards)."""
        if t_s < self._now_s:
            raise ValueError(f"ManualClock cannot go back from {self._now_s} to {t_s}")
        self._now_s = float(t_s)
