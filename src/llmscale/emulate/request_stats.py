"""What one emulated replica's vLLM counts per finished request: how it ended, its tokens, its times.

vLLM observes these when a request finishes (vllm/v1/metrics/loggers.py), aborted requests
included: ``vllm:request_success_total{finished_reason}``, ``vllm:request_prompt_tokens``,
``vllm:request_generation_tokens``, ``vllm:request_params_max_tokens`` (1-2-5 buckets to
max_model_len), ``vllm:request_params_n`` (buckets 1, 2, 5, 10, 20; once per request, however many
sequences it asked for), and the phase times ``vllm:request_prefill_time_seconds`` (scheduled ->
first token), ``vllm:request_decode_time_seconds`` (first -> last token) and
``vllm:request_inference_time_seconds`` (scheduled -> last token), with the request-latency
buckets. The prefix-cache counters count prompt tokens looked up and found (here added when the
request ends, where vLLM adds them when it first schedules it): the emulated engine
runs without prefix caching (``vllm:cache_config_info`` says so), so every lookup misses and
hits stay 0 (a hit rate of 0, what such a vLLM reports). The simulator's replica does not keep
these (the backtest never reads them), so the emulator records them for the requests its HTTP
clients sent, as each one ends.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmscale.metrics.names import REQUEST_LATENCY_BUCKETS_S, REQUEST_PARAMS_N_BUCKETS, vllm_1_2_5_buckets
from llmscale.sim.histogram import BucketHistogram

__all__ = ["FINISHED_REASONS", "RequestStats", "RequestTimes"]

#: vLLM's finish reasons the emulator produces, as its metrics label them (FINISH_REASON_STRINGS
#: of vllm/v1/engine/__init__.py: stop, length, abort; newer vLLMs add error and repetition).
FINISHED_REASONS = ("stop", "length", "abort")


@dataclass(frozen=True)
class RequestTimes:
    """A finished request's phases in seconds: prefill (scheduled -> first token), decode (first ->
    last token), inference (scheduled -> last token). A request that never ran has none."""

    prefill_s: float
    decode_s: float
    inference_s: float


class RequestStats:
    """One replica's finished requests. Token buckets: vLLM's 1-2-5 series up to ``max_model_len``."""

    def __init__(self, max_model_len: int) -> None:
        bounds = tuple(float(b) for b in vllm_1_2_5_buckets(max_model_len))
        self.finished = dict.fromkeys(FINISHED_REASONS, 0)
        self.prompt_tokens = BucketHistogram(bounds)
        self.generation_tokens = BucketHistogram(bounds)
        self.max_tokens = BucketHistogram(bounds)
        self.params_n = BucketHistogram(tuple(float(b) for b in REQUEST_PARAMS_N_BUCKETS))
        self.prefill_s = BucketHistogram(REQUEST_LATENCY_BUCKETS_S)
        self.decode_s = BucketHistogram(REQUEST_LATENCY_BUCKETS_S)
        self.inference_s = BucketHistogram(REQUEST_LATENCY_BUCKETS_S)
        #: prompt tokens looked up in the prefix cache, and found there (never: no prefix caching)
        self.prefix_cache_queries = 0
        self.prefix_cache_hits = 0

    def record(
        self,
        reason: str,
        prompt_tokens: int,
        generation_tokens: int,
        *,
        times: RequestTimes | None = None,
        max_tokens: int | None = None,
        n: int | None = None,
    ) -> None:
        """A request ended for ``reason`` (one of FINISHED_REASONS) after ``generation_tokens``.

        ``max_tokens``: the request's own parameter (vLLM observes it only when given);
        ``n``: given for one sequence of each request (the one that counts the request's ``n``).
        """
        if reason not in self.finished:
            raise ValueError(f"finished_reason {reason!r} is not one of {FINISHED_REASONS}")
        self.finished[reason] += 1
        self.prompt_tokens.observe(float(prompt_tokens))
        self.generation_tokens.observe(float(generation_tokens))
        if max_tokens is not None:
            self.max_tokens.observe(float(max_tokens))
        if n is not None:
            self.params_n.observe(float(n))
        if times is not None:
            # vLLM looks a prompt up when it first schedules it; counted here when it ends
            self.prefix_cache_queries += prompt_tokens
            self.prefill_s.observe(times.prefill_s)
            self.decode_s.observe(times.decode_s)
            self.inference_s.observe(times.inference_s)
