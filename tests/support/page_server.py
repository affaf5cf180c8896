"""A real HTTP server for tests that serves text pages at paths the test sets (127.0.0.1, free port).

aiohttp on its own event loop in a daemon thread, so one server answers
hundreds of concurrent requests and a slow page (``delay_s``) delays only its
own answers. Pages can be changed while the server runs; ``hits`` counts
requests per path. Use the ``page_server`` fixture (import it into a conftest).
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from aiohttp import web

__all__ = ["Page", "PageServer", "page_server"]


@dataclass(frozen=True)
class Page:
    body: str = ""
    status: int = 200
    delay_s: float = 0.0
    #: bytes sent as they are instead of ``body`` (e.g. gzip-encoded), and extra response headers
    raw: bytes | None = None
    headers: tuple[tuple[str, str], ...] = ()


class PageServer:
    def __init__(self) -> None:
        self.pages: dict[str, Page] = {}
        self.hits: Counter[str] = Counter()
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="page-server", daemon=True)
        self._runner: web.AppRunner | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, path: str) -> str:
        return self.base_url + path

    def set(
        self,
        path: str,
        body: str = "",
        *,
        status: int = 200,
        delay_s: float = 0.0,
        raw: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.pages[path] = Page(body, status, delay_s, raw, tuple((headers or {}).items()))

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        self.hits[path] += 1
        page = self.pages.get(path)
        if page is None:
            return web.Response(status=404, text="no such page\n")
        if page.delay_s:
            await asyncio.sleep(page.delay_s)
        if page.raw is not None or page.headers:
            body = page.body.encode() if page.raw is None else page.raw
            headers = {"Content-Type": "text/plain", **dict(page.headers)}
            return web.Response(status=page.status, body=body, headers=headers)
        return web.Response(status=page.status, text=page.body, content_type="text/plain")

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_get("/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, backlog=1024)
        await site.start()
        server = site._server
        assert server is not None
        self.port = int(server.sockets[0].getsockname()[1])  # type: ignore[union-attr]

    def start(self) -> PageServer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10.0)
        return self

    def stop(self) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10.0)
            self._runner = None
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10.0)
        self._loop.close()


@pytest.fixture
def page_server() -> Iterator[PageServer]:
    server = PageServer().start()
    try:
        yield server
    finally:
        server.stop()
