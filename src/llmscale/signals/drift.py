"""What the fleet did over a window, as a step-time model predicts it: mean ITL and TTFT, batch, context.

The live controller compares these with :mod:`llmscale.perf.drift`'s predictions (the model
drift signals ``model_drift_itl_ratio`` and ``model_drift_ttft_ratio``). Pure: a
:class:`~llmscale.signals.window.FleetWindow` in, a :class:`DriftWindow` out.

Means here, not percentiles. The percentiles of :mod:`llmscale.signals.histograms` are what an
SLO is about; a step-time model predicts the *mean* duration of an engine step, so the
comparison is between means: the histogram's ``_sum`` increase over its ``_count`` increase,
summed over replicas (PromQL's ``rate(x_sum) / rate(x_count)``).

Which numbers, and why:

* **Mean ITL** — ``vllm:inter_token_latency_seconds`` (or the older
  ``time_per_output_token_seconds``). vLLM observes one gap per generated token after the first,
  so the mean is weighted by tokens: a step of 30 sequences counts 30 times.
* **Batch** — ``vllm:num_requests_running`` per replica, at every observation of the window,
  weighted like the ITL by itself (``sum b^2 / sum b``): the batch an average *token* was
  generated in. A replica at 10 half the time and idle the other half averages 5, but every
  token it produced came from a batch of 10; the model must be asked about 10.
* **Context** — mean prompt + half the mean output of the requests finished in the window
  (token counters over finished requests): a sequence's context grows from its prompt to
  prompt + output while it decodes, so halfway on average. Long outputs stay in the batch
  longer, so this understates the context of the running batch a little; on Llama-3-8B at
  batch 32 the KV reads it feeds are ~3 of 13 ms per step, so a 30% error in the context
  moves the prediction by ~7%.
* **Prefills per second per replica** — the TTFT histogram's count increase over the span:
  each prefill takes engine time from the decode steps it shares an iteration with.
* **Mean TTFT, and how much of it was queueing** — ``vllm:request_queue_time_seconds`` times a
  request from its arrival at the replica to its first scheduling, so mean TTFT minus mean
  queue time is the engine's own time to the first token: the steps that prefill the prompt.
  A step-time model predicts that part, not the queue. Where no queue-time histogram is
  exported, the most requests seen waiting at an observation (replicas'
  ``num_requests_waiting`` plus the gateway queue) says whether TTFT was queueing at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from llmscale.signals.histograms import LATENCY_WINDOW_S, counter_increase
from llmscale.signals.rates import counter_rates
from llmscale.signals.window import (
    ITL,
    QUEUE_TIME,
    RUNNING,
    TTFT,
    WAITING,
    FleetWindow,
    Span,
    first_value,
    start_index,
)
from llmscale.types import Phase, ReplicaSample

__all__ = ["DriftWindow", "drift_window"]


@dataclass(frozen=True, slots=True)
class DriftWindow:
    """The fleet's engine over a window (sums over replicas; None where nothing was seen)."""

    #: seconds between the oldest and newest observation used
    span_s: float
    #: replicas with two samples or more in the window
    replicas: int
    #: inter-token gaps observed (the ITL histogram's count increase) and their summed seconds
    itl_count: float
    itl_sum_s: float
    #: first tokens observed (the TTFT histogram's count increase) and their summed seconds
    ttft_count: float
    ttft_sum_s: float
    #: requests scheduled (the queue-time histogram's count increase) and their summed waits;
    #: ``queue_seen`` False: no replica exports a queue-time histogram
    queue_count: float
    queue_sum_s: float
    queue_seen: bool
    #: running requests per replica, weighted by itself (see the module docstring); None: no gauge
    batch: float | None
    #: requests finished in the window, and their prompt and generated tokens
    finished: float
    prompt_tokens: float
    generation_tokens: float
    #: prompt tokens of the requests prefilled in the window (over replicas with a TTFT histogram)
    prefilled: float
    prefill_prompt_tokens: float
    #: prefills per second per replica (None: no replica had two TTFT samples)
    prefill_rps_per_replica: float | None
    #: the most requests seen waiting at one observation (replicas + gateway); None: unknown
    waiting_max: float | None

    @property
    def itl_mean_s(self) -> float | None:
        return self.itl_sum_s / self.itl_count if self.itl_count > 0 else None

    @property
    def ttft_mean_s(self) -> float | None:
        return self.ttft_sum_s / self.ttft_count if self.ttft_count > 0 else None

    @property
    def queue_mean_s(self) -> float | None:
        return self.queue_sum_s / self.queue_count if self.queue_count > 0 else None

    @property
    def prompt_mean_tokens(self) -> float | None:
        """Mean prompt of the requests prefilled in the window (of the finished ones without TTFT)."""
        if self.prefilled > 0:
            return self.prefill_prompt_tokens / self.prefilled
        return self.prompt_tokens / self.finished if self.finished > 0 else None

    @property
    def context_mean_tokens(self) -> float | None:
        """Mean prompt + half the mean output of the finished requests."""
        if not self.finished > 0:
            return None
        return (self.prompt_tokens + 0.5 * self.generation_tokens) / self.finished

    @property
    def queue_free(self) -> bool:
        """No observation of the window saw a request waiting (and the waiting gauge was known)."""
        return self.waiting_max is not None and self.waiting_max == 0.0


def _hist_name(s: ReplicaSample, names: Sequence[str]) -> str | None:
    for n in names:
        if n in s.histograms:
            return n
    return None


def _sum_count_increase(span: Span, name: str) -> tuple[float, float] | None:
    """(sum, count) increase of histogram ``name`` over a replica's span, reset-aware; None if absent."""
    first, last = span.first[1], span.last[1]
    if name not in last.histograms:
        return None
    if span.restarted:
        hs = [s.histograms[name] for s in span.samples if name in s.histograms]
        if len(hs) < 2:
            return None
        return counter_increase([h.sum for h in hs]), counter_increase([h.count for h in hs])
    h0 = first.histograms.get(name)
    if h0 is None:
        return None  # the family appeared mid-window (an upgrade): no increase to take
    h1 = last.histograms[name]
    return h1.sum - h0.sum, h1.count - h0.count


def drift_window(fw: FleetWindow, window_s: float = LATENCY_WINDOW_S) -> DriftWindow:
    """The :class:`DriftWindow` of the last ``window_s`` of ``fw`` (the latency signals' window)."""
    start = start_index(fw, window_s)
    obs = fw.observations
    itl_sum = itl_count = ttft_sum = ttft_count = queue_sum = queue_count = 0.0
    queue_seen = False
    prefill_rate = 0.0
    rate_replicas = 0
    for span in fw.spans(start).values():
        if span.count < 2:
            continue
        last = span.last[1]
        dt = obs[span.last[0]].time_s - obs[span.first[0]].time_s
        name = _hist_name(last, ITL)
        inc = _sum_count_increase(span, name) if name is not None else None
        if inc is not None:
            itl_sum += inc[0]
            itl_count += inc[1]
        name = _hist_name(last, TTFT)
        inc = _sum_count_increase(span, name) if name is not None else None
        if inc is not None:
            ttft_sum += inc[0]
            ttft_count += inc[1]
            if dt > 0.0:
                prefill_rate += inc[1] / dt
                rate_replicas += 1
        name = _hist_name(last, QUEUE_TIME)
        inc = _sum_count_increase(span, name) if name is not None else None
        if inc is not None:
            queue_seen = True
            queue_sum += inc[0]
            queue_count += inc[1]
    # The batch a token saw: every known serving replica at every observation, weighted by itself.
    # One pass over the window's samples for both. The queue is the fleet's at each observation
    # as ObsTotals.queue() reads it (unknown replicas extrapolated; None when no serving replica
    # reports one), without indexing the observations before the window.
    b_sum = b_sq = 0.0
    b_seen = False
    waiting_max: float | None = 0.0
    ready = Phase.READY
    for i in range(start, len(obs)):
        o = obs[i]
        serving = waiting_n = 0
        waiting = 0.0
        for s in o.replicas:
            if s.phase != ready:
                continue
            serving += 1
            if not s.ok:
                continue
            values = s.values
            b = first_value(values, RUNNING)
            if b is not None:
                b_seen = True
                b_sum += b
                b_sq += b * b
            q = first_value(values, WAITING)
            if q is not None:
                waiting += q
                waiting_n += 1
        gateway = float(o.gateway_queue or 0)
        if serving == 0:
            queue: float | None = gateway
        else:
            queue = waiting * serving / waiting_n + gateway if waiting_n else None
        waiting_max = None if queue is None or waiting_max is None else max(waiting_max, queue)
    if b_sum > 0.0:
        batch: float | None = b_sq / b_sum
    else:
        batch = 0.0 if b_seen else None
    r = counter_rates(fw, window_s)
    return DriftWindow(
        span_s=obs[-1].time_s - obs[start].time_s,
        replicas=r.replicas,
        itl_count=itl_count,
        itl_sum_s=itl_sum,
        ttft_count=ttft_count,
        ttft_sum_s=ttft_sum,
        queue_count=queue_count,
        queue_sum_s=queue_sum,
        queue_seen=queue_seen,
        batch=batch,
        finished=r.finished,
        prompt_tokens=r.prompt_tokens,
        generation_tokens=r.generation_tokens,
        prefilled=r.prefilled,
        prefill_prompt_tokens=r.prefill_prompt_tokens,
        prefill_rps_per_replica=prefill_rate / rate_replicas if rate_replicas else None,
        waiting_max=waiting_max,
    )
