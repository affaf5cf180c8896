"""One streamed request against an OpenAI-compatible server, timed from the client's side.

TTFT is the time from sending the request to the first chunk that carries
text; TPOT is the mean gap between the first and the last text chunk over
the remaining tokens; E2E ends at ``data: [DONE]`` (or the end of the body).
The token count is the server's ``usage.completion_tokens`` when it sends
one, else the number of text chunks (one token per chunk, as vLLM streams).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx

from llmscale.clock import Clock, WallClock

__all__ = ["Outcome", "RequestRecord", "make_prompt", "request_body", "send_one"]


class Outcome:
    OK = "ok"
    ERROR = "error"
    TIMEOUT = "timeout"


@dataclass(frozen=True)
class RequestRecord:
    """What one request did. Times in seconds; latencies None unless measured."""

    index: int
    scheduled_s: float  # when the trace says it arrives, from the start of the replay
    sent_s: float  # when it was sent (later than scheduled when the concurrency limit held it)
    input_tokens: int
    output_tokens: int  # asked for (max_tokens)
    outcome: str
    tokens: int = 0  # received
    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None
    error: str = ""


def make_prompt(input_tokens: int) -> str:
    """About ``input_tokens`` tokens of text: 4-character words, the 4-characters-a-token rule's unit."""
    return " ".join(["tok"] * max(1, input_tokens))


def request_body(model: str, input_tokens: int, output_tokens: int, *, chat: bool) -> dict[str, Any]:
    """A streaming request for exactly ``output_tokens`` tokens.

    ``ignore_eos`` (a vLLM extension) keeps a real vLLM generating to
    ``max_tokens``, so the trace's output length is what the server produces.
    """
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": int(output_tokens),
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
        "temperature": 0.0,
    }
    prompt = make_prompt(int(input_tokens))
    if chat:
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    return body


def _text_of(chunk: dict[str, Any]) -> str:
    choices = chunk.get("choices") or []
    if not choices or not isinstance(choices[0], dict):
        return ""
    c = choices[0]
    if "text" in c:
        return str(c.get("text") or "")
    delta = c.get("delta") or {}
    return str(delta.get("content") or "") if isinstance(delta, dict) else ""


async def send_one(
    http: httpx.AsyncClient,
    url: str,
    body: dict[str, Any],
    *,
    index: int,
    scheduled_s: float,
    sent_s: float,
    input_tokens: int,
    clock: Clock | None = None,
) -> RequestRecord:
    """POST ``body`` to ``url`` and time its stream. Never raises for server or network errors."""
    out = int(body["max_tokens"])

    def record(outcome: str, **kw: Any) -> RequestRecord:
        return RequestRecord(index, scheduled_s, sent_s, input_tokens, out, outcome, **kw)

    clock = clock or WallClock()
    t0 = clock.now_s()
    first: float | None = None
    last: float | None = None
    chunks = 0
    usage_tokens: int | None = None
    try:
        async with http.stream("POST", url, json=body) as resp:
            if resp.status_code != 200:
                text = (await resp.aread()).decode(errors="replace")
                return record(Outcome.ERROR, error=f"HTTP {resp.status_code}: {text[:200]}")
            done = False
            async for line in resp.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    done = True
                    break
                try:
                    chunk = json.loads(data)
                except ValueError:
                    return record(Outcome.ERROR, error=f"not JSON in the stream: {data[:100]}")
                if isinstance(chunk, dict) and "error" in chunk:
                    return record(Outcome.ERROR, tokens=chunks, error=f"in-stream error: {chunk['error']}")
                if isinstance(chunk, dict) and isinstance(chunk.get("usage"), dict):
                    usage_tokens = chunk["usage"].get("completion_tokens", usage_tokens)
                if isinstance(chunk, dict) and _text_of(chunk):
                    now = clock.now_s()
                    if first is None:
                        first = now
                    last = now
                    chunks += 1
            end = clock.now_s()
    except httpx.TimeoutException as e:
        return record(Outcome.TIMEOUT, tokens=chunks, error=f"timed out: {type(e).__name__}")
    except httpx.HTTPError as e:
        return record(Outcome.ERROR, tokens=chunks, error=f"{type(e).__name__}: {e}")
    if not done:
        return record(Outcome.ERROR, tokens=chunks, error="the stream ended without [DONE]")
    if first is None or last is None:
        return record(Outcome.ERROR, error="no token in the stream")
    tokens = int(usage_tokens) if isinstance(usage_tokens, int) else chunks
    tpot = (last - first) / (tokens - 1) if tokens > 1 else None
    return record(Outcome.OK, tokens=tokens, ttft_s=first - t0, tpot_s=tpot, e2e_s=end - t0)
