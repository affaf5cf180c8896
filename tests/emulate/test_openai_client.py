"""A client we did not write (the official `openai` package) against `llmscale emulate` in a subprocess.

The timing tests compare what the client measures with the simulator's own
prediction for the same request: an offline Fleet with the emulator's
settings, one request arriving at an idle replica. The fleet runs at
TIME_SCALE = 0.25, so wall latencies are 4x the simulated ones and the client's
figures are multiplied by 0.25 before comparing.

Tolerances, and why:
* A token can never reach the client before the simulator produced it: the
  client starts its clock before the server sees the request, so client TTFT
  >= simulated TTFT (2 ms allowance for clock rounding). This is the tight side.
* It can arrive late. To keep the request's own transit out of that, lateness is
  measured from the response headers (the server sends them right after the
  simulator admitted the request; the openai client returns the stream once
  they arrive): first token - headers <= predicted TTFT + LATE_WALL_S. What is
  left is one engine tick (10 ms) plus scheduling delays; on the shared 2-core
  test machine under a parallel build (load ~9) we have seen several hundred
  ms of those, so LATE_WALL_S = 0.5 s of wall time (0.125 s simulated).
* TPOT is a difference of two token times over n-1 = 47 gaps, so a common delay
  cancels; a delay of one end alone of 0.25 s wall moves it by 5.3 ms wall =
  1.3 ms simulated against ~12.5 ms predicted, ~11%; the test allows 20%.
"""

from __future__ import annotations

import json
import time

import httpx
import numpy as np
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from llmscale.emulate import EmulateConfig
from llmscale.emulate.engine import build_sim_config
from llmscale.metrics.names import DCGM, TTFT_BUCKETS_S
from llmscale.metrics.names import VllmMetric as V
from llmscale.perf import get_perf_model
from llmscale.sim.fleet import Fleet
from support.emulate_proc import ADMIN_TOKEN, TIME_SCALE, EmulateProcess

MODEL = "meta-llama/Meta-Llama-3-8B"
LATE_WALL_S = 0.5
TPOT_REL = 0.20
PROMPT_TOKENS = 2000
OUTPUT_TOKENS = 48
PROMPT = " ".join(["tok"] * PROMPT_TOKENS)  # 4 characters a token: the emulator counts 2000


def predict(input_tokens: int, output_tokens: int) -> tuple[float, float]:
    """The simulator's TTFT and TPOT (simulated s) for one request on an idle replica, CLI defaults."""
    cfg = EmulateConfig(replicas=1, port=0)
    fleet = Fleet(
        get_perf_model(cfg.model, cfg.gpu, cfg.tp),
        build_sim_config(cfg),
        np.array([0.0]),
        np.array([input_tokens]),
        np.array([output_tokens]),
        initial_replicas=1,
        gpus_per_replica=cfg.tp,
    )
    fleet.run_until(600.0)
    return fleet.ttft_s[0], fleet.tpot_s[0]


def client(ep: EmulateProcess) -> openai.OpenAI:
    """A client that has already made one request, so a timed request measures the server and not
    the client's lazy imports, connection set-up or the server's first-request paths."""
    c = openai.OpenAI(base_url=ep.base_url + "/v1", api_key="not-needed", max_retries=0, timeout=60.0)
    c.completions.create(model=MODEL, prompt="tok", max_tokens=1)
    c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "tok"}], max_tokens=1)
    return c


def check_timing(
    t_sent: float, t_headers: float, token_times: list[float], prompt_tokens: int = PROMPT_TOKENS
) -> None:
    sim_ttft, sim_tpot = predict(prompt_tokens, OUTPUT_TOKENS)
    ttft = (token_times[0] - t_sent) * TIME_SCALE
    ttft_after_headers = (token_times[0] - t_headers) * TIME_SCALE
    tpot = (token_times[-1] - token_times[0]) / (len(token_times) - 1) * TIME_SCALE
    assert ttft >= sim_ttft - 0.002, (ttft, sim_ttft)
    assert ttft_after_headers <= sim_ttft + LATE_WALL_S * TIME_SCALE, (ttft_after_headers, sim_ttft)
    assert tpot == pytest.approx(sim_tpot, rel=TPOT_REL), (tpot, sim_tpot)


def test_openai_client_streams_a_completion_at_the_simulators_pace(emulate_slow: EmulateProcess) -> None:
    create = client(emulate_slow).completions.create
    t_sent = time.monotonic()
    stream = create(
        model=MODEL,
        prompt=PROMPT,
        max_tokens=OUTPUT_TOKENS,
        stream=True,
        stream_options={"include_usage": True},
    )
    t_headers = time.monotonic()
    times, text, usage, finish = [], "", None, None
    for chunk in stream:
        if chunk.choices and chunk.choices[0].text:
            times.append(time.monotonic())
            text += chunk.choices[0].text
            finish = chunk.choices[0].finish_reason or finish
        if chunk.usage is not None:
            usage = chunk.usage
    assert usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens) == (PROMPT_TOKENS, OUTPUT_TOKENS)
    assert len(times) == OUTPUT_TOKENS and finish == "length" and text.strip()
    check_timing(t_sent, t_headers, times)


def test_openai_client_streams_a_chat_completion_at_the_simulators_pace(emulate_slow: EmulateProcess) -> None:
    create = client(emulate_slow).chat.completions.create
    t_sent = time.monotonic()
    stream = create(
        model=MODEL,
        messages=[{"role": "user", "content": PROMPT}],
        max_tokens=OUTPUT_TOKENS,
        stream=True,
        stream_options={"include_usage": True},
    )
    t_headers = time.monotonic()
    times, roles, usage = [], set(), None
    for chunk in stream:
        if chunk.choices:
            delta = chunk.choices[0].delta
            if delta.role:
                roles.add(delta.role)
            if delta.content:
                times.append(time.monotonic())
        if chunk.usage is not None:
            usage = chunk.usage
    assert roles == {"assistant"}
    assert usage is not None and usage.completion_tokens == OUTPUT_TOKENS
    # the chat template's tokens too: <|begin_of_text|>, the user's header and <|eot_id|>, the
    # assistant's header (emulate/tokens.py)
    assert usage.prompt_tokens == PROMPT_TOKENS + 10
    assert len(times) == OUTPUT_TOKENS
    check_timing(t_sent, t_headers, times, usage.prompt_tokens)


def test_openai_client_non_streaming_answers_carry_usage(emulate_slow: EmulateProcess) -> None:
    c = client(emulate_slow)
    done = c.completions.create(model=MODEL, prompt="tok tok tok", max_tokens=5)
    assert done.object == "text_completion"
    assert done.choices[0].finish_reason == "length" and done.choices[0].text
    assert done.usage is not None and (done.usage.prompt_tokens, done.usage.completion_tokens) == (3, 5)
    chat = c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "tok tok"}])
    assert chat.choices[0].message.role == "assistant" and chat.choices[0].message.content
    assert chat.usage is not None and chat.usage.completion_tokens == 8  # the --default-max-tokens


def test_models_health_and_refusals(emulate_slow: EmulateProcess) -> None:
    c = client(emulate_slow)
    assert [m.id for m in c.models.list().data] == [MODEL]
    with pytest.raises(openai.NotFoundError):
        c.completions.create(model="no-such-model", prompt="tok", max_tokens=1)
    with pytest.raises(openai.BadRequestError, match="maximum context length"):
        c.completions.create(model=MODEL, prompt=" ".join(["tok"] * 8190), max_tokens=100)
    with httpx.Client(timeout=10.0) as http:
        assert http.get(emulate_slow.base_url + "/health").status_code == 200
        for url in emulate_slow.replica_urls.values():
            assert http.get(url + "/health").status_code == 200


def test_replica_metrics_parse_with_vllm_and_dcgm_names(emulate_slow: EmulateProcess) -> None:
    c = client(emulate_slow)
    c.completions.create(model=MODEL, prompt="tok tok tok tok", max_tokens=4)  # at least one request seen
    (url,) = emulate_slow.replica_urls.values()
    with httpx.Client(timeout=10.0) as http:
        resp = http.get(url + "/metrics")
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(resp.text)}
    # the default release's names (0.11: the names deprecated in 0.9 are gone; test_vllm_versions.py
    # checks both releases' pages)
    for name in (V.RUNNING, V.WAITING, V.KV_USAGE):
        assert families[name].type == "gauge"
        assert families[name].samples[0].labels["model_name"] == MODEL
    # the parser names counters without `_total`; their samples keep it
    gen = families[V.GENERATION_TOKENS.removesuffix("_total")]
    assert gen.type == "counter" and gen.samples[0].name == V.GENERATION_TOKENS
    assert gen.samples[0].value >= 4
    ttft = families[V.TTFT]
    assert ttft.type == "histogram"
    les = [s.labels["le"] for s in ttft.samples if s.name.endswith("_bucket")]
    assert [float(x) for x in les] == [*TTFT_BUCKETS_S, float("inf")]
    count = next(s.value for s in ttft.samples if s.name.endswith("_count"))
    assert count >= 1
    for name in (V.E2E, V.ITL, V.TPOT, V.QUEUE_TIME):
        assert families[name].type == "histogram"
    for name in (DCGM.GPU_UTIL, DCGM.MEM_COPY_UTIL, DCGM.FB_USED, DCGM.SM_ACTIVE, DCGM.DRAM_ACTIVE):
        sample = families[name].samples[0]
        assert sample.labels["gpu"] == "0"
        assert sample.value >= 0.0
    assert 0.0 <= families[DCGM.GPU_UTIL].samples[0].value <= 100.0


def test_admin_document_lists_the_replica_with_its_port(emulate_slow: EmulateProcess) -> None:
    with httpx.Client(timeout=10.0, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}) as http:
        doc = http.get(emulate_slow.base_url + "/admin/replicas").json()
        targets = http.get(emulate_slow.base_url + "/admin/targets").json()
    (replica,) = doc["replicas"]
    assert doc["spec_replicas"] == 1 and replica["phase"] == "ready"
    assert emulate_slow.replica_urls[replica["name"]].endswith(f":{replica['port']}")
    assert targets == [
        {"targets": [f"127.0.0.1:{replica['port']}"], "labels": {"pod": replica["name"], "phase": "ready"}}
    ]
    json.dumps(doc)  # plain JSON types only
