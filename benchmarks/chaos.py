"""Chaos matrix: `llmscale run` against `llmscale emulate` under injected faults, one table.

Every case starts its own `llmscale run` (a subprocess, as a user runs it) on 127.0.0.1 against one
shared `llmscale emulate --replicas 2 --admin-api`, injects one kind of fault through a small proxy
in this process, and reads the run's decision log afterwards. Columns:

- **faults**: faults injected (altered or refused responses, killed processes);
- **wrong**: scale actions that should not have happened: a scale-down on a tick whose load was
  unknown (an unknown replica or a metrics outage), a final outside [min, max], a scale-up inside
  the cooldown a previous scale-up started (across restarts and leaders), a scale by a replica that
  did not hold the lease, or two leaders acting in overlapping terms;
- **lost**: ticks without a decision line, from the gaps between a process's consecutive lines
  (a gap of k tick intervals is k - 1 lost lines; a failed tick still writes its line).

The policy of the metric cases is test_faults.py's null-as-zero one (KEDA's ``ignoreNullValues``
over the DCGM ``vram_used_ratio``, 0.9 per emulated GPU at any load, target 0.45 a pod): it keeps
2 replicas on data and proposes 1 the moment a value is missing or diluted by a zero, so every
metric fault is a chance for a wrong scale-down that only the controller's handling of missing
data prevents. It reads a gauge: counter resets are injected and must not disturb the tick, but
do not feed this policy's decision.

Time is scaled down: tick 0.5 s, so the issue's "10 min" metrics outage is 40 ticks (20 s), which
is what matters to the loop (ticks with unknown load); frozen and skewed pages use
``max_sample_age_s`` 5 s instead of 60 s. The leader-failover case needs the repository's real
kube-apiserver (tests/support/kube_cluster.py; skipped with a note when its binaries are missing).

The page cases (issue 19, ``page-*``) corrupt one replica's page of two the way the issue found
them taking ``slo`` to its maximum within seconds, freezing it, or pushing the controller past
its 512Mi: a queue of 1e9 (and 1e12 under ``keda-queue``), counters that fall steadily, buckets
that fall with ``le``, a duplicated queue sample, 10,000 extra queue series, samples stamped an
hour ahead, a 50 MB page, a gzip page inflating to 1 GiB, a 302 to another page. The controller
runs in dry-run with ``slo`` (scales nothing; the guard state moves as if it did), so **wrong**
counts the fault ticks whose decision moved past what the healthy ticks before decided (a
scale-up the healthy replica does not warrant) or below the spec with load unknown; the note
gives the run's peak RSS, its slowest tick, how many ``/healthz`` polls during the fault answered
200, and how long it took to exit on SIGTERM.

    python benchmarks/chaos.py                 # every case, a few minutes on 2 cores
    python benchmarks/chaos.py --cases outage-1-tick,nan --soak-s 20
    python benchmarks/chaos.py --cases page-queue-1e9,page-gzip-bomb
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import pairwise
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "chaos-emulate-admin-token-5b2e"
TICK_S = 0.5
MIN_REPLICAS, MAX_REPLICAS = 1, 4
VRAM_PER_REPLICA = 0.9
NULL_AS_ZERO_POLICY = {
    "name": "keda-queue",
    "params": {
        "signal": "vram_used_ratio",
        "threshold": VRAM_PER_REPLICA / 2,
        "down_stabilization_s": 0,
        "polling_interval_s": 1,
    },
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def llmscale() -> list[str]:
    script = Path(sys.executable).with_name("llmscale")
    return [str(script)] if script.exists() else [sys.executable, "-m", "llmscale.cli"]


def wait_until(check: Callable[[], Any], timeout_s: float, what: str, every_s: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout_s:.0f} s")
        time.sleep(every_s)


# -- processes ------------------------------------------------------------------------------


class Proc:
    """A child in its own process group, output to files; stop() = SIGTERM, then SIGKILL."""

    def __init__(self, name: str, argv: Sequence[str], workdir: Path) -> None:
        self.name = name
        self.out = workdir / f"{name}.out"
        self.err = workdir / f"{name}.err"
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "LLMSCALE_EMULATE_ADMIN_TOKEN": TOKEN}
        with open(self.out, "wb") as o, open(self.err, "wb") as e:
            self.proc = subprocess.Popen(
                list(argv), stdout=o, stderr=e, stdin=subprocess.DEVNULL, start_new_session=True, env=env
            )

    def running(self) -> bool:
        return self.proc.poll() is None

    def kill9(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self, timeout_s: float = 15.0) -> int | None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill9()
        return self.proc.poll()

    def rss_kib(self) -> int | None:
        try:
            text = Path(f"/proc/{self.proc.pid}/status").read_text()
        except OSError:
            return None
        m = re.search(r"^VmRSS:\s+(\d+) kB", text, re.M)
        return int(m.group(1)) if m else None

    def tail(self, n: int = 15) -> str:
        lines = (self.out.read_text(errors="replace") + self.err.read_text(errors="replace")).splitlines()
        return "\n".join(lines[-n:])


class Emulate:
    """`llmscale emulate --admin-api` with its replicas; admin calls with the token."""

    def __init__(self, workdir: Path, replicas: int = 2, name: str = "emulate") -> None:
        argv = [
            *llmscale(),
            "emulate",
            "--replicas",
            str(replicas),
            "--port",
            "0",
            "--admin-api",
            "--cold-start-s",
            "0",
            "--max-seconds",
            "1800",
        ]
        self.proc = Proc(name, argv, workdir)

        def ready() -> str | None:
            if not self.proc.running():
                raise RuntimeError(f"emulate exited:\n{self.proc.tail()}")
            text = self.proc.out.read_text(errors="replace")
            m = re.search(r"^front door: (http://\S+)", text, re.M)
            return m.group(1) if m and re.search(r"^ready$", text, re.M) else None

        self.url: str = wait_until(ready, 60, "emulate ready")

    def admin(self, method: str = "GET", path: str = "/admin/replicas", body: Any = None) -> Any:
        parts = urlsplit(self.url)
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
        try:
            headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
            conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            if resp.status >= 400:
                raise RuntimeError(f"emulate admin {method} {path}: {resp.status} {data[:200]!r}")
            return json.loads(data) if data else None
        finally:
            conn.close()

    def spec(self) -> int:
        return int(self.admin()["spec_replicas"])

    def scale(self, n: int) -> None:
        self.admin("POST", "/admin/scale", {"replicas": n})
        wait_until(lambda: len(self.ready()) == n, 30, f"{n} ready replicas")

    def ready(self) -> list[dict[str, Any]]:
        return [r for r in self.admin()["replicas"] if r["phase"] == "ready"]


# -- the fault proxies ----------------------------------------------------------------------


def _http_get(url: str, timeout_s: float = 5.0) -> tuple[int, bytes]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout_s)
    try:
        conn.request("GET", parts.path or "/")
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


_SAMPLE = re.compile(r"^(?P<series>[^#\s][^ ]*(?:\{.*\})?) (?P<value>\S+)(?: (?P<ts>-?\d+))?$")
_COUNTER = re.compile(r"(_total|_count|_sum|_bucket)(\{|$)")
_WAITING = "vllm:num_requests_waiting"
#: issue 19's page faults rewrite_page applies (the served ones, big pages, gzip, redirects, in ScrapeProxy)
PAGE_REWRITES = ("queue-1e9", "queue-1e12", "falling", "buckets", "duplicate", "explosion", "future")


def rewrite_page(
    page: str,
    fault: str,
    *,
    baseline: dict[str, float] | None = None,
    now_s: float = 0.0,
    since_s: float = 0.0,
) -> str:
    """A replica's exposition page with ``fault`` applied (the proxy's rewrites, unit-testable).

    ``nan``: every engine and DCGM value NaN; ``reset``: every counter minus its value when the
    fault began (``baseline``), as an engine restart leaves it; ``skew``: every sample stamped
    with a timestamp 120 s behind ``now_s`` (a replica whose clock is 2 minutes slow).
    Issue 19's: ``queue-1e9`` / ``queue-1e12``: the waiting queue reads that; ``falling``: every
    counter at its value when the fault began less 2% per second since (``since_s``);
    ``buckets``: every finite bucket 1e6, above its +Inf count; ``duplicate``: the queue sample
    twice; ``explosion``: 10,000 more queue series of 5 each; ``future``: every sample stamped
    an hour after ``now_s``.
    """
    out = []
    for line in page.splitlines():
        m = _SAMPLE.match(line)
        if m is None or line.startswith("#"):
            out.append(line)
            continue
        series, value = m.group("series"), m.group("value")
        if series.startswith(_WAITING + "{") and fault in ("queue-1e9", "queue-1e12", "duplicate"):
            if fault == "duplicate":
                out.append(line)
            else:
                value = fault.removeprefix("queue-")
        elif fault == "falling" and _COUNTER.search(series) and baseline is not None:
            with contextlib.suppress(ValueError):
                value = repr(baseline.get(series, float(value)) * max(0.5, 1.0 - 0.02 * since_s))
        elif fault == "buckets" and "_bucket{" in series and 'le="+Inf"' not in series:
            value = "1000000.0"
        elif fault == "future":
            out.append(f"{series} {value} {int((now_s + 3600.0) * 1000)}")
            continue
        elif fault == "nan" and (series.startswith("vllm:") or series.startswith("DCGM_")):
            value = "NaN"
        elif fault == "reset" and _COUNTER.search(series) and baseline is not None:
            with contextlib.suppress(ValueError):
                value = repr(max(0.0, float(value) - baseline.get(series, 0.0)))
        elif fault == "skew":
            out.append(f"{series} {value} {int((now_s - 120.0) * 1000)}")
            continue
        out.append(f"{series} {value}" + (f" {m.group('ts')}" if m.group("ts") else ""))
    if fault == "explosion":
        out += [f'{_WAITING}{{engine="x{i}",model_name="exploded"}} 5.0' for i in range(10_000)]
    return "\n".join(out) + "\n"


def gzip_bomb(inflated_mib: int) -> bytes:
    """A valid gzip member of ``inflated_mib`` MiB of b"0" (~1 KiB a MiB), built in about a second:
    after a full flush each MiB compresses to the same block, so one block is repeated."""
    import struct
    import zlib

    chunk = b"0" * (1 << 20)
    c = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    block = c.compress(chunk) + c.flush(zlib.Z_FULL_FLUSH)
    crc = 0
    for _ in range(inflated_mib):
        crc = zlib.crc32(chunk, crc)
    head = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    return (
        head + block * inflated_mib + c.flush() + struct.pack("<II", crc, (inflated_mib << 20) & 0xFFFFFFFF)
    )


def counter_values(page: str) -> dict[str, float]:
    values = {}
    for line in page.splitlines():
        m = _SAMPLE.match(line)
        if m is not None and not line.startswith("#") and _COUNTER.search(m.group("series")):
            with contextlib.suppress(ValueError):
                values[m.group("series")] = float(m.group("value"))
    return values


class ScrapeProxy:
    """Serves ``/<replica>/metrics`` from the replica's real page, with a per-replica fault."""

    def __init__(self, upstreams: dict[str, str]) -> None:
        self.upstreams = dict(upstreams)
        self.faults: dict[str, str] = {}
        self.injected = 0
        self._frozen: dict[str, bytes] = {}
        self._baseline: dict[str, dict[str, float]] = {}
        self._since: dict[str, float] = {}
        self._last: dict[str, bytes] = {}
        self._lock = threading.Lock()
        self._bomb: bytes | None = None
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                name = self.path.strip("/").split("/")[0]
                status, body = proxy.serve(name)
                self.send_response(status)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                for k, v in proxy.extra_headers(name, status).items():
                    self.send_header(k, v)
                self.end_headers()
                with contextlib.suppress(OSError):  # a scraper hangs up on a page past its limit
                    self.wfile.write(body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/{name}/metrics"

    def set_fault(self, name: str, fault: str | None) -> None:
        with self._lock:
            if fault is None:
                self.faults.pop(name, None)
                return
            self.faults[name] = fault
            self._since[name] = time.time()
            last = self._last.get(name, b"")
            self._frozen[name] = last
            self._baseline[name] = counter_values(last.decode(errors="replace"))

    def extra_headers(self, name: str, status: int) -> dict[str, str]:
        fault = self.faults.get(name)
        if fault == "gzip-bomb" and status == 200:
            return {"Content-Encoding": "gzip"}
        if fault == "redirect" and status == 302:
            # Same host and port, another path: followed, its body (a queue of 1e9) would be this
            # replica's load.
            return {"Location": f"http://127.0.0.1:{self._server.server_address[1]}/evil/metrics"}
        return {}

    def serve(self, name: str) -> tuple[int, bytes]:
        if name == "evil":  # where the redirect points: the first replica's page with a queue of 1e9
            first = sorted(self.upstreams)[0]
            _, body = _http_get(self.upstreams[first])
            return 200, rewrite_page(body.decode(), "queue-1e9").encode()
        upstream = self.upstreams.get(name)
        if upstream is None:
            return 404, b"no such replica\n"
        with self._lock:
            fault = self.faults.get(name)
        if fault == "redirect":
            self.injected += 1
            return 302, b"moved\n"
        if fault == "gzip-bomb":
            self.injected += 1
            if self._bomb is None:
                self._bomb = gzip_bomb(1024)
            return 200, self._bomb
        if fault == "down":
            self.injected += 1
            return 503, b"injected outage\n"
        if fault == "frozen" and self._frozen.get(name):
            self.injected += 1
            return 200, self._frozen[name]
        try:
            status, body = _http_get(upstream)
        except OSError as e:
            return 502, f"upstream: {e}\n".encode()
        if status == 200:
            self._last[name] = body
        if fault in ("nan", "reset", "skew", *PAGE_REWRITES) and status == 200:
            self.injected += 1
            now = time.time()
            text = rewrite_page(
                body.decode(),
                fault,
                baseline=self._baseline.get(name),
                now_s=now,
                since_s=now - self._since.get(name, now),
            )
            body = text.encode()
        if fault == "big" and status == 200:
            self.injected += 1
            body += b"# padding to 50 MB\n" * (50 * 1024 * 1024 // 19)
        return status, body

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class AdminProxy:
    """Forwards emulate's API; during a storm, answers ``/admin/scale`` with ``status`` instead."""

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        self._host, self._port = parts.hostname or "127.0.0.1", parts.port or 80
        self.storm: int | None = None
        self.storm_left = 0
        self.injected = 0
        self.forwarded_scales = 0
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                if self.path.startswith("/admin/scale") and proxy.storm is not None and proxy.storm_left > 0:
                    proxy.storm_left -= 1
                    proxy.injected += 1
                    payload = json.dumps({"error": f"injected {proxy.storm}"}).encode()
                    self.send_response(proxy.storm)
                    if proxy.storm == 429:
                        self.send_header("Retry-After", "1")
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                if self.path.startswith("/admin/scale"):
                    proxy.forwarded_scales += 1
                conn = http.client.HTTPConnection(proxy._host, proxy._port, timeout=30)
                try:
                    skip = {"host", "content-length", "connection"}
                    headers = {k: v for k, v in self.headers.items() if k.lower() not in skip}
                    conn.request(self.command, self.path, body=body or None, headers=headers)
                    resp = conn.getresponse()
                    data = resp.read()
                    self.send_response(resp.status)
                    for k, v in resp.getheaders():
                        if k.lower() not in ("content-length", "transfer-encoding", "connection"):
                            self.send_header(k, v)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                finally:
                    conn.close()

            do_GET = do_POST = _handle

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


# -- reading a case's decision logs ---------------------------------------------------------


def decision_lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    lines = []
    for raw in path.read_text().splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            lines.append(json.loads(raw))
    return lines


@dataclass
class Outcome:
    """One row of the table."""

    fault: str
    faults: int
    wrong: int
    lost: int
    ticks: int
    note: str = ""
    wrong_why: list[str] = field(default_factory=list)


def judge(
    logs: Sequence[Sequence[dict[str, Any]]], *, tick_s: float, cooldown_up_s: float = 0.0
) -> tuple[int, int, int, list[str]]:
    """(ticks, wrong actions, lost lines, why each action is wrong) over one or more processes'
    decision lines (one list per process, in order; see the module docstring for the rules)."""
    why: list[str] = []
    lost = ticks = 0
    applied: list[dict[str, Any]] = []
    for lines in logs:
        firsts: dict[str, dict[str, Any]] = {}
        for ln in lines:
            firsts.setdefault(ln["trace_id"], ln)  # a failed scale's second line shares the trace id
        tick_lines = sorted(firsts.values(), key=lambda ln: ln["time_s"])
        ticks += len(tick_lines)
        for a, b in pairwise(tick_lines):
            lost += max(0, round((b["time_s"] - a["time_s"]) / tick_s) - 1)
        # A scale's line is written before the scale; a failed one adds a second line with the
        # same trace id and its error: that scale never happened.
        failed = {ln["trace_id"] for ln in lines if ln.get("actuation_error")}
        for ln in lines:
            if not ln.get("applied") or ln["trace_id"] in failed:
                continue
            spec = (ln.get("replicas") or {}).get("spec")
            final = ln["desired"]
            t = ln["time_s"]
            if spec is not None and final < spec and (ln["unknown_replicas"] or ln["metrics_outage"]):
                why.append(f"{t:.1f}: scale-down {spec}->{final} with {ln['unknown_replicas']} unknown")
            if not MIN_REPLICAS <= final <= MAX_REPLICAS:
                why.append(f"{t:.1f}: {final} outside [{MIN_REPLICAS}, {MAX_REPLICAS}]")
            if ln.get("leader") is False:
                why.append(f"{t:.1f}: scaled without the lease")
            applied.append(ln)
    applied.sort(key=lambda ln: ln["time_s"])
    ups = [ln for ln in applied if ln["desired"] > (ln.get("replicas") or {}).get("spec", ln["desired"])]
    for a, b in pairwise(ups):
        if b["time_s"] - a["time_s"] < cooldown_up_s:
            why.append(f"{b['time_s']:.1f}: scale-up {b['time_s'] - a['time_s']:.1f} s after the last one")
    terms: dict[Any, tuple[float, float]] = {}
    for ln in applied:
        if ln.get("lease_term") is not None:
            lo, hi = terms.get(ln["lease_term"], (ln["time_s"], ln["time_s"]))
            terms[ln["lease_term"]] = (min(lo, ln["time_s"]), max(hi, ln["time_s"]))
    spans = sorted(terms.values())
    for (_, hi), (lo, _) in pairwise(spans):
        if lo < hi:
            why.append("two leaders acted in overlapping terms")
    return ticks, len(why), lost, why


def format_table(rows: Sequence[Outcome]) -> str:
    head = ("fault", "faults injected", "wrong scale actions", "lost records", "ticks", "note")
    cells = [head] + [(r.fault, str(r.faults), str(r.wrong), str(r.lost), str(r.ticks), r.note) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(head))]
    out = ["| " + " | ".join(c.ljust(w) for c, w in zip(head, widths, strict=True)) + " |"]
    out.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for c in cells[1:]:
        out.append("| " + " | ".join(x.ljust(w) for x, w in zip(c, widths, strict=True)) + " |")
    return "\n".join(out)


# -- the cases ------------------------------------------------------------------------------


@dataclass
class Bench:
    workdir: Path
    emulate: Emulate
    names: list[str]
    scrape: ScrapeProxy
    serial: int = 0

    def config(
        self,
        *,
        policy: dict[str, Any] | None = None,
        actuator_url: str | None = None,
        guards: dict[str, Any] | None = None,
        state: Path | None = None,
        max_sample_age_s: float = 5.0,
        mode: str = "apply",
        port: int | None = None,
    ) -> tuple[Path, Path]:
        self.serial += 1
        log = self.workdir / f"decisions-{self.serial}.jsonl"
        doc = {
            "target": {"name": "emulated-llama", "backend": "vllm"},
            "metrics": {
                "source": "scrape",
                "scrape": {
                    "static_targets": [{"name": n, "url": self.scrape.url(n)} for n in self.names],
                    "timeout_s": 1.0,
                    "max_sample_age_s": max_sample_age_s,
                },
            },
            "policy": policy or NULL_AS_ZERO_POLICY,
            "guards": {
                "min_replicas": MIN_REPLICAS,
                "max_replicas": MAX_REPLICAS,
                "drain_aware": False,
                **(guards or {}),
            },
            "tick_s": TICK_S,
            "mode": mode,
            "actuator": {"kind": "emulate", "emulate": {"url": actuator_url or self.emulate.url}},
            "server": {"listen": f"127.0.0.1:{port or free_port()}"},
            "decision_log": {"path": str(log)},
            "state": {"store": "file", "path": str(state)} if state else {"store": "none"},
        }
        path = self.workdir / f"llmscale-{self.serial}.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return path, log

    def run(self, config: Path, *extra: str) -> Proc:
        self.serial += 1
        return Proc(f"run-{self.serial}", [*llmscale(), "run", "--config", str(config), *extra], self.workdir)

    def reset(self) -> None:
        for n in self.names:
            self.scrape.set_fault(n, None)
        if self.emulate.spec() != 2:
            self.emulate.scale(2)


def _lines_after(log: Path, n: int, run: Proc, start: int = 0) -> Callable[[], bool]:
    def check() -> bool:
        if not run.running():
            raise RuntimeError(f"llmscale run exited:\n{run.tail()}")
        return len(decision_lines(log)) >= start + n

    return check


def metric_case(
    b: Bench, fault: str, *, replicas: Sequence[str], fault_ticks: int, label: str, note: str = ""
) -> Outcome:
    """Healthy ticks, ``fault_ticks`` ticks with ``fault`` on ``replicas``, healthy ticks again."""
    config, log = b.config()
    run = b.run(config)
    before = b.scrape.injected
    try:
        wait_until(_lines_after(log, 4, run), 60, "4 healthy ticks")
        for n in replicas:
            b.scrape.set_fault(n, fault)
        start = len(decision_lines(log))
        wait_until(
            _lines_after(log, fault_ticks, run, start), fault_ticks * TICK_S * 4 + 30, f"{fault} ticks"
        )
        for n in replicas:
            b.scrape.set_fault(n, None)
        start = len(decision_lines(log))
        wait_until(_lines_after(log, 4, run, start), 60, "4 ticks after")
    finally:
        run.stop()
    lines = decision_lines(log)
    ticks, wrong, lost, why = judge([lines], tick_s=TICK_S)
    # What the fault did to the loop: ticks with unknown load, and the policy's scale-downs held.
    unknown = sum(1 for ln in lines if ln["unknown_replicas"] or ln["metrics_outage"])
    held = sum(
        1
        for ln in lines
        if ln["desired_before_guards"] is not None and ln["desired_before_guards"] < ln["desired"]
    )
    seen = f"{unknown} tick(s) with unknown load, {held} proposed scale-down(s) held"
    return Outcome(
        label, b.scrape.injected - before, wrong, lost, ticks, f"{seen}; {note}" if note else seen, why
    )


SLO_POLICY = {"name": "slo", "params": {}}
KEDA_QUEUE_POLICY = {"name": "keda-queue", "params": {"polling_interval_s": 1}}


def judge_dry(lines: Sequence[dict[str, Any]], fault_from: int) -> list[str]:
    """Why each dry-run decision from line ``fault_from`` on is wrong: above both the spec and
    every decision of the healthy ticks before (a scale-up the healthy replica does not warrant),
    or below the spec while load is unknown."""
    healthy = [ln["desired"] for ln in lines[:fault_from] if ln.get("desired") is not None]
    why = []
    for ln in lines[fault_from:]:
        final, spec = ln.get("desired"), (ln.get("replicas") or {}).get("spec")
        if final is None or spec is None:
            continue  # a failed tick decided nothing
        warranted = max([spec, *healthy])
        if final > warranted:
            why.append(f"{ln['time_s']:.1f}: {final} replicas (healthy ticks decided at most {warranted})")
        if final < spec and (ln["unknown_replicas"] or ln["metrics_outage"]):
            why.append(
                f"{ln['time_s']:.1f}: scale-down {spec}->{final} with {ln['unknown_replicas']} unknown"
            )
    return why


def page_case(
    b: Bench, fault: str, *, label: str, policy: dict[str, Any] | None = None, fault_ticks: int = 10
) -> Outcome:
    """Issue 19: 4 healthy ticks, ``fault_ticks`` with ``fault`` on one replica's page, 4 healthy;
    `run` in dry-run. RSS and /healthz are polled through the fault; SIGTERM ends the case."""
    port = free_port()
    config, log = b.config(policy=policy or SLO_POLICY, mode="dry-run", port=port)
    run = b.run(config)
    before = b.scrape.injected
    rss: list[int] = []
    polls = healthy = 0
    frozen = False
    try:
        wait_until(_lines_after(log, 4, run), 90, "4 healthy ticks")
        b.scrape.set_fault(b.names[0], fault)
        start = len(decision_lines(log))
        t_end = time.monotonic() + fault_ticks * TICK_S * 4 + 60
        while len(decision_lines(log)) < start + fault_ticks:
            if not run.running():
                raise RuntimeError(f"llmscale run exited:\n{run.tail()}")
            if time.monotonic() > t_end:
                break  # a controller that stopped deciding: counted as lost records below
            kib = run.rss_kib()
            if kib is not None:
                rss.append(kib)
            polls += 1
            with contextlib.suppress(OSError):
                healthy += _http_get(f"http://127.0.0.1:{port}/healthz", 2.0)[0] == 200
            time.sleep(0.25)
        b.scrape.set_fault(b.names[0], None)
        try:
            wait_until(_lines_after(log, 4, run, len(decision_lines(log))), 60, "4 ticks after")
        except TimeoutError:
            frozen = True  # the controller stopped deciding (as `slo` did on a queue of 1e9 before)
    finally:
        t0 = time.monotonic()
        code = run.stop(timeout_s=30.0)
        exit_s = time.monotonic() - t0
    lines = decision_lines(log)
    ticks, _, lost, _ = judge([lines], tick_s=TICK_S)
    why = judge_dry(lines, start)
    unknown = sum(1 for ln in lines[start:] if ln["unknown_replicas"])
    slowest = max((ln.get("tick_duration_s") or 0.0 for ln in lines), default=0.0)
    peak = max(rss, default=0) / 1024
    note = (
        f"{unknown} tick(s) with unknown load; peak RSS {peak:.0f} MiB; slowest tick {slowest:.2f} s; "
        f"/healthz 200 {healthy}/{polls}; SIGTERM exit {exit_s:.1f} s (code {code})"
        + ("; FROZEN: no decision for 60 s after the fault" if frozen else "")
    )
    return Outcome(label, b.scrape.injected - before, len(why), lost, ticks, note, why)


PAGE_CASES: dict[str, tuple[str, str, dict[str, Any] | None]] = {
    "page-queue-1e9": ("queue-1e9", "queue 1e9 on 1 of 2 (slo)", None),
    "page-queue-1e12": ("queue-1e12", "queue 1e12 on 1 of 2 (keda-queue)", KEDA_QUEUE_POLICY),
    "page-falling-counters": ("falling", "counters falling 2%/s (1 of 2)", None),
    "page-buckets": ("buckets", "buckets falling with le (1 of 2)", None),
    "page-duplicate": ("duplicate", "queue sample duplicated (1 of 2)", None),
    "page-explosion": ("explosion", "10,000 extra queue series (1 of 2)", None),
    "page-future": ("future", "samples stamped +1 h (1 of 2)", None),
    "page-50mb": ("big", "50 MB page (1 of 2)", None),
    "page-gzip-bomb": ("gzip-bomb", "gzip page inflating to 1 GiB (1 of 2)", None),
    "page-redirect": ("redirect", "302 to a queue of 1e9 (1 of 2)", None),
}


def storm_case(b: Bench, status: int, storm: int = 6) -> Outcome:
    """A static policy asks for 3; the first ``storm`` scale requests are answered ``status``."""
    proxy = AdminProxy(b.emulate.url)
    proxy.storm, proxy.storm_left = status, storm
    config, log = b.config(
        policy={"name": "static", "params": {"replicas": 3}},
        actuator_url=proxy.url,
        guards={"cooldown_up_s": 60},
    )
    run = b.run(config)
    try:
        wait_until(
            lambda: b.emulate.spec() == 3 or not run.running(), 90, "the scale to land after the storm"
        )
        start = len(decision_lines(log))
        wait_until(_lines_after(log, 4, run, start), 30, "4 ticks after")
    finally:
        run.stop()
        proxy.close()
    lines = decision_lines(log)
    ticks, wrong, lost, why = judge([lines], tick_s=TICK_S, cooldown_up_s=60)
    failed = sum(1 for ln in lines if ln.get("actuation_error"))
    landed = proxy.forwarded_scales
    note = f"{failed} failed scales recorded, {landed} scale request(s) got through"
    b.reset()
    return Outcome(f"API {status} storm ({storm} scale calls)", proxy.injected, wrong, lost, ticks, note, why)


def kill_case(b: Bench) -> Outcome:
    """Run 1 scales 2 -> 3 (cooldown 60 s, saved to a file) and is killed with SIGKILL; the fleet
    is shrunk to 2 behind its back; run 2 on the saved state must not scale up within the cooldown."""
    state = b.workdir / "kill-state.json"
    state.unlink(missing_ok=True)
    guards = {"cooldown_up_s": 60}
    config, log1 = b.config(policy={"name": "static", "params": {"replicas": 3}}, guards=guards, state=state)
    run1 = b.run(config)
    try:
        wait_until(
            lambda: any(ln["applied"] for ln in decision_lines(log1)) or not run1.running(),
            60,
            "run 1's scale",
        )
        wait_until(_lines_after(log1, 2, run1, len(decision_lines(log1))), 30, "2 more ticks")
    finally:
        run1.kill9()
    b.emulate.scale(2)
    config2, log2 = b.config(policy={"name": "static", "params": {"replicas": 3}}, guards=guards, state=state)
    run2 = b.run(config2)
    try:
        wait_until(_lines_after(log2, 10, run2), 60, "10 ticks of run 2")
    finally:
        run2.stop()
    l1, l2 = decision_lines(log1), decision_lines(log2)
    ticks, wrong, lost, why = judge([l1, l2], tick_s=TICK_S, cooldown_up_s=60)
    held = sum(1 for ln in l2 if ln["guard"] == "cooldown")
    b.reset()
    return Outcome(
        "kill -9 + restart of run",
        1,
        wrong,
        lost,
        ticks,
        f"restart held {held} tick(s) in the saved cooldown",
        why,
    )


def soak_case(b: Bench, seconds: float) -> Outcome:
    """`run` at 0.5 s ticks for ``seconds`` under the benchmark's light load; RSS sampled every second."""
    config, log = b.config()
    run = b.run(config)
    rss: list[int] = []
    try:
        wait_until(_lines_after(log, 4, run), 60, "4 ticks")  # warm: imports done, window full soon
        t_end = time.monotonic() + seconds
        while time.monotonic() < t_end:
            if not run.running():
                raise RuntimeError(f"run exited during the soak:\n{run.tail()}")
            kib = run.rss_kib()
            if kib is not None:
                rss.append(kib)
            time.sleep(1.0)
    finally:
        run.stop()
    ticks, wrong, lost, why = judge([decision_lines(log)], tick_s=TICK_S)
    mib = [k / 1024 for k in rss]
    note = (
        f"RSS start {mib[0]:.0f} / end {mib[-1]:.0f} / peak {max(mib):.0f} MiB over {seconds:.0f} s"
        if mib
        else "no RSS"
    )
    return Outcome(f"soak {seconds:.0f} s under load", 0, wrong, lost, ticks, note, why)


def failover_case(workdir: Path) -> Outcome:
    """Two `run`s with leader election on the real kube-apiserver; SIGKILL the leader."""
    sys.path.insert(0, str(ROOT / "tests"))
    try:
        from support.kube_cluster import kube_binaries, start_cluster  # type: ignore[import-not-found]
    except ImportError as e:
        return Outcome("leader failover", 0, 0, 0, 0, f"skipped: {e}")
    if kube_binaries() is None:
        return Outcome("leader failover", 0, 0, 0, 0, "skipped: kube-apiserver binaries not built")
    from kubernetes import client

    kdir = Path(tempfile.mkdtemp(prefix="chaos-kube-", dir=workdir))
    cluster = start_cluster(kdir)
    procs: list[Proc] = []
    try:
        admin = cluster.admin_client()
        ns = "chaos"
        client.CoreV1Api(admin).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
        body = client.V1Deployment(
            metadata=client.V1ObjectMeta(name="vllm"),
            spec=client.V1DeploymentSpec(
                replicas=3,
                selector=client.V1LabelSelector(match_labels={"app": "vllm"}),
                template=client.V1PodTemplateSpec(
                    metadata=client.V1ObjectMeta(
                        labels={"app": "vllm"}, annotations={"fake-kubelet/pending-s": "600"}
                    ),
                    spec=client.V1PodSpec(
                        containers=[client.V1Container(name="s", image="registry.invalid/x:1")]
                    ),
                ),
            ),
        )
        apps = client.AppsV1Api(admin)
        apps.create_namespaced_deployment(ns, body)
        lease = (3.0, 2.0, 0.3)
        logs = []
        for ident in ("a", "b"):
            log = workdir / f"failover-{ident}.jsonl"
            doc = {
                "target": {"namespace": ns, "name": "vllm", "selector": {"app": "vllm"}},
                "metrics": {
                    "source": "scrape",
                    "scrape": {
                        "static_targets": [
                            {"name": "nowhere", "url": f"http://127.0.0.1:{free_port()}/metrics"}
                        ],
                        "timeout_s": 0.3,
                    },
                },
                "policy": {"name": "static", "params": {"replicas": 3}},
                "guards": {"min_replicas": 1, "max_replicas": 5, "cooldown_up_s": 20},
                "tick_s": TICK_S,
                "mode": "apply",
                "actuator": {"kind": "kubernetes", "kubernetes": {"kubeconfig": str(kdir / "kubeconfig")}},
                "server": {"listen": "127.0.0.1:0"},
                "decision_log": {"path": str(log)},
                "state": {"store": "configmap"},
                "leader_election": {
                    "enabled": True,
                    "identity": ident,
                    "lease_duration_s": lease[0],
                    "renew_deadline_s": lease[1],
                    "retry_period_s": lease[2],
                },
            }
            cfg = workdir / f"failover-{ident}.yaml"
            cfg.write_text(yaml.safe_dump(doc))
            procs.append(Proc(f"failover-{ident}", [*llmscale(), "run", "--config", str(cfg)], workdir))
            logs.append(log)
            wait_until(lambda log=log: len(decision_lines(log)) >= 2, 60, f"{ident}'s first ticks")

        def scale_to(n: int) -> None:
            apps.patch_namespaced_deployment_scale("vllm", ns, {"spec": {"replicas": n}})

        scale_to(2)  # a's (the leader's) scale-up back to 3 starts a 20 s cooldown
        wait_until(lambda: any(ln["applied"] for ln in decision_lines(logs[0])), 30, "a's scale")
        procs[0].kill9()
        killed = time.time()
        took = wait_until(
            lambda: next((ln for ln in decision_lines(logs[1]) if ln.get("leader")), None), 30, "b to lead"
        )
        scale_to(2)  # b must wait out a's cooldown before it scales back
        wait_until(lambda: any(ln["applied"] for ln in decision_lines(logs[1])), 40, "b's scale")
        procs[1].stop()
        ticks, wrong, lost, why = judge([decision_lines(p) for p in logs], tick_s=TICK_S, cooldown_up_s=20)
        note = f"standby led {took['time_s'] - killed:.1f} s after the kill (lease {lease[0]:g} s)"
        return Outcome("leader failover (kill -9)", 1, wrong, lost, ticks, note, why)
    finally:
        for p in procs:
            p.stop()
        cluster.stop()


CASES = (
    "outage-1-tick",
    "outage-long",
    "partial",
    "counter-reset",
    "nan",
    "frozen",
    "clock-skew",
    "api-409",
    "api-429",
    "api-503",
    "kill-restart",
    "leader-failover",
    "soak",
    *PAGE_CASES,
)


def run_cases(cases: Sequence[str], workdir: Path, soak_s: float) -> list[Outcome]:
    rows: list[Outcome] = []
    emulate = Emulate(workdir)
    scrape: ScrapeProxy | None = None
    load: Proc | None = None
    try:
        replicas = emulate.ready()
        names = sorted(r["name"] for r in replicas)
        ups = {r["name"]: f"http://127.0.0.1:{r['port']}/metrics" for r in replicas}
        scrape = ScrapeProxy(ups)
        # A light load all along: an idle replica's page never changes, and a page unchanged for
        # max_sample_age_s reads as frozen (unknown) -- the healthy ticks must be healthy.
        load = Proc(
            "loadgen",
            [
                *llmscale(),
                "loadgen",
                "--workload",
                "default",
                "--rate-scale",
                "0.05",
                "--target",
                emulate.url,
                "--max-requests",
                "1000000",
                "--concurrency-limit",
                "16",
                "--max-duration-s",
                "1800",
            ],
            workdir,
        )
        b = Bench(workdir, emulate, names, scrape)
        one = names[:1]
        table: dict[str, Callable[[], Outcome]] = {
            "outage-1-tick": lambda: metric_case(
                b, "down", replicas=names, fault_ticks=1, label="metrics outage, 1 tick"
            ),
            "outage-long": lambda: metric_case(
                b,
                "down",
                replicas=names,
                fault_ticks=40,
                label="metrics outage, 40 ticks",
                note="the issue's 10 min at 0.5 s ticks: 20 s",
            ),
            "partial": lambda: metric_case(
                b, "down", replicas=one, fault_ticks=10, label="partial scrape (1 of 2 down)"
            ),
            "counter-reset": lambda: metric_case(
                b,
                "reset",
                replicas=one,
                fault_ticks=10,
                label="counter reset (1 of 2)",
                note="counters restart from 0; the policy reads a gauge",
            ),
            "nan": lambda: metric_case(b, "nan", replicas=one, fault_ticks=10, label="NaN values (1 of 2)"),
            "frozen": lambda: metric_case(
                b,
                "frozen",
                replicas=names,
                fault_ticks=24,
                label="frozen pages (both)",
                note="max_sample_age_s 5 s",
            ),
            "clock-skew": lambda: metric_case(
                b, "skew", replicas=one, fault_ticks=10, label="clock skew -120 s (1 of 2)"
            ),
            "api-409": lambda: storm_case(b, 409),
            "api-429": lambda: storm_case(b, 429),
            "api-503": lambda: storm_case(b, 503),
            "kill-restart": lambda: kill_case(b),
            "leader-failover": lambda: failover_case(workdir),
            "soak": lambda: soak_case(b, soak_s),
            **{
                case: (lambda f=f, lab=lab, pol=pol: page_case(b, f, label=lab, policy=pol))
                for case, (f, lab, pol) in PAGE_CASES.items()
            },
        }
        for case in cases:
            t0 = time.monotonic()
            print(f"# {case} ...", file=sys.stderr, flush=True)
            row = table[case]()
            row.note = (row.note + "; " if row.note else "") + f"{time.monotonic() - t0:.0f} s"
            rows.append(row)
            for w in row.wrong_why:
                print(f"#   wrong: {w}", file=sys.stderr)
            b.reset()
    finally:
        if load is not None:
            load.stop()
        if scrape is not None:
            scrape.close()
        emulate.proc.stop()
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, from: {', '.join(CASES)}")
    ap.add_argument("--soak-s", type=float, default=60.0, help="length of the soak case")
    ap.add_argument("--workdir", type=Path, default=None, help="keep logs here (default: a temp dir)")
    args = ap.parse_args(argv)
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        ap.error(f"unknown case(s) {unknown}; known: {', '.join(CASES)}")
    with contextlib.ExitStack() as stack:
        workdir = args.workdir or Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix="llmscale-chaos-"))
        )
        workdir.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        rows = run_cases(cases, workdir, args.soak_s)
        print(format_table(rows))
        print(f"\n{len(rows)} case(s) in {time.monotonic() - t0:.0f} s; tick {TICK_S} s")
    return 1 if any(r.wrong for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
