"""The OpenAI wire format the emulator speaks: parsing request bodies, building response objects.

Pure functions, no HTTP: the server module turns these into responses. Prompt
length comes from a :class:`~llmscale.emulate.tokens.TokenCounter` (the model's
tokenizer when one is on disk, else one token per 4 characters), or exactly the
length of a token-id list. The output text is filler words, one per token; the
emulator generates ``max_tokens`` of them (as vLLM does with ``ignore_eos``)
unless a ``stop`` string shows up in that text first (:func:`plan_output`).
A request without ``model`` is served by the served model, as vLLM serves it.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from llmscale.emulate.tokens import estimate_tokens

__all__ = [
    "ApiError",
    "OutputPlan",
    "ParsedRequest",
    "chunk_object",
    "error_object",
    "filler_text",
    "final_object",
    "models_object",
    "new_id",
    "parse_request",
    "plan_output",
    "unix_time",
    "usage_chunk_object",
]

_FILLER = (" the", " quick", " brown", " fox", " jumps", " over", " a", " lazy", " dog", ".")
_PERIOD_CHARS = sum(len(w) for w in _FILLER)  # 43: the filler repeats every 10 tokens
_STARTS = tuple(sum(len(w) for w in _FILLER[:i]) for i in range(len(_FILLER)))


class ApiError(Exception):
    """A request the API refuses, with the HTTP status and OpenAI error type to answer."""

    def __init__(self, status: int, message: str, kind: str = "BadRequestError", param: str | None = None):
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.param = param


@dataclass(frozen=True)
class OutputPlan:
    """What the emulator will generate for one request, known when it arrives.

    ``tokens`` output tokens (the simulated request's length), ending for
    ``finish_reason`` ``"length"`` (``max_tokens`` reached) or ``"stop"`` (the
    token that completed ``stop_reason``, one of the request's stop strings);
    ``text`` is what the client receives: the filler up to that stop string,
    which is not included (OpenAI's and vLLM's default).
    """

    tokens: int
    finish_reason: str
    stop_reason: str | None
    text: str

    def piece(self, i: int) -> str:
        """The text token ``i`` adds to what the client sees (empty once past a stop string)."""
        start = (i // len(_FILLER)) * _PERIOD_CHARS + _STARTS[i % len(_FILLER)]
        return self.text[start : start + len(_FILLER[i % len(_FILLER)])]


def plan_output(max_tokens: int, stop: tuple[str, ...]) -> OutputPlan:
    """Generate filler until ``max_tokens`` or until a stop string is complete, whichever comes first.

    Stop sequences are honoured, not refused (a client such as guidellm or an
    evaluation harness sends them routinely, and an emulator that refused them
    would not be a stand-in for vLLM): the output text is fixed and known in
    advance, so the token at which a stop string completes is found when the
    request arrives and the simulated request is exactly that long, with the
    latency and KV use of a request that really stopped there. E.g. stop
    ``"fox"`` with max_tokens 16: " the quick brown fox" is 4 tokens, the client
    gets " the quick brown " and finish_reason "stop". A stop string that the
    filler never contains (``"\n"``) leaves the request at ``max_tokens``, as a
    model that never wrote it would.
    """
    longest = max((len(s) for s in stop), default=0)
    # The filler repeats every 10 tokens, so a stop string that occurs at all ends within the first
    # period plus its own length (every filler token has at least one character).
    horizon = min(max_tokens, len(_FILLER) + longest + 1) if stop else 0
    text = filler_text(0, horizon)
    best: tuple[int, int, str] | None = None  # (end, start, stop string): earliest end wins
    for s in stop:
        at = text.find(s)
        if at >= 0 and (best is None or (at + len(s), at) < best[:2]):
            best = (at + len(s), at, s)
    if best is None:
        return OutputPlan(max_tokens, "length", None, filler_text(0, max_tokens))
    end, start, s = best
    tokens = next(i + 1 for i in range(horizon) if len(filler_text(0, i + 1)) >= end)
    return OutputPlan(tokens, "stop", s, text[:start])


@dataclass(frozen=True)
class ParsedRequest:
    """What the emulator needs from a completions or chat-completions body."""

    chat: bool
    model: str
    input_tokens: int
    max_tokens: int
    stream: bool
    include_usage: bool
    output: OutputPlan


def _prompt_tokens(prompt: Any, count: Callable[[str], int]) -> int:
    if isinstance(prompt, str):
        return count(prompt)
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return len(prompt)  # token ids: exact
    if isinstance(prompt, list) and len(prompt) == 1:
        return _prompt_tokens(prompt[0], count)
    raise ApiError(
        400,
        "prompt must be a string or a list of token ids (batched prompts are not emulated)",
        param="prompt",
    )


def _message_tokens(messages: Any, count: Callable[[str], int]) -> int:
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
    return count("".join(text))


def _positive_int(body: dict[str, Any], *names: str) -> int | None:
    for name in names:
        value = body.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ApiError(400, f"{name} = {value!r}, must be an integer >= 1", param=name)
        return value
    return None


def _stop_strings(body: dict[str, Any]) -> tuple[str, ...]:
    stop = body.get("stop")
    if stop is None:
        stop = []
    elif isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop):
        raise ApiError(400, f"stop = {stop!r}: must be a non-empty string or a list of them", param="stop")
    if body.get("stop_token_ids"):
        # The filler text has no token ids: refused rather than ignored.
        raise ApiError(400, "stop_token_ids is not emulated; use stop strings", param="stop_token_ids")
    return tuple(stop)


def _finite(body: dict[str, Any], key: str) -> float | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ApiError(400, f"{key} = {value!r}: must be a number", param=key)
    return float(value)


def _check_sampling(body: dict[str, Any], chat: bool) -> None:
    """Sampling settings: vLLM's ranges, and a 400 for what the emulator cannot produce.

    The filler text ignores sampling, which costs nothing in latency, so a valid temperature is
    accepted; but a value vLLM refuses (temperature -5, top_p 0) is refused here too, and
    outputs the emulator cannot give (log-probabilities, echo, best_of > 1) are a 400 rather
    than an answer that silently lacks them (found from outside: logprobs 5 came back null).
    """
    temperature = _finite(body, "temperature")
    if temperature is not None and temperature < 0:
        raise ApiError(400, f"temperature must be non-negative, got {temperature:g}", param="temperature")
    top_p = _finite(body, "top_p")
    if top_p is not None and not 0 < top_p <= 1:
        raise ApiError(400, f"top_p must be in (0, 1], got {top_p:g}", param="top_p")
    for key in ("presence_penalty", "frequency_penalty"):
        v = _finite(body, key)
        if v is not None and not -2 <= v <= 2:
            raise ApiError(400, f"{key} must be in [-2, 2], got {v:g}", param=key)
    wants = ("logprobs", "top_logprobs") if chat else ("logprobs", "echo")
    for key in wants:
        if body.get(key) not in (None, False, 0):
            raise ApiError(400, f"{key} is not emulated (the emulator's text is filler)", param=key)
    best_of = body.get("best_of")
    if best_of not in (None, 1):
        raise ApiError(400, f"best_of = {best_of!r}: only best_of = 1 is emulated", param="best_of")


def parse_request(
    body: Any,
    *,
    chat: bool,
    served: tuple[str, ...],
    default_max_tokens: int,
    count_tokens: Callable[[str], int] = estimate_tokens,
) -> ParsedRequest:
    """Validate a request body; raises :class:`ApiError` with the answer vLLM would give.

    ``served[0]`` is the served model's name: a body without ``model`` gets it
    (vLLM's behaviour), one naming another model is answered 404.
    """
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    model = body.get("model")
    if model is None:
        model = served[0]
    if not isinstance(model, str) or model not in served:
        raise ApiError(404, f"The model `{model}` does not exist.", "NotFoundError", "model")
    n = body.get("n", 1)
    if n != 1:
        raise ApiError(400, f"n = {n!r}: only n = 1 is emulated", param="n")
    _check_sampling(body, chat)
    if chat:
        input_tokens = _message_tokens(body.get("messages"), count_tokens)
        max_tokens = _positive_int(body, "max_completion_tokens", "max_tokens")
    else:
        if "prompt" not in body:
            raise ApiError(400, "prompt is required", param="prompt")
        input_tokens = _prompt_tokens(body["prompt"], count_tokens)
        max_tokens = _positive_int(body, "max_tokens")
    options = body.get("stream_options")
    include_usage = bool(isinstance(options, dict) and options.get("include_usage"))
    limit = default_max_tokens if max_tokens is None else max_tokens
    return ParsedRequest(
        chat=chat,
        model=model,
        input_tokens=input_tokens,
        max_tokens=limit,
        stream=bool(body.get("stream", False)),
        include_usage=include_usage,
        output=plan_output(limit, _stop_strings(body)),
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
    """One streamed chunk carrying ``text`` (a chat chunk's first delta also names the role).

    The last one carries ``finish`` and, as vLLM's do, ``stop_reason`` (the stop string or null).
    """
    if p.chat:
        delta: dict[str, Any] = {"role": "assistant", "content": text} if first else {"content": text}
        choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        obj = "chat.completion.chunk"
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
        obj = "text_completion"
    if finish is not None:
        choice["stop_reason"] = p.output.stop_reason
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


def final_object(p: ParsedRequest, rid: str, created: int) -> dict[str, Any]:
    """The whole answer of a non-streaming request that completed (its :class:`OutputPlan`)."""
    out = p.output
    choice: dict[str, Any]
    # ``stop_reason`` is vLLM's addition: the stop string that ended the output, else null.
    if p.chat:
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": out.text},
            "logprobs": None,
            "finish_reason": out.finish_reason,
            "stop_reason": out.stop_reason,
        }
        obj = "chat.completion"
    else:
        choice = {
            "index": 0,
            "text": out.text,
            "logprobs": None,
            "finish_reason": out.finish_reason,
            "stop_reason": out.stop_reason,
        }
        obj = "text_completion"
    return {
        "id": rid,
        "object": obj,
        "created": created,
        "model": p.model,
        "choices": [choice],
        "usage": _usage(p, out.tokens),
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
