"""The activator's held requests through a real Prometheus: a fleet at zero, one request held.

Prometheus scrapes emulate's front door (``llmscale:activator_requests_held``); the Prometheus source
reads it into ``gateway_queue`` although no replica (no ``up`` series with a pod) exists, and
``queue_waiting`` counts it.
"""

from __future__ import annotations

import threading
import time
from urllib.parse import urlparse

import httpx

from llmscale.emulate import EmulateConfig, EmulatorThread
from llmscale.metrics.prometheus import PrometheusSource
from llmscale.signals.fleet import compute_signals
from support.prometheus_server import TargetGroup


def _request(base_url: str, out: list[int]) -> None:
    r = httpx.post(base_url + "/v1/completions", json={"prompt": "hi", "max_tokens": 2}, timeout=60)
    out.append(r.status_code)


def test_a_request_held_at_zero_replicas_reads_as_the_gateway_queue(prometheus_server):
    cfg = EmulateConfig(replicas=0, port=0, timeout_s=30.0, pending_s=0.0, loading_s=0.0, warmup_s=0.0)
    with EmulatorThread(cfg) as emu:
        front = urlparse(emu.base_url).netloc
        prom = prometheus_server(
            scrape_interval_s=1.0, static_targets=[TargetGroup([front], {"job": "front"})]
        )
        prom.wait_for("up", lambda r: len(r) == 1 and r[0]["value"][1] == "1")
        with PrometheusSource(prom.url, backend="vllm") as source:
            idle = source.observe(1.0)
            assert idle.replicas == () and idle.gateway_queue == 0, source.last_errors
            codes: list[int] = []
            client = threading.Thread(target=_request, args=(emu.base_url, codes), daemon=True)
            client.start()
            deadline = time.monotonic() + 30
            while (obs := source.observe(2.0)).gateway_queue != 1:
                assert time.monotonic() < deadline, f"held request not read: {source.last_errors}"
                time.sleep(0.5)
            assert obs.replicas == () and "activator" not in source.last_errors
            assert compute_signals([obs]).get("queue_waiting") == 1.0
            emu.call(lambda server: server.emu.scale_to(1))  # the first replica serves it
            client.join(30)
            assert codes == [200]

        # a query nothing answers leaves the gateway unknown, never 0
        with PrometheusSource(prom.url, backend="vllm", activator_query="sum(no_such_gauge)") as quiet:
            assert quiet.observe(3.0).gateway_queue is None
