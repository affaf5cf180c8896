"""A private asyncio event loop on a daemon thread, for sources whose ``observe`` is synchronous.

The sources fetch concurrently with asyncio clients, but their callers (the
live loop, tests, benchmarks) call ``observe`` from plain code or even from
inside their own event loop, where ``asyncio.run`` is refused. Running the
coroutines on a loop of our own works from both, and keeps the HTTP client
(and its keep-alive connections) alive from one tick to the next.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import TypeVar

__all__ = ["LoopThread"]

T = TypeVar("T")


class LoopThread:
    """Runs coroutines on one event loop owned by a daemon thread; started on first use."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _ensure(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name=self._name, daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    def run(self, make: Callable[[], Awaitable[T]], timeout_s: float | None = None) -> T:
        """Run ``make()`` on the loop and wait for its result (pre: not called from that loop)."""
        loop = self._ensure()

        async def call() -> T:
            return await make()

        return asyncio.run_coroutine_threadsafe(call(), loop).result(timeout_s)

    def close(self, cleanup: Callable[[], Awaitable[None]] | None = None) -> None:
        """Run ``cleanup`` on the loop (e.g. close a client), then stop the loop and join its thread."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return
        try:
            if cleanup is not None:

                async def call() -> None:
                    await cleanup()

                asyncio.run_coroutine_threadsafe(call(), loop).result(10.0)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10.0)
            loop.close()
