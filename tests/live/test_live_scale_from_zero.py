"""Scale to and from zero live: a request held at emulate's front door is demand the controller sees.

Real parts throughout: emulate's fleet at 0 replicas on HTTP, its front door's ``/metrics`` (the
activator's ``llmscale:activator_requests_held``), ``llmscale run`` as a subprocess scraping it and
scaling through emulate's admin API. Before the activator gauge a request waited at the front door
for over 30 s while the controller read ``queue_waiting 0`` and stayed at 0.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from llmscale.emulate import EmulateConfig, EmulatorThread
from llmscale.metrics.names import ACTIVATOR
from llmscale.metrics.scrape import PodScrapeSource
from support.wait import wait_for

TOKEN = "zero-live-admin-token-5678"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
#: the emulated cold start, s: short, so the first replica is ready seconds after the decision
COLD = {"pending_s": 0.0, "loading_s": 1.0, "warmup_s": 0.5}


@pytest.fixture
def at_zero():
    cfg = EmulateConfig(replicas=0, port=0, admin_api=True, admin_token=TOKEN, timeout_s=120.0, **COLD)
    fleet = EmulatorThread(cfg)
    fleet.start()
    try:
        yield fleet
    finally:
        fleet.stop()


def _held(base_url: str) -> float:
    page = httpx.get(base_url + "/metrics", timeout=5).text
    line = next(ln for ln in page.splitlines() if ln.startswith(ACTIVATOR.REQUESTS_HELD + " "))
    return float(line.split()[1])


class _Client(threading.Thread):
    """One completion request on its own thread; keeps the answer and how long it took."""

    def __init__(self, base_url: str) -> None:
        super().__init__(daemon=True)
        self.base_url = base_url
        self.response: httpx.Response | None = None
        self.error: BaseException | None = None
        self.took_s = 0.0

    def run(self) -> None:
        t0 = time.monotonic()
        try:
            self.response = httpx.post(
                self.base_url + "/v1/completions", json={"prompt": "hello", "max_tokens": 4}, timeout=150
            )
        except BaseException as e:  # handed to the test thread
            self.error = e
        self.took_s = time.monotonic() - t0


def test_the_front_door_exports_the_requests_it_holds_and_the_scrape_source_reads_them(at_zero):
    base = at_zero.base_url
    assert _held(base) == 0.0
    source = PodScrapeSource([], activator_url=base + "/metrics")
    client = _Client(base)
    try:
        assert source.observe(1.0).gateway_queue == 0
        client.start()
        wait_for("the request held at the front door", lambda: _held(base) == 1.0, 30)
        obs = source.observe(2.0)
        assert obs.gateway_queue == 1 and obs.replicas == () and source.last_errors == {}
        # the first replica takes it: served, and the front door holds nothing any more
        httpx.post(base + "/admin/scale", json={"replicas": 1}, headers=AUTH, timeout=5).raise_for_status()
        client.join(60)
        assert client.error is None and client.response is not None
        assert client.response.status_code == 200, client.response.text
        assert client.response.headers["x-llmscale-replica"]
        assert source.observe(3.0).gateway_queue == 0
    finally:
        source.close()
        client.join(5)


def test_an_unreachable_activator_is_unknown_not_zero():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with PodScrapeSource([], activator_url=f"http://127.0.0.1:{port}/metrics", timeout_s=1) as source:
        obs = source.observe(1.0)
    assert obs.gateway_queue is None
    assert "activator" in source.last_errors and source.errors_total == 1


@pytest.mark.parametrize(
    ("value", "held"),
    [
        pytest.param("3", 3, id="three"),
        pytest.param("1e6", 1_000_000, id="the-bound"),
        pytest.param("1e12", None, id="absurd"),
        pytest.param("-1", None, id="negative"),
        pytest.param("NaN", None, id="nan"),
    ],
)
def test_an_absurd_activator_page_is_unknown_not_load(value, held):
    # One page saying 1e12 held requests must not take a fleet at zero to its maximum.
    from support.page_server import PageServer

    server = PageServer().start()
    try:
        server.set("/metrics", f"{ACTIVATOR.REQUESTS_HELD} {value}\n")
        with PodScrapeSource([], activator_url=server.url("/metrics"), timeout_s=2) as source:
            obs = source.observe(1.0)
    finally:
        server.stop()
    assert obs.gateway_queue == held
    assert ("activator" in source.last_errors) is (held is None)


def _config(tmp_path: Path, base_url: str) -> Path:
    doc = {
        "target": {"name": "emulated"},
        "metrics": {"source": "scrape", "scrape": {"emulate_url": base_url, "timeout_s": 2}},
        # KEDA's rules: active while queue_waiting > 0; inactive for cooldown_period_s -> 0
        "policy": {
            "name": "keda-queue",
            "params": {"polling_interval_s": 0.5, "cooldown_period_s": 2.0, "threshold": 5},
        },
        "guards": {"min_replicas": 0, "max_replicas": 2, "drain_aware": False},
        "mode": "apply",
        "actuator": {"kind": "emulate", "emulate": {"url": base_url}},
        "server": {"listen": "127.0.0.1:0"},
        "decision_log": {"path": str(tmp_path / "decisions.jsonl")},
        "state": {"store": "file", "path": str(tmp_path / "state.json")},
    }
    p = tmp_path / "llmscale.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def _lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def test_run_scales_from_zero_for_a_held_request_and_back_to_zero(tmp_path, at_zero):
    """0 -> 1 -> 0 with ``run`` over real HTTP: the held request is the demand that starts the first
    replica, it is served once that replica is ready, and the idle replica goes after the cooldown."""
    base = at_zero.base_url
    log = tmp_path / "decisions.jsonl"
    env = {**os.environ, "LLMSCALE_EMULATE_ADMIN_TOKEN": TOKEN}
    proc = subprocess.Popen(
        [sys.executable, "-m", "llmscale.cli", "run", "--config", str(_config(tmp_path, base))],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    client = _Client(base)
    try:
        # the controller is up and idle at zero before the request arrives
        wait_for("a first decision", lambda: proc.poll() is None and len(_lines(log)) >= 1, 90)
        first = _lines(log)[0]
        assert first["desired"] == 0 and first["rule"] == "idle-at-zero", first
        client.start()
        client.join(120)
        assert client.error is None and client.response is not None
        assert client.response.status_code == 200, client.response.text
        # ... and back to zero once the replica has been idle for the cooldown
        spec = lambda: httpx.get(base + "/admin/replicas", headers=AUTH, timeout=5).json()  # noqa: E731
        wait_for(
            "the fleet back at zero", lambda: not spec()["replicas"] and spec()["spec_replicas"] == 0, 60
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        client.join(5)
    assert proc.returncode == 0, err
    lines = [ln for ln in _lines(log) if ln.get("error") is None]
    up = next(ln for ln in lines if ln["rule"] == "activate-from-zero")
    assert up["applied"] is True and up["desired"] == 1 and up["replicas"]["spec"] == 0
    assert up["inputs"]["value"] >= 1  # queue_waiting: the held request, read at zero replicas
    down = next(ln for ln in lines if ln["rule"] == "scale-to-zero")
    assert down["applied"] is True and down["desired"] == 0 and lines.index(down) > lines.index(up)
    # the request waited for the decision and a 1.5 s cold start, not for a time-out
    assert client.took_s < 60, client.took_s
