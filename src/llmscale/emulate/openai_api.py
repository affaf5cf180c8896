"""The OpenAI wire format the emulator speaks: parsing request bodies, building response objects.

Pure functions, no HTTP: the server module turns these into responses. Prompt
length comes from a :class:`~llmscale.emulate.tokens.TokenCounter` (the model's
tokenizer when one is on disk, else one token per 4 characters), or exactly the
length of a token-id list. The output text is filler words, one per token; the
emulator generates ``max_tokens`` of them (as vLLM does with ``ignore_eos``)
unless a ``stop`` string shows up in that text first (:func:`plan_output`).
A request without ``model`` is served by the served model, as vLLM serves it.

``n > 1`` asks for n choices: each is a simulated request of its own on one
replica (vLLM runs the n sequences as n requests of its engine), all with the
filler text. ``logprobs`` are answered with plausible values (:func:`logprob_of`):
the sampled token's log-probability between -0.02 and -0.72, its alternatives
sharing the rest of the probability (halving), so the top-k probabilities sum below 1. ``tools``
with ``tool_choice`` "auto" (the default when tools are given) are refused with
vLLM's own message for a server started without a tool-call parser; with
``tool_choice`` "none" the tools are accepted and unused, as vLLM does.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from llmscale.emulate.tokens import TokenCounter, estimate_tokens
from llmscale.ranges import finite_number, shown_value

__all__ = [
    "ApiError",
    "OutputPlan",
    "ParsedRequest",
    "chat_messages",
    "chunk_object",
    "filler_text",
    "final_object",
    "logprob_of",
    "logprobs_object",
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
#: most choices one request may ask for: n simulated requests each, so a typo of 10,000 must not
#: start 10,000 (vLLM has no such cap; its memory is the limit)
MAX_N = 64
#: vLLM's default ``--max-logprobs``: more top log-probabilities than this are a 400.
MAX_LOGPROBS = 20
#: the message vLLM answers a ``tool_choice`` "auto" with when started without a tool-call parser
TOOLS_REFUSAL = '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'


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
    #: choices asked for (each one a simulated request)
    n: int = 1
    #: top log-probabilities per token, None: no log-probabilities (chat: top_logprobs, 0 with
    #: ``logprobs: true`` alone; completions: ``logprobs``)
    logprobs: int | None = None
    #: the request's own max_tokens (None when it gave none), for vllm:request_params_max_tokens
    max_tokens_param: int | None = None


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


def chat_messages(messages: Any) -> list[tuple[str, str]]:
    """``(role, text)`` of each message (content parts: their text ones joined); 400 when malformed."""
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "messages must be a non-empty list", param="messages")
    out = []
    for m in messages:
        if not isinstance(m, dict):
            raise ApiError(400, "each message must be an object with role and content", param="messages")
        role = m.get("role", "user")
        content = m.get("content")
        text = ""
        if isinstance(content, str):
            text = content
        elif isinstance(content, list):  # content parts: count the text ones
            text = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        out.append((str(role), text))
    return out


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
    f = finite_number(value)
    if f is None:
        raise ApiError(400, f"{key} = {shown_value(value)}: must be a number", param=key)
    return f


def _check_sampling(body: dict[str, Any], chat: bool) -> int | None:
    """Sampling settings: vLLM's ranges, and a 400 for what the emulator cannot produce.

    The filler text ignores sampling, which costs nothing in latency, so a valid temperature is
    accepted; but a value vLLM refuses (temperature -5, top_p 0) is refused here too, and
    outputs the emulator cannot give (echo, best_of > 1) are a 400 rather than an answer that
    silently lacks them. Returns the top log-probabilities asked for per token (None: none).
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
    if not chat and body.get("echo") not in (None, False):
        raise ApiError(400, "echo is not emulated (the emulator's text is filler)", param="echo")
    best_of = body.get("best_of")
    if best_of not in (None, 1):
        raise ApiError(400, f"best_of = {best_of!r}: only best_of = 1 is emulated", param="best_of")
    return _logprobs(body, chat)


def _count(body: dict[str, Any], key: str) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_LOGPROBS:
        raise ApiError(400, f"{key} = {value!r}: must be an integer in [0, {MAX_LOGPROBS}]", param=key)
    return value


def _logprobs(body: dict[str, Any], chat: bool) -> int | None:
    """Completions: ``logprobs`` k (0..20). Chat: ``logprobs: true`` and ``top_logprobs`` k."""
    if not chat:
        return _count(body, "logprobs")
    wanted = body.get("logprobs")
    if wanted not in (None, True, False):
        raise ApiError(400, f"logprobs = {wanted!r}: must be true or false", param="logprobs")
    top = _count(body, "top_logprobs")
    if top is not None and top > 0 and not wanted:
        raise ApiError(400, "top_logprobs requires logprobs to be true", param="top_logprobs")
    return (top or 0) if wanted else None


def _check_tools(body: dict[str, Any]) -> None:
    """vLLM without a tool-call parser: tool_choice "auto" (the default with tools) is a 400."""
    tools = body.get("tools")
    if not tools:
        return
    if not isinstance(tools, list):
        raise ApiError(400, "tools must be a list of tool definitions", param="tools")
    choice = body.get("tool_choice", "auto")
    if choice == "none":
        return  # accepted and unused, as vLLM does
    if choice == "auto":
        raise ApiError(400, TOOLS_REFUSAL, param="tool_choice")
    raise ApiError(
        400,
        f"tool_choice = {choice!r}: tool calls are not emulated (the output is filler text); "
        'send tool_choice "none" or no tools',
        param="tool_choice",
    )


_ESTIMATE = TokenCounter(estimate_tokens, "estimate")


def parse_request(
    body: Any,
    *,
    chat: bool,
    served: tuple[str, ...],
    default_max_tokens: int,
    count_tokens: Callable[[str], int] | None = None,
    counter: TokenCounter = _ESTIMATE,
) -> ParsedRequest:
    """Validate a request body; raises :class:`ApiError` with the answer vLLM would give.

    ``served[0]`` is the served model's name: a body without ``model`` gets it
    (vLLM's behaviour), one naming another model is answered 404. Prompts are
    counted by ``counter`` (chat: through the chat template), or by ``count_tokens``
    when given (a plain text counter, chat messages joined).
    """
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    model = body.get("model")
    if model is None:
        model = served[0]
    if not isinstance(model, str) or model not in served:
        raise ApiError(404, f"The model `{model}` does not exist.", "NotFoundError", "model")
    n = body.get("n")
    n = 1 if n is None else n
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_N:
        raise ApiError(400, f"n = {n!r}: must be an integer in [1, {MAX_N}]", param="n")
    logprobs = _check_sampling(body, chat)
    if chat:
        _check_tools(body)
        messages = chat_messages(body.get("messages"))
        if count_tokens is not None:
            input_tokens = count_tokens("".join(text for _, text in messages))
        else:
            input_tokens = counter.count_chat(messages)
        max_tokens = _positive_int(body, "max_completion_tokens", "max_tokens")
    else:
        if "prompt" not in body:
            raise ApiError(400, "prompt is required", param="prompt")
        input_tokens = _prompt_tokens(body["prompt"], count_tokens or counter.count)
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
        n=n,
        logprobs=logprobs,
        max_tokens_param=max_tokens,
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
    """Usage as vLLM counts it: the prompt once, the completion tokens of every choice."""
    return {
        "prompt_tokens": p.input_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": p.input_tokens + completion_tokens,
    }


#: Alternatives offered in top log-probabilities: words the filler never writes, so none repeats
#: the sampled token.
_ALTERNATIVES = (
    " an", " this", " that", " one", " some", " slow", " red", " cat", " runs", " under", " big",
    " small", " old", " new", " bird", " walks", " near", " green", " tired", " happy", " sleepy",
)  # fmt: skip


def logprob_of(i: int, choice: int = 0) -> float:
    """The sampled token ``i``'s log-probability: in [-0.72, -0.02], varying from token to token.

    A multiplicative hash of (token, choice) gives the spread, so answers are reproducible and
    choices differ. Worked: token 0 of choice 0 reads -0.02 (probability 0.98).
    """
    frac = ((i * 2654435761 + choice * 40503) % 1000) / 1000.0
    return -(0.02 + 0.7 * frac)


def _top(i: int, k: int, choice: int, token: str) -> list[tuple[str, float]]:
    """The top ``k`` (at least the sampled token): the sampled one first, then alternatives sharing
    what it leaves, the j-th getting half of the rest: 1 - p, times 1/2, 1/4, ... So the top list
    sums below 1 and every alternative is below the sampled token (p >= e^-0.72 = 0.49 > (1 - p) / 2).
    Worked: p = 0.9 gives alternatives 0.05, 0.025, 0.0125 (log -3.0, -3.7, -4.4).
    """
    lp = logprob_of(i, choice)
    rest = -math.expm1(lp)  # 1 - p, exact for p near 1
    out = [(token, lp)]
    for j in range(1, k):
        out.append((_ALTERNATIVES[(i + j) % len(_ALTERNATIVES)], math.log(rest * 0.5**j)))
    return out


def _visible(p: ParsedRequest, start: int, stop: int) -> list[tuple[int, str]]:
    """Token indices in ``[start, stop)`` whose text the client sees, with that text."""
    return [(i, t) for i in range(start, stop) if (t := p.output.piece(i))]


def logprobs_object(p: ParsedRequest, start: int, stop: int, choice: int = 0) -> dict[str, Any] | None:
    """The ``logprobs`` of output tokens ``start .. stop-1``, in the shape of the request's API.

    Completions: parallel lists (tokens, token_logprobs, top_logprobs as dicts, text_offset into
    the choice's text). Chat: ``content``, one entry per token with its bytes and top list.
    None when the request asked for none.
    """
    k = p.logprobs
    if k is None:
        return None
    tokens = _visible(p, start, stop)
    if p.chat:
        content = []
        for i, text in tokens:
            top = _top(i, k, choice, text) if k else []
            content.append(
                {
                    "token": text,
                    "logprob": logprob_of(i, choice),
                    "bytes": list(text.encode()),
                    "top_logprobs": [{"token": t, "logprob": v, "bytes": list(t.encode())} for t, v in top],
                }
            )
        return {"content": content}
    offsets = [len(filler_text(0, i)) for i, _ in tokens]
    return {
        "text_offset": offsets,
        "token_logprobs": [logprob_of(i, choice) for i, _ in tokens],
        "tokens": [text for _, text in tokens],
        "top_logprobs": [dict(_top(i, max(k, 1), choice, text)) for i, text in tokens],
    }


def chunk_object(
    p: ParsedRequest,
    rid: str,
    created: int,
    text: str,
    *,
    first: bool,
    finish: str | None,
    index: int = 0,
    logprobs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One streamed chunk of choice ``index`` carrying ``text`` (a chat chunk's first delta also
    names the role) and, when asked for, the log-probabilities of its tokens.

    The last one carries ``finish`` and, as vLLM's do, ``stop_reason`` (the stop string or null).
    """
    if p.chat:
        delta: dict[str, Any] = {"role": "assistant", "content": text} if first else {"content": text}
        choice: dict[str, Any] = {
            "index": index,
            "delta": delta,
            "logprobs": logprobs,
            "finish_reason": finish,
        }
        obj = "chat.completion.chunk"
    else:
        choice = {"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish}
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
    """The whole answer of a non-streaming request that completed: ``n`` choices of its
    :class:`OutputPlan` (each choice was a simulated request of its own)."""
    out = p.output
    choices: list[dict[str, Any]] = []
    # ``stop_reason`` is vLLM's addition: the stop string that ended the output, else null.
    for index in range(p.n):
        logprobs = logprobs_object(p, 0, out.tokens, index)
        if p.chat:
            choices.append(
                {
                    "index": index,
                    "message": {"role": "assistant", "content": out.text},
                    "logprobs": logprobs,
                    "finish_reason": out.finish_reason,
                    "stop_reason": out.stop_reason,
                }
            )
        else:
            choices.append(
                {
                    "index": index,
                    "text": out.text,
                    "logprobs": logprobs,
                    "finish_reason": out.finish_reason,
                    "stop_reason": out.stop_reason,
                }
            )
    return {
        "id": rid,
        "object": "chat.completion" if p.chat else "text_completion",
        "created": created,
        "model": p.model,
        "choices": choices,
        "usage": _usage(p, out.tokens * p.n),
    }


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
