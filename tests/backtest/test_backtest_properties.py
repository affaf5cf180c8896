"""Invariants of whole backtests (real controller loop, real perf model, small seeded workloads)."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmscale.backtest.compare import build_document, run_backtest
from llmscale.backtest.runner import BacktestSettings, run_policy
from llmscale.sim.config import SimConfig
from llmscale.workloads import Workload, flash_crowd


def small_workload(seed: int, rate: float, duration_s: float) -> Workload:
    return flash_crowd(
        rate,
        duration_s,
        spike_start_s=duration_s / 3,
        spike_duration_s=duration_s / 6,
        multiplier=4.0,
        seed=seed,
    )


def quick_settings(**kw) -> BacktestSettings:
    base = BacktestSettings(
        min_replicas=1,
        max_replicas=6,
        initial_replicas=2,
        sim=SimConfig(pending_s=20.0, loading_s=10.0, warmup_s=5.0, grace_s=10.0, timeout_s=30.0),
    )
    return replace(base, **kw)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    rate=st.floats(2.0, 30.0),
    policy=st.sampled_from(["hpa-gpu-util", "static"]),
    max_replicas=st.integers(1, 6),
)
def test_requests_conserved_and_replicas_within_bounds(seed, rate, policy, max_replicas):
    w = small_workload(seed, rate, 300.0)
    s = quick_settings(max_replicas=max_replicas, initial_replicas=min(2, max_replicas), seed=seed)
    lines: list[str] = []

    class Sink:
        def write(self, text: str) -> int:
            lines.append(text)
            return len(text)

    r = run_policy(w, policy, s, decisions_out=Sink())  # type: ignore[arg-type]
    row = r.summary
    accounted = (
        row["completed"]
        + row["rejected"]
        + row["timed_out"]
        + row["killed_by_scale_down"]
        + row["in_flight_at_end"]
    )
    assert accounted == row["requests"] == w.num_requests
    if policy != "static":
        for line in lines:
            tick = json.loads(line)
            assert s.min_replicas <= tick["desired"] <= s.max_replicas
        active = np.add.reduce(
            [
                r.series[k]
                for k in ("replicas_pending", "replicas_loading", "replicas_warmup", "replicas_ready")
            ]
        )
        assert active.max() <= s.max_replicas


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000))
def test_same_seed_gives_identical_json_apart_from_wall_time(seed):
    w = small_workload(seed, 8.0, 180.0)
    s = quick_settings(seed=seed, sim=replace(quick_settings().sim, step_noise=0.05, seed=seed))

    def doc() -> str:
        results, oracle, _ = run_backtest(w, ["hpa-gpu-util", "static"], s, include_oracle=True, jobs=1)
        d = build_document(w, s, results, oracle, with_series=True)
        for row in [*d["results"], d["oracle"]]:
            row.pop("wall_s")
        return json.dumps(d, sort_keys=True)

    assert doc() == doc()


def test_no_kill_unless_grace_expired_static_never_drains():
    w = small_workload(1, 20.0, 300.0)
    r = run_policy(w, "static", quick_settings(policy_params={"static": {"replicas": 3}}))
    assert r.summary["killed_by_scale_down"] == 0
    assert r.summary["scale_events"] == 0
