"""The words for requests beyond the model's context (llmscale.report.context), from the JSON facts."""

from __future__ import annotations

from typing import Any

import pytest

from llmscale.backtest.context_check import fmt_share
from llmscale.report.context import context_summary, context_warning


@pytest.mark.parametrize(
    ("share", "text"),
    [
        pytest.param(2121 / 3993, "53.1%", id="mooncake-on-llama-3-8b"),
        pytest.param(89 / 232_624, "0.038%", id="default-preset: two significant digits, never 0.0%"),
        pytest.param(10 / 3993, "0.25%", id="below-one-percent"),
        pytest.param(1 / 100, "1.0%", id="one-percent"),
        pytest.param(0.0, "0.0%", id="none"),
        pytest.param(1.0, "100.0%", id="all"),
    ],
)
def test_fmt_share(share: float, text: str) -> None:
    assert fmt_share(share) == text


def _ctx(**over: Any) -> dict[str, Any]:
    ctx: dict[str, Any] = {
        "model": "llama-3-8b",
        "requests": 3993,
        "max_model_len_tokens": 8192,
        "kv_pool_tokens": 449_856,
        "admitted_tokens": 8192,
        "over_context_requests": 2121,
        "over_context_share": 0.53118,
        "longest_request_tokens": 191_386,
        "long_context_models": [
            {"model": "llama-3.1-8b", "admitted_tokens": 131_072, "over_context_requests": 0},
            {"model": "qwen2-7b", "admitted_tokens": 131_072, "over_context_requests": 0},
        ],
    }
    ctx.update(over)
    return ctx


@pytest.mark.parametrize(
    ("ctx", "needles"),
    [
        pytest.param(
            _ctx(),
            [
                "2,121 of 3,993 requests (53.1%)",
                "llama-3-8b's context of 8,192 tokens",
                "the longest: 191,386",
                "HTTP 400",
                "llama-3.1-8b (131,072 tokens), qwen2-7b (131,072 tokens) would take them all",
            ],
            id="alternatives-take-all",
        ),
        pytest.param(
            _ctx(
                long_context_models=[
                    {"model": "llama-3.1-8b", "admitted_tokens": 131_072, "over_context_requests": 10}
                ]
            ),
            [
                "No catalogue model of similar size takes them all; "
                "llama-3.1-8b (131,072 tokens) would reject 10 (0.25%)"
            ],
            id="alternatives-partial",
        ),
        pytest.param(
            _ctx(long_context_models=[]),
            ["No catalogue model of similar size would take more of them"],
            id="no-alternative",
        ),
        pytest.param(
            _ctx(
                model="llama-3.1-70b",
                max_model_len_tokens=131_072,
                kv_pool_tokens=25_648,
                admitted_tokens=25_648,
            ),
            [
                "the 25,648 tokens llama-3.1-70b admits",
                "its context is 131,072",
                "KV cache holds only 25,648",
            ],
            id="kv-pool-binds",
        ),
    ],
)
def test_the_warning_names_the_share_the_limit_and_what_would_take_them(
    ctx: dict[str, Any], needles: list[str]
) -> None:
    text = context_warning(ctx)
    assert text is not None
    for needle in needles:
        assert needle in text
    assert context_summary(ctx) == text


def test_no_warning_when_every_request_fits() -> None:
    ctx = _ctx(
        over_context_requests=0, over_context_share=0.0, long_context_models=[], longest_request_tokens=8000
    )
    assert context_warning(ctx) is None
    assert context_summary(ctx) == "every request within llama-3-8b's context of 8,192 tokens"
