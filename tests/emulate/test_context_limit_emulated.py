"""The emulator's length check against the official `openai` client, as vLLM answers it.

vLLM's OpenAI server serves a request whose prompt tokens + max_tokens equal
max_model_len and answers HTTP 400 one token beyond ("This model's maximum
context length is 8192 tokens. However, you requested 8193 tokens ..."). The
400 comes before the engine, so none of vLLM's metrics counts the request:
an autoscaler reading them never sees it, in the emulator as with vLLM.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from llmscale.backtest.context_check import fleet_limit
from llmscale.emulate import EmulateConfig
from llmscale.emulate.engine import build_sim_config
from llmscale.perf.catalogue import get_model
from support.emulate_proc import EmulateProcess, start_emulate, stop_emulate

#: Simulated seconds per wall second: the prefill of 8,188 tokens (~0.5 s simulated) takes ~0.1 s.
FAST = "4.0"


@pytest.fixture(scope="module")
def emulate_llama3() -> Iterator[EmulateProcess]:
    ep = start_emulate("--replicas", "1", "--time-scale", FAST)
    try:
        yield ep
    finally:
        stop_emulate(ep.proc)


def _client(ep: EmulateProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=ep.base_url + "/v1", api_key="not-needed", max_retries=0, timeout=60.0)


def _prompt(tokens: int) -> str:
    return " ".join(["tok"] * tokens)  # 4 characters a token: the emulator counts exactly `tokens`


def _vllm_samples(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every ``vllm:`` sample of a replica's /metrics page (counters, gauges, histogram buckets)."""
    with httpx.Client(timeout=10.0) as http:
        text = http.get(url + "/metrics").text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        if family.name.startswith("vllm:")
        for s in family.samples
    }


def test_prompt_plus_max_tokens_up_to_the_context_is_served_one_more_is_a_400(
    emulate_llama3: EmulateProcess,
) -> None:
    context = get_model("llama-3-8b").max_context_tokens
    c = _client(emulate_llama3)
    model = c.models.list().data[0]
    assert model.model_extra is not None and model.model_extra["max_model_len"] == context
    done = c.completions.create(model=model.id, prompt=_prompt(context - 4), max_tokens=4)
    assert done.usage is not None and (done.usage.prompt_tokens, done.usage.completion_tokens) == (
        context - 4,
        4,
    )
    with pytest.raises(openai.BadRequestError) as err:
        c.completions.create(model=model.id, prompt=_prompt(context - 4), max_tokens=5)
    assert err.value.status_code == 400
    assert f"maximum context length is {context} tokens" in str(err.value)
    assert f"you requested {context + 1} tokens ({context - 4} in the messages, 5 in the completion)" in str(
        err.value
    )


def test_a_rejected_request_moves_no_vllm_metric(emulate_llama3: EmulateProcess) -> None:
    c = _client(emulate_llama3)
    model = c.models.list().data[0].id
    c.completions.create(model=model, prompt=_prompt(100), max_tokens=4)  # done: the replica is idle again
    (url,) = emulate_llama3.replica_urls.values()
    before = _vllm_samples(url)
    assert before[("vllm:prompt_tokens_total", (("engine", "0"), ("model_name", model)))] >= 100
    for _ in range(3):
        with pytest.raises(openai.BadRequestError):
            c.completions.create(model=model, prompt=_prompt(9000), max_tokens=16)
        with pytest.raises(openai.BadRequestError):
            c.chat.completions.create(
                model=model, messages=[{"role": "user", "content": _prompt(8000)}], max_tokens=500
            )
    after = _vllm_samples(url)
    assert after == before


def test_a_replica_whose_kv_cache_is_shorter_than_the_context_names_what_it_admits() -> None:
    # Llama-3.1-70B on two H100s: a 131,072-token context, but the KV pool left after the weights
    # is far smaller. vLLM would not start so; it runs with --max-model-len lowered to what fits,
    # and /v1/models and the 400 say that number, not the model's context.
    ep = start_emulate("--replicas", "1", "--time-scale", FAST, "--model", "llama-3.1-70b", "--tp", "2")
    try:
        cfg = EmulateConfig(model="llama-3.1-70b", tp=2)
        limit = fleet_limit(cfg.model, cfg.gpu, cfg.tp, build_sim_config(cfg)).admitted_tokens
        assert limit < get_model("llama-3.1-70b").max_context_tokens
        c = _client(ep)
        model = c.models.list().data[0]
        assert model.model_extra is not None and model.model_extra["max_model_len"] == limit
        with pytest.raises(openai.BadRequestError, match=f"maximum context length is {limit} tokens"):
            c.completions.create(model=model.id, prompt=_prompt(limit - 4), max_tokens=5)
    finally:
        stop_emulate(ep.proc)
