"""Issue 19: the memory of a scrape is bounded whatever a replica serves.

A 50 MB page raised the controller to 550 MB (its pod's limit is 512Mi, deploy/), and a gzip
page inflating to 1 GiB took it to 5.5 GB in 16 s (the body limit applied only to what came
over the wire). A controller process (a child, so its peak RSS is its own) scrapes a sane page
to warm up, then a 50 MB page, a 1 GiB gzip bomb and 50 MiB pages without a length (read until
the connection closes) and in chunks; each hostile replica is unknown with its reason, and the peak RSS grows
by at most 3 x 8 MiB per hostile page over the warm process (measured: +57 MiB for the four,
peak 81 MiB).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmscale.metrics.names import VLLM

REPO = Path(__file__).resolve().parents[2]

CHILD = r"""
import json, re, sys
from llmscale.metrics.scrape import PodScrapeSource

def hwm_mib():
    text = open("/proc/self/status").read()
    return int(re.search(r"^VmHWM:\s+(\d+) kB", text, re.M).group(1)) / 1024

sane, hostile = sys.argv[1], sys.argv[2:]
with PodScrapeSource([("sane", sane)], timeout_s=60.0) as warm:
    warm.observe(0.0)
    warm.observe(1.0)
before = hwm_mib()
targets = [("sane", sane)] + [(f"bad{i}", u) for i, u in enumerate(hostile)]
with PodScrapeSource(targets, timeout_s=60.0) as src:
    obs = src.observe(0.0)
    errors = dict(src.last_errors)
print(json.dumps({
    "before_mib": before, "peak_mib": hwm_mib(),
    "ok": {s.replica: s.ok for s in obs.replicas}, "errors": errors,
}))
"""


def gzip_bomb(inflated_mib: int) -> bytes:
    """A valid gzip member of ``inflated_mib`` MiB of b"0": the chaos benchmark's builder, one copy."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("chaos_bench", REPO / "benchmarks" / "chaos.py")
    assert spec is not None and spec.loader is not None
    chaos = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = chaos  # its dataclasses look their module up while being built
    spec.loader.exec_module(chaos)
    bomb: bytes = chaos.gzip_bomb(inflated_mib)
    return bomb


class RawServer:
    """Answers every GET on 127.0.0.1 with fixed head bytes and then ``body_mib`` MiB, written as
    they go (never held whole): framings aiohttp's server does not write (until close, chunked)."""

    def __init__(self, head: bytes, body_mib: int, chunked: bool) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/metrics"
        self.head, self.body_mib, self.chunked = head, body_mib, chunked
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        mib = b"#\n" * (1 << 19)
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                try:
                    conn.recv(65536)
                    conn.sendall(self.head)
                    for _ in range(self.body_mib):
                        conn.sendall(b"%x\r\n%s\r\n" % (len(mib), mib) if self.chunked else mib)
                    if self.chunked:
                        conn.sendall(b"0\r\n\r\n")
                except OSError:
                    continue  # the client hung up past its limit


@pytest.fixture
def raw_servers() -> Iterator[tuple[str, str]]:
    plain = RawServer(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n", 50, chunked=False)
    chunked = RawServer(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", 50, chunked=True)
    try:
        yield plain.url, chunked.url
    finally:
        plain.sock.close()
        chunked.sock.close()


def test_gzip_bomb_is_valid_gzip() -> None:
    import gzip

    assert gzip.decompress(gzip_bomb(3)) == b"0" * (3 << 20)


def test_hostile_pages_leave_the_scrape_within_its_memory_bound(page_server, raw_servers) -> None:
    sane = f'# TYPE {VLLM.waiting} gauge\n{VLLM.waiting}{{engine="0"}} 1.0\n'
    page_server.set("/sane", sane)
    page_server.set("/big", sane + "# padding to 50 MB\n" * (50 * 1024 * 1024 // 19))
    page_server.set("/bomb", raw=gzip_bomb(1024), headers={"Content-Encoding": "gzip"})
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, page_server.url("/sane")]
        + [page_server.url(p) for p in ("/big", "/bomb")]
        + list(raw_servers),
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=True,
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["ok"] == {"sane": True, **{f"bad{i}": False for i in range(4)}}, got["errors"]
    assert "limit 8388608" in got["errors"]["bad0"]
    assert "inflates past 8388608 bytes" in got["errors"]["bad1"]
    assert "larger than 8388608 bytes" in got["errors"]["bad2"]  # 50 MiB until the connection closes
    assert "larger than 8388608 bytes" in got["errors"]["bad3"]  # 50 MiB in chunks
    grown = got["peak_mib"] - got["before_mib"]
    print(f"peak RSS {got['peak_mib']:.0f} MiB, +{grown:.0f} MiB over the warm scraper")
    # Per page in flight at most 3 x 8 MiB (the lean client's read buffer doubles up to 2x the
    # limit, plus the body's copy); four hostile pages at once: 96 MiB. Unbounded, it was GiBs.
    assert grown < 4 * 3 * 8, got
    assert got["peak_mib"] < 512, got
