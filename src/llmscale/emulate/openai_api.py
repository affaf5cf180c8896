"""The OpenAI wire format the emulator speaks: parsing request bodies, building response objects.

Pure functions, no HTTP: the server module turns these into responses. Prompt
length is estimated at one token per 4 characters of text (the usual English
rule of thumb; ``loadgen`` writes prompts of 4-character words so the count it
means is the count the emulator reads), or exactly the length of a token-id
list. The emulator generates exactly ``max_tokens`` tokens, as vLLM does with
``ignore_eos``; their text is filler words.
"""

from __future__ import annotations

import math
import time
import uuid
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ApiError",
    "ParsedRequest",
    "chunk_object",
    "error_object",
    "estimate_tokens",
    "filler_text",
    "final_object",
    "models_object",
    "new_id",
    "parse_request",
    "unix_time",
    "usage_chunk_object",
]

_FILLER = (" the", " quick", " brown", " fox", " jumps", " over", " a", " lazy", " dog", ".")


class ApiError(Exception):
    """A request the API refuses, with the HTTP status and OpenAI error type to answer."""

    def __init__(self, status: int, message: str, kind: str = "BadRequestError", param: str | None = None):
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.param = param


@dataclass(frozen=True)
class ParsedRequest:
    """What the emulator needs from a completions or chat-completions body."""

    chat: bool
    model: str
    input_tokens: int
    max_tokens: int
    stream: bool
    include_usage: bool


def estimate_tokens(text: str) -> int:
    """About one token per 4 characters, at least one: ``"tok tok tok"`` (11 chars) is 3."""
    return max(1, math.ceil(len(text) / 4))


def _prompt_tokens(prompt: Any) -> int:
    if isinstance(prompt, str):
        return estimate_tokens(prompt)
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return len(prompt)  # token ids: exact
    if isinstance(prompt, list) and len(prompt) == 1:
        return _prompt_tokens(prompt[0])
    raise ApiError(
        400,
        "prompt must be a string or a list of token ids (batched prompts are not emulated)",
        param="prompt",
    )


def _message_tokens(messages: Any) -> int:
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "messages must be a non-empty list", param="messages")
    text = []
    for m in messages:
        if not isinstance(m, dict):
            raise ApiError(400, "each message must be an object with role and content", param="messages")
        content = m.get("content")
        if isinstance(content, str):
            text.append(content)
        elif isinstance(content, list):  # content parts: count the text ones
            text.extend(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return estimate_tokens("".join(text))


def _positive_int(body: dict[str, Any], *names: str) -> int | None:
    for name in names:
        value = body.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ApiError(400, f"{name} = {value!r}, must be an integer >= 1", param=name)
        return value
    return None


def parse_request(
    body: Any, *, chat: bool, served: tuple[str, ...], default_max_tokens: int
) -> ParsedRequest:
    """Validate a request body; raises :class:`ApiError` with the answer vLLM would give."""
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or model not in served:
        raise ApiError(404, f"The model `{model}` does not exist.", "NotFoundError", "model")
    n = body.get("n", 1)
    if n != 1:
        raise ApiError(400, f"n = {n!r}: only n = 1 is emulated", param="n")
    if chat:
        input_tokens = _message_tokens(body.get("messages"))
        max_tokens = _positive_int(body, "max_completion_tokens", "max_tokens")
    else:
        if "prompt" not in body:
            raise ApiError(400, "prompt is required", param="prompt")
        input_tokens = _prompt_tokens(body["prompt"])
        max_tokens = _positive_int(body, "max_tokens")
    options = body.get("stream_options")
    include_usage = bool(isinstance(options, dict) and options.get("include_usage"))
    return ParsedRequest(
        chat=chat,
        model=model,
        input_tokens=input_tokens,
        max_tokens=default_max_tokens if max_tokens is None else max_tokens,
        stream=bool(body.get("stream", False)),
        include_usage=include_usage,
    )


def filler_text(start: int, stop: int) -> str:
    """The text of output tokens ``start .. stop-1`` (one filler word per token)."""
    return "".join(_FILLER[i % len(_FILLER)] for i in range(start, stop))


def unix_time() -> int:
    """The ``created`` field: a Unix timestamp the wire format wants; nothing here keeps time by it."""
    return int(time.time())


def new_id(chat: bool) -> str:
    return ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex


def _usage(p: ParsedRequest, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": p.input_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": p.input_tokens + completion_tokens,
    }


def chunk_object(
    p: ParsedRequest, rid: str, created: int, text: str, *, first: bool, finish: str | None
) -> dict[str, Any]:
    """One streamed chunk carrying ``text`` (a chat chunk's first delta also names the role)."""
    if p.chat:
        delta: dict[str, Any] = {"role": "assistant", "content": text} if first else {"content": text}
        choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        obj = "chat.completion.chunk"
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
        obj = "text_completion"
    return {"id": rid, "object": obj, "created": created, "model": p.model, "choices": [choice]}


def usage_chunk_object(p: ParsedRequest, rid: str, created: int, completion_tokens: int) -> dict[str, Any]:
    """The last chunk when ``stream_options.include_usage`` is set: no choices, the usage."""
    obj = "chat.completion.chunk" if p.chat else "text_completion"
    return {
        "id": rid,
        "object": obj,
        "created": created,
        "model": p.model,
        "choices": [],
        "usage": _usage(p, completion_tokens),
    }


def final_object(p: ParsedRequest, rid: str, created: int, completion_tokens: int) -> dict[str, Any]:
    """The whole answer of a non-streaming request."""
    text = filler_text(0, completion_tokens)
    choice: dict[str, Any]
    if p.chat:
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "logprobs": None,
            "finish_reason": "length",
        }
        obj = "chat.completion"
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "length"}
        obj = "text_completion"
    return {
        "id": rid,
        "object": obj,
        "created": created,
        "model": p.model,
        "choices": [choice],
        "usage": _usage(p, completion_tokens),
    }


def error_object(message: str, kind: str, status: int, param: str | None = None) -> dict[str, Any]:
    """The error body vLLM's OpenAI server answers with."""
    return {"error": {"message": message, "type": kind, "param": param, "code": status}}


def models_object(served: str, max_model_len: int) -> dict[str, Any]:
    """``GET /v1/models``: the one served model, with vLLM's extra ``max_model_len``."""
    return {
        "object": "list",
        "data": [
            {
                "id": served,
                "object": "model",
                "created": unix_time(),
                "owned_by": "llmscale-emulate",
                "root": served,
                "parent": None,
                "max_model_len": max_model_len,
            }
        ],
    }
