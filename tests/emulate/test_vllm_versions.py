"""``llmscale emulate --vllm-version``: two vLLM releases' shapes, against the official `openai` client.

A real emulated fleet on 127.0.0.1 (an in-process server on its own thread and event loop) for each
release the emulator plays: 0.10.0 (the flat error body, the names deprecated in 0.9 still on the
page) and 0.11.0 (the nested error body, current names only). Also what both share: ``n > 1``,
log-probabilities, ``/version``, ``/tokenize`` and ``/detokenize``, the chat template's tokens,
``tools`` refused as vLLM without a tool-call parser refuses them, and the per-request series
(prefix cache, phase times, request parameters) with vLLM's names, types and buckets.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from llmscale.emulate import EmulateConfig, EmulatorThread
from llmscale.emulate.tokens import BUILTIN_TOKENIZER_DIR
from llmscale.errors import ConfigError
from llmscale.metrics.names import (
    REQUEST_LATENCY_BUCKETS_S,
    REQUEST_PARAMS_N_BUCKETS,
    SIM,
    vllm_1_2_5_buckets,
)
from llmscale.metrics.names import VllmMetric as V

MODEL = "meta-llama/Meta-Llama-3-8B"
VERSIONS = ("0.10.0", "0.11.0")
#: (name on the page, in 0.10.0, in 0.11.0)
RENAMED = (
    (V.KV_USAGE, True, True),
    (V.KV_USAGE_OLD, True, False),
    (V.ITL_OLD, True, False),
    (V.ITL, False, True),
    (V.TPOT, False, True),
    (V.PREFIX_CACHE_QUERIES, True, True),
    (V.PREFIX_CACHE_HITS, True, True),
    (V.PREFIX_CACHE_QUERIES_OLD, True, False),
    (V.PREFIX_CACHE_HITS_OLD, True, False),
)


@pytest.fixture(scope="module", params=VERSIONS)
def fleet(request: pytest.FixtureRequest) -> Iterator[EmulatorThread]:
    cfg = EmulateConfig(replicas=1, port=0, time_scale=4.0, vllm_version=request.param)
    with EmulatorThread(cfg) as t:
        yield t


@pytest.fixture(scope="module")
def tokenized() -> Iterator[EmulatorThread]:
    with EmulatorThread(EmulateConfig(replicas=1, port=0, time_scale=4.0, tokenizer="builtin")) as t:
        yield t


def client(fleet: EmulatorThread) -> openai.OpenAI:
    return openai.OpenAI(base_url=fleet.base_url + "/v1", api_key="unused", max_retries=0, timeout=60.0)


def families(fleet: EmulatorThread) -> dict[str, Any]:
    (port,) = fleet.call(lambda s: s.replica_ports()).values()
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10.0).text
    return {f.name: f for f in text_string_to_metric_families(text)}


def sample(family: Any, suffix: str) -> float:
    return float(next(s.value for s in family.samples if s.name.endswith(suffix)))


def buckets(family: Any) -> list[float]:
    return [float(s.labels["le"]) for s in family.samples if s.name.endswith("_bucket")]


# ------------------------------------------------------------------------------- per release


def test_error_body_is_the_releases(fleet: EmulatorThread) -> None:
    """0.10.1 nested vLLM's error body; before it the fields sat at the top with object "error". The
    client raises the same NotFoundError for both (it goes by the status)."""
    version = fleet.cfg.vllm_version
    resp = httpx.post(fleet.base_url + "/v1/completions", json={"model": "nope", "prompt": "x"}, timeout=10)
    body = resp.json()
    assert resp.status_code == 404
    if version == "0.10.0":
        assert body["object"] == "error" and "error" not in body
        assert (body["type"], body["code"], body["param"]) == ("NotFoundError", 404, "model")
        assert "does not exist" in body["message"]
    else:
        assert set(body) == {"error"}
        assert (body["error"]["type"], body["error"]["code"]) == ("NotFoundError", 404)
    with pytest.raises(openai.NotFoundError):
        client(fleet).completions.create(model="nope", prompt="x", max_tokens=1)
    assert httpx.get(fleet.base_url + "/version", timeout=10).json() == {"version": version}


def test_the_page_carries_the_releases_names(fleet: EmulatorThread) -> None:
    client(fleet).completions.create(model=MODEL, prompt="tok tok", max_tokens=2)
    page = families(fleet)
    column = VERSIONS.index(fleet.cfg.vllm_version)
    for name, *present in RENAMED:
        family = name.removesuffix("_total")
        assert (family in page) == present[column], (fleet.cfg.vllm_version, name)
    # a gauge, named as one (it was llmscale_sim:kv_blocks_total)
    assert page[SIM.KV_BLOCKS].type == "gauge" and sample(page[SIM.KV_BLOCKS], "") > 0


# ------------------------------------------------------------------------------- both releases


def test_n_choices_each_a_simulated_request(fleet: EmulatorThread) -> None:
    c = client(fleet)
    before = families(fleet)
    done = c.completions.create(model=MODEL, prompt="tok tok tok", max_tokens=4, n=3)
    assert sorted(ch.index for ch in done.choices) == [0, 1, 2]
    assert all(ch.text == done.choices[0].text and ch.finish_reason == "length" for ch in done.choices)
    assert done.usage is not None and (done.usage.prompt_tokens, done.usage.completion_tokens) == (3, 12)
    stream = c.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=3, n=2, stream=True,
        stream_options={"include_usage": True},
    )  # fmt: skip
    text: dict[int, str] = {0: "", 1: ""}
    usage = None
    for chunk in stream:
        for ch in chunk.choices:
            text[ch.index] += ch.delta.content or ""
        usage = chunk.usage or usage
    assert text[0] == text[1] == " the quick brown"
    assert usage is not None and usage.completion_tokens == 6
    after = families(fleet)
    # 5 sequences ended, 2 requests: generation tokens counted per sequence, n once per request
    gen = V.GENERATION_TOKENS.removesuffix("_total")
    assert sample(after[gen], "_total") - sample(before[gen], "_total") == 12 + 6
    n_hist = after[V.PARAMS_N]
    assert buckets(n_hist) == [*map(float, REQUEST_PARAMS_N_BUCKETS), math.inf]
    assert sample(n_hist, "_count") - sample(before[V.PARAMS_N], "_count") == 2
    assert sample(n_hist, "_sum") - sample(before[V.PARAMS_N], "_sum") == 3 + 2


def test_logprobs_in_the_completions_and_chat_shapes(fleet: EmulatorThread) -> None:
    c = client(fleet)
    done = c.completions.create(model=MODEL, prompt="tok", max_tokens=5, logprobs=2)
    lp = done.choices[0].logprobs
    assert lp is not None and lp.tokens == [" the", " quick", " brown", " fox", " jumps"]
    assert lp.text_offset == [0, 4, 10, 16, 20]
    assert lp.token_logprobs is not None and all(-1.0 < v < 0.0 for v in lp.token_logprobs)
    assert lp.top_logprobs is not None and all(len(top) == 2 for top in lp.top_logprobs)
    chat = c.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=4, logprobs=True, top_logprobs=3
    )
    content = chat.choices[0].logprobs.content  # type: ignore[union-attr]
    assert content is not None and [t.token for t in content] == [" the", " quick", " brown", " fox"]
    for t in content:
        assert len(t.top_logprobs) == 3 and t.top_logprobs[0].logprob == t.logprob
        assert sum(math.exp(x.logprob) for x in t.top_logprobs) < 1.0
    streamed = [
        chunk.choices[0].logprobs
        for chunk in c.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=3,
            logprobs=True,
            stream=True,
        )
        if chunk.choices
    ]
    assert [len(x.content or []) for x in streamed if x is not None] == [1, 1, 1]


def test_chat_counts_the_template_and_tools_are_refused_as_vllm_does(fleet: EmulatorThread) -> None:
    """Chat "hi" is 11 prompt tokens, as vLLM serving Llama-3 counts it: <|begin_of_text|>, the user's
    header (4) and <|eot_id|> around "hi", the assistant's header (4)."""
    c = client(fleet)
    chat = c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=1)
    assert chat.usage is not None and chat.usage.prompt_tokens == 11
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    with pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "hi"}],
            tools=[tool],
            max_tokens=1,  # type: ignore[list-item]
        )
    assert "--enable-auto-tool-choice" in str(e.value)  # the message, from either body
    served = c.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], tools=[tool], tool_choice="none",  # type: ignore[list-item]
        max_tokens=1,
    )  # fmt: skip
    assert served.choices[0].message.tool_calls is None


def test_phase_times_and_parameters_on_the_page(fleet: EmulatorThread) -> None:
    c = client(fleet)
    before = families(fleet)
    c.completions.create(model=MODEL, prompt="tok " * 40, max_tokens=6)
    after = families(fleet)

    def delta(name: str, suffix: str) -> float:
        return sample(after[name], suffix) - sample(before[name], suffix)

    for name in (V.PREFILL_TIME, V.DECODE_TIME, V.INFERENCE_TIME):
        assert after[name].type == "histogram"
        assert buckets(after[name]) == [*REQUEST_LATENCY_BUCKETS_S, math.inf]
        assert delta(name, "_count") == 1
    prefill, decode = delta(V.PREFILL_TIME, "_sum"), delta(V.DECODE_TIME, "_sum")
    assert prefill > 0 and decode > 0
    assert delta(V.INFERENCE_TIME, "_sum") == pytest.approx(prefill + decode, abs=1e-9)
    max_len = fleet.call(lambda s: s.emu.max_model_len)
    assert buckets(after[V.PARAMS_MAX_TOKENS]) == [*map(float, vllm_1_2_5_buckets(max_len)), math.inf]
    assert delta(V.PARAMS_MAX_TOKENS, "_sum") == 6
    queries = V.PREFIX_CACHE_QUERIES.removesuffix("_total")
    hits = V.PREFIX_CACHE_HITS.removesuffix("_total")
    assert after[queries].type == "counter" and delta(queries, "_total") == 40  # no prefix caching:
    assert sample(after[hits], "_total") == 0  # every lookup misses


def test_tokenize_needs_token_ids(fleet: EmulatorThread) -> None:
    resp = httpx.post(fleet.base_url + "/tokenize", json={"prompt": "hi"}, timeout=10)
    assert resp.status_code == 400 and "--tokenizer" in resp.text


# ------------------------------------------------------------------------------- the shipped tokenizer


def test_the_builtin_tokenizer_counts_tokenizes_and_detokenizes(tokenized: EmulatorThread) -> None:
    c = client(tokenized)
    done = c.completions.create(model=MODEL, prompt="hi", max_tokens=1)
    assert done.usage is not None and done.usage.prompt_tokens == 2  # <|begin_of_text|> hi
    http = httpx.Client(base_url=tokenized.base_url, timeout=10)
    tok = http.post("/tokenize", json={"prompt": "hi", "return_token_strs": True}).json()
    assert tok["count"] == 2 and tok["token_strs"] == ["<|begin_of_text|>", "hi"]
    assert tok["max_model_len"] == tokenized.call(lambda s: s.emu.max_model_len)
    assert http.post("/detokenize", json={"tokens": tok["tokens"]}).json() == {
        "prompt": "<|begin_of_text|>hi"
    }
    messages = [{"role": "user", "content": "hi"}]
    chat = c.chat.completions.create(model=MODEL, messages=messages, max_tokens=1)  # type: ignore[arg-type]
    counted = http.post("/tokenize", json={"messages": messages}).json()["count"]
    assert chat.usage is not None and chat.usage.prompt_tokens == counted == 16
    bad = http.post("/detokenize", json={"tokens": [10**9]})
    assert bad.status_code == 400 and "token ids" in bad.json()["error"]["message"]
    assert (BUILTIN_TOKENIZER_DIR / "tokenizer_config.json").is_file()


@pytest.mark.parametrize("version", ["0.9.2", "latest", ""])
def test_a_release_the_emulator_does_not_play_is_refused(version: str) -> None:
    with pytest.raises(ConfigError, match="vllm_version"):
        EmulateConfig(vllm_version=version)
