"""Replica servers that misbehave at the socket level, against the lean scrape client and PodScrapeSource.

Each attack is a script a real TCP server on 127.0.0.1 plays on the first connection a client
opens: bytes to write, pauses, a close or a reset, or the request left unread. Every later
connection serves a good page. For every attack (docs/hostile-servers.md):

* the request ends within its deadline plus a small slack, with a page or one of the errors a
  scrape turns into "unknown this tick" (HttpError, Unsupported, OSError, TimeoutError), and no
  exception escapes into the event loop's handler;
* the next request on the same client reads the good page, never a stale answer left on a
  connection (the keep-alive desync attacks);
* a fleet of such servers scraped together by PodScrapeSource leaves the honest replica known on
  every tick, each tick ends within the scrape time-out, and once the servers turn honest every
  replica is read again;
* an answer that streams its framing (chunk extensions, 1-byte chunks) as fast as loopback goes
  holds at most the body limit plus a header block in memory.

Run the client in a thread joined with a bound: a parser that loops for ever (a chunk size of
-6 once sent it back onto the line it had just read) fails the test instead of hanging it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from llmscale.metrics._http import HttpError, LeanClient, Unsupported
from llmscale.metrics.scrape import PodScrapeSource

PAGE = (
    b"# TYPE vllm:num_requests_running gauge\n"
    b'vllm:num_requests_running{model_name="m"} 3\n'
    b"# TYPE vllm:num_requests_waiting gauge\n"
    b'vllm:num_requests_waiting{model_name="m"} 1\n'
)
STALE = PAGE.replace(b"} 3\n", b"} 999\n")  # what a desynced connection would hand the next tick


def ok(body: bytes = PAGE, *headers: str, version: str = "HTTP/1.1") -> bytes:
    head = "".join(f"{h}\r\n" for h in headers)
    return f"{version} 200 OK\r\nContent-Length: {len(body)}\r\n{head}\r\n".encode() + body


CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"

#: a step of an attack script: bytes to write, a pause (s), or an action
Step = bytes | float | str
#: a generator of bytes written as fast as the client reads them, until the server stops
Flood = Callable[[], bytes]


@dataclass(frozen=True)
class Attack:
    name: str
    steps: tuple[Step, ...]
    #: "error": must fail this request; "page": must read exactly ``body``; "either"
    expect: str = "error"
    body: bytes = PAGE
    read_request: bool = True  # False: the server writes before (or without) reading the request


def attack(name: str, *steps: Step, expect: str = "error", body: bytes = PAGE, read: bool = True) -> Any:
    return pytest.param(Attack(name, steps, expect, body, read), id=name)


def drip(data: bytes, gap_s: float = 0.05) -> tuple[Step, ...]:
    """``data`` one byte per ``gap_s`` (a slow-loris server, scaled from one byte a second)."""
    out: list[Step] = []
    for b in data:
        out += [bytes([b]), gap_s]
    return tuple(out)


# The bound of every request (s) and the slack a loaded 2-core machine gets past it.
DEADLINE_S = 0.5
SLACK_S = 1.0

ATTACKS = [
    # -- slow and endless heads and bodies
    attack("slowloris-head", *drip(ok()[:40]), "hang"),
    attack("whole-answer-one-byte-a-write", *(bytes([b]) for b in ok()), "keep", expect="page"),
    attack("slowloris-body", ok()[:-10], *drip(ok()[-10:], 0.2), "hang"),
    attack("endless-headers", CHUNKED[:17], "flood:X-Padding: aaaaaaaaaaaaaaaa\r\n"),
    attack("header-line-10MB", b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 10_000_000 + b"\r\n\r\n", "hang"),
    attack("never-reads-the-request", "hang", read=False),
    attack("accepts-then-silence", "hang"),
    # -- Content-Length that lies
    attack("length-shorter-same-segment", b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n" + PAGE),
    attack(
        "length-shorter-then-late-bytes",
        b"HTTP/1.1 200 OK\r\nContent-Length: " + str(len(PAGE) - 10).encode() + b"\r\n\r\n" + PAGE[:-10],
        0.1,
        PAGE[-10:],
        "keep",
        expect="page",
        body=PAGE[:-10],
    ),
    attack("length-longer-then-hang", b"HTTP/1.1 200 OK\r\nContent-Length: 9999\r\n\r\n" + PAGE, "hang"),
    attack("length-longer-then-close", b"HTTP/1.1 200 OK\r\nContent-Length: 9999\r\n\r\n" + PAGE, "close"),
    attack("length-negative", b"HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n" + PAGE),
    attack("length-plus-sign", b"HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\nabcde"),
    attack("length-two-values", ok(PAGE, "Content-Length: 5")),
    attack("length-list-of-two", b"HTTP/1.1 200 OK\r\nContent-Length: 5, 7\r\n\r\nabcde"),
    attack("length-superscript-digit", "HTTP/1.1 200 OK\r\nContent-Length: ²\r\n\r\nab".encode("latin-1")),
    attack("length-5000-digits", b"HTTP/1.1 200 OK\r\nContent-Length: " + b"1" * 5000 + b"\r\n\r\n"),
    attack("length-same-twice", ok(PAGE, f"Content-Length: {len(PAGE)}"), expect="page"),
    attack("length-and-chunked", ok(PAGE, "Transfer-Encoding: chunked")),
    # -- chunked encoding
    attack("chunk-size-negative-6", CHUNKED + b"-6\r\n", "hang"),
    attack(
        "chunk-size-negative-2", CHUNKED + b"-2\r\n" + f"{len(PAGE):x}\r\n".encode() + PAGE + b"\r\n0\r\n\r\n"
    ),
    attack("chunk-size-0x", CHUNKED + b"0x5\r\nabcde\r\n0\r\n\r\n"),
    attack("chunk-size-underscore", CHUNKED + b"1_0\r\n" + b"a" * 16 + b"\r\n0\r\n\r\n"),
    attack("chunk-size-not-hex", CHUNKED + b"zz\r\n"),
    attack("chunk-size-huge", CHUNKED + b"ffffffffffffffffff\r\n", "hang"),
    attack("chunk-not-followed-by-crlf", CHUNKED + b"3\r\nabcXX0\r\n\r\n"),
    attack("chunk-extension-64KB", CHUNKED + b"5;" + b"e" * 70_000 + b"\r\n", "hang"),
    attack("chunk-extension-flood", CHUNKED, "flood:1;" + "e" * 60_000 + "\r\nx\r\n"),
    attack("one-byte-chunks-flood", CHUNKED, "flood:1\r\nx\r\n"),
    attack("trailer-flood", CHUNKED + b"0\r\n", "flood:X-T: aaaaaaaa\r\n"),
    attack("bytes-after-last-chunk", CHUNKED + b"5\r\nabcde\r\n0\r\n\r\nHTTP/1.1 200 OK\r\n"),
    attack(
        "chunks-with-extensions-and-trailer",
        CHUNKED + f"{len(PAGE):x} ; a=b\r\n".encode() + PAGE + b"\r\n0\r\nX-T: 1\r\n\r\n",
        expect="page",
    ),
    # -- connections that end early
    attack("close-mid-body", ok()[:-10], "close"),
    attack("reset-mid-body", ok()[:-10], "reset"),
    attack("reset-before-answer", "reset"),
    attack("close-mid-chunks", CHUNKED + b"5\r\nab", "close"),
    attack("close-before-answer", "close"),
    # -- other versions and status lines
    attack("http10-until-close", b"HTTP/1.0 200 OK\r\n\r\n" + PAGE, "close", expect="page"),
    attack("http10-with-length", ok(version="HTTP/1.0"), "keep", expect="page"),
    attack("http09-no-status", PAGE, "close"),
    attack("http2-preface", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "hang"),
    attack("lf-only-lines", ok().replace(b"\r\n", b"\n"), "hang"),
    attack("status-superscript", "HTTP/1.1 ²00 OK\r\nContent-Length: 0\r\n\r\n".encode("latin-1")),
    attack("status-5-digits", b"HTTP/1.1 20000 OK\r\nContent-Length: 0\r\n\r\n"),
    attack("status-5000-digits", b"HTTP/1.1 " + b"2" * 5000 + b" OK\r\n\r\n"),
    attack("continue-then-200", b"HTTP/1.1 100 Continue\r\n\r\n" + ok()),
    attack("tls-alert-bytes", b"\x15\x03\x01\x00\x02\x02\x46", "close"),
    attack("nul-bytes", b"\x00" * 100_000, "hang"),
    # -- answers out of step with requests
    # answered at once, then again when the request comes: refused as two answers in one read, or
    # read, and the connection dropped when the second lands on it while idle
    attack("answer-before-the-request", ok(), "keep", expect="either", read=False),
    attack("two-answers-one-segment", ok() + ok(STALE), "serve-stale"),
    attack("two-answers-second-late", ok(), 0.05, ok(STALE), "serve-stale", expect="page"),
]

# -------------------------------------------------------------------------------------------------
# the server


@dataclass
class HostileServer:
    """A TCP server on 127.0.0.1 on its own loop thread: connection 0 plays ``attack``, later
    connections serve ``PAGE`` with keep-alive (``honest`` makes every connection do so)."""

    attack: Attack | None
    port: int = 0
    connections: int = 0
    honest: bool = False
    _loop: asyncio.AbstractEventLoop = field(default_factory=asyncio.new_event_loop)
    _thread: threading.Thread | None = None
    _server: asyncio.Server | None = None
    _stop: asyncio.Event | None = None

    async def _good(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, body: bytes) -> None:
        while True:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(ok(body))
            await writer.drain()

    async def _play(self, a: Attack, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self._stop is not None
        if a.read_request:
            await reader.readuntil(b"\r\n\r\n")
        for step in a.steps:
            if isinstance(step, bytes):
                writer.write(step)
                await writer.drain()
            elif isinstance(step, float):
                await asyncio.sleep(step)
            elif step.startswith("flood:"):
                unit = step[len("flood:") :].encode()
                unit *= max(1, 16384 // len(unit))  # small writes: the server's buffers count in tracemalloc
                while not self._stop.is_set():
                    writer.write(unit)
                    await writer.drain()
            elif step == "hang":
                await self._stop.wait()
            elif step == "keep":
                await self._good(reader, writer, PAGE)
            elif step == "serve-stale":  # a connection out of step answers every later request stale
                await self._good(reader, writer, STALE)
            elif step == "reset":
                writer.transport.abort()
                return
            elif step == "close":
                return

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        k = self.connections
        self.connections += 1
        try:
            if k == 0 and self.attack is not None and not self.honest:
                await self._play(self.attack, reader, writer)
            else:
                await self._good(reader, writer, PAGE)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        except asyncio.CancelledError:  # the server stopping: ends quietly (a cancelled task is logged)
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _start(self) -> None:
        self._stop = asyncio.Event()
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, limit=1 << 20)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _shut(self) -> None:
        assert self._server is not None and self._stop is not None
        self._stop.set()
        self._server.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=5.0)

    def __enter__(self) -> HostileServer:
        self._thread = threading.Thread(target=self._loop.run_forever, name="hostile-server", daemon=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10.0)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._shut(), self._loop).result(10.0)
        self._loop.call_soon_threadsafe(self._loop.stop)
        assert self._thread is not None
        self._thread.join(10.0)
        self._loop.close()

    def url(self, path: str = "/metrics") -> str:
        return f"http://127.0.0.1:{self.port}{path}"


def bounded(scenario: Callable[[], Awaitable[None]], limit_s: float = 20.0) -> list[dict[str, Any]]:
    """Run ``scenario`` on a fresh loop in a thread joined within ``limit_s``; the loop's
    exception-handler calls (an exception that escaped a protocol callback) are returned."""
    escaped: list[dict[str, Any]] = []
    failure: list[BaseException] = []

    def main() -> None:
        async def wrapped() -> None:
            asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: escaped.append(ctx))
            await scenario()

        try:
            asyncio.run(wrapped())
        except BaseException as e:
            failure.append(e)

    thread = threading.Thread(target=main, name="hostile-client", daemon=True)
    thread.start()
    thread.join(limit_s)
    assert not thread.is_alive(), f"the client's event loop did not finish within {limit_s} s (wedged)"
    if failure:
        raise failure[0]
    return escaped


ALLOWED = (HttpError, Unsupported, OSError, TimeoutError)

# -------------------------------------------------------------------------------------------------
# the lean client, one attack at a time


@pytest.mark.parametrize("a", ATTACKS)
def test_each_attack_ends_by_its_deadline_and_the_next_request_reads_the_page(a: Attack) -> None:
    with HostileServer(a) as srv:
        outcome: list[object] = []

        async def scenario() -> None:
            client = LeanClient(max_body_bytes=1 << 20)
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            try:
                got: object = await client.get(srv.url(), t0 + DEADLINE_S)
            except ALLOWED as e:
                got = e
            outcome.append(got)
            outcome.append(loop.time() - t0)
            # The next tick, a moment later: a good page, on a connection that is in step.
            await asyncio.sleep(0.15)
            outcome.append(await client.get(srv.url(), loop.time() + 5.0))
            client.close()

        escaped = bounded(scenario)
    got, took_s, then = outcome
    assert not escaped, f"{a.name}: an exception escaped into the event loop: {escaped[0].get('message')}"
    assert took_s < DEADLINE_S + SLACK_S, f"{a.name}: took {took_s:.2f} s (deadline {DEADLINE_S} s)"
    if a.expect == "error":
        assert isinstance(got, ALLOWED), f"{a.name}: read {got!r}"
    elif a.expect == "page":
        assert got == (200, a.body), f"{a.name}: {got!r}"
    assert then == (200, PAGE), f"{a.name}: the next request read {then!r}"


@pytest.mark.parametrize(
    "unit",
    [
        pytest.param(b"1;" + b"e" * 60_000 + b"\r\nx\r\n", id="chunk-extensions"),
        pytest.param(b"X-Padding: " + b"a" * 1000 + b"\r\n", id="headers"),
    ],
)
def test_a_framing_flood_holds_at_most_the_body_limit(unit: bytes) -> None:
    # Before the framing counted, the chunk-extension flood carried 1 byte of body per 60 KiB and
    # the client buffered all of it until the time-out: hundreds of MB in 0.5 s on loopback.
    limit = 1 << 19
    head = CHUNKED if b"\r\nx\r\n" in unit else CHUNKED[:17]
    a = Attack("flood", (head, "flood:" + unit.decode()))
    with HostileServer(a) as srv:
        peak: list[int] = []

        async def scenario() -> None:
            client = LeanClient(max_body_bytes=limit)
            loop = asyncio.get_running_loop()
            tracemalloc.start()
            try:
                with pytest.raises(ALLOWED):
                    await client.get(srv.url(), loop.time() + 2.0)
                peak.append(tracemalloc.get_traced_memory()[1])
            finally:
                tracemalloc.stop()
            client.close()

        bounded(scenario)
    # The read buffer doubles as it grows (up to twice what it holds), and the chunks read so far
    # are kept once more: 3 x (512 KiB + 64 KiB) at most, 4 x 512 KiB with the loop's own.
    assert peak[0] < 4 * limit, f"peak {peak[0] / 2**20:.1f} MiB for a {limit / 2**20:.1f} MiB limit"


def test_a_flood_of_one_byte_chunks_costs_the_loop_little() -> None:
    # Each chunk is a pass of the parse loop: before the chunk count was bounded, 1-byte chunks up
    # to the default 8 MiB limit (~1.4 million with their framing) kept the loop busy for seconds,
    # and every other replica's answer waited behind them.
    a = Attack("one-byte-chunks", (CHUNKED, "flood:1\r\nx\r\n"))
    with HostileServer(a) as srv:
        cpu: list[float] = []

        async def scenario() -> None:
            client = LeanClient()  # the default 8 MiB page limit
            loop = asyncio.get_running_loop()
            t0 = time.thread_time()
            with pytest.raises(ALLOWED):
                await client.get(srv.url(), loop.time() + 10.0)
            cpu.append(time.thread_time() - t0)
            client.close()

        bounded(scenario, limit_s=60.0)
    assert cpu[0] < 1.0, f"{cpu[0]:.1f} s of the loop's CPU for one answer"


# -------------------------------------------------------------------------------------------------
# a fleet: PodScrapeSource over many hostile replicas and one honest one

FLEET = [
    "slowloris-body",
    "header-line-10MB",
    "never-reads-the-request",
    "length-two-values",
    "length-superscript-digit",
    "chunk-size-negative-6",
    "chunk-extension-flood",
    "reset-mid-body",
    "continue-then-200",
    "two-answers-one-segment",
    "two-answers-second-late",
    "status-5000-digits",
]


@pytest.mark.parametrize("lean_http", [True, False], ids=["lean-client", "aiohttp"])
def test_a_fleet_of_hostile_replicas_leaves_the_honest_one_read_on_every_tick(lean_http: bool) -> None:
    by_name = {p.values[0].name: p.values[0] for p in ATTACKS}
    timeout_s = 0.5
    with contextlib.ExitStack() as stack:
        honest = stack.enter_context(HostileServer(None))
        hostile = {n: stack.enter_context(HostileServer(by_name[n])) for n in FLEET}
        targets = [("honest", honest.url())] + [(n, s.url()) for n, s in hostile.items()]
        src = stack.enter_context(
            PodScrapeSource(targets, timeout_s=timeout_s, max_page_bytes=1 << 20, lean_http=lean_http)
        )
        for tick in range(3):
            if tick == 2:  # every server honest from now on: every replica must be read again
                for s in hostile.values():
                    s.honest = True
            t0 = time.monotonic()
            obs = src.observe(float(tick * 15))
            took_s = time.monotonic() - t0
            assert took_s < timeout_s + 2 * SLACK_S, f"tick {tick} took {took_s:.2f} s"
            by = {s.replica: s for s in obs.replicas}
            assert "scrape" not in src.last_errors  # no attack failed the whole tick
            assert by["honest"].ok, src.last_errors
            assert by["honest"].values["vllm:num_requests_running"] == 3
            if tick == 2:
                bad = {n: src.last_errors.get(n) for n, s in by.items() if not s.ok}
                assert not bad, bad
            # no replica ever reads the stale answer a desynced connection holds
            assert all(s.values.get("vllm:num_requests_running", 3) == 3 for s in obs.replicas), [
                (s.replica, tick, s.values)
                for s in obs.replicas
                if s.values.get("vllm:num_requests_running", 3) != 3
            ]


# -------------------------------------------------------------------------------------------------
# many large pages at once: what one tick holds

#: a replica server in its own process (its buffers stay out of this process's tracemalloc):
#: ``/small`` serves a vLLM-sized page, any other path a valid page of ``argv[1]`` bytes (a comment
#: block and one read series), with keep-alive
LARGE_PAGE_SERVER = r"""
import asyncio, sys
size = int(sys.argv[1])
small = b'vllm:num_requests_running{model_name="m"} 3\n'
large = small + (b"# " + b"a" * 997 + b"\n") * (size // 1000)
def answer(body):
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body
async def serve(r, w):
    try:
        while True:
            head = await r.readuntil(b"\r\n\r\n")
            w.write(answer(small if head.startswith(b"GET /small ") else large))
            await w.drain()
    except Exception:
        pass
    finally:
        w.close()
async def main():
    s = await asyncio.start_server(serve, "127.0.0.1", 0)
    print(s.sockets[0].getsockname()[1], flush=True)
    await asyncio.sleep(120)
asyncio.run(main())
"""


def test_many_large_pages_in_one_tick_hold_at_most_the_budget() -> None:
    # 60 replicas serving 4 MB pages, each under the 8 MiB page limit: held together until parsed,
    # they peaked near 250 MB (60 pages of 7.9 MB: 470 MB, past the 512Mi of a controller pod).
    # The tick's budget for pages past 128 KiB (64 MiB) reads 17 of them.
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-c", LARGE_PAGE_SERVER, "4000000"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        targets = [("small", f"http://127.0.0.1:{port}/small")]
        targets += [(f"large-{i}", f"http://127.0.0.1:{port}/p{i}") for i in range(60)]
        with PodScrapeSource(targets, timeout_s=20.0) as src:
            tracemalloc.start()
            try:
                obs = src.observe(0.0)
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
            by = {s.replica: s for s in obs.replicas}
            assert by["small"].ok, src.last_errors  # an honest page never draws on the budget
            read = sum(s.ok for s in obs.replicas) - 1
            # each draws its length less its free 128 KiB: 64 MiB // (4,000,044 - 131,072) = 17
            assert read == 17, src.last_errors
            refused = [e for n, e in src.last_errors.items() if n.startswith("large-")]
            assert len(refused) == 60 - read and all("budget" in e for e in refused), refused[:2]
    finally:
        proc.kill()
        proc.wait(10.0)
    # 64 MiB of pages, each's read buffer while it came, the parse of one page at a time
    assert peak < 120 * 2**20, f"peak {peak / 2**20:.0f} MiB"
