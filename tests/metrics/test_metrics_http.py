"""The lean scrape client against a scripted server: framing, keep-alive, stale connections, time-outs.

The server answers each request with bytes the test writes, so every framing the
client must read (Content-Length, chunks, until close) and every way a server
misbehaves is exercised exactly. PodScrapeSource's fallback to aiohttp (redirects,
compressed answers) runs against the same server.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import pytest
from metrics_pages import VLLM_NEW

from llmscale.metrics._http import HttpError, LeanClient, Unsupported
from llmscale.metrics.exposition import parse_exposition
from llmscale.metrics.scrape import PodScrapeSource
from llmscale.metrics.vetting import READ_VALUES


def ok(body: bytes, *headers: str) -> bytes:
    head = "".join(f"{h}\r\n" for h in headers)
    return f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n{head}\r\n".encode() + body


def chunked(*chunks: bytes, trailer: bytes = b"") -> bytes:
    out = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    for c in chunks:
        out += f"{len(c):x};ext=1\r\n".encode() + c + b"\r\n"
    return out + b"0\r\n" + trailer + b"\r\n"


@dataclass
class Reply:
    wire: bytes = b""
    then: str = "keep"  # keep | close (after the reply) | hang (send, then never more) | reset


@dataclass
class Scripted:
    """A TCP server answering request k (counted over all connections) with ``script(k)``."""

    script: Callable[[int], Reply]
    requests: int = 0
    connections: int = 0
    port: int = 0
    #: set once the server has closed a connection (its FIN sent)
    closed_one: asyncio.Event = field(default_factory=asyncio.Event, repr=False)
    _server: asyncio.Server | None = field(default=None, repr=False)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                try:
                    await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                reply = self.script(self.requests)
                self.requests += 1
                writer.write(reply.wire)
                await writer.drain()
                if reply.then == "hang":
                    await asyncio.Event().wait()  # never set: hangs until the scenario ends
                if reply.then == "reset":
                    writer.transport.abort()
                    return
                if reply.then == "close":
                    return
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
            self.closed_one.set()

    async def __aenter__(self) -> Scripted:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()

    def url(self, path: str = "/metrics") -> str:
        return f"http://127.0.0.1:{self.port}{path}"


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(scenario(), 30.0))


def deadline(s: float = 5.0) -> float:
    return asyncio.get_running_loop().time() + s


PAGE = VLLM_NEW.encode()


@pytest.mark.parametrize(
    ("wire", "body"),
    [
        pytest.param(ok(PAGE), PAGE, id="content-length"),
        pytest.param(ok(PAGE, "Content-Encoding: identity", "X-Other: 1"), PAGE, id="identity-encoding"),
        pytest.param(chunked(PAGE[:100], PAGE[100:]), PAGE, id="chunked"),
        pytest.param(chunked(PAGE, trailer=b"X-Trailer: 1\r\n"), PAGE, id="chunked-with-trailer"),
        pytest.param(b"HTTP/1.1 204 No Content\r\n\r\n", b"", id="no-content"),
        pytest.param(ok(PAGE * 150), PAGE * 150, id="larger-than-the-read-buffer"),  # ~350 KiB
        pytest.param(chunked(*[PAGE * 30] * 5), PAGE * 150, id="chunked-larger-than-the-read-buffer"),
    ],
)
def test_framings_are_read_and_the_connection_kept(wire, body):
    async def scenario() -> None:
        async with Scripted(lambda k: Reply(wire)) as srv:
            client = LeanClient()
            for _ in range(3):
                assert await client.get(srv.url(), deadline()) == (204 if not body else 200, body)
            assert srv.connections == 1  # kept alive: one connection for three requests
            client.close()

    run(scenario)


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param(Reply(ok(PAGE, "Connection: close"), "close"), id="connection-close"),
        pytest.param(
            Reply(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n" + PAGE, "close"),
            id="http10-until-close",
        ),
        pytest.param(Reply(b"HTTP/1.1 200 OK\r\n\r\n" + PAGE, "close"), id="no-length-until-close"),
    ],
)
def test_answers_that_end_the_connection_open_a_new_one(reply):
    async def scenario() -> None:
        async with Scripted(lambda k: reply) as srv:
            client = LeanClient()
            for _ in range(2):
                assert await client.get(srv.url(), deadline()) == (200, PAGE)
            assert srv.connections == 2
            client.close()

    run(scenario)


def test_a_connection_the_server_closed_while_idle_is_replaced_silently():
    # The server's keep-alive time-out closes the idle connection between two scrapes.
    async def scenario() -> None:
        async with Scripted(lambda k: Reply(ok(PAGE), "close" if k == 0 else "keep")) as srv:
            client = LeanClient()
            assert await client.get(srv.url(), deadline()) == (200, PAGE)
            await asyncio.wait_for(srv.closed_one.wait(), 5.0)  # the server closed it while idle
            assert await client.get(srv.url(), deadline()) == (200, PAGE)
            assert srv.connections == 2
            client.close()

    run(scenario)


def test_a_reset_before_any_answer_on_a_reused_connection_is_retried_once():
    async def scenario() -> None:
        async with Scripted(lambda k: Reply(ok(PAGE)) if k != 1 else Reply(b"", "reset")) as srv:
            client = LeanClient()
            assert await client.get(srv.url(), deadline()) == (200, PAGE)
            assert await client.get(srv.url(), deadline()) == (200, PAGE)  # reset, then again: ok
            assert (srv.requests, srv.connections) == (3, 2)
            client.close()

    run(scenario)


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        pytest.param(Reply(ok(PAGE)[:-10], "reset"), ConnectionResetError, id="reset-mid-answer"),
        pytest.param(Reply(b"SSH-2.0-OpenSSH\r\n\r\n"), HttpError, id="not-http"),
        pytest.param(Reply(ok(PAGE) + b"junk"), HttpError, id="bytes-after-the-body"),
        pytest.param(Reply(b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n"), HttpError, id="bad-length"),
        pytest.param(
            Reply(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"), HttpError, id="bad-chunk"
        ),
        pytest.param(
            Reply(b"HTTP/1.1 301 Moved\r\nLocation: /x\r\nContent-Length: 0\r\n\r\n"), Unsupported, id="301"
        ),
        pytest.param(Reply(ok(gzip.compress(PAGE), "Content-Encoding: gzip")), Unsupported, id="gzip"),
        pytest.param(
            Reply(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n"),
            Unsupported,
            id="compressed-transfer",
        ),
        pytest.param(Reply(b"HTTP/1.1 100 Continue\r\n\r\n"), Unsupported, id="100-continue"),
        # Issue 19: past max_body_bytes (1 MiB here) on every framing, before the bytes are held.
        pytest.param(
            Reply(b"HTTP/1.1 200 OK\r\nContent-Length: 2000000\r\n\r\n", "hang"),
            HttpError,
            id="length-past-limit",
        ),
        pytest.param(
            Reply(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1e8480\r\n", "hang"),
            HttpError,
            id="one-chunk-past-limit",
        ),
        pytest.param(Reply(chunked(*[PAGE * 100] * 8)), HttpError, id="chunks-past-limit"),
        pytest.param(
            Reply(b"HTTP/1.1 200 OK\r\n\r\n" + PAGE * 500, "close"), HttpError, id="until-close-past-limit"
        ),
        pytest.param(
            Reply(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"0" * 70_000, "hang"),
            HttpError,
            id="endless-chunk-size",
        ),
    ],
)
def test_broken_or_unsupported_answers_raise_and_drop_the_connection(reply, error):
    async def scenario() -> None:
        async with Scripted(lambda k: reply if k == 0 else Reply(ok(PAGE))) as srv:
            client = LeanClient(max_body_bytes=1 << 20)
            with pytest.raises(error):
                await client.get(srv.url(), deadline())
            assert await client.get(srv.url(), deadline()) == (200, PAGE)  # a fresh connection
            assert srv.connections == 2
            client.close()

    run(scenario)


def test_a_silent_server_times_out_at_the_deadline():
    async def scenario() -> None:
        async with Scripted(lambda k: Reply(ok(PAGE)[:50], "hang") if k == 0 else Reply(ok(PAGE))) as srv:
            client = LeanClient()
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            with pytest.raises(TimeoutError):
                await client.get(srv.url(), t0 + 0.3)
            assert 0.25 < loop.time() - t0 < 2.0
            assert await client.get(srv.url(), deadline()) == (200, PAGE)  # not the half answer's socket
            assert srv.connections == 2
            client.close()

    run(scenario)


def test_non_200_answers_are_returned_and_https_is_left_to_a_full_client():
    async def scenario() -> None:
        async with Scripted(lambda k: Reply(b"HTTP/1.1 503 Busy\r\nContent-Length: 4\r\n\r\nbusy")) as srv:
            client = LeanClient({"Authorization": "Bearer t"})
            assert await client.get(srv.url(), deadline()) == (503, b"busy")
            with pytest.raises(Unsupported):
                await client.get(f"https://127.0.0.1:{srv.port}/metrics", deadline())
            client.close()

    run(scenario)


# -------------------------------------------------------------------------------------------------
# PodScrapeSource: what the lean client does not handle goes to aiohttp, with the same result


class _ServerThread:
    """A Scripted server on its own loop thread, for the synchronous PodScrapeSource."""

    def __init__(self, script: Callable[[int], Reply]) -> None:
        import threading

        self.srv = Scripted(script)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> Scripted:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.srv.__aenter__(), self.loop).result(10.0)
        return self.srv

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.srv.__aexit__(), self.loop).result(10.0)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10.0)


@pytest.mark.parametrize(
    "first",
    [
        pytest.param(
            Reply(b"HTTP/1.1 307 Temporary Redirect\r\nLocation: /metrics/\r\nContent-Length: 0\r\n\r\n"),
            id="redirect",
        ),
        pytest.param(Reply(ok(gzip.compress(PAGE), "Content-Encoding: gzip")), id="gzip"),
    ],
)
def test_pages_the_lean_client_leaves_are_fetched_by_aiohttp(first):
    # vLLM's /metrics used to answer 307 to /metrics/ (a mounted ASGI app); some exporters
    # compress whatever the client asks.
    def script(k: int) -> Reply:
        return first if k == 0 else Reply(ok(PAGE))

    with _ServerThread(script) as srv, PodScrapeSource([("pod-a", srv.url())], timeout_s=5.0) as src:
        for now in (0.0, 15.0):
            obs = src.observe(now)
            assert obs.replicas[0].ok, src.last_errors
            # the source keeps the values llmscale reads (metrics/vetting.py's READ_VALUES)
            read = {k: v for k, v in parse_exposition(VLLM_NEW).values.items() if k in READ_VALUES}
            assert read and obs.replicas[0].values == read


def test_lean_and_aiohttp_fetches_read_the_same_pages():
    with _ServerThread(lambda k: Reply(ok(PAGE))) as srv:
        targets = [(f"pod-{i}", srv.url(f"/p{i}")) for i in range(3)]
        with PodScrapeSource(targets) as lean, PodScrapeSource(targets, lean_http=False) as full:
            a, b = lean.observe(0.0), full.observe(0.0)
            assert a.replicas == b.replicas and all(s.ok for s in a.replicas)
            assert lean.observe(15.0).replicas == a.replicas
            # one page shape: the first target's page teaches the layout, the other two read
            # through it (PageReader shares layouts between sources), then all three again
            assert (lean.layout_reads, lean.line_reads) == (5, 1)
