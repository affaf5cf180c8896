"""``llmscale emulate`` behaves like vLLM toward clients: the official `openai` client against a real
emulated fleet on 127.0.0.1 (an in-process server on its own thread and event loop).

* A client that disconnects aborts its request: the replica's running count and KV usage go back
  to what they were at once, not when the simulated request would have finished (~25 s later).
* ``stop`` strings end the output (finish_reason "stop"); a request without ``model`` is served.
* The per-request and per-step families vLLM exports, with its names, types, labels and buckets.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, TypeVar

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from llmscale.emulate import EmulateConfig, EmulatorThread
from llmscale.errors import ConfigError
from llmscale.metrics.names import ITERATION_TOKENS_BUCKETS, vllm_1_2_5_buckets
from llmscale.metrics.names import VllmMetric as V
from support.wait import wait_for

MODEL = "meta-llama/Meta-Llama-3-8B"  # the served name (the model's Hugging Face id)
#: ~2000 tokens at ~12.5 ms each: ~25 s of decoding, far longer than any wait below.
LONG_TOKENS = 2000
T = TypeVar("T")


@pytest.fixture
def fleet() -> Iterator[EmulatorThread]:
    with EmulatorThread(EmulateConfig(replicas=1, port=0)) as t:
        yield t


def client(fleet: EmulatorThread) -> openai.OpenAI:
    return openai.OpenAI(base_url=fleet.base_url + "/v1", api_key="unused", max_retries=0, timeout=60.0)


def metrics_url(fleet: EmulatorThread) -> str:
    (port,) = fleet.call(lambda s: s.replica_ports()).values()
    return f"http://127.0.0.1:{port}/metrics"


def scrape(fleet: EmulatorThread) -> dict[str, Any]:
    """The replica's families by name (the parser names a counter family without ``_total``)."""
    text = httpx.get(metrics_url(fleet), timeout=10.0).text
    return {f.name: f for f in text_string_to_metric_families(text)}


def value(families: dict[str, Any], family: str, sample: str, **labels: str) -> float:
    return next(
        s.value
        for s in families[family].samples
        if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items())
    )


def load(fleet: EmulatorThread) -> tuple[float, float, float]:
    """(running, waiting, KV usage) as the replica's /metrics says."""
    f = scrape(fleet)
    return (
        value(f, V.RUNNING, V.RUNNING),
        value(f, V.WAITING, V.WAITING),
        value(f, V.KV_USAGE, V.KV_USAGE),
    )


def engine_state(fleet: EmulatorThread) -> tuple[int, int, int]:
    """(running, KV blocks in use, open flights) read off the simulator itself."""

    def read(server: Any) -> tuple[int, int, int]:
        server.emu.advance()
        (r,) = server.emu.fleet.replicas
        return r.num_running, r.blocks_used, server.emu.in_flight

    result: tuple[int, int, int] = fleet.call(read)
    return result


# ------------------------------------------------------------------------------- disconnects


@pytest.mark.parametrize("chat", [False, True], ids=["completions", "chat"])
def test_a_client_that_closes_its_stream_frees_the_slot_and_kv_blocks(
    fleet: EmulatorThread, chat: bool
) -> None:
    assert load(fleet) == (0.0, 0.0, 0.0)
    c = client(fleet)
    if chat:
        stream: Any = c.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "tok " * 300}],
            max_tokens=LONG_TOKENS,
            stream=True,
        )
    else:
        stream = c.completions.create(model=MODEL, prompt="tok " * 300, max_tokens=LONG_TOKENS, stream=True)
    received = 0
    for chunk in stream:
        piece = chunk.choices[0].delta.content if chat else chunk.choices[0].text
        received += bool(piece)
        if received == 3:
            break
    running, _, kv = load(fleet)
    assert running == 1.0 and kv > 0.0  # still generating: ~2000 tokens to go
    stream.close()  # the client goes away mid-stream
    wait_for("the replica is idle again", lambda: load(fleet) == (0.0, 0.0, 0.0))
    assert engine_state(fleet) == (0, 0, 0)
    f = scrape(fleet)
    aborted = value(f, "vllm:request_success", V.REQUEST_SUCCESS, finished_reason="abort")
    assert aborted == 1.0
    generated = value(f, V.REQUEST_GENERATION_TOKENS, V.REQUEST_GENERATION_TOKENS + "_sum")
    assert 3 <= generated < LONG_TOKENS / 2  # what it had produced when the client left


def test_a_client_that_gives_up_while_queued_leaves_the_queue() -> None:
    """One sequence at a time: a second, non-streaming request waits behind a long one; its client
    times out and disconnects, and the queue empties while the first request keeps running."""
    with EmulatorThread(EmulateConfig(replicas=1, port=0, max_num_seqs=1)) as fleet:
        stream = client(fleet).completions.create(
            model=MODEL, prompt="tok", max_tokens=LONG_TOKENS, stream=True
        )
        next(iter(stream))
        impatient = openai.OpenAI(
            base_url=fleet.base_url + "/v1", api_key="unused", max_retries=0, timeout=1.0
        )
        with pytest.raises(openai.APITimeoutError):
            impatient.completions.create(model=MODEL, prompt="tok tok", max_tokens=4)
        wait_for("the queued request is gone", lambda: load(fleet)[:2] == (1.0, 0.0))
        assert engine_state(fleet)[2] == 1  # only the streaming request is still in flight
        stream.close()
        wait_for("the replica is idle again", lambda: load(fleet) == (0.0, 0.0, 0.0))
        f = scrape(fleet)
    assert value(f, "vllm:request_success", V.REQUEST_SUCCESS, finished_reason="abort") == 2.0


# --------------------------------------------------------------------------- stop and model


def test_stop_sequences_end_the_output_with_finish_reason_stop(fleet: EmulatorThread) -> None:
    c = client(fleet)
    # The emulator's text is " the quick brown fox jumps over a lazy dog." repeating.
    done = c.completions.create(model=MODEL, prompt="tok tok", max_tokens=16, stop=["fox"])
    assert done.choices[0].text == " the quick brown "
    assert done.choices[0].finish_reason == "stop"
    assert done.usage is not None and done.usage.completion_tokens == 4  # " fox" was generated
    pieces, finish = [], None
    for chunk in c.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "tok"}], max_tokens=16, stop="brown", stream=True
    ):
        pieces.append(chunk.choices[0].delta.content or "")
        finish = chunk.choices[0].finish_reason or finish
    assert "".join(pieces) == " the quick " and finish == "stop"
    unmatched = c.completions.create(model=MODEL, prompt="tok", max_tokens=6, stop=["\n"])
    assert unmatched.choices[0].finish_reason == "length" and unmatched.usage.completion_tokens == 6
    with pytest.raises(openai.BadRequestError, match="stop"):
        c.completions.create(model=MODEL, prompt="tok", max_tokens=6, stop=[""])
    f = scrape(fleet)
    assert value(f, "vllm:request_success", V.REQUEST_SUCCESS, finished_reason="stop") == 2.0
    assert value(f, "vllm:request_success", V.REQUEST_SUCCESS, finished_reason="length") == 1.0


def test_a_request_without_model_is_served_by_the_served_model(fleet: EmulatorThread) -> None:
    with httpx.Client(base_url=fleet.base_url, timeout=30.0) as http:
        done = http.post("/v1/completions", json={"prompt": "tok tok", "max_tokens": 3})
        chat = http.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "tok"}]})
        other = http.post("/v1/completions", json={"model": "gpt-4", "prompt": "tok"})
    assert done.status_code == 200 and done.json()["model"] == MODEL
    assert done.json()["usage"]["completion_tokens"] == 3
    assert chat.status_code == 200 and chat.json()["model"] == MODEL
    assert other.status_code == 404  # a model that is not served is still refused


# -------------------------------------------------------------------------------- metrics


def test_vllm_request_and_engine_families_after_known_requests(fleet: EmulatorThread) -> None:
    """Two requests one after the other on an idle replica: 40 prompt tokens ("tok " x 40 is 159
    characters, 40 tokens at 4 a token) and 5 out, ending on length; 12 prompt tokens ending on
    the stop string after 4 out. vLLM counts an engine step's tokens as those it generated plus
    the whole prompt of a request whose first token it produced, so the steps carry 40+1, 1, 1,
    1, 1 and 12+1, 1, 1, 1 tokens: 9 steps, 61 tokens."""
    c = client(fleet)
    c.completions.create(model=MODEL, prompt=" ".join(["tok"] * 40), max_tokens=5)
    c.completions.create(model=MODEL, prompt=" ".join(["tok"] * 12), max_tokens=50, stop="fox")
    f = scrape(fleet)
    labels = {"model_name": MODEL, "engine": "0"}

    success = f["vllm:request_success"]
    assert success.type == "counter"
    by_reason = {s.labels["finished_reason"]: s.value for s in success.samples if s.name == V.REQUEST_SUCCESS}
    assert by_reason == {"stop": 1.0, "length": 1.0, "abort": 0.0}
    assert all({k: s.labels[k] for k in labels} == labels for s in success.samples)

    buckets_1_2_5 = [float(b) for b in vllm_1_2_5_buckets(8192)] + [float("inf")]
    assert buckets_1_2_5[-3:] == [2000.0, 5000.0, float("inf")]
    for name, total in ((V.REQUEST_PROMPT_TOKENS, 52.0), (V.REQUEST_GENERATION_TOKENS, 9.0)):
        h = f[name]
        assert h.type == "histogram"
        les = [float(s.labels["le"]) for s in h.samples if s.name == name + "_bucket"]
        assert les == buckets_1_2_5
        assert value(f, name, name + "_count", **labels) == 2.0
        assert value(f, name, name + "_sum", **labels) == total

    it = f[V.ITERATION_TOKENS]
    assert it.type == "histogram"
    les = [float(s.labels["le"]) for s in it.samples if s.name == V.ITERATION_TOKENS + "_bucket"]
    assert les == [float(b) for b in ITERATION_TOKENS_BUCKETS] + [float("inf")]
    assert value(f, V.ITERATION_TOKENS, V.ITERATION_TOKENS + "_count") == 9.0
    assert value(f, V.ITERATION_TOKENS, V.ITERATION_TOKENS + "_sum") == 61.0
    assert value(f, V.ITERATION_TOKENS, V.ITERATION_TOKENS + "_bucket", le="1.0") == 7.0  # decode steps

    info = f[V.CACHE_CONFIG_INFO]
    assert info.type == "gauge"
    (sample,) = info.samples
    blocks = fleet.call(lambda s: s.emu.fleet.total_blocks)
    assert sample.value == 1.0
    assert sample.labels["block_size"] == "16" and sample.labels["num_gpu_blocks"] == str(blocks)
    assert sample.labels["gpu_memory_utilization"] == "0.9" and sample.labels["engine"] == "0"
    assert sample.labels["enable_prefix_caching"] == "False"


# ------------------------------------------------------------------------------- tokenizer


def test_prompt_tokens_are_counted_with_a_local_tokenizer(tmp_path: Any) -> None:
    """A word-level tokenizer made here (nothing is downloaded): "hello world tok" is 3 tokens to it,
    ceil(15 / 4) = 4 to the estimate."""
    tokenizers = pytest.importorskip("tokenizers")
    vocab = {"[UNK]": 0, "hello": 1, "world": 2, "tok": 3}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "tokenizer.json"))
    with EmulatorThread(EmulateConfig(replicas=1, port=0, tokenizer=str(tmp_path))) as t:
        done = client(t).completions.create(model=MODEL, prompt="hello world tok", max_tokens=1)
        assert t.call(lambda s: s.tokens.source) == str(tmp_path / "tokenizer.json")
    assert done.usage is not None and done.usage.prompt_tokens == 3


def test_a_tokenizer_that_is_not_there_is_an_error_not_an_estimate(tmp_path: Any) -> None:
    with pytest.raises(ConfigError, match=r"no tokenizer\.json"):
        EmulatorThread(EmulateConfig(replicas=1, port=0, tokenizer=str(tmp_path / "absent"))).start()
