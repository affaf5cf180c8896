"""A tiny HTTP/1.1 server on 127.0.0.1 that answers what a test says, and counts its open connections.

For fuzzing clients of Prometheus's API: ``respond(path, params)`` returns the :class:`Reply`
(status, body bytes, and optionally a drip: one byte every ``drip_s`` seconds, status line
included, which no per-read time-out ever catches). Plain sockets and one thread per connection,
so the server sees exactly what a client leaves open: :attr:`AnswerServer.open_now` is the number
of connections whose client has not closed them yet (a drip notices a closed client before each
byte; an idle keep-alive connection when its read ends), :attr:`max_open` the most at once.
"""

from __future__ import annotations

import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

__all__ = ["AnswerServer", "Reply", "answer_server"]


@dataclass(frozen=True)
class Reply:
    body: bytes
    status: int = 200
    #: send the whole answer one byte at a time, this many seconds apart
    drip_s: float | None = None


Respond = Callable[[str, dict[str, str]], Reply]


class AnswerServer:
    def __init__(self, respond: Respond) -> None:
        self.respond = respond
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=64)
        self._listener.settimeout(0.1)  # accept() wakes to see stop(): closing alone does not wake it
        self.port = int(self._listener.getsockname()[1])
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._stopping = threading.Event()
        self.accepted = 0
        self.max_open = 0
        self.requests = 0
        self._accept = threading.Thread(target=self._accept_loop, name="answer-server", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def open_now(self) -> int:
        with self._lock:
            return len(self._conns)

    def wait_open_at_most(self, n: int, timeout_s: float = 5.0) -> int:
        """Wait until at most ``n`` connections are open (bounded); the count then."""
        deadline = time.monotonic() + timeout_s
        while self.open_now > n and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.open_now

    def start(self) -> AnswerServer:
        self._accept.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._listener.close()
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            with suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)
        self._accept.join(5)
        for t in list(self._threads):
            t.join(5)

    def _accept_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(None)
            with self._lock:
                self._conns.add(conn)
                self.accepted += 1
                self.max_open = max(self.max_open, len(self._conns))
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self._threads.append(t)
            t.start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            buf = b""
            while not self._stopping.is_set():
                while b"\r\n\r\n" not in buf:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buf += chunk
                head, _, buf = buf.partition(b"\r\n\r\n")
                target = head.split(b"\r\n", 1)[0].split(b" ")[1].decode("latin-1")
                parts = urlsplit(target)
                params = {k: v[0] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
                with self._lock:
                    self.requests += 1
                reply = self.respond(parts.path, params)
                wire = (
                    f"HTTP/1.1 {reply.status} X\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(reply.body)}\r\n\r\n"
                ).encode() + reply.body
                if reply.drip_s is None:
                    conn.sendall(wire)
                    continue
                for i in range(len(wire)):
                    if self._closed_by_client(conn):
                        return
                    conn.sendall(wire[i : i + 1])
                    if self._stopping.wait(reply.drip_s):
                        return
        except OSError:
            return
        finally:
            with self._lock:
                self._conns.discard(conn)
            conn.close()

    @staticmethod
    def _closed_by_client(conn: socket.socket) -> bool:
        readable, _, _ = select.select([conn], [], [], 0)
        if not readable:
            return False
        try:
            return conn.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True


@contextmanager
def answer_server(respond: Respond) -> Iterator[AnswerServer]:
    server = AnswerServer(respond).start()
    try:
        yield server
    finally:
        server.stop()
