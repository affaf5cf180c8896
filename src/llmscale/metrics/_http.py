"""A lean HTTP/1.1 GET client for scraping many ``/metrics`` pages over keep-alive connections.

Why not aiohttp for every request: on the 2-core VM of benchmarks/controller_tick.py,
aiohttp's client spends ~1.5 ms of CPU per request (request and response objects,
header multidicts, cookie handling, tracing hooks, the connector's bookkeeping, a
256 KiB read buffer allocated per read), ~0.75 s a tick for 500 pages. A scrape
needs none of that: the same GET to the same target every tick. This client keeps
one connection per target open, writes a request prepared once, reads into a
reused buffer, and parses the status line, the headers that frame the body
(``Content-Length``, chunks, or the end of the connection) and the body: ~0.4 ms
a request. The benchmark prints both, fetching the same pages in one process
(one run: scrape+parse of 500 pages 0.32 s CPU against aiohttp's 0.90 s).

It covers plain ``http://`` only. Anything else it does not handle — ``https``,
a redirect, a compressed or 1xx answer — raises :class:`Unsupported`, and the
caller fetches that URL with aiohttp instead (see ``metrics/scrape.py``).

Only ``asyncio``: every method runs on the caller's event loop; not thread-safe.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

__all__ = ["FREE_PAGE_BYTES", "ByteBudget", "HttpError", "LeanClient", "Unsupported"]

#: what a connection reads into per request (grown when an answer is larger): see _Connection
_READ_BYTES = 64 * 1024
#: free space get_buffer keeps before a read
_MIN_FREE = 16 * 1024
#: a header block longer than this is not a metrics endpoint's answer
_MAX_HEAD_BYTES = 64 * 1024
#: nor a body longer than this by default (a 500-series vLLM page is ~20 KiB; DCGM node pages
#: ~100 KiB): a 50 MB page once raised the controller to 550 MB, past its pod's 512Mi (issue 19)
_MAX_BODY_BYTES = 8 * 1024 * 1024
#: a chunk size is 1 to 16 hex digits (RFC 9112 7.1): not int(x, 16), which reads "-6", "0x5" and
#: "1_0"; a size of -6 once moved the parser back onto the line it had read, for ever
#: (docs/hostile-servers.md)
_CHUNK_SIZE = re.compile(rb"[0-9A-Fa-f]{1,16}")
#: chunks an answer may come in: each costs a pass of the parse loop, and 1-byte chunks streamed at
#: loopback speed kept the event loop busy for seconds per answer (~1.4 million of them fit an
#: 8 MiB limit with their framing), past every other replica's time-out. A page written one chunk
#: per line (a 20 KiB vLLM page: ~270) stays far under it.
_MAX_CHUNKS = 16_384
#: a decimal field of the status line or Content-Length: ASCII digits only (str.isdigit also
#: passes "²", which int() refuses), at most 18 of them (int() refuses past 4,300)
_DECIMAL = re.compile(r"[0-9]{1,18}")


class HttpError(Exception):
    """The server's answer is not valid HTTP/1.x (or too large); the connection is dropped."""


#: what any one page may hold without drawing on a tick's shared budget: a vLLM page is ~20-34 KiB,
#: a node's DCGM page ~100 KiB
FREE_PAGE_BYTES = 128 * 1024
#: the least a page draws from the shared budget at a time (one read's worth)
_GRANT_BYTES = 64 * 1024


class ByteBudget:
    """What the pages of one tick may hold together: ``free_bytes`` each, and past that whatever
    is left of ``shared_bytes``, drawn as a page grows.

    Why: each page is bounded (``max_body_bytes``), but a tick holds every page until it is
    parsed, so 60 replicas serving 7.9 MB pages (a comment block and one read series: a valid
    page) held 470 MB, past the controller's 512Mi. With a budget, N pages hold at most
    N x ``free_bytes`` + ``shared_bytes``; an honest fleet never draws on it. Event-loop code:
    no lock.
    """

    def __init__(self, shared_bytes: int, free_bytes: int = FREE_PAGE_BYTES) -> None:
        self.left = shared_bytes
        self.free_bytes = free_bytes

    def grant(self, allowed: int, need: int) -> int:
        """The new allowance of a page allowed ``allowed`` bytes that now needs ``need``;
        HttpError when the shared budget cannot give it."""
        extra = max(need - allowed, _GRANT_BYTES)
        if extra > self.left:
            raise HttpError(
                f"{need} bytes and more: the tick's budget for pages past {self.free_bytes} bytes "
                "is spent (other large pages hold it)"
            )
        self.left -= extra
        return allowed + extra

    def settle(self, allowed: int, held: int) -> None:
        """Give back what a page allowed ``allowed`` does not keep (``held`` bytes: 0 when it failed)."""
        self.left += max(0, allowed - max(self.free_bytes, held))


class Unsupported(Exception):
    """A URL or an answer this client does not handle; fetch it with a full client instead."""


@dataclass(frozen=True, slots=True)
class _Origin:
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class _Request:
    origin: _Origin
    wire: bytes  # the whole request, written as is


class _Connection(asyncio.BufferedProtocol):
    """One keep-alive connection; at most one request in flight (no pipelining).

    A buffered protocol: the transport reads into this connection's buffer. A plain
    protocol's transport calls ``sock.recv(256 KiB)`` for every read, and an allocation
    that large is served by mmap and munmap with fresh pages each time: on this VM
    ~0.3 ms more per 19 KiB answer than reading into a reused buffer (~6x).
    """

    def __init__(self, max_body_bytes: int = _MAX_BODY_BYTES) -> None:
        self.max_body_bytes = max_body_bytes
        self.transport: asyncio.Transport | None = None
        self.reusable = False  # set when an answer ends cleanly and the server keeps the connection
        self.got_bytes = False  # any byte of the current answer arrived (a stale connection has none)
        self._waiter: asyncio.Future[tuple[int, bytes]] | None = None
        self._buf = bytearray()  # this request's bytes are _buf[:_n]
        self._n = 0
        self._head_end = -1  # index just after the blank line ending the header block
        self._scanned = 0  # the header block's end is not before this index (see _advance)
        self._status = 0
        self._length: int | None = None  # Content-Length; None: chunked or until the connection closes
        self._chunked = False
        self._chunks: list[bytes] = []
        self._chunked_bytes = 0
        self._pos = 0  # chunked: where the next chunk-size line starts in _buf
        self._keep = True
        self._timer: asyncio.TimerHandle | None = None
        #: the tick's budget this answer draws on (None: none, or the answer is settled) and its allowance
        self._budget: ByteBudget | None = None
        self._allowed = 0

    # -- asyncio.BufferedProtocol ----------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        buf = self._buf
        if len(buf) - self._n < _MIN_FREE:
            # A new, larger buffer rather than a resize: the transport may still hold a view of the old.
            # Doubling stops near what an answer may hold (its body, its head, its framing): a
            # 1 MiB limit then reads into ~1.3 MiB at most, not the 2 MiB the next doubling gives.
            cap = self.max_body_bytes + 3 * _MAX_HEAD_BYTES
            grown = bytearray(max(min(2 * len(buf), cap), self._n + _MIN_FREE))
            grown[: self._n] = memoryview(buf)[: self._n]
            self._buf = buf = grown
        return memoryview(buf)[self._n :]

    def buffer_updated(self, nbytes: int) -> None:
        waiter = self._waiter
        if waiter is None or waiter.done():  # bytes nobody asked for: the connection is out of step
            self.abort()
            return
        self.got_bytes = True
        self._n += nbytes
        try:
            done = self._advance()
        except (HttpError, Unsupported) as e:
            self.abort()
            waiter.set_exception(e)
            return
        if done is not None:
            self._settle(len(done[1]))
            self._finish()
            if not self.reusable and self.transport is not None:
                self.transport.close()
            waiter.set_result(done)

    def connection_lost(self, exc: Exception | None) -> None:
        self.reusable = False
        self.transport = None
        waiter = self._waiter
        until_close = self._head_end >= 0 and self._length is None and not self._chunked
        body = self._body(self._head_end, self._n) if until_close else b""
        if until_close and waiter is not None and not waiter.done():
            self._settle(len(body))
        self._finish()
        if waiter is None or waiter.done():
            return
        if until_close:
            waiter.set_result((self._status, body))  # the answer ends with the connection
            return
        why = f"connection closed{'' if exc is None else f': {exc}'}"
        waiter.set_exception(ConnectionResetError(why if self.got_bytes else f"{why} before an answer"))

    # -- one request -----------------------------------------------------------------------

    def start(
        self, wire: bytes, deadline: float, budget: ByteBudget | None = None
    ) -> asyncio.Future[tuple[int, bytes]]:
        """Send a request; the future gets (status, body), or TimeoutError at ``deadline`` (loop time).

        ``budget``: the tick's, which an answer past its free bytes draws on (see ByteBudget).

        Pre: no request in flight, transport open. A timer on the connection rather than
        ``asyncio.timeout`` around the await: ~4x less CPU per request, no task cancellation.
        """
        assert self.transport is not None and self._waiter is None
        self.reusable = False
        self.got_bytes = False
        self._buf = bytearray(_READ_BYTES)  # per request: memory follows the requests in flight
        self._n = 0
        self._head_end = -1
        self._scanned = 0
        self._length = None
        self._chunked = False
        self._chunks.clear()
        self._chunked_bytes = 0
        self._pos = 0
        self._keep = True
        self._budget = budget
        self._allowed = 0 if budget is None else budget.free_bytes
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[tuple[int, bytes]] = loop.create_future()
        self._waiter = waiter
        self._timer = loop.call_at(deadline, self._time_out)
        self.transport.write(wire)
        return waiter

    def _time_out(self) -> None:
        self._timer = None
        waiter = self._waiter
        self.abort()  # a late answer must not land in the next request's read
        if waiter is not None and not waiter.done():
            waiter.set_exception(TimeoutError())

    def _hold(self, need: int) -> None:
        """Make room for ``need`` bytes of this answer in the tick's budget (HttpError if spent)."""
        if self._budget is not None and need > self._allowed:
            self._allowed = self._budget.grant(self._allowed, need)

    def _settle(self, held: int) -> None:
        """The answer ended holding ``held`` bytes: give back the rest of its allowance."""
        if self._budget is not None:
            self._budget.settle(self._allowed, held)
            self._budget = None

    def _finish(self) -> None:
        self._settle(0)  # a failed answer holds nothing (an answer read was settled before)
        self._waiter = None
        self._buf = bytearray()
        self._n = 0
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def abort(self) -> None:
        self.reusable = False
        self._finish()
        if self.transport is not None:
            self.transport.abort()

    def _advance(self) -> tuple[int, bytes] | None:
        """Parse what arrived; the answer when complete, else None."""
        buf = self._buf
        n = self._n
        if self._head_end < 0:
            # From where the last read's search ended (less the 3 bytes a split CRLFCRLF may have
            # there): a server sending its head one byte a read would otherwise cost a search
            # of up to 64 KiB per byte, ~2^32 byte compares on the loop before the size limit.
            end = buf.find(b"\r\n\r\n", self._scanned, n)
            if end < 0:
                if n > _MAX_HEAD_BYTES:
                    raise HttpError("header block too large")
                self._scanned = max(0, n - 3)
                return None
            self._head(buf[:end].decode("latin-1"))
            self._head_end = self._pos = end + 4
        if self._chunked:
            return self._advance_chunks()
        if self._length is None:
            if n - self._head_end > self.max_body_bytes:
                raise HttpError(f"body larger than {self.max_body_bytes} bytes")
            self._hold(n - self._head_end)
            return None  # until the connection closes (connection_lost)
        have = n - self._head_end
        if have < self._length:
            return None
        if have > self._length:
            raise HttpError("more bytes than Content-Length")  # no pipelining: nothing may follow
        self.reusable = self._keep
        return self._status, self._body(self._head_end, n)

    def _body(self, start: int, stop: int) -> bytes:
        with memoryview(self._buf) as view:  # released at once: the buffer may be replaced next
            return bytes(view[start:stop])

    def _head(self, head: str) -> None:
        status_line, _, _ = head.partition("\r\n")
        parts = status_line.split(" ", 2)
        if (
            len(parts) < 2
            or parts[0] not in ("HTTP/1.0", "HTTP/1.1")
            or len(parts[1]) != 3
            or not _DECIMAL.fullmatch(parts[1])
        ):
            raise HttpError(f"not an HTTP/1.x status line: {status_line[:80]!r}")
        status = int(parts[1])
        if status < 200 or 300 <= status < 400:
            raise Unsupported(f"HTTP {status}")  # informational answers, redirects: a full client
        # Only the headers that frame the body are read (a lookup in the lowered block, not a
        # dict of every header: ~5x less CPU on this path, see the module docstring).
        lowered = head.lower()
        conn = _header(lowered, "connection")
        self._status = status
        self._keep = "close" not in conn and (parts[0] != "HTTP/1.0" or "keep-alive" in conn)
        encoding = ", ".join(_headers(lowered, "content-encoding"))
        if encoding not in ("", "identity"):
            raise Unsupported(f"Content-Encoding {encoding}")
        # Every Content-Length and Transfer-Encoding line, not the first: two different lengths
        # frame two different answers (RFC 9112 6.3: unrecoverable), and a second
        # "Transfer-Encoding: gzip" under a "chunked" one compresses what the first frames.
        lengths = {v.strip() for v in ",".join(_headers(lowered, "content-length")).split(",")} - {""}
        transfer = ", ".join(_headers(lowered, "transfer-encoding"))
        if transfer not in ("", "chunked"):
            raise Unsupported(f"Transfer-Encoding {transfer[:80]}")  # e.g. "gzip, chunked"
        if len(lengths) > 1:
            shown = ", ".join(sorted(v[:20] for v in lengths)[:4])
            raise HttpError(f"Content-Length given as different values ({shown})")
        length = lengths.pop() if lengths else ""
        if status in (204, 304):
            self._length = 0
        elif transfer:
            self._chunked = True
            if length:  # both framings: chunked wins, and nothing after it on this connection is trusted
                self._keep = False
        elif length:
            if not _DECIMAL.fullmatch(length):
                raise HttpError(f"bad Content-Length {length[:40]!r}")
            if int(length) > self.max_body_bytes:
                raise HttpError(f"body of {int(length)} bytes (limit {self.max_body_bytes})")
            self._hold(int(length))  # before its bytes come
            self._length = int(length)
        else:
            self._keep = False  # the body ends with the connection

    def _advance_chunks(self) -> tuple[int, bytes] | None:
        buf, n = self._buf, self._n
        # The bytes on the wire count too, not only the body they carry: 1-byte chunks each with a
        # 60 KiB extension carry 1 byte in 60 KiB, and a server streaming them at loopback speed
        # buffered gigabytes within a 2 s time-out while the body stayed far under its limit.
        if n - self._head_end > self.max_body_bytes + _MAX_HEAD_BYTES:
            raise HttpError(f"chunked answer larger than {self.max_body_bytes} bytes with its framing")
        self._hold(n - self._head_end)
        while True:
            eol = buf.find(b"\r\n", self._pos, n)
            if eol < 0:
                if n - self._pos > _MAX_HEAD_BYTES:  # a size line that never ends
                    raise HttpError("chunk size line too long")
                return None
            size_text = bytes(buf[self._pos : eol]).split(b";", 1)[0].strip(b" \t")
            if not _CHUNK_SIZE.fullmatch(size_text):
                raise HttpError(f"bad chunk size {size_text[:40]!r}")
            size = int(size_text, 16)
            if size == 0:
                end = buf.find(b"\r\n\r\n", eol, n)  # the last chunk, then trailers (if any), a blank line
                if end < 0:
                    if n - eol > _MAX_HEAD_BYTES:
                        raise HttpError("trailer block too large")
                    return None
                if end + 4 != n:
                    raise HttpError("bytes after the last chunk")
                self.reusable = self._keep
                return self._status, b"".join(self._chunks)
            if self._chunked_bytes + size > self.max_body_bytes:  # before its bytes are buffered
                raise HttpError(f"body larger than {self.max_body_bytes} bytes")
            start, stop = eol + 2, eol + 2 + size
            if n < stop + 2:
                return None
            if buf[stop : stop + 2] != b"\r\n":
                raise HttpError("chunk not followed by CRLF")
            self._chunked_bytes += size
            if self._chunked_bytes > self.max_body_bytes:
                raise HttpError(f"body larger than {self.max_body_bytes} bytes")
            if len(self._chunks) >= _MAX_CHUNKS:
                raise HttpError(f"more than {_MAX_CHUNKS} chunks")
            self._chunks.append(self._body(start, stop))
            self._pos = stop + 2


def _header(lowered: str, name: str) -> str:
    """The value of header ``name`` in a lowered header block ("" when absent; the first if repeated)."""
    at = lowered.find(f"\r\n{name}:")
    if at < 0:
        return ""
    start = at + len(name) + 3
    end = lowered.find("\r\n", start)
    return lowered[start : None if end < 0 else end].strip()


def _headers(lowered: str, name: str) -> list[str]:
    """Every value of header ``name`` in a lowered header block, in order (none when absent)."""
    out: list[str] = []
    key = f"\r\n{name}:"
    at = lowered.find(key)
    while at >= 0:
        start = at + len(key)
        end = lowered.find("\r\n", start)
        out.append(lowered[start : None if end < 0 else end].strip())
        if end < 0:
            break
        at = lowered.find(key, end)
    return out


class LeanClient:
    """GETs over kept-alive connections, one idle connection kept per origin (host, port).

    ``headers`` are sent with every request (e.g. ``Authorization``); an answer's body longer
    than ``max_body_bytes`` raises :class:`HttpError` (the connection is dropped as it passes). :meth:`get`
    raises :class:`Unsupported` for what a full client must fetch, :class:`HttpError`
    for a malformed answer and ``OSError`` for connection failures. A request on a
    reused connection that the server closed while idle (its keep-alive time-out)
    is sent again once on a new connection, as browsers and aiohttp do for a GET.
    """

    def __init__(
        self, headers: Mapping[str, str] | None = None, *, max_body_bytes: int = _MAX_BODY_BYTES
    ) -> None:
        self._extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        self._max_body_bytes = max_body_bytes
        self._requests: dict[str, _Request] = {}
        self._idle: dict[_Origin, list[_Connection]] = {}

    def _request(self, url: str) -> _Request:
        req = self._requests.get(url)
        if req is None:
            parts = urlsplit(url)
            if parts.scheme != "http" or parts.username is not None or not parts.hostname:
                raise Unsupported(f"{parts.scheme or 'no'} scheme, or credentials in the URL")
            target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            host = parts.netloc
            wire = (
                f"GET {target} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: llmscale\r\n{self._extra}\r\n"
            ).encode("latin-1")
            req = self._requests[url] = _Request(_Origin(parts.hostname, parts.port or 80), wire)
        return req

    async def get(self, url: str, deadline: float, budget: ByteBudget | None = None) -> tuple[int, bytes]:
        """(status, body) of a GET to ``url``, or TimeoutError at ``deadline`` (the loop's time).

        Pre: an ``http://`` URL (else :class:`Unsupported`). ``budget``: the tick's, which a body
        past its free bytes draws on (HttpError when spent; see :class:`ByteBudget`).
        """
        req = self._request(url)
        idle = self._idle.get(req.origin)
        while idle:
            conn = idle.pop()
            if conn.transport is None or conn.transport.is_closing():
                continue
            try:
                return await self._exchange(conn, req, deadline, budget)
            except ConnectionResetError:
                if conn.got_bytes:
                    raise
                break  # closed while idle: once more on a new connection
        loop = asyncio.get_running_loop()
        async with asyncio.timeout_at(deadline):
            _, conn = await loop.create_connection(
                lambda: _Connection(self._max_body_bytes), req.origin.host, req.origin.port
            )
        return await self._exchange(conn, req, deadline, budget)

    async def _exchange(
        self, conn: _Connection, req: _Request, deadline: float, budget: ByteBudget | None
    ) -> tuple[int, bytes]:
        try:
            answer = await conn.start(req.wire, deadline, budget)
        except BaseException:  # cancelled or failed mid-answer: the connection is out of step
            conn.abort()
            raise
        if conn.reusable:
            self._idle.setdefault(req.origin, []).append(conn)
        return answer

    def forget(self, urls: set[str]) -> None:
        """Drop prepared requests of URLs not in ``urls`` and close connections to other origins."""
        self._requests = {u: r for u, r in self._requests.items() if u in urls}
        keep = {r.origin for r in self._requests.values()}
        for origin in [o for o in self._idle if o not in keep]:
            for conn in self._idle.pop(origin):
                conn.abort()

    def close(self) -> None:
        for conns in self._idle.values():
            for conn in conns:
                conn.abort()
        self._idle.clear()
