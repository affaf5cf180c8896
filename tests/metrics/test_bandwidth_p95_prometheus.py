"""The README's live recipe for seed 004's bandwidth P95, run for real: Prometheus scrapes an emulated
replica every 100 ms and ``quantile_over_time(0.95, DCGM_FI_PROF_DRAM_ACTIVE[60s])`` agrees with the
P95 the replica's page computes from its own 100 ms samples (``llmscale:dram_active_p95_60s``).

A scrape of an emulated page averages the DCGM gauges over the time since the previous scrape, as
dcgm-exporter's profiling fields average over its collection interval (``-c 100``): scraped every
100 ms, each stored sample is one 100 ms reading, which is what the recipe asks of dcgm-exporter.
"""

from __future__ import annotations

import time

import openai
import pytest
from support.prometheus_server import TargetGroup

from llmscale.emulate import EmulateConfig, EmulatorThread
from llmscale.metrics.names import DCGM, DERIVED
from llmscale.metrics.prometheus import PrometheusSource
from llmscale.metrics.promql import default_queries, with_overrides
from llmscale.signals.gpu import bw_saturation_p95
from llmscale.signals.window import FleetWindow

MODEL = "meta-llama/Meta-Llama-3-8B"
TOKENS = 600  # ~5 s of decoding one sequence at ~8 ms a step, real time
WAIT_S = 30.0
QUERY = f"max by (pod) (quantile_over_time(0.95, {DCGM.DRAM_ACTIVE}[60s]))"


def test_prometheus_quantile_over_100ms_scrapes_matches_the_pages_p95(prometheus_server):
    with EmulatorThread(EmulateConfig(replicas=1, port=0)) as emu:
        ((name, port),) = emu.call(lambda: emu.server.replica_ports()).items()
        prom = prometheus_server(
            scrape_interval_s=0.1, static_targets=[TargetGroup([f"127.0.0.1:{port}"], {"pod": name})]
        )
        prom.wait_for("up", lambda r: len(r) == 1 and r[0]["value"][1] == "1")
        client = openai.OpenAI(base_url=emu.base_url + "/v1", api_key="x", max_retries=0, timeout=60.0)
        stream = client.completions.create(model=MODEL, prompt="tok " * 200, max_tokens=TOKENS, stream=True)
        assert sum(1 for c in stream if c.choices and c.choices[0].text) == TOKENS
        # the last second of decoding is stored once Prometheus has scraped past it
        deadline = time.monotonic() + WAIT_S
        while True:
            samples = prom.query(f"count_over_time({DCGM.DRAM_ACTIVE}[60s])")
            busy = prom.query(f"count_over_time(({DCGM.DRAM_ACTIVE} > 0)[60s:100ms])")
            if samples and busy and float(busy[0]["value"][1]) >= 30:
                break
            assert time.monotonic() < deadline, "Prometheus stored no stretch of decoding"
            time.sleep(0.2)
        # a P95 of whatever share of the minute was busy: with >= 5 % busy it is a busy reading
        from_prometheus = float(prom.query(QUERY)[0]["value"][1])
        from_page = float(prom.query(DERIVED.DRAM_ACTIVE_P95_60S)[0]["value"][1])
        n = float(samples[0]["value"][1])
        assert n > 50, n  # ~10 a second since the target came up
        assert from_prometheus == pytest.approx(from_page, rel=0.05)
        assert 0.3 < from_page < 0.8  # a decode step of Llama-3-8B on an H100 reads ~0.57

        # the controller, given the recipe's query, reads the P95 as each replica's own
        base = default_queries("vllm", replica_label="pod", selector="")
        queries = with_overrides(base, values={DERIVED.DRAM_ACTIVE_P95_60S: QUERY})
        with PrometheusSource(prom.url, backend="vllm", queries=queries) as source:
            obs = source.observe(time.time())
        (sample,) = obs.replicas
        assert sample.values[DERIVED.DRAM_ACTIVE_P95_60S] == pytest.approx(from_prometheus, rel=0.05)
        bw = bw_saturation_p95(FleetWindow.build([obs]))
        assert bw.value == pytest.approx(from_prometheus, rel=0.05)
        assert "each its exporter's" in bw.note
