"""Parsing OpenAI request bodies the way the emulator counts tokens and refuses bad requests."""

from __future__ import annotations

from typing import Any

import pytest

from llmscale.emulate.openai_api import ApiError, parse_request

SERVED = ("m",)
PARTS = [{"type": "text", "text": "abcd"}]


@pytest.mark.parametrize(
    ("body", "chat", "tokens", "max_tokens", "stream"),
    [
        pytest.param({"model": "m", "prompt": "tok tok tok"}, False, 3, 16, False, id="text-4-chars-a-token"),
        pytest.param({"model": "m", "prompt": [1, 2, 3, 4, 5]}, False, 5, 16, False, id="token-ids-exact"),
        pytest.param({"model": "m", "prompt": ["abcdefgh"]}, False, 2, 16, False, id="one-element-list"),
        pytest.param({"model": "m", "prompt": "x", "max_tokens": 7, "stream": True}, False, 1, 7, True,
                     id="stream-and-max-tokens"),
        pytest.param({"model": "m", "messages": [{"role": "user", "content": "tok tok"}],
                      "max_completion_tokens": 9}, True, 2, 9, False, id="chat-max-completion-tokens"),
        pytest.param({"model": "m", "messages": [{"role": "user", "content": PARTS}]},
                     True, 1, 16, False, id="chat-content-parts"),
    ],
)  # fmt: skip
def test_parse(body: dict[str, Any], chat: bool, tokens: int, max_tokens: int, stream: bool) -> None:
    p = parse_request(body, chat=chat, served=SERVED, default_max_tokens=16)
    assert (p.input_tokens, p.max_tokens, p.stream) == (tokens, max_tokens, stream)


@pytest.mark.parametrize(
    ("body", "chat", "status", "match"),
    [
        pytest.param({"model": "other", "prompt": "x"}, False, 404, "does not exist", id="unknown-model"),
        pytest.param({"model": "m"}, False, 400, "prompt is required", id="no-prompt"),
        pytest.param({"model": "m", "prompt": "x", "max_tokens": 0}, False, 400, "max_tokens", id="zero-max"),
        pytest.param({"model": "m", "prompt": "x", "n": 2}, False, 400, "n = 2", id="n-above-1"),
        pytest.param({"model": "m", "messages": []}, True, 400, "messages", id="empty-messages"),
        pytest.param([1, 2], False, 400, "JSON object", id="not-an-object"),
    ],
)  # fmt: skip
def test_refusals(body: Any, chat: bool, status: int, match: str) -> None:
    with pytest.raises(ApiError, match=match) as e:
        parse_request(body, chat=chat, served=SERVED, default_max_tokens=16)
    assert e.value.status == status


def test_a_request_without_model_is_served_by_the_served_model() -> None:
    p = parse_request({"prompt": "x"}, chat=False, served=("served", "alias"), default_max_tokens=4)
    assert p.model == "served"
    p = parse_request({"model": None, "messages": [{"role": "user", "content": "x"}]}, chat=True,
                      served=("served",), default_max_tokens=4)  # fmt: skip
    assert p.model == "served"


@pytest.mark.parametrize(
    ("stop", "max_tokens", "tokens", "reason", "text"),
    [
        # The filler is " the quick brown fox jumps over a lazy dog." repeating, one word a token.
        pytest.param("fox", 16, 4, "fox", " the quick brown ", id="ends-in-the-4th-token"),
        pytest.param(["zzz", "brown"], 16, 3, "brown", " the quick ", id="any-of-a-list"),
        pytest.param(["dog", "quick"], 16, 2, "quick", " the ", id="the-earliest-wins"),
        pytest.param("fox", 3, 3, None, " the quick brown", id="max-tokens-first"),
        pytest.param("\n", 12, 12, None, None, id="never-in-the-filler"),
        pytest.param("dog. the", 30, 11, "dog. the", " the quick brown fox jumps over a lazy ",
                     id="across-a-period"),
    ],
)  # fmt: skip
def test_stop_strings_end_the_output(stop: Any, max_tokens: int, tokens: int, reason: Any, text: Any) -> None:
    body = {"model": "m", "prompt": "x", "max_tokens": max_tokens, "stop": stop}
    out = parse_request(body, chat=False, served=SERVED, default_max_tokens=16).output
    assert (out.tokens, out.stop_reason) == (tokens, reason)
    assert out.finish_reason == ("length" if reason is None else "stop")
    if text is not None:
        assert out.text == text
    assert "".join(out.piece(i) for i in range(out.tokens)) == out.text  # what a stream sends


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        pytest.param({"stop": ""}, "stop", id="empty-string"),
        pytest.param({"stop": ["ok", 3]}, "stop", id="not-a-string"),
        pytest.param({"stop_token_ids": [128009]}, "stop_token_ids", id="token-ids-not-emulated"),
    ],
)
def test_stop_refusals(extra: dict[str, Any], match: str) -> None:
    with pytest.raises(ApiError, match=match) as e:
        parse_request({"model": "m", "prompt": "x", **extra}, chat=False, served=SERVED, default_max_tokens=4)
    assert e.value.status == 400


def test_prompt_tokens_come_from_the_counter_given() -> None:
    p = parse_request({"model": "m", "prompt": "a b c"}, chat=False, served=SERVED, default_max_tokens=4,
                      count_tokens=lambda text: len(text.split()))  # fmt: skip
    assert p.input_tokens == 3  # the estimate would say ceil(5 / 4) = 2


@pytest.mark.parametrize(
    ("extra", "chat", "match"),
    [
        ({"temperature": -5}, False, "temperature must be non-negative, got -5"),
        ({"temperature": "hot"}, True, "temperature = 'hot': must be a number"),
        ({"top_p": 0}, False, r"top_p must be in \(0, 1\], got 0"),
        ({"presence_penalty": 3}, True, r"presence_penalty must be in \[-2, 2\], got 3"),
        ({"logprobs": 5}, False, "logprobs is not emulated"),
        ({"echo": True}, False, "echo is not emulated"),
        ({"logprobs": True, "top_logprobs": 2}, True, "logprobs is not emulated"),
        ({"best_of": 4}, False, "only best_of = 1 is emulated"),
    ],
)
def test_sampling_settings_vllm_refuses_or_the_emulator_cannot_give(extra, chat, match) -> None:
    """Found from outside: temperature -5 was served, logprobs 5 came back null, best_of 4 ignored."""
    body = {"model": "m", **extra}
    body.update({"messages": [{"role": "user", "content": "x"}]} if chat else {"prompt": "x"})
    with pytest.raises(ApiError, match=match) as e:
        parse_request(body, chat=chat, served=SERVED, default_max_tokens=4)
    assert e.value.status == 400


def test_valid_sampling_settings_are_served() -> None:
    body = {"model": "m", "prompt": "x", "temperature": 0.7, "top_p": 0.9, "logprobs": None, "best_of": 1}
    assert parse_request(body, chat=False, served=SERVED, default_max_tokens=4).max_tokens == 4
