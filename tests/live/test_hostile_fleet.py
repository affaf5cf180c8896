"""A fleet whose every scrape may be an attack: ``llmscale run`` keeps deciding, and sanely.

Four replicas behind real HTTP servers on 127.0.0.1 each finish 2.5 req/s (10 req/s for the
fleet). Each scrape of each replica is answered, at random from a fixed seed, with an honest page
or one of the attacks below: impossible or absurd values, broken histograms, an old page served
again, empty or binary bodies, label and line floods, timestamps a year ahead, answers that hang,
trickle or never end, a body cut short, a gzip bomb, redirects, errors. ``llmscale run`` (the real
CLI: static scrape targets, the ``slo`` policy, a KEDA actuator taking replicas from the metrics,
0.5 s ticks, a 1 s scrape time-out) runs a bounded number of ticks against it. Each attack alone is
refused (``tests/metrics/test_page_validation.py``); mixed, three replicas unknown while the fourth
served an old page once read the fleet at ~230 req/s for a true 40 and took ``slo`` to its maximum.

Asserted from the decision log: no tick outlasts the scrape time-out by more than a margin (the
machine's load included: a hang would take 10 s), the fleet rate never reads above twice the truth,
the desired replicas never exceed twice what the true rate needs at the policy's own capacity per
replica, plus one (or the 4 there were, which a stabilised scale-down holds), and the last ticks
still decide. The servers and the controller stop by
themselves, leaving no child process.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import math
import os
import random
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from tests.support.run_config import standalone_run_config

from llmscale.metrics.names import VLLM
from support.processes import children

REPLICAS = 4
RATE_RPS = 2.5  # per replica: the fleet's truth is 10 req/s
TIMEOUT_S = 1.0
TICK_S = 0.5
TICKS = 16
#: a tick may outlast the scrape time-out by this much: parsing, signals, the policy, and a
#: machine shared with other test processes (a hang, not cut at the time-out, takes 10 s)
TICK_MARGIN_S = 3.0
SEEDS = (1, 4, 7)
LABELS = 'engine="0",model_name="llama-3-8b"'
BOUNDS = (0.1, 0.5, 1.0, 2.5, 5.0, 10.0)


def _name(name: str | None) -> str:
    assert name is not None
    return name


RUNNING, WAITING, KV = _name(VLLM.running), _name(VLLM.waiting), _name(VLLM.kv_usage)
PROMPT, GENERATED = _name(VLLM.prompt_tokens), _name(VLLM.generation_tokens)
TTFT, E2E = _name(VLLM.ttft), _name(VLLM.e2e)


def _histogram(name: str, count: float, mean_s: float) -> str:
    """A histogram whose observations all sit near ``mean_s`` (cumulative buckets, then +Inf)."""
    lines = [f"# TYPE {name} histogram"]
    for b in BOUNDS:
        lines.append(f'{name}_bucket{{{LABELS},le="{b}"}} {count if b >= mean_s else 0.0}')
    lines.append(f'{name}_bucket{{{LABELS},le="+Inf"}} {count}')
    lines.append(f"{name}_count{{{LABELS}}} {count}")
    lines.append(f"{name}_sum{{{LABELS}}} {count * mean_s}")
    return "\n".join(lines) + "\n"


def honest_page(age_s: float, *, waiting: str = "1.0", running: str = "3.0", kv: str = "0.3") -> str:
    """A vLLM replica's page ``age_s`` after it started: counters grow at :data:`RATE_RPS`."""
    done = 200.0 + RATE_RPS * age_s
    return (
        f"# TYPE {RUNNING} gauge\n{RUNNING}{{{LABELS}}} {running}\n"
        f"# TYPE {WAITING} gauge\n{WAITING}{{{LABELS}}} {waiting}\n"
        f"# TYPE {KV} gauge\n{KV}{{{LABELS}}} {kv}\n"
        f"# TYPE {PROMPT} counter\n{PROMPT}{{{LABELS}}} {done * 500}\n"
        f"# TYPE {GENERATED} counter\n{GENERATED}{{{LABELS}}} {done * 200}\n"
        + _histogram(TTFT, done, 0.08)
        + _histogram(E2E, done, 4.0)
    )


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: HostileFleet

    def log_message(self, format: str, *args: object) -> None:
        pass

    def send(self, body: bytes, *, code: int = 200, headers: tuple[tuple[str, str], ...] = ()) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        fleet = self.server
        attack = fleet.next_attack()
        page = honest_page(fleet.age_s())
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            ATTACKS[attack](self, page)


def _set(page: str, series: str, value: str) -> str:
    """``page`` with every sample whose line starts with ``series`` (a name, ``{``, ...) at ``value``."""
    lines = page.split("\n")
    return "\n".join(f"{ln.rsplit(' ', 1)[0]} {value}" if ln.startswith(series) else ln for ln in lines)


def _dribble(h: Handler, chunks: Iterator[bytes], pause_s: float) -> None:
    for chunk in chunks:
        if h.server.closing.wait(pause_s):
            return
        h.wfile.write(chunk)
        h.wfile.flush()


def _trickle(h: Handler, page: str) -> None:
    body = page.encode()
    h.send_response(200)
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    _dribble(h, (body[i : i + 1] for i in range(40)), 0.3)


def _never_ending(h: Handler, page: str) -> None:
    h.send_response(200)
    h.send_header("Transfer-Encoding", "chunked")
    h.end_headers()
    _dribble(h, (b"400\r\n" + b"# x\n" * 256 + b"\r\n" for _ in range(400)), 0.05)


def _cut_short(h: Handler, page: str) -> None:
    body = page.encode()
    h.send_response(200)
    h.send_header("Content-Length", str(2 * len(body)))
    h.end_headers()
    h.wfile.write(body[:300])
    h.wfile.flush()
    h.connection.shutdown(socket.SHUT_RDWR)


_BOMB: list[bytes] = []


def _gzip_bomb(h: Handler, page: str) -> None:
    if not _BOMB:
        _BOMB.append(gzip.compress(b"0" * (64 << 20), 9))  # 64 MiB of zeros in ~64 KiB
    h.send(_BOMB[0], headers=(("Content-Encoding", "gzip"),))


ATTACKS = {
    "honest": lambda h, p: h.send(p.encode()),
    "waiting-1e308": lambda h, p: h.send(_set(p, WAITING + "{", "1e308").encode()),
    "waiting-inf": lambda h, p: h.send(_set(p, WAITING + "{", "+Inf").encode()),
    "waiting-nan": lambda h, p: h.send(_set(p, WAITING + "{", "NaN").encode()),
    "waiting-negative": lambda h, p: h.send(_set(p, WAITING + "{", "-5").encode()),
    "waiting-1e18": lambda h, p: h.send(_set(p, WAITING + "{", "1e18").encode()),
    "running-1e12": lambda h, p: h.send(_set(p, RUNNING + "{", "1e12").encode()),
    "kv-7": lambda h, p: h.send(_set(p, KV + "{", "7").encode()),
    "buckets-fall": lambda h, p: h.send(_set(p, f'{TTFT}_bucket{{{LABELS},le="+Inf"', "1").encode()),
    "count-inf": lambda h, p: h.send(_set(p, f"{E2E}_count{{", "+Inf").encode()),
    "sum-negative": lambda h, p: h.send(_set(p, f"{E2E}_sum{{", "-1e9").encode()),
    # the page the replica served at the first scrape, again: an old page from a cache
    "old-page": lambda h, p: h.send(honest_page(0.0).encode()),
    "empty": lambda h, p: h.send(b""),
    "binary": lambda h, p: h.send(random.Random(len(p)).randbytes(1 << 18)),
    "utf8-garbage": lambda h, p: h.send(p.encode() + b"\xff\xfe\x00bad{{{\n"),
    "duplicated": lambda h, p: h.send((p + p.replace(" 1.0\n", " 999.0\n")).encode()),
    "huge-label": lambda h, p: h.send((p + f'{WAITING}{{x="{"y" * (1 << 20)}"}} 3\n').encode()),
    "line-flood": lambda h, p: h.send((p + "x_metric 1\n" * 300_000).encode()),
    "year-ahead": lambda h, p: h.send(
        "\n".join(
            ln + f" {int(h.server.wall_s() * 1000) + 365 * 86_400_000}" if ln[:1].isalpha() else ln
            for ln in p.split("\n")
        ).encode()
    ),
    "hang": lambda h, p: h.server.closing.wait(10.0),
    "trickle": _trickle,
    "never-ending": _never_ending,
    "cut-short": _cut_short,
    "gzip-bomb": _gzip_bomb,
    "bad-gzip": lambda h, p: h.send(b"\x1f\x8b\x08garbage" * 100, headers=(("Content-Encoding", "gzip"),)),
    "redirect": lambda h, p: h.send(b"", code=302, headers=(("Location", "http://10.255.255.1/metrics"),)),
    "error-500": lambda h, p: h.send(b"<html>oops</html>", code=500),
}
#: an honest answer for about one scrape in five
CHOICES = ["honest"] * 6 + [a for a in ATTACKS if a != "honest"]


class HostileFleet(ThreadingHTTPServer):
    """Every replica's /r<i>/metrics on one server, each answer drawn from one seeded generator."""

    daemon_threads = True

    def __init__(self, seed: int) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.closing = threading.Event()
        #: wall time of the first scrape: the replicas "start" then (see :meth:`age_s`)
        self.started: float | None = None
        self.answered: list[str] = []

    @staticmethod
    def wall_s() -> float:
        return time.time()

    def age_s(self) -> float:
        """Seconds since the first scrape, not since the servers started.

        ``llmscale run`` takes seconds to start (5.7 s on a loaded 2-core machine), and an old
        page that is a replica's first page is a baseline no source can tell from an honest one:
        there is no page before it to compare with (docs/hostile-inputs.md lists it as not
        covered). Counted from the servers' start, that baseline was 5.7 s old, so five ticks
        (4.8 s) later the replica read at (5.7 + 4.8) / 4.8 = 2.2x its rate, and with its three
        peers unknown (each counted at the known replicas' mean) the fleet at 2.2x the truth: the
        assertion failed in 3 of 9 runs of the three seeds, by how slowly the controller
        started, not by what it read. From the first scrape, the old page is the one the fleet
        served at the controller's first look.
        """
        now = self.wall_s()
        with self.lock:
            if self.started is None:
                self.started = now
            return now - self.started

    def next_attack(self) -> str:
        with self.lock:
            attack = self.rng.choice(CHOICES)
            self.answered.append(attack)
            return attack

    def url(self, replica: int) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/r{replica}/metrics"


def _config(tmp_path: Path, fleet: HostileFleet) -> Path:
    urls = [fleet.url(i) for i in range(REPLICAS)]
    return standalone_run_config(tmp_path, urls, tick_s=TICK_S, timeout_s=TIMEOUT_S)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_fleet_answering_random_attacks_is_read_sanely(tmp_path: Path, seed: int) -> None:
    before = children()
    fleet = HostileFleet(seed)
    serving = threading.Thread(target=fleet.serve_forever, kwargs={"poll_interval": 0.05})
    serving.start()
    try:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "llmscale.cli",
                "run",
                "--config",
                str(_config(tmp_path, fleet)),
                "--max-ticks",
                str(TICKS),
            ],
            capture_output=True,
            text=True,
            timeout=TICKS * (TIMEOUT_S + TICK_MARGIN_S) + 60,
            env={**os.environ, "KUBECONFIG": os.devnull},
        )
    finally:
        fleet.closing.set()
        fleet.shutdown()
        fleet.server_close()
        serving.join(10.0)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = [json.loads(x) for x in (tmp_path / "decisions.jsonl").read_text().splitlines()]
    assert len(lines) == TICKS
    attacks = set(fleet.answered)
    assert len(attacks) >= 15, attacks  # the seed mixed many kinds, not a lucky run of honest pages
    true_rps = REPLICAS * RATE_RPS
    rows = [
        (k, ln["tick_duration_s"], ln["observed"].get("request_rate_rps"), ln["desired"], ln["inputs"])
        for k, ln in enumerate(lines)
    ]
    for k, took_s, rate, desired, inputs in rows:
        where = f"tick {k} of seed {seed}: {lines[k]}"
        assert took_s <= TIMEOUT_S + TICK_MARGIN_S, where
        assert rate is None or rate <= 2.0 * true_rps, where
        capacity = inputs.get("capacity_rps_per_replica")
        if capacity:
            needed = math.ceil(true_rps / (capacity * inputs.get("target_utilization", 1.0)))
            # the 4 replicas there were may be held (a scale-down is stabilised), never more
            assert desired <= max(REPLICAS, 2 * needed + 1), where
    # still deciding at the end: the last ticks decided without an error
    assert all(ln["error"] is None and ln["desired"] >= 1 for ln in lines[-3:]), lines[-3:]
    assert serving.is_alive() is False
    assert children() <= before
