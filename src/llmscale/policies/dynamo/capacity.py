"""Dynamo's capacity search for an aggregated engine, priced by llmscale's step-time model.

``core/perf_model/engine_query.py`` of ai-dynamo 1.6.1 (``_find_aggregated_capacity``,
``_capacity_batch_sizes``, ``_select_capacity``): where Dynamo asks its forward-pass model, this asks
:mod:`llmscale.perf` how long one engine iteration takes (see the package docstring).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from llmscale.deployment import Deployment
from llmscale.errors import ConfigError

__all__ = [
    "DEFAULT_ISL_TOKENS",
    "DEFAULT_OSL_TOKENS",
    "MAX_CAPACITY_SEARCH_CANDIDATES",
    "AggCapacity",
    "StepModel",
    "agg_engine_capacity",
    "capacity_batch_sizes",
    "chunked_prefill_s",
    "iteration_s",
    "perf_for",
]

#: Dynamo's ``defaults.py`` request shape, used until the fleet has finished a request.
DEFAULT_ISL_TOKENS = 3000.0
DEFAULT_OSL_TOKENS = 150.0


class _Cost(Protocol):
    @property
    def duration_s(self) -> float: ...


class StepModel(Protocol):
    """What the planner needs of a performance model: one engine iteration's duration.

    :class:`llmscale.perf.PerfModel` satisfies it; unit tests pass a small stub.
    """

    def step(
        self,
        prefill_tokens: int,
        prefill_attn_pairs: float,
        num_prefill_seqs: int,
        num_decode: int,
        decode_ctx_tokens: int,
    ) -> _Cost: ...


def iteration_s(
    perf: StepModel, prefill_tokens: float, decode_kv_tokens: float, num_decode: int, isl: float
) -> float:
    """Duration of one mixed iteration: ``prefill_tokens`` of whole prompts of ``isl`` tokens + decodes.

    Prefill attention is counted as (ISL + 1)/2 key positions per prompt token
    (whole prompts packed into the chunk).
    """
    p = max(0, round(prefill_tokens))
    seqs = max(1, math.ceil(p / max(1.0, isl))) if p > 0 else 0
    pairs = p * (max(1.0, isl) + 1.0) / 2.0
    return perf.step(p, pairs, seqs, max(0, num_decode), max(0, round(decode_kv_tokens))).duration_s


#: full chunks :func:`chunked_prefill_s` adds one by one before it prices the rest at once
_MAX_CHUNK_STEPS = 10_000


def chunked_prefill_s(
    perf: StepModel,
    queued_tokens: float,
    isl: float,
    max_num_batched_tokens: int,
    decode_kv: float,
    num_decode: int,
) -> float:
    """``AggRegressionModel.estimate_next_ttft``: a new prompt behind ``queued_tokens``, chunk by chunk."""
    remaining = queued_tokens + isl
    total = 0.0
    full = float(max_num_batched_tokens)
    if remaining > _MAX_CHUNK_STEPS * full:
        # Bounded whatever the queue a page reports: 1e12 queued tokens in 8,192-token chunks were
        # 1.2e8 iterations of this loop (issue 19). Past 10,000 full chunks (82M tokens at 8,192,
        # no backtest comes near) they are priced at once; the rest as before.
        n = math.floor(remaining / full) - 1 if math.isfinite(remaining) else 0
        if n <= 0:
            return math.inf
        total = n * iteration_s(perf, full, decode_kv, num_decode, isl)
        remaining -= n * full
    while remaining > 0:
        chunk = min(remaining, full)
        total += iteration_s(perf, chunk, decode_kv, num_decode, isl)
        remaining -= chunk
    return total


@dataclass(frozen=True)
class AggCapacity:
    """An agg engine's sustainable request rate, the batch that gives it and whether it meets the SLOs."""

    engine_rps: float
    batch: int
    ttft_s: float
    itl_s: float
    eligible: bool = True


#: ai-dynamo 1.6.1 ``MAX_CAPACITY_SEARCH_CANDIDATES``: at most this many batch sizes are tried
MAX_CAPACITY_SEARCH_CANDIDATES = 128


def capacity_batch_sizes(max_batch: int) -> list[int]:
    """The batch sizes the capacity search tries: all of 1..max_batch up to 128, else 128 spread evenly.

    E.g. 256 -> 1, 3, 5, ..., 253, 256 (``1 + i x 255 // 127``); 1000 -> 1, 8, 16, ..., 992, 1000.
    """
    if max_batch <= 0:
        return []
    if max_batch <= MAX_CAPACITY_SEARCH_CANDIDATES:
        return list(range(1, max_batch + 1))
    span, steps = max_batch - 1, MAX_CAPACITY_SEARCH_CANDIDATES - 1
    return [1 + i * span // steps for i in range(MAX_CAPACITY_SEARCH_CANDIDATES)]


def _better(best: AggCapacity | None, candidate: AggCapacity) -> AggCapacity:
    """Dynamo's throughput selection: a candidate within the SLOs beats one outside; then the higher rate."""
    if best is None or (candidate.eligible and not best.eligible):
        return candidate
    if best.eligible and not candidate.eligible:
        return best
    return candidate if candidate.engine_rps > best.engine_rps else best


def agg_engine_capacity(
    perf: StepModel,
    isl: float,
    osl: float,
    ttft_sla_s: float,
    itl_sla_s: float,
    max_num_batched_tokens: int,
    max_kv_tokens: int | None,
    max_num_seqs: int | None,
) -> AggCapacity:
    """ai-dynamo 1.6.1's aggregated capacity search (``_find_aggregated_capacity``), throughput target.

    The request shape is rounded up to whole tokens (ISL = ceil, OSL = max(1, ceil));
    a decode holds ``ctx = ISL + OSL // 2`` tokens. Batch sizes run up to
    ``min(max_num_seqs, max_kv_tokens // ctx, max_num_batched_tokens - 1)``, at most
    128 of them (:func:`capacity_batch_sizes`); a batch whose piggybacked prefill
    ``ceil(bs x ISL / OSL)`` does not fit next to its decodes (``<= mbt - bs``) is
    skipped. Each batch's ITL is one mixed iteration, its TTFT the chunked prefill
    of that prefill plus a new prompt at the same decode load; its rate is
    ``bs / (OSL x ITL)``. The best batch within both SLOs wins by rate; when none
    is within them, the highest-rate batch is returned with ``eligible = False``
    (the previous port returned batch 1's rate instead). Zero capacity when the
    shape is not positive or no batch fits.
    """
    if isl <= 0 or osl <= 0 or max_num_batched_tokens <= 1:
        return AggCapacity(0.0, 0, 0.0, 0.0, eligible=False)
    isl_t, osl_t = math.ceil(isl), max(1, math.ceil(osl))
    ctx = max(1, isl_t + osl_t // 2)
    decode_cap = max_num_seqs if max_num_seqs else 1 << 31
    if max_kv_tokens:
        decode_cap = min(decode_cap, max_kv_tokens // ctx)
    hard_cap = min(decode_cap, max(1, max_num_batched_tokens - 1))
    best: AggCapacity | None = None
    for bs in capacity_batch_sizes(hard_cap):
        prefill = math.ceil(bs * isl_t / osl_t)
        budget = max(0, max_num_batched_tokens - bs)
        if budget == 0 or prefill > budget:
            continue
        prefill = min(prefill, max_num_batched_tokens)
        decode_kv = float(bs * ctx)
        itl = iteration_s(perf, prefill, decode_kv, bs, isl_t)
        if itl <= 0:
            continue
        ttft = chunked_prefill_s(perf, float(prefill), isl_t, max_num_batched_tokens, decode_kv, bs)
        ok = ttft <= ttft_sla_s and itl <= itl_sla_s
        best = _better(best, AggCapacity(bs / (osl_t * itl), bs, ttft, itl, ok))
    return best if best is not None else AggCapacity(0.0, 0, 0.0, 0.0, eligible=False)


def perf_for(ctx: Deployment) -> tuple[StepModel, int | None]:
    """The calibrated model of ``ctx``'s replica and its KV capacity in tokens (None if unknown)."""
    from llmscale.perf import get_perf_model

    perf = get_perf_model(
        ctx.model, ctx.gpu, ctx.tp, calibration=ctx.calibration, scale=ctx.perf_scale, precision=ctx.precision
    )
    try:
        kv_tokens: int | None = perf.kv_capacity_tokens(
            max_num_batched_tokens=ctx.max_num_batched_tokens,
            max_num_seqs=ctx.max_num_seqs,
        )
    except ConfigError:
        kv_tokens = None
    return perf, kv_tokens
