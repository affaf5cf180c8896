"""The oracle is a lower bound: no policy reaches its attainment (or 99%) with fewer GPU-hours.

Workloads where the interval-greedy oracle was not, found from outside: long outputs (~1.5k
tokens; requests span several 60 s intervals and a 30 s tail judged them unfinished) and coarse
replicas (Llama-3-70B at TP 4 on H200: a replica is 4 GPUs). Small workloads (5 minutes, five
intervals), compiled or pure-Python simulator alike: seconds per example. Each example compares
the oracle with three static fleets and three autoscalers (``slo``, ``knative-kpa``,
``hpa-gpu-util``).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmscale.backtest.compare import run_backtest
from llmscale.backtest.runner import BacktestSettings
from llmscale.sim.config import SimConfig
from llmscale.workloads import Workload, flash_crowd, poisson

DURATION_S = 300.0
STATIC_SIZES = (2, 4, 6)
POLICIES = ("slo", "knative-kpa", "hpa-gpu-util")


def _workload(kind: str, seed: int, rate_rps: float) -> Workload:
    rng = np.random.default_rng(seed)
    if kind == "bursty":
        base = flash_crowd(
            rate_rps, DURATION_S, spike_start_s=100.0, spike_duration_s=60.0, multiplier=4.0, seed=seed
        )
    else:
        base = poisson(rate_rps, DURATION_S, seed=seed)
    n = base.num_requests
    # (prompt, output) token ranges of each shape
    shapes = {
        "long-output": ((200, 1200), (1200, 1800)),
        "long-prompt": ((3000, 7000), (50, 300)),
        "bursty": ((200, 2000), (50, 400)),
    }
    (p_lo, p_hi), (o_lo, o_hi) = shapes[kind]
    inp = rng.integers(p_lo, p_hi, n).astype(np.int64)
    out = rng.integers(o_lo, o_hi, n).astype(np.int64)
    return Workload.from_arrays(kind, base.arrival_s, inp, out, {})


def _settings(coarse: bool) -> BacktestSettings:
    s = BacktestSettings(
        min_replicas=1,
        max_replicas=10,
        initial_replicas=2,
        sim=SimConfig(pending_s=20.0, loading_s=10.0, warmup_s=5.0, grace_s=10.0, timeout_s=30.0),
    )
    return replace(s, model="llama-3-70b", gpu="h200-141gb", tp=4) if coarse else s


# derandomize: the same examples every run. Not a proof that the oracle is a lower bound (its
# search is a heuristic), a check on the shapes where the interval-greedy oracle was not: requests
# spanning intervals (long outputs), long prompts, a flash crowd and coarse 70B TP4 replicas.
@settings(max_examples=8, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(["long-output", "long-prompt", "bursty"]),
    coarse=st.booleans(),
    seed=st.integers(0, 1_000),
    load=st.floats(0.3, 1.0),
)
def test_no_policy_meets_the_oracles_attainment_for_fewer_gpu_hours(kind, coarse, seed, load):
    # Rates from light to about what the largest static fleet carries for each shape.
    _check_lower_bound(kind, coarse, seed, load)


@pytest.mark.parametrize(
    ("kind", "coarse", "seed", "load"),
    [
        # the interval-greedy oracle lost to static 6 here (0.585 vs 0.608 GPU-hours)
        pytest.param("long-output", False, 7, 0.9, id="long-output"),
        # the interval-greedy oracle lost to static 2 here (0.676 vs 0.786 GPU-hours)
        pytest.param("long-prompt", True, 7, 0.5, id="coarse-long-prompt"),
        pytest.param("long-prompt", False, 7, 0.9, id="long-prompt"),
        pytest.param("bursty", False, 7, 0.9, id="bursty"),
        pytest.param("long-output", True, 7, 0.9, id="coarse-long-output"),
        pytest.param("bursty", True, 7, 0.9, id="coarse-bursty"),
    ],
)
def test_each_shape(kind, coarse, seed, load):
    # The four shapes the issue names, each in every run of the suite (the examples above need
    # not cover all). One seed, loads 0.5 / 0.7 / 0.9 of each shape's full rate were measured
    # for both oracles; these are the two the interval-greedy oracle failed and the highest load
    # of each other shape.
    _check_lower_bound(kind, coarse, seed, load)


def test_a_first_minute_sized_short_leaves_a_backlog_the_oracle_pays_for_later():
    # Greedy per interval: 3 replicas serve the first minute's long generations within the SLO but
    # leave a backlog the next minutes pay for (4, 4, 4, then 5); a static 4 spent 4% less than
    # that. The oracle's constant-fleet step finds the 4, its descent trims the drain at the end.
    _check_lower_bound("long-output", False, 0, 0.6015625)


def _check_lower_bound(kind: str, coarse: bool, seed: int, load: float) -> None:
    full_rps = {"long-output": 20.0, "long-prompt": 8.0, "bursty": 8.0}[kind]
    if coarse:
        full_rps /= 2.0
    w = _workload(kind, seed, full_rps * load)
    s = _settings(coarse)
    rows = []
    for size in STATIC_SIZES:
        sized = replace(s, policy_params={"static": {"replicas": size}})
        (r,), _, _ = run_backtest(w, ["static"], sized, include_oracle=False)
        rows.append((f"static {size}", r.summary))
    results, oracle, _ = run_backtest(w, list(POLICIES), s, include_oracle=True)
    assert oracle is not None
    rows += [(r.policy, r.summary) for r in results]
    bar = min(0.99, oracle.summary["slo_attainment"])
    for name, row in rows:
        if row["slo_attainment"] >= bar:
            assert row["gpu_hours"] >= oracle.summary["gpu_hours"], (
                f"{name} reached {row['slo_attainment']:.4f} (bar {bar:.4f}) with "
                f"{row['gpu_hours']} GPU-hours, the oracle spent {oracle.summary['gpu_hours']}"
            )
