"""Closed batches replayed on the simulator: what ``vllm bench latency`` measures, predicted.

A closed batch is B requests of ``input_tokens`` prompt and ``output_tokens`` output tokens, all
sent at once; its latency is the time until the last one finished. That is what the end-to-end
engine measurements (shared/data/calibration/argonne) and ``vllm bench latency`` report, and it
exercises everything the simulator does per iteration: prefill batching under the token budget,
decode batches shrinking as requests finish, KV blocks running out and preemption.

The schedule of a closed batch (which iterations run, with how many prompt tokens and decode
sequences) depends on the engine's settings and the KV capacity, never on how long an iteration
takes: every request is there from the start and nobody times out. So :func:`schedule` replays
the batch once on the real simulator, recording every iteration, and :meth:`Schedule.makespan_s`
then prices that schedule with any set of coefficients at the cost of a few hundred step-cost
calls: the fit evaluates thousands of coefficient vectors without re-running the simulator, and
its prediction is exactly the simulator's (``tests/perf/test_closed_batch.py`` checks both).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np

from llmscale.errors import ConfigError
from llmscale.types import Status

__all__ = ["EngineSettings", "Schedule", "schedule", "simulate_makespan_s"]

#: Simulated time a closed batch may take (a batch of 256 x 32k tokens takes hours, not years).
_HORIZON_S = 1e7


@dataclass(frozen=True, slots=True)
class EngineSettings:
    """The scheduler settings of a vLLM-like engine that shape a batch's iterations.

    Defaults are vLLM V1's (chunked prefill on, a budget of 8,192 tokens per iteration, 256
    sequences). :meth:`vllm_v0` gives the 2024 default the Argonne measurements ran with.
    """

    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    chunked_prefill: bool = True
    gpu_memory_utilization: float = 0.9

    @staticmethod
    def vllm_v0(max_model_len: int) -> EngineSettings:
        """vLLM 0.4-0.5 defaults: no chunked prefill, budget max(max_model_len, 2048) tokens."""
        return EngineSettings(
            max_num_seqs=256, max_num_batched_tokens=max(max_model_len, 2048), chunked_prefill=False
        )

    def sim_config(self, **extra: Any) -> Any:
        from llmscale.sim.config import SimConfig

        return SimConfig(
            max_num_seqs=self.max_num_seqs,
            max_num_batched_tokens=self.max_num_batched_tokens,
            chunked_prefill=self.chunked_prefill,
            gpu_memory_utilization=self.gpu_memory_utilization,
            **extra,
        )


@dataclass(frozen=True)
class Schedule:
    """Every iteration of one closed batch, as ``PerfModel.step`` arguments with a multiplicity.

    Row i of ``steps`` is (count, prefill tokens, attention pairs, prefill sequences, decode
    sequences, decode context per iteration); decode-only iterations of one batch size are
    merged into one row whose context is their mean (a decode-only step is affine in its
    context, so count x step(mean context) is the sum exactly, up to rounding).
    A batch with one output token measures the time to first token of its last request.
    """

    steps: np.ndarray
    preemptions: int
    iterations: int

    def makespan_s(self, perf: Any) -> float:
        """Time until the last request finished, priced by ``perf`` (a ``PerfModel``)."""
        return _price(self.steps, perf)


def _price(steps: np.ndarray, perf: Any) -> float:
    kernel = getattr(perf, "kernel", None)
    total = 0.0
    for cnt, pf, pairs, npf, nd, ctx in steps.tolist():
        if kernel is not None:
            d = kernel.cost(pf, pairs, npf, nd, ctx)[0]
        else:
            d = perf.step(int(pf), pairs, int(npf), int(nd), round(ctx)).duration_s
        total += cnt * d
    return total


def _merge(rows: list[tuple[float, float, float, float, float, float]]) -> np.ndarray:
    mixed: list[tuple[float, ...]] = []
    dec_steps: dict[float, float] = defaultdict(float)
    dec_ctx: dict[float, float] = defaultdict(float)
    for cnt, pf, pairs, npf, nd, ctx in rows:
        if npf == 0.0:
            dec_steps[nd] += cnt
            dec_ctx[nd] += ctx
        else:
            mixed.append((cnt, pf, pairs, npf, nd, ctx))
    for nd in sorted(dec_steps):
        k = dec_steps[nd]
        mixed.append((k, 0.0, 0.0, 0.0, nd, dec_ctx[nd] / k))
    return np.array(mixed, dtype=float).reshape(-1, 6)


def schedule(
    model: str,
    gpu: str,
    tp: int,
    input_tokens: int,
    output_tokens: int,
    batch: int,
    engine: EngineSettings,
) -> Schedule:
    """Replay a closed batch on one simulated replica and return its iteration schedule.

    Raises :class:`ConfigError` if the model does not fit the GPUs or a request exceeds the
    model's context (as vLLM would refuse it).
    """
    if min(input_tokens, output_tokens, batch) < 1:
        raise ConfigError(
            "a closed batch needs input, output and batch >= 1 "
            f"(got {input_tokens}, {output_tokens}, {batch})"
        )
    fleet = closed_batch_fleet(model, gpu, tp, input_tokens, output_tokens, batch, engine)
    replica = fleet.replicas[0]
    trace: list[tuple[float, float, float, float, float, float]] = []
    replica.trace = trace
    fleet.run_until(_HORIZON_S)
    if fleet.unresolved > 0 or int(fleet.counts[Status.REJECTED]) > 0:
        raise ConfigError(
            f"{model} on {tp} x {gpu}: a closed batch of {batch} x ({input_tokens} + {output_tokens}) "
            f"tokens does not run (a request is rejected or never finishes)"
        )
    return Schedule(steps=_merge(trace), preemptions=int(replica.num_preemptions), iterations=len(trace))


def closed_batch_fleet(
    model: str, gpu: str, tp: int, input_tokens: int, output_tokens: int, batch: int, engine: EngineSettings
) -> Any:
    """One warm replica of ``model`` on ``tp`` x ``gpu`` with ``batch`` equal requests arriving at 0.

    Nobody times out and no lifecycle delay applies: a closed batch is all the replica does.
    """
    from llmscale.perf.step_time import get_perf_model
    from llmscale.sim.fleet import Fleet

    cfg = engine.sim_config(timeout_s=math.inf, pending_s=0.0, loading_s=0.0, warmup_s=0.0)
    return Fleet(
        get_perf_model(model, gpu, tp),
        cfg,
        np.zeros(batch),
        np.full(batch, input_tokens, dtype=np.int64),
        np.full(batch, output_tokens, dtype=np.int64),
        initial_replicas=1,
        gpus_per_replica=tp,
    )


def simulate_makespan_s(
    model: str, gpu: str, tp: int, input_tokens: int, output_tokens: int, batch: int, engine: EngineSettings
) -> float:
    """The simulator's own latency of a closed batch (with the committed coefficients), s."""
    fleet = closed_batch_fleet(model, gpu, tp, input_tokens, output_tokens, batch, engine)
    fleet.run_until(_HORIZON_S)
    return float(np.nanmax(np.asarray(fleet.finish_at_s)))
