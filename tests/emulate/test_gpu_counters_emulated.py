"""An emulated replica's DCGM fields, scraped over HTTP, mean what the simulator's mean.

`llmscale emulate` runs in a subprocess; the official `openai` client keeps one long
completion streaming. Each scrape of a replica's /metrics averages the DCGM gauges over
the time since the previous scrape, so a scrape taken once the stream has begun and one
taken ~300 tokens later bracket a window with the request in flight throughout.
The emulated readings are compared with the simulator's for the same step, computed
offline from the performance model with :func:`llmscale.sim.gpu_counters.gpu_counters`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from llmscale.emulate import EmulateConfig
from llmscale.metrics.names import DCGM, DERIVED
from llmscale.metrics.names import VllmMetric as V
from llmscale.perf import get_perf_model
from llmscale.sim.gpu_counters import GpuCounterSpec, gpu_counters
from support.emulate_proc import EmulateProcess, start_emulate, stop_emulate

MODEL = "meta-llama/Meta-Llama-3-8B"
TIME_SCALE = 2.0  # simulated seconds per wall second: a 400-token answer streams in ~1.6 s
PROMPT_TOKENS = 2000
FIRST_SCRAPE_AT, LAST_SCRAPE_AT, MAX_TOKENS = 20, 320, 400
DRAIN_TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def emulate() -> Iterator[EmulateProcess]:
    ep = start_emulate("--replicas", "1", "--time-scale", str(TIME_SCALE))
    try:
        yield ep
    finally:
        stop_emulate(ep.proc)


def scrape(http: httpx.Client, url: str) -> dict[str, float]:
    """One replica page as {family name: first sample's value} (counters under their family name)."""
    resp = http.get(url + "/metrics")
    resp.raise_for_status()
    return {f.name: f.samples[0].value for f in text_string_to_metric_families(resp.text) if f.samples}


def predicted(context_tokens: int) -> dict[str, float]:
    """The simulator's readings for a replica decoding one sequence of ``context_tokens`` back to back."""
    cfg = EmulateConfig(replicas=1, port=0)
    perf = get_perf_model(cfg.model, cfg.gpu, cfg.tp)
    c = perf.step(0, 0.0, 0, 1, context_tokens)
    g = gpu_counters(GpuCounterSpec.from_perf(perf), c.duration_s, c.duration_s, c.sm_busy_s, c.dram_bytes)
    return {
        DCGM.SM_ACTIVE: g.sm_active,
        DCGM.SM_OCCUPANCY: g.sm_occupancy,
        DCGM.TENSOR_ACTIVE: g.tensor_active,
        DCGM.DRAM_ACTIVE: g.dram_active,
        DCGM.MEM_COPY_UTIL: g.mem_copy_util_pct,
    }


def test_idle_then_streaming_replica_reads_like_the_simulator(emulate: EmulateProcess) -> None:
    (url,) = emulate.replica_urls.values()
    with httpx.Client(timeout=10.0) as http:
        # Idle: wait (bounded) for a page with nothing running or waiting; the next page's window
        # then holds no request, since this test sends none before it.
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        while True:
            page = scrape(http, url)
            if page[V.RUNNING] == 0.0 and page[V.WAITING] == 0.0:
                break
            assert time.monotonic() < deadline, "the emulated replica never went idle"
            time.sleep(0.1)
        idle = scrape(http, url)
        for name in (DCGM.GPU_UTIL, DCGM.MEM_COPY_UTIL, DCGM.GR_ENGINE_ACTIVE, DCGM.SM_ACTIVE):
            assert idle[name] == 0.0, name
        for name in (DCGM.SM_OCCUPANCY, DCGM.TENSOR_ACTIVE, DCGM.DRAM_ACTIVE):
            assert idle[name] == 0.0, name
        assert idle[DCGM.FB_USED] > 0.0

        # Steady: one request in flight from the first scrape to the last.
        c = openai.OpenAI(
            base_url=emulate.base_url + "/v1", api_key="not-needed", max_retries=0, timeout=60.0
        )
        stream = c.completions.create(
            model=MODEL, prompt=" ".join(["tok"] * PROMPT_TOKENS), max_tokens=MAX_TOKENS, stream=True
        )
        tokens = 0
        pages: list[dict[str, float]] = []
        for chunk in stream:
            if chunk.choices and chunk.choices[0].text:
                tokens += 1
                if tokens in (FIRST_SCRAPE_AT, LAST_SCRAPE_AT):
                    pages.append(scrape(http, url))
        assert tokens == MAX_TOKENS
    first, busy = pages
    # the request was running at both scrapes and nothing else was sent
    assert first[V.RUNNING] == busy[V.RUNNING] == 1.0
    assert busy[DCGM.GPU_UTIL] >= 90.0 and busy[DCGM.GR_ENGINE_ACTIVE] >= 0.9
    # the same decode step, offline, at the window's middle context
    expect = predicted(PROMPT_TOKENS + (FIRST_SCRAPE_AT + LAST_SCRAPE_AT) // 2)
    for name, value in expect.items():
        # the window's edges cut at most an 8 ms step of a ~2.4 s simulated window each
        assert busy[name] == pytest.approx(value, rel=0.05), name
    # what the replica did: streamed weights (SMs waiting on HBM), little math, while "busy"
    assert busy[DCGM.TENSOR_ACTIVE] < 0.01 < busy[DCGM.SM_ACTIVE] < busy[DCGM.GPU_UTIL] / 100.0


LONG_TOKENS, P95_SCRAPE_AT = 1500, 1400


def test_the_page_carries_seed_004s_bandwidth_p95_of_100ms_samples(emulate: EmulateProcess) -> None:
    """``llmscale:dram_active_p95_60s``: the P95 over the last 60 s of 100 ms DRAM_ACTIVE samples.

    One sequence decoding back to back from token 1 to 1,400 (~11 s of the replica's time at
    ~8 ms a step) fills 110 of the 600 samples of the minute with that step's reading (0.57
    at a 2,000-token context on an H100), so the P95 (position 569 of 600, among the busiest
    30) is that reading; a mean over the minute would be ~0.1, a scrape-long average anything
    between. The simulator's offline prediction for the step is the reference, as above.
    """
    (url,) = emulate.replica_urls.values()
    c = openai.OpenAI(base_url=emulate.base_url + "/v1", api_key="not-needed", max_retries=0, timeout=60.0)
    with httpx.Client(timeout=10.0) as http:
        stream = c.completions.create(
            model=MODEL, prompt=" ".join(["tok"] * PROMPT_TOKENS), max_tokens=LONG_TOKENS, stream=True
        )
        tokens = 0
        page: dict[str, float] = {}
        for chunk in stream:
            if chunk.choices and chunk.choices[0].text:
                tokens += 1
                if tokens == P95_SCRAPE_AT:
                    page = scrape(http, url)
        assert tokens == LONG_TOKENS
    p95 = page[DERIVED.DRAM_ACTIVE_P95_60S]
    expect = predicted(PROMPT_TOKENS + P95_SCRAPE_AT // 2)[DCGM.DRAM_ACTIVE]
    assert p95 == pytest.approx(expect, rel=0.05)
