"""Emulated replicas under steady load, and a cold cache in front of their pages (127.0.0.1 only).

For the tests of pages that cannot be dated (``Observation.undated_replicas``): :class:`Load`
sends requests through an emulator's front door at a rate the test sets, :func:`finished` reads
the fleet's finished requests from the replicas' own pages, and :class:`ColdCache` answers each
replica's first request with the copy it was given (kept from earlier, as a stale-while-revalidate
cache or a sidecar exporter's first snapshot does) and every later one with the live page.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx

from llmscale.emulate import EmulateConfig, EmulatorThread
from llmscale.metrics.exposition import parse_exposition
from llmscale.metrics.names import VLLM
from llmscale.signals.rates import counter_rates
from llmscale.signals.window import FleetWindow
from llmscale.types import Observation

__all__ = ["MODEL", "ColdCache", "Load", "emulated_fleet", "finished"]

MODEL = "meta-llama/Meta-Llama-3-8B"


class Load:
    """Requests at ``rate_at(t)`` per second through the front door (64 prompt, 64 output tokens)
    until stopped; a pool of threads sends them, so a slow answer delays no other request."""

    def __init__(self, base_url: str, rate_at: Callable[[float], float]) -> None:
        self.url = base_url + "/v1/completions"
        self.rate_at = rate_at
        self.stop = threading.Event()
        self.http = httpx.Client(timeout=30.0, limits=httpx.Limits(max_connections=64))
        self.pool = ThreadPoolExecutor(48)
        self.thread = threading.Thread(target=self._send, daemon=True)
        self.started = time.monotonic()

    def _one(self) -> None:
        body = {"model": MODEL, "prompt": "tok " * 64, "max_tokens": 64}
        with contextlib.suppress(httpx.HTTPError):  # the fleet is stopping
            self.http.post(self.url, json=body)

    def _send(self) -> None:
        due = self.started
        while not self.stop.is_set():
            self.pool.submit(self._one)
            due += 1.0 / self.rate_at(due - self.started)
            if self.stop.wait(max(0.0, due - time.monotonic())):
                return

    def __enter__(self) -> Load:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(10.0)
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.http.close()


def finished(urls: list[str]) -> float:
    """The fleet's finished requests (the E2E histograms' counts), read from the replicas now."""
    total = 0.0
    for url in urls:
        page = parse_exposition(httpx.get(url, timeout=5.0).text)
        total += page.histograms[VLLM.e2e].count
    return total


class ColdCache(ThreadingHTTPServer):
    """``/r<i>/metrics``: replica i's kept copy on its first request, its live page after."""

    daemon_threads = True

    def __init__(self, urls: list[str], copies: list[bytes]) -> None:
        super().__init__(("127.0.0.1", 0), _CacheHandler)
        self.urls, self.copies = urls, copies
        self.lock = threading.Lock()
        self.served: set[int] = set()
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def path(self, i: int) -> str:
        return f"/r{i}/metrics"

    def url(self, i: int) -> str:
        return f"http://127.0.0.1:{self.port}{self.path(i)}"

    def __enter__(self) -> ColdCache:
        self._thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05})
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()
        if self._thread is not None:
            self._thread.join(10.0)


class _CacheHandler(BaseHTTPRequestHandler):
    server: ColdCache

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        cache = self.server
        i = int(self.path.split("/")[1][1:])
        with cache.lock:
            first = i not in cache.served
            cache.served.add(i)
        body = cache.copies[i] if first else httpx.get(cache.urls[i], timeout=5.0).content
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def emulated_fleet(replicas: int) -> Iterator[tuple[EmulatorThread, list[str]]]:
    """``replicas`` emulated vLLM replicas, ready at once: the emulator and their /metrics URLs."""
    cfg = EmulateConfig(replicas=replicas, port=0, pending_s=0.0, loading_s=0.0, warmup_s=0.0, seed=1)
    with EmulatorThread(cfg) as emu:
        ports = emu.call(lambda server: server.replica_ports())
        yield emu, [f"http://127.0.0.1:{p}/metrics" for _, p in sorted(ports.items())]


def fleet_request_rates(window: list[Observation]) -> list[float | None]:
    """The fleet request rate read at each tick of ``window``, as the live loop's window reads it."""
    out: list[float | None] = []
    fw: FleetWindow | None = None
    for k in range(len(window)):
        fw = FleetWindow.build(window[: k + 1], previous=fw)
        out.append(counter_rates(fw).request_rps)
    return out
