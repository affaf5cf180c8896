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
