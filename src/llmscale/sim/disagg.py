"""Prefill/decode disaggregation: two simulated pools and the KV transfer between them.

A disaggregated deployment (NVIDIA Dynamo, llm-d, vLLM's ``NixlConnector``) runs
the prompt on a *prefill* replica, ships the prompt's KV cache to a *decode*
replica, and decodes there. Here each pool is an ordinary :class:`Fleet` (its
own replicas, lifecycle, router and scale verbs), and :class:`DisaggFleet`
joins them:

1. A request arrives at the prefill pool as ``(P prompt tokens, 1 output
   token)``: a prefill replica runs only chunked prefill iterations and is done
   with the request when its last prompt chunk has run.
2. Its KV cache (``P x model.kv_bytes_per_token`` bytes, sharded over the TP
   group, each GPU sending its shard over its own link) crosses the
   interconnect: ``transfer_s = P x kv_bytes_per_token_per_gpu / bandwidth +
   latency`` (:func:`kv_transfer_s`).
3. The decode pool admits it at ``prefill end + transfer_s`` as ``(P, O)``. The
   prompt is not computed again: the decode pool's replicas price a prompt
   "chunk" as one more decode slot with that context (:class:`KvLoadedPerf`),
   which is what vLLM's decode side runs -- its first iteration computes the
   first token from the pulled KV. So the client's TTFT is
   ``prefill queue + prefill + transfer + decode queue + first decode step``.

Requests with ``O == 1`` end at the prefill pool (nothing to decode). A request
the prefill pool rejects or loses to its time-out never reaches the decode
pool. The decode pool's client time-out counts from the hand-off (the client has
its first token only after the decode pool's first step, so this is lenient by
the prefill time; stated in docs/disaggregation.md).

Worked number (tests/sim/test_disagg.py pins it): Llama-3-8B keeps ``2 x 32
layers x 8 KV heads x 128 x 2 bytes = 131,072 bytes`` of KV per token; a 2,048
token prompt is 268 MB, which takes 0.60 ms over NVLink4 (450 GB/s each way),
5.4 ms over one NDR InfiniBand port (50 GB/s) and 21.5 ms over 100 GbE
(12.5 GB/s), plus each link's fixed latency.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from llmscale.errors import ConfigError
from llmscale.perf.interconnect import INTERCONNECTS, POOLS, Interconnect, get_interconnect, kv_transfer_s
from llmscale.sim.config import SimConfig
from llmscale.sim.fleet import Fleet
from llmscale.types import Status

__all__ = [
    "INTERCONNECTS",
    "POOLS",
    "DisaggConfig",
    "DisaggFleet",
    "Interconnect",
    "KvLoadedPerf",
    "get_interconnect",
    "kv_transfer_s",
]


@dataclass(frozen=True)
class DisaggConfig:
    """How a disaggregated backtest splits the fleet (``BacktestSettings.disaggregated``).

    The bounds of each pool default to the backtest's (``min_replicas`` at least 1: a pool
    of 0 serves nothing); ``interconnect`` names one of :data:`INTERCONNECTS`.
    """

    interconnect: str = "infiniband"
    prefill_initial_replicas: int = 2
    decode_initial_replicas: int = 2
    #: per-pool upper bounds; None: the backtest's ``max_replicas``
    prefill_max_replicas: int | None = None
    decode_max_replicas: int | None = None

    def __post_init__(self) -> None:
        get_interconnect(self.interconnect)  # validates the name
        for name in ("prefill_initial_replicas", "decode_initial_replicas"):
            if getattr(self, name) < 1:
                raise ConfigError(f"disaggregated.{name} = {getattr(self, name)}, must be >= 1")
        for name in ("prefill_max_replicas", "decode_max_replicas"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise ConfigError(f"disaggregated.{name} = {v}, must be >= 1")

    @property
    def link(self) -> Interconnect:
        return get_interconnect(self.interconnect)


class _KernelFacts:
    """What readers other than the iteration pricer take from ``perf.kernel`` (the FLOP rate)."""

    __slots__ = ("step_flops_s",)

    def __init__(self, step_flops_s: float) -> None:
        self.step_flops_s = step_flops_s


class KvLoadedPerf:
    """A decode replica's performance model: prompts arrive as KV, not as tokens to compute.

    A prompt "chunk" the replica admits costs what one more decoding sequence with
    that much context costs (vLLM's decode side computes the first token from the
    pulled KV in an ordinary decode slot): ``step(pf, pairs, n_pf, n_dec, ctx)`` is
    priced as ``step(0, 0, 0, n_dec + n_pf, ctx + pf)`` of the wrapped model. A
    prompt longer than the iteration's token budget is admitted over several
    iterations, each priced as one decode slot (an overcount of a few decode steps
    for prompts above ``max_num_batched_tokens``). Everything else is the wrapped
    model's. ``kernel`` is not the compiled pricer, so the fleet calls :meth:`step`.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        kernel = getattr(inner, "kernel", None)
        self.kernel = _KernelFacts(float(getattr(kernel, "step_flops_s", 0.0)))

    def step(
        self,
        prefill_tokens: int,
        prefill_attn_pairs: float,
        num_prefill_seqs: int,
        num_decode: int,
        decode_ctx_tokens: int,
    ) -> Any:
        return self.inner.step(
            0, 0.0, 0, int(num_decode) + int(num_prefill_seqs), int(decode_ctx_tokens) + int(prefill_tokens)
        )

    def __getattr__(self, name: str) -> Any:
        # Only reached for attributes not set above: the model, the GPU, KV capacity, decode_affine.
        return getattr(self.inner, name)


class DisaggFleet:
    """A prefill pool and a decode pool joined by a KV transfer (module docstring).

    ``prefill`` and ``decode`` are ordinary fleets: scale them, observe them and
    bill them apart. Time moves only in :meth:`run_until`. Per-request outcomes of
    the whole path are read with :meth:`outcomes` (indexed like the workload).
    Pre: workload arrays sorted by arrival time, tokens >= 1.
    """

    def __init__(
        self,
        perf: Any,
        config: SimConfig,
        arrival_s: np.ndarray,
        input_tokens: np.ndarray,
        output_tokens: np.ndarray,
        *,
        prefill_replicas: int,
        decode_replicas: int,
        gpus_per_replica: float,
        link: Interconnect,
        decode_config: SimConfig | None = None,
    ) -> None:
        if config.hbm_glitches or config.adaptive_batch is not None:
            raise ConfigError(
                "sim.hbm_glitches / sim.adaptive_batch are not modelled with disaggregated pools"
            )
        self.link = link
        self.arrival_s = np.ascontiguousarray(arrival_s, dtype=np.float64)
        self.input_tokens = np.ascontiguousarray(input_tokens, dtype=np.int64)
        self.output_tokens = np.ascontiguousarray(output_tokens, dtype=np.int64)
        n = int(self.arrival_s.size)
        self.num_requests = n
        self.prefill = Fleet(
            perf,
            config,
            self.arrival_s,
            self.input_tokens,
            np.ones(n, dtype=np.int64),
            initial_replicas=prefill_replicas,
            gpus_per_replica=gpus_per_replica,
        )
        empty = np.zeros(0)
        self.decode = Fleet(
            KvLoadedPerf(perf),
            decode_config or config,
            empty,
            empty.astype(np.int64),
            empty.astype(np.int64),
            initial_replicas=decode_replicas,
            gpus_per_replica=gpus_per_replica,
        )
        #: seconds each request's KV takes to cross (computed for all, used for those decoded)
        self.transfer_s = np.asarray(kv_transfer_s(self.input_tokens, float(perf.kv_bytes_per_token), link))
        #: decode-pool index of each request, -1 until handed off (or never: O == 1, or lost in prefill)
        self.decode_idx = np.full(n, -1, dtype=np.int64)
        #: when each request reached the decode pool (NaN: not yet or never)
        self.handoff_s = np.full(n, math.nan)
        self._handled = np.zeros(n, dtype=bool)
        self._lo = 0  # every request below it is handled
        self._pending: list[tuple[float, int]] = []  # (hand-off time, request) in transfer
        self.now = 0.0

    # ------------------------------------------------------------------ time

    def run_until(self, t_end: float) -> None:
        """Run both pools to ``t_end``: prefills, the transfers they start, and the decodes."""
        self.prefill.run_until(t_end)
        self._collect(t_end)
        pending = self._pending
        decode = self.decode
        while pending and pending[0][0] <= t_end:
            h, i = heapq.heappop(pending)
            req = decode.submit(int(self.input_tokens[i]), int(self.output_tokens[i]), h)
            self.decode_idx[i] = req.idx
            self.handoff_s[i] = h
        decode.run_until(t_end)
        self.now = t_end

    def _collect(self, t_end: float) -> None:
        """Start the transfer of every prompt the prefill pool finished since the last call."""
        lo = self._lo
        hi = int(np.searchsorted(self.arrival_s, t_end, side="right"))
        if hi <= lo:
            return
        status = np.asarray(self.prefill.status)[lo:hi]
        fresh = np.flatnonzero((status != Status.IN_FLIGHT) & ~self._handled[lo:hi]) + lo
        if fresh.size:
            self._handled[fresh] = True
            finish = np.asarray(self.prefill.finish_at_s)
            for i in fresh.tolist():
                if self.prefill.status[i] == Status.COMPLETED and self.output_tokens[i] > 1:
                    heapq.heappush(self._pending, (float(finish[i] + self.transfer_s[i]), i))
        handled = self._handled
        while lo < hi and handled[lo]:
            lo += 1
        self._lo = lo

    # ------------------------------------------------------------- accounting

    @property
    def arrivals_done(self) -> bool:
        """Every request has arrived at the prefill pool and none is in transfer."""
        return self.prefill.arrivals_done and not self._pending

    @property
    def unresolved(self) -> int:
        """Requests with no final outcome yet (in the prefill pool, in transfer or decoding)."""
        return self.prefill.unresolved + len(self._pending) + self.decode.unresolved

    @property
    def last_resolved_s(self) -> float:
        return max(self.prefill.last_resolved_s, self.decode.last_resolved_s)

    def gpu_seconds(self, now: float) -> dict[str, float]:
        """GPU-seconds per pool up to ``now`` (:meth:`Fleet.gpu_seconds` of each)."""
        return {"prefill": self.prefill.gpu_seconds(now), "decode": self.decode.gpu_seconds(now)}

    def finish(self, now: float) -> None:
        """Close both pools' books at ``now`` (clients past their time-out gave up)."""
        self.prefill.finish(now)
        self._collect(math.inf)
        self.decode.finish(now)

    def outcomes(self) -> dict[str, np.ndarray]:
        """Per-request outcome columns of the whole path, indexed like the workload.

        ``status`` (:class:`Status` codes: the decode pool's for requests handed off,
        the prefill pool's otherwise; IN_FLIGHT for a request still in transfer),
        ``ttft_s``, ``tpot_s``, ``e2e_s``, ``finish_at_s`` (from the arrival at the
        prefill pool; NaN when not applicable).
        """
        p = self.prefill
        d = self.decode
        status = np.frombuffer(bytes(p.status), dtype=np.uint8).copy()
        first = np.asarray(p.first_token_at_s, dtype=np.float64).copy()
        finish = np.asarray(p.finish_at_s, dtype=np.float64).copy()
        tpot = np.full(self.num_requests, math.nan)
        # A request whose prefill completed with more to decode is not done at the prefill pool.
        to_decode = (status == Status.COMPLETED) & (self.output_tokens > 1)
        status[to_decode] = Status.IN_FLIGHT
        first[to_decode] = math.nan
        finish[to_decode] = math.nan
        handed = self.decode_idx >= 0
        k = self.decode_idx[handed]
        status[handed] = np.frombuffer(bytes(d.status), dtype=np.uint8)[k]
        first[handed] = np.asarray(d.first_token_at_s, dtype=np.float64)[k]
        finish[handed] = np.asarray(d.finish_at_s, dtype=np.float64)[k]
        tpot[handed] = np.asarray(d.tpot_s, dtype=np.float64)[k]
        return {
            "status": status,
            "ttft_s": first - self.arrival_s,
            "tpot_s": tpot,
            "e2e_s": finish - self.arrival_s,
            "finish_at_s": finish,
        }
