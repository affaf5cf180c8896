"""Requests no fleet can serve within the SLO: too long for the context, or too slow to prefill alone.

A request is *infeasible* on a deployment when even an idle replica cannot
meet its TTFT target: its prompt's prefill alone (engine settings as
simulated, no other request, no step noise) takes longer than the target, or
it is longer than the model admits (rejected on arrival with HTTP 400, see
:mod:`llmscale.backtest.context_check`). No replica count changes its fate,
so sizing leaves it out: the capacity probe (:mod:`llmscale.backtest.sizing`),
the defaults sized from the workload and the oracle's 99% target (judged on
an interval's feasible requests). Results count it apart and report the SLO
attainment both over all requests (the headline) and over feasible ones.

E.g. Llama-3-8B on one H100 (chunked prefill, 8,192-token batches): a
7,000-token prompt's first token comes ~0.24 s after it reaches an idle
replica. With a 0.2 s TTFT target it is infeasible; with
``--slo-ttft-per-1k-tokens-s 0.01`` its target is 0.2 + 0.01 x 7 = 0.27 s and
it is feasible again (``tests/backtest/test_feasibility.py``).

The idle prefill time is measured with the simulator itself, once per
distinct prompt length (the default hour has 5,526 among 232,624 requests: 0.04 s):
each length arrives alone on one replica, an hour after the previous one, so
it meets an idle replica (a prefill longer than an hour is infeasible
anyway).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from llmscale.sim.limits import exceeds_context
from llmscale.slo import ttft_target_s, ttft_within

if TYPE_CHECKING:
    from llmscale.backtest.runner import BacktestSettings
    from llmscale.workloads.model import Workload

__all__ = [
    "feasible_only",
    "idle_ttft_s",
    "infeasible_mask",
    "infeasible_parts",
    "infeasible_summary",
]

#: seconds between two lone requests of the idle-prefill measurement (see the module docstring)
_APART_S = 3600.0

#: memo of :func:`infeasible_mask` (a pure function of its key): each backtest worker and oracle
#: trial is forked after the parent computed it, so the idle prefills are simulated once
_MEMO: dict[tuple[Any, ...], tuple[np.ndarray, np.ndarray]] = {}


def _idle_engine(sim: Any) -> Any:
    """``sim`` with what an idle replica's prefill does not depend on set to one value each.

    Only the engine settings stay (batch limits, chunking, memory, context): the oracle's
    fleet (no grace deadline) and the policies' then share one measurement. Injected faults
    go too: feasibility is what a healthy replica can do.
    """
    return replace(
        sim,
        pending_s=0.0,
        loading_s=0.0,
        warmup_s=0.0,
        grace_s=0.0,
        timeout_s=math.inf,
        max_queue=None,
        router="least-outstanding",
        step_noise=0.0,
        seed=0,
        hbm_glitches=(),
        adaptive_batch=None,
    )


def idle_ttft_s(perf: Any, sim: Any, prompt_tokens: np.ndarray) -> np.ndarray:
    """TTFT (s) of each prompt length in ``prompt_tokens`` alone on an idle replica of ``perf``.

    Lengths must be within the replica's context. Measured on a one-replica
    fleet with ``sim``'s engine settings, no step noise, no client time-out.
    """
    from llmscale.sim.fleet import Fleet

    lengths = np.asarray(prompt_tokens, dtype=np.int64)
    if lengths.size == 0:
        return np.zeros(0, dtype=np.float64)
    quiet = _idle_engine(sim)
    arrivals = np.arange(lengths.size, dtype=np.float64) * _APART_S
    ones = np.ones(lengths.size, dtype=np.int64)  # the first token is all that is measured
    fleet = Fleet(perf, quiet, arrivals, lengths, ones, initial_replicas=1, gpus_per_replica=1)
    fleet.run_until(float(arrivals[-1]) + _APART_S)
    fleet.finish(fleet.now)
    ttft = np.asarray(fleet.ttft_s, dtype=np.float64)
    return np.nan_to_num(ttft, nan=math.inf)


def infeasible_mask(workload: Workload, settings: BacktestSettings) -> np.ndarray:
    """Per request of ``workload``: True when no replica count can meet its SLO (module docstring)."""
    over, slow = infeasible_parts(workload, settings)
    mask: np.ndarray = over | slow
    return mask


def infeasible_parts(workload: Workload, settings: BacktestSettings) -> tuple[np.ndarray, np.ndarray]:
    """Per request: (longer than the context, within it but too slow to prefill on an idle replica)."""
    from llmscale.backtest.context_check import fleet_limit
    from llmscale.perf import get_perf_model

    inp = np.asarray(workload.input_tokens, dtype=np.int64)
    out = np.asarray(workload.output_tokens, dtype=np.int64)
    key = (
        settings.model,
        settings.gpu,
        settings.tp,
        settings.calibration,
        settings.precision,
        _idle_engine(settings.sim),
        settings.slo_ttft_s,
        settings.slo_ttft_per_1k_tokens_s,
        hash(inp.tobytes()),
        hash(out.tobytes()),
    )
    hit = _MEMO.get(key)
    if hit is not None:
        return hit
    limit = fleet_limit(
        settings.model, settings.gpu, settings.tp, settings.sim, settings.calibration, settings.precision
    )
    over = exceeds_context(inp, out, limit.admitted_tokens)
    lengths, where = np.unique(inp[~over], return_inverse=True)
    perf = get_perf_model(
        settings.model,
        settings.gpu,
        settings.tp,
        calibration=settings.calibration,
        precision=settings.precision,
    )
    idle = np.full(inp.size, -math.inf)
    idle[~over] = idle_ttft_s(perf, settings.sim, lengths)[where]
    target = ttft_target_s(inp, settings.slo_ttft_s, settings.slo_ttft_per_1k_tokens_s)
    # Over the context: idle = -inf, within any target, so counted once (as over) and not as slow.
    slow: np.ndarray = ~ttft_within(idle, target)
    over.setflags(write=False)
    slow.setflags(write=False)
    _MEMO.clear()  # one workload at a time: a long sweep must not keep every mask
    _MEMO[key] = (over, slow)
    return over, slow


def infeasible_summary(workload: Workload, settings: BacktestSettings) -> dict[str, Any]:
    """The ``infeasible`` entry of the backtest JSON's ``workload`` section."""
    over, slow = infeasible_parts(workload, settings)
    n = int(over.size)
    count = int(np.count_nonzero(over | slow))
    return {
        "requests": count,
        "share": round(count / n, 6) if n else 0.0,
        "over_context": int(np.count_nonzero(over)),
        "prefill_past_ttft_target": int(np.count_nonzero(slow)),
    }


def feasible_only(workload: Workload, settings: BacktestSettings) -> Workload:
    """The feasible requests of ``workload`` (itself when all are), for sizing from the workload.

    Raises :class:`~llmscale.errors.ConfigError` when none is feasible: no fleet can be sized for
    a workload no replica can serve within its SLO.
    """
    from llmscale.errors import ConfigError
    from llmscale.workloads.model import Workload

    keep = ~infeasible_mask(workload, settings)
    if keep.all():
        return workload
    if not keep.any():
        raise ConfigError(
            f"no request of {workload.name} can meet the SLO: each is longer than the context or "
            f"its prefill alone on an idle {settings.model} replica takes longer than its TTFT target "
            f"({settings.slo_ttft_s:g} s + {settings.slo_ttft_per_1k_tokens_s:g} s per 1,000 prompt tokens)"
        )
    return Workload.from_arrays(
        workload.name,
        workload.arrival_s[keep],
        workload.input_tokens[keep],
        workload.output_tokens[keep],
        {**workload.meta, "feasible_only": True},
    )
