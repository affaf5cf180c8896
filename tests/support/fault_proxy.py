"""A fault-injecting reverse proxy for tests: plain HTTP on 127.0.0.1 in front of an HTTPS upstream.

It answers ``503 Service Unavailable`` (with a Kubernetes Status body, as an
overloaded API server or a load balancer in front of one would) for the first
``fail_first`` requests, or for every request while ``fail_always`` is set, and
forwards everything else unchanged. The counters let a test check how often
the client under test came back.

Only for tests: one upstream connection per request, no streaming, no keep-alive.
"""

from __future__ import annotations

import http.client
import json
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

__all__ = ["FaultProxy"]

_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "host",
    "content-length",
}


class FaultProxy:
    """``with FaultProxy(upstream, ca_file, fail_first=3) as proxy:`` then talk to ``proxy.url``."""

    def __init__(
        self, upstream: str, ca_file: str | None, *, fail_first: int = 0, fail_always: bool = False
    ) -> None:
        parts = urlsplit(upstream)
        self._upstream_host = parts.hostname or "127.0.0.1"
        self._upstream_port = parts.port or (443 if parts.scheme == "https" else 80)
        self._tls = ssl.create_default_context(cafile=ca_file) if parts.scheme == "https" else None
        self.fail_first = fail_first
        self.fail_always = fail_always
        self.failed = 0
        self.forwarded = 0
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="fault-proxy", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def _should_fail(self) -> bool:
        with self._lock:
            if self.fail_always or self.failed < self.fail_first:
                self.failed += 1
                return True
            self.forwarded += 1
            return False

    def _forward(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        conn: http.client.HTTPConnection
        if self._tls is not None:
            conn = http.client.HTTPSConnection(
                self._upstream_host, self._upstream_port, context=self._tls, timeout=30
            )
        else:
            conn = http.client.HTTPConnection(self._upstream_host, self._upstream_port, timeout=30)
        try:
            conn.request(method, path, body=body or None, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            return resp.status, [(k, v) for k, v in resp.getheaders() if k.lower() not in _HOP_BY_HOP], data
        finally:
            conn.close()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:  # quiet test output
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                if proxy._should_fail():
                    payload = json.dumps(
                        {
                            "kind": "Status",
                            "apiVersion": "v1",
                            "status": "Failure",
                            "reason": "ServiceUnavailable",
                            "message": "injected by FaultProxy",
                            "code": 503,
                        }
                    ).encode()
                    self._reply(503, [("Content-Type", "application/json")], payload)
                    return
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
                status, resp_headers, data = proxy._forward(self.command, self.path, headers, body)
                self._reply(status, resp_headers, data)

            def _reply(self, status: int, headers: list[tuple[str, str]], data: bytes) -> None:
                self.send_response(status)
                for k, v in headers:
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_PATCH = do_DELETE = _handle

        return Handler
