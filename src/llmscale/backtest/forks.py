"""Runs in forked processes, each sending its answer back through a pipe, keyed by what it runs.

A fork is a snapshot: the child starts from the parent's memory as it is (a fleet mid-run, the
search's settings), changes only its own copy-on-write pages and writes its answer's bytes to its
pipe. This serves both the oracle's trial runs (:mod:`~llmscale.backtest.oracle_trials`: a
16-byte outcome from a fleet mid-run, which cannot be deep-copied when the simulator is compiled)
and the causal reference's whole runs (:mod:`~llmscale.backtest.causal_reference`: a pickled
result). What each does with a child once it answered differs (the trials leave theirs to exit
and reap them later; the reference waits for its exit status), so :meth:`Forks.read` hands back
the pid with the bytes.
"""

from __future__ import annotations

import contextlib
import os
import signal
import traceback
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["Forks"]

K = TypeVar("K", bound=Hashable)


class Forks(Generic[K]):
    """Forked runs keyed by ``K``; at most one per key at a time. POSIX only."""

    def __init__(self) -> None:
        #: key -> (child pid, read end of its pipe)
        self._running: dict[K, tuple[int, int]] = {}

    def __contains__(self, key: K) -> bool:
        return key in self._running

    def start(self, key: K, answer: Callable[[], bytes]) -> None:
        """Fork a child that writes ``answer()`` to its pipe and exits (1, its traceback on
        stderr, when ``answer`` raises). Nothing when ``key`` runs already."""
        if key in self._running:
            return
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child
            code = 1
            try:
                os.close(read_fd)
                for _, other_fd in self._running.values():
                    os.close(other_fd)  # the siblings' pipes are the parent's
                view = memoryview(answer())
                while view:
                    view = view[os.write(write_fd, view) :]
                # Closed now, the parent reads its end-of-file before this process's memory is
                # torn down (tens of ms for a large fleet), which it need not wait for.
                os.close(write_fd)
                code = 0
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(code)
        os.close(write_fd)
        self._running[key] = (pid, read_fd)

    def read(self, key: K) -> tuple[int, bytes]:
        """(pid, every byte) of the child started for ``key``, read to its end-of-file; the child
        is the caller's to wait for (:func:`os.waitpid`) or to reap later."""
        pid, read_fd = self._running.pop(key)
        chunks = []
        try:
            while chunk := os.read(read_fd, 1 << 20):
                chunks.append(chunk)
        finally:
            os.close(read_fd)
        return pid, b"".join(chunks)

    def cancel(self) -> None:
        """Kill and wait for the children still running (runs nobody asked for in the end)."""
        for pid, read_fd in self._running.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(read_fd)
        self._running.clear()
