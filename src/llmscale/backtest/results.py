"""Per-policy results of a backtest: the summary row, its time series, and SLO accounting."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from llmscale.backtest.feasibility import infeasible_mask
from llmscale.slo import slo_met, ttft_target_s
from llmscale.types import Status

if TYPE_CHECKING:
    from llmscale.backtest.runner import BacktestSettings
    from llmscale.sim.fleet import Fleet
    from llmscale.workloads.model import Workload

#: ``slo_met`` is :func:`llmscale.slo.slo_met`, kept importable from here for scripts
__all__ = ["OUTCOME_KEYS", "SUMMARY_KEYS", "PolicyResult", "outcome_counts", "summarize"]

#: how a run's requests ended and the share that met the SLO: every row's keys after ``policy``
#: (:data:`SUMMARY_KEYS`, and the two-pool row's, ``backtest.disagg.DISAGG_KEYS``)
OUTCOME_KEYS = (
    "requests",
    "completed",
    "rejected",
    "timed_out",
    "killed_by_scale_down",
    "in_flight_at_end",
    "slo_attainment",
)

#: the keys of one result row in the JSON output, in order (a contract for scripts)
SUMMARY_KEYS = (
    "policy",
    *OUTCOME_KEYS,
    "infeasible",
    "slo_attainment_feasible",
    "ttft_p50_s",
    "ttft_p95_s",
    "ttft_p99_s",
    "tpot_p50_s",
    "tpot_p99_s",
    "e2e_p50_s",
    "e2e_p99_s",
    "gpu_hours",
    "cost",
    "cost_currency",
    "replicas_mean",
    "replicas_max",
    "scale_events",
    "direction_changes",
    "mean_gpu_util",
    "mean_sm_active",
    "makespan_s",
    "starts",
    "wall_s",
)


@dataclass
class PolicyResult:
    summary: dict[str, Any]
    series: dict[str, list[Any]] = field(default_factory=dict)
    #: the oracle's result only: the causal reference derived from its schedule
    #: (:mod:`~llmscale.backtest.causal_reference`), when it was run
    causal_reference: PolicyResult | None = None

    @property
    def policy(self) -> str:
        return str(self.summary["policy"])

    def as_json(self, *, with_series: bool = False) -> dict[str, Any]:
        out = dict(self.summary)
        if with_series:
            out["series"] = self.series
        return out


def _pct(values: np.ndarray, q: float) -> float | None:
    values = values[~np.isnan(values)]
    if values.size == 0:
        return None
    return round(float(np.percentile(values, q)), 6)


def _direction_changes(desired: list[int]) -> int:
    changes = 0
    last_dir = 0
    prev = desired[0] if desired else 0
    for d in desired[1:]:
        if d != prev:
            direction = 1 if d > prev else -1
            if last_dir and direction != last_dir:
                changes += 1
            last_dir = direction
            prev = d
    return changes


def per_minute_p99_ttft(
    arrival_s: np.ndarray, ttft_s: np.ndarray, status: np.ndarray, timeout_s: float, end_s: float
) -> tuple[list[float], list[float | None]]:
    """P99 TTFT of the requests arriving in each minute; a request that never got a first
    token counts at the client time-out (it waited at least that long)."""
    ttft = ttft_s.copy()
    no_token = np.isnan(ttft) & (status != Status.REJECTED)
    ttft[no_token] = timeout_s
    minutes = math.ceil(max(end_s, float(arrival_s[-1]) if arrival_s.size else 0.0) / 60.0) or 1
    idx = np.minimum((arrival_s // 60.0).astype(np.int64), minutes - 1)
    order = np.argsort(idx, kind="stable")
    idx_sorted = idx[order]
    ttft_sorted = ttft[order]
    bounds = np.searchsorted(idx_sorted, np.arange(minutes + 1))
    t_out: list[float] = []
    p_out: list[float | None] = []
    for m in range(minutes):
        chunk = ttft_sorted[bounds[m] : bounds[m + 1]]
        chunk = chunk[~np.isnan(chunk)]
        t_out.append(m * 60.0 + 30.0)
        p_out.append(round(float(np.percentile(chunk, 99)), 5) if chunk.size else None)
    return t_out, p_out


def _ready_weighted_mean(series: dict[str, list[Any]], key: str) -> float | None:
    """The mean of series ``key`` over ready replicas (each sample weighted by the replicas ready then).

    ``gpu_util`` gives the mean DCGM_FI_DEV_GPU_UTIL as a 0-1 ratio, ``sm_active`` the mean
    DCGM_FI_PROF_SM_ACTIVE. None when no sample had a ready replica.
    """
    if key not in series:
        return None
    pairs = [(u, r) for u, r in zip(series[key], series["replicas_ready"], strict=True) if u is not None]
    weight = sum(r for _, r in pairs)
    return sum(u * r for u, r in pairs) / weight if weight else None


def outcome_counts(status: np.ndarray, met: np.ndarray) -> dict[str, Any]:
    """The :data:`OUTCOME_KEYS` of a run from each request's status code and SLO verdict."""
    n = int(status.size)
    counts = np.bincount(status, minlength=len(Status.NAMES))
    return {
        "requests": n,
        "completed": int(counts[Status.COMPLETED]),
        "rejected": int(counts[Status.REJECTED]),
        "timed_out": int(counts[Status.TIMED_OUT]),
        "killed_by_scale_down": int(counts[Status.KILLED]),
        "in_flight_at_end": int(counts[Status.IN_FLIGHT]),
        "slo_attainment": round(float(met.sum()) / n, 6) if n else None,
    }


def summarize(
    policy: str,
    workload: Workload,
    fleet: Fleet,
    series: dict[str, list[Any]],
    settings: BacktestSettings,
    *,
    end_s: float,
    wall_s: float,
) -> PolicyResult:
    status = np.frombuffer(bytes(fleet.status), dtype=np.uint8)
    ttft = np.asarray(fleet.ttft_s, dtype=np.float64)
    tpot = np.asarray(fleet.tpot_s, dtype=np.float64)
    e2e = np.asarray(fleet.e2e_s, dtype=np.float64)
    finish = np.asarray(fleet.finish_at_s, dtype=np.float64)
    n = int(status.size)
    target = ttft_target_s(workload.input_tokens, settings.slo_ttft_s, settings.slo_ttft_per_1k_tokens_s)
    met = slo_met(status, ttft, tpot, target, settings.slo_tpot_s)
    infeasible = infeasible_mask(workload, settings)
    feasible_n = n - int(infeasible.sum())
    first_arrival = float(workload.arrival_s[0]) if n else 0.0
    last_finish = float(np.nanmax(finish)) if np.any(~np.isnan(finish)) else first_arrival
    desired = series.get("desired_replicas", [])
    alive = [
        p + lo + w + r + d
        for p, lo, w, r, d in zip(
            series.get("replicas_pending", []),
            series.get("replicas_loading", []),
            series.get("replicas_warmup", []),
            series.get("replicas_ready", []),
            series.get("replicas_draining", []),
            strict=True,
        )
    ]
    if "replicas_node_pending" in series:
        # Asked for and waiting for a node: part of the fleet the policy holds (node pool only).
        alive = [a + k for a, k in zip(alive, series["replicas_node_pending"], strict=True)]
    mean_util = _ready_weighted_mean(series, "gpu_util")
    mean_sm = _ready_weighted_mean(series, "sm_active")
    from llmscale.mix.fleet import fleet_cost

    cost, currency, by_gpu = fleet_cost(fleet, settings.gpu, settings.gpu_prices, end_s)
    summary: dict[str, Any] = {
        "policy": policy,
        **outcome_counts(status, met),
        "infeasible": n - feasible_n,
        "slo_attainment_feasible": (
            round(float(met[~infeasible].sum()) / feasible_n, 6) if feasible_n else None
        ),
        "ttft_p50_s": _pct(ttft, 50),
        "ttft_p95_s": _pct(ttft, 95),
        "ttft_p99_s": _pct(ttft, 99),
        "tpot_p50_s": _pct(tpot, 50),
        "tpot_p99_s": _pct(tpot, 99),
        "e2e_p50_s": _pct(e2e, 50),
        "e2e_p99_s": _pct(e2e, 99),
        "gpu_hours": round(fleet.gpu_seconds(end_s) / 3600.0, 5),
        # the GPU-hours at the prices per GPU-hour (--gpu-prices, or the cited defaults)
        "cost": cost,
        "cost_currency": currency,
        "replicas_mean": round(sum(alive) / len(alive), 3) if alive else None,
        "replicas_max": max(alive) if alive else None,
        "scale_events": fleet.scale_events,
        "direction_changes": _direction_changes(desired),
        "mean_gpu_util": None if mean_util is None else round(mean_util, 4),
        "mean_sm_active": None if mean_sm is None else round(mean_sm, 4),
        "makespan_s": round(last_finish - first_arrival, 3),
        # starts into service after the initial fleet, by tier (cold / warm_node / sleeping)
        "starts": fleet.starts_by_tier(),
        "wall_s": round(wall_s, 3),
    }
    if by_gpu is not None:
        # Only a mixed-GPU fleet (--gpus): the GPU-hours per type behind the cost.
        summary["gpu_hours_by_gpu"] = by_gpu
    if fleet.config.node_pool:
        # Replica-seconds spent waiting for a node (provisioning or a full pool): only with a node
        # pool, so a run without one writes the row it wrote before the pool.
        summary["node_pending_replica_s"] = round(fleet.node_pending_seconds(end_s), 3)
    minute_t, minute_p99 = per_minute_p99_ttft(
        workload.arrival_s, ttft, status, fleet.config.timeout_s, end_s
    )
    step = series["t_s"][1] - series["t_s"][0] if len(series.get("t_s", [])) > 1 else 10.0
    edges = np.concatenate([[0.0], np.asarray(series.get("t_s", []), dtype=np.float64)])
    counts_per_step = np.histogram(workload.arrival_s, bins=edges)[0] if edges.size > 1 else np.array([])
    out_series = dict(series)
    out_series["arrival_rps"] = [round(float(c) / step, 4) for c in counts_per_step]
    out_series["minute_t_s"] = minute_t
    out_series["ttft_p99_s_per_minute"] = minute_p99
    return PolicyResult(summary=summary, series=out_series)
