"""Seed 004's queue entropy live, at its own resolution: 30 one-second queue lengths.

A real Prometheus scrapes an emulated replica every second while a burst of requests queues on
it (``max_num_seqs`` 2, eight streams); the controller's Prometheus source, with
``queue_per_s``, reads the fleet's waiting queue once a second between ticks with one range
query, and ``queue_entropy`` is computed over those seconds instead of one value per tick.
"""

from __future__ import annotations

import threading
import time

import httpx
import openai

from llmscale.emulate import EmulateConfig, EmulatorThread
from llmscale.metrics.prometheus import PrometheusSource
from llmscale.signals.gpu import normalized_entropy, queue_entropy
from llmscale.signals.window import FleetWindow
from support.prometheus_server import TargetGroup
from support.wait import wait_for

MODEL = "meta-llama/Meta-Llama-3-8B"
STREAMS = 8  # on 2 batch slots: 6 wait, then 4, 2, 0 as each pair finishes
TOKENS = 250  # ~2 s of decoding a pair at ~8 ms a step, real time


def _stream(base_url: str) -> None:
    client = openai.OpenAI(base_url=base_url + "/v1", api_key="x", max_retries=0, timeout=60.0)
    stream = client.completions.create(model=MODEL, prompt="tok " * 50, max_tokens=TOKENS, stream=True)
    for _ in stream:
        pass


def test_the_source_reads_the_waiting_queue_each_second_between_ticks(prometheus_server):
    with EmulatorThread(EmulateConfig(replicas=1, port=0, max_num_seqs=2)) as emu:
        ((name, port),) = emu.call(lambda server: server.replica_ports()).items()
        prom = prometheus_server(
            scrape_interval_s=1.0, static_targets=[TargetGroup([f"127.0.0.1:{port}"], {"pod": name})]
        )
        prom.wait_for("up", lambda r: len(r) == 1 and r[0]["value"][1] == "1")
        with PrometheusSource(prom.url, backend="vllm", queue_per_s=True) as source:
            threads = [threading.Thread(target=_stream, args=(emu.base_url,)) for _ in range(STREAMS)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=120)
            assert not any(t.is_alive() for t in threads)

            # Prometheus stores a queue that rose and fell: wait (bounded) for its scrapes to show
            # it, and for three scrapes of the empty queue after the burst (1 s apart: [3s])
            def stored(query: str) -> float:
                return float(prom.query(query)[0]["value"][1])

            wait_for(
                "Prometheus to store the queue",
                lambda: stored("max_over_time(vllm:num_requests_waiting[60s])") >= 2,
                30.0,
                every_s=0.5,
            )
            wait_for(
                "scrapes of the empty queue after the burst",
                lambda: stored("max_over_time(vllm:num_requests_waiting[3s])") == 0,
                30.0,
                every_s=0.5,
            )
            first = source.observe(time.time())
            assert "queue_per_s" not in source.last_errors, source.last_errors
            q = first.queue_per_s
            assert q is not None and q.period_s == 1.0 and q.end_s == first.time_s
            # the same seconds as Prometheus' own range query of the summed queue
            at = source._queue_until
            assert at is not None
            n = len(q.values)
            r = httpx.get(
                prom.url + "/api/v1/query_range",
                params={"query": source.queue_query, "start": at - (n - 1), "end": at, "step": 1},
            ).json()
            direct = [float(v) for _, v in r["data"]["result"][0]["values"]]
            assert list(q.values) == direct
            assert 5 <= n <= 30 and max(q.values) >= 2 and q.values[-1] == 0.0

            ent = queue_entropy(FleetWindow.build([first]))
            assert ent.value == normalized_entropy(q.values)
            assert f"{n} one-second sample(s)" in ent.note

            # the next tick reads only the seconds since this one: nothing counted twice. It comes
            # once Prometheus holds two scrapes newer than the first tick.
            wait_for(
                "two scrapes after the first tick",
                lambda: stored("timestamp(vllm:num_requests_waiting)") >= first.time_s + 2.0,
                30.0,
                every_s=0.2,
            )
            second = source.observe(time.time())
            assert second.queue_per_s is not None and 2 <= len(second.queue_per_s.values) <= 5


def test_the_config_switch_reaches_the_source():
    from llmscale.config import parse_config
    from llmscale.wiring import _prometheus_source

    doc = {
        "target": {"namespace": "llm", "name": "llama", "selector": {"app": "llama"}},
        "metrics": {"source": "prometheus", "prometheus": {"url": "http://127.0.0.1:9", "queue_per_s": True}},
        "policy": {"name": "static", "params": {"replicas": 3}},
    }
    source = _prometheus_source(parse_config(doc, source="llmscale.yaml"))
    try:
        assert isinstance(source, PrometheusSource)
        assert source.queue_query == 'sum(sum by (pod) (vllm:num_requests_waiting{namespace="llm"}))'
    finally:
        source.close()
    doc["metrics"]["prometheus"]["queue_per_s"] = False
    off = _prometheus_source(parse_config(doc, source="llmscale.yaml"))
    try:
        assert off.queue_query is None  # type: ignore[attr-defined]
    finally:
        off.close()
