"""``output_len_cv`` and ``prompt_len_cv``: the spread of request lengths, from vLLM's per-request
token histograms (``vllm:request_generation_tokens``, ``vllm:request_prompt_tokens``).

The ``slo`` policy's tail model sizes a replica's decode batch at the context of the requests
*in flight*, which are length-biased: a request stays in the batch for as many steps as it
generates tokens, so the mean output length in flight is ``E[o^2] / E[o] = E[o] (1 + cv^2)``,
not ``E[o]`` (``docs/tail-model.md``). The mean comes from the token counters
(``decode_steps_mean``); the CV needs the distribution, which vLLM exports per finished request
as a histogram on 1-2-5 token buckets (1, 2, 5, 10, ..., 2000, 5000 for max_model_len 8192).
The prompts' CV sets the prefill tail the same model weighs (a mix of 8k-token prompts of CV 0.5
holds ~4x the rate per replica the same mean with CV 1 does: fewer prompts near the TTFT limit).

Within a bucket the lengths are taken as uniform, so each bucket ``(lo, hi]`` contributes
``(lo + hi) / 2`` to the first moment and ``(lo^2 + lo hi + hi^2) / 3`` to the second; the
``+Inf`` bucket is taken as ``(lo, 2 lo]``. Worked (``tests/signals/test_output_lengths.py``):
100 requests in ``(100, 200]`` and 100 in ``(500, 1000]`` -> moments 450 and 303,333.3,
cv^2 = 303,333.3 / 450^2 - 1 = 0.498, cv 0.706 (the two point masses 150 and 750 would give
0.667: the buckets' own width adds a little).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from llmscale.signals.histograms import LATENCY_WINDOW_S, window_histogram
from llmscale.signals.window import OUTPUT_TOKENS, PROMPT_LENGTHS, FleetWindow
from llmscale.types import SignalValue

__all__ = ["bucket_cv", "output_length_signals"]


def bucket_cv(bounds: Sequence[float], cumulative: Sequence[float]) -> float | None:
    """CV of the values behind cumulative bucket counts, uniform within each bucket (None: no count)."""
    n = cumulative[-1] if cumulative else 0.0
    if not n > 0.0:
        return None
    m1 = m2 = 0.0
    lo = prev = 0.0
    for hi, cum in zip(bounds, cumulative, strict=True):
        c = cum - prev
        prev = cum
        top = 2.0 * lo if math.isinf(hi) else hi
        if c > 0.0:
            m1 += c * (lo + top) / 2.0
            m2 += c * (lo * lo + lo * top + top * top) / 3.0
        lo = top if not math.isinf(hi) else lo
    m1 /= n
    m2 /= n
    if m1 <= 0.0:
        return None
    return math.sqrt(max(0.0, m2 / (m1 * m1) - 1.0))


def _cv_signal(fw: FleetWindow, names: Sequence[str], what: str, window_s: float) -> SignalValue:
    hist = window_histogram(fw, names, window_s)
    if hist is None:
        return SignalValue(None, f"no replica has two {what} histogram samples")
    cv = bucket_cv(hist.bounds, hist.cumulative)
    if cv is None:
        return SignalValue(None, "no request finished in the window")
    return SignalValue(cv, f"{hist.count:.0f} finished requests")


def output_length_signals(fw: FleetWindow, window_s: float = LATENCY_WINDOW_S) -> dict[str, SignalValue]:
    """``output_len_cv`` and ``prompt_len_cv`` over the last ``window_s`` (None with a note without
    two histogram samples)."""
    return {
        "output_len_cv": _cv_signal(fw, OUTPUT_TOKENS, "output-length", window_s),
        "prompt_len_cv": _cv_signal(fw, PROMPT_LENGTHS, "prompt-length", window_s),
    }
