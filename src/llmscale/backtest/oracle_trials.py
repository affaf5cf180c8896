"""Trial runs of the oracle's searches: forked copies of a fleet, each run with one choice.

A fork is the snapshot: the child sees the fleet exactly as it is, changes
only its own copy-on-write pages and sends back two numbers. This is faster
than deep-copying a fleet with thousands of requests in flight, and it works
for the mypyc-compiled simulator classes, which cannot be copied. Several
trials may run at once (one core each). The forking is :class:`~llmscale.backtest.forks.Forks`,
which the causal reference's runs share.
"""

from __future__ import annotations

import functools
import os
import struct
from collections.abc import Callable

from llmscale.backtest.forks import Forks
from llmscale.errors import LlmscaleError
from llmscale.sim.fleet import Fleet

__all__ = ["Outcome", "Trials", "reap"]

#: a trial's outcome: a value and what kind of value it is (the caller's convention)
Outcome = tuple[float, int]


class Trials:
    """Trials from one state of ``fleet``, keyed by the replica count tried; the parent's fleet is
    untouched. Each sends back its :data:`Outcome` (see the module docstring)."""

    def __init__(self, fleet: Fleet, run: Callable[[Fleet, int], Outcome], exiting: list[int]) -> None:
        if not hasattr(os, "fork"):
            raise LlmscaleError("the oracle searches with forked trial runs, which needs a POSIX system")
        self._fleet = fleet
        self._run = run
        #: replica count -> its forked run (:class:`~llmscale.backtest.forks.Forks`)
        self._forks: Forks[int] = Forks()
        #: children that answered and are exiting (shared from interval to interval): see :func:`reap`
        self._exiting = exiting
        self.done: dict[int, Outcome] = {}

    def start(self, n: int) -> None:
        """Start the trial of ``n`` replicas unless it ran or runs already."""
        if n not in self.done:
            self._forks.start(n, functools.partial(self._answer, n))

    def _answer(self, n: int) -> bytes:
        value, kind = self._run(self._fleet, n)
        return struct.pack("<dd", value, float(kind))

    def outcome(self, n: int) -> Outcome:
        """The outcome of ``n`` replicas: started now if it is not running, then waited for."""
        if n not in self.done:
            self.start(n)
            pid, data = self._forks.read(n)
            if len(data) != 16:
                _, status = os.waitpid(pid, 0)
                raise LlmscaleError(
                    f"an oracle trial run failed (exit status {status}); its traceback is above"
                )
            # A child that wrote its outcome has nothing left to do but exit: reaped later.
            self._exiting.append(pid)
            value, kind = struct.unpack("<dd", data)
            self.done[n] = (value, int(kind))
        return self.done[n]

    def cancel(self) -> None:
        """Stop the trials still running (guesses the search did not need)."""
        self._forks.cancel()
        reap(self._exiting, block=False)


def reap(pids: list[int], *, block: bool) -> None:
    """Wait for the children in ``pids`` that have exited (all of them with ``block``); drop them."""
    left = []
    for pid in pids:
        done, _ = os.waitpid(pid, 0 if block else os.WNOHANG)
        if done == 0:
            left.append(pid)
    pids[:] = left
