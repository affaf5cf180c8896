"""Parsing OpenAI request bodies the way the emulator counts tokens and refuses bad requests."""

from __future__ import annotations

import math
from typing import Any

import pytest

from llmscale.emulate.openai_api import ApiError, logprobs_object, parse_request

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
        # chat: Llama-3's template around the content: 1 (BOS) + 5 a message + 4 (assistant header)
        pytest.param({"model": "m", "messages": [{"role": "user", "content": "tok tok"}],
                      "max_completion_tokens": 9}, True, 12, 9, False, id="chat-max-completion-tokens"),
        pytest.param({"model": "m", "messages": [{"role": "user", "content": PARTS}]},
                     True, 11, 16, False, id="chat-content-parts"),
        pytest.param({"model": "m", "messages": [{"role": "system", "content": "be brief"},
                                                 {"role": "user", "content": "hi"}]},
                     True, 1 + 5 + 2 + 5 + 1 + 4, 16, False, id="chat-two-messages"),
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
        pytest.param({"model": "m", "prompt": "x", "n": 0}, False, 400, "n = 0", id="n-below-1"),
        pytest.param({"model": "m", "prompt": "x", "n": 65}, False, 400, "n = 65", id="n-above-the-cap"),
        pytest.param({"model": "m", "prompt": "x", "logprobs": 21}, False, 400, "logprobs = 21",
                     id="logprobs-above-vllms-max"),
        pytest.param({"model": "m", "messages": [{"role": "user", "content": "x"}], "top_logprobs": 2},
                     True, 400, "requires logprobs", id="top-logprobs-without-logprobs"),
        pytest.param({"model": "m", "messages": [{"role": "user", "content": "x"}],
                      "tools": [{"type": "function", "function": {"name": "f"}}]},
                     True, 400, "enable-auto-tool-choice", id="tools-auto-as-vllm-without-a-parser"),
        pytest.param({"model": "m", "messages": [{"role": "user", "content": "x"}], "tool_choice": "required",
                      "tools": [{"type": "function", "function": {"name": "f"}}]},
                     True, 400, "tool calls are not emulated", id="tools-required"),
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
        ({"echo": True}, False, "echo is not emulated"),
        ({"best_of": 4}, False, "only best_of = 1 is emulated"),
    ],
)
def test_sampling_settings_vllm_refuses_or_the_emulator_cannot_give(extra, chat, match) -> None:
    """Found from outside: temperature -5 was served, best_of 4 ignored."""
    body = {"model": "m", **extra}
    body.update({"messages": [{"role": "user", "content": "x"}]} if chat else {"prompt": "x"})
    with pytest.raises(ApiError, match=match) as e:
        parse_request(body, chat=chat, served=SERVED, default_max_tokens=4)
    assert e.value.status == 400


def test_valid_sampling_settings_are_served() -> None:
    body = {"model": "m", "prompt": "x", "temperature": 0.7, "top_p": 0.9, "logprobs": None, "best_of": 1}
    assert parse_request(body, chat=False, served=SERVED, default_max_tokens=4).max_tokens == 4


@pytest.mark.parametrize(
    ("body", "chat", "n", "logprobs"),
    [
        pytest.param({"prompt": "x", "n": 3}, False, 3, None, id="n-3"),
        pytest.param({"prompt": "x", "logprobs": 0}, False, 1, 0, id="completions-logprobs-0"),
        pytest.param({"prompt": "x", "logprobs": 5}, False, 1, 5, id="completions-logprobs-5"),
        pytest.param({"messages": [{"role": "user", "content": "x"}], "logprobs": True}, True, 1, 0,
                     id="chat-logprobs-alone"),
        pytest.param({"messages": [{"role": "user", "content": "x"}], "logprobs": True, "top_logprobs": 4},
                     True, 1, 4, id="chat-top-logprobs"),
        pytest.param({"messages": [{"role": "user", "content": "x"}], "tool_choice": "none",
                      "tools": [{"type": "function", "function": {"name": "f"}}]}, True, 1, None,
                     id="tools-with-choice-none-are-unused"),
    ],
)  # fmt: skip
def test_n_logprobs_and_tools_accepted(body: dict[str, Any], chat: bool, n: int, logprobs: Any) -> None:
    p = parse_request({"model": "m", **body}, chat=chat, served=SERVED, default_max_tokens=4)
    assert (p.n, p.logprobs) == (n, logprobs)


def test_logprobs_are_plausible_in_both_shapes() -> None:
    """The sampled token is the likeliest of its top list, probabilities sum below 1, and the shapes
    are OpenAI's: parallel lists for completions, ``content`` entries for chat."""
    comp = parse_request({"model": "m", "prompt": "x", "logprobs": 3, "max_tokens": 12}, chat=False,
                         served=SERVED, default_max_tokens=4)  # fmt: skip
    lp = logprobs_object(comp, 0, comp.output.tokens)
    assert lp is not None and lp["tokens"] == [comp.output.piece(i) for i in range(12)]
    assert lp["text_offset"][:3] == [0, 4, 10]  # " the", " quick", " brown"
    for token, value, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"], strict=True):
        assert -0.72 <= value <= -0.02 and len(top) == 3 and top[token] == value == max(top.values())
        assert sum(math.exp(v) for v in top.values()) < 1.0
    chat = parse_request({"model": "m", "messages": [{"role": "user", "content": "x"}], "logprobs": True,
                          "top_logprobs": 2, "max_tokens": 5}, chat=True, served=SERVED,
                         default_max_tokens=4)  # fmt: skip
    content = logprobs_object(chat, 0, 5, choice=1)
    assert content is not None and len(content["content"]) == 5
    first = content["content"][0]
    assert first["token"] == " the" and first["bytes"] == list(b" the") and len(first["top_logprobs"]) == 2
    assert first["top_logprobs"][0]["logprob"] == first["logprob"]
    assert logprobs_object(parse_request({"model": "m", "prompt": "x"}, chat=False, served=SERVED,
                                         default_max_tokens=4), 0, 4) is None  # fmt: skip
