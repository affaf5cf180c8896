"""An emulated fleet in a background thread with its own event loop, for tests and benchmarks.

>>> cfg = EmulateConfig(replicas=2, port=0, admin_api=True, admin_token=token)   # doctest: +SKIP
>>> with EmulatorThread(cfg) as fleet:   # doctest: +SKIP
...     httpx.get(fleet.base_url + "/admin/replicas", headers={"Authorization": f"Bearer {token}"}).json()
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from types import TracebackType
from typing import Any

from llmscale.emulate.config import EmulateConfig
from llmscale.emulate.server import EmulateServer, serve
from llmscale.errors import LlmscaleError

__all__ = ["EmulatorThread"]


class EmulatorThread:
    """Start with :meth:`start` (or ``with``); :meth:`stop` closes every listener and joins the thread."""

    def __init__(self, cfg: EmulateConfig) -> None:
        self.cfg = cfg
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._server: EmulateServer | None = None
        self._error: BaseException | None = None

    def start(self, timeout_s: float = 30.0) -> EmulatorThread:
        """Run the fleet; returns once its front door listens. Raises what start-up raised."""
        if self._thread is not None:
            raise RuntimeError("EmulatorThread already started")
        self._thread = threading.Thread(target=self._run, name="llmscale-emulate", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout_s):
            self.stop()
            raise LlmscaleError(f"the emulated fleet did not start within {timeout_s} s")
        if self._error is not None:
            self.stop()
            raise self._error
        return self

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()

        def ready(server: EmulateServer) -> None:
            self._server = server
            self._ready.set()

        try:
            await serve(self.cfg, on_ready=ready, stop=self._stop)
        except BaseException as e:  # handed to the starting thread, which re-raises it
            self._error = e
        finally:
            self._ready.set()

    @property
    def server(self) -> EmulateServer:
        if self._server is None:
            raise RuntimeError("the emulated fleet is not running")
        return self._server

    @property
    def base_url(self) -> str:
        return self.server.base_url

    def call(self, fn: Any, timeout_s: float = 10.0) -> Any:
        """Run ``fn(server)`` on the fleet's loop (its state belongs to that thread) and return its result."""
        loop = self._loop
        if loop is None:
            raise RuntimeError("the emulated fleet is not running")

        async def run() -> Any:
            return fn(self.server)

        return asyncio.run_coroutine_threadsafe(run(), loop).result(timeout_s)

    def stop(self, timeout_s: float = 15.0) -> None:
        """Stop the fleet and join its thread (idempotent)."""
        loop, stop, thread = self._loop, self._stop, self._thread
        if loop is not None and stop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop already ended
                loop.call_soon_threadsafe(stop.set)
        if thread is not None:
            thread.join(timeout_s)
            if thread.is_alive():
                raise LlmscaleError(f"the emulated fleet did not stop within {timeout_s} s")
        self._thread = None
        self._server = None

    def __enter__(self) -> EmulatorThread:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
