"""The simulator observed for ten minutes, with a scale-up and a scale-down: every signal at every tick.

Uses the real performance model when ``llmscale.perf`` imports, else the
sim room's test fake (tests/sim/fake_perf.py).
"""

from __future__ import annotations

import math
from bisect import bisect_left

import numpy as np
import pytest

from llmscale.metrics.names import HISTOGRAM_BOUNDS
from llmscale.signals import SIGNALS, compute_signals
from llmscale.sim.config import SimConfig
from llmscale.sim.exporter import SimMetricSource
from llmscale.sim.fleet import Fleet
from llmscale.types import Phase
from llmscale.workloads import make_preset

TICK_S = 15.0
WINDOW_LEN = 20


def _perf():
    try:
        from llmscale.perf import get_perf_model

        return get_perf_model("llama-3-8b", "h100-80gb", 1)
    except ImportError:  # the perf room not merged yet
        from fake_perf import FakePerf

        return FakePerf()


def _same_or_adjacent_bucket(estimate, truth, bounds):
    b_est = bisect_left(bounds, estimate - 1e-9)
    b_true = bisect_left(bounds, truth)
    return abs(b_est - b_true) <= 1


@pytest.fixture(scope="module")
def run():
    w = make_preset("default", seed=3, duration_s=600.0, rate_rps_mean=25.0)
    fleet = Fleet(
        _perf(),
        SimConfig(gpu_memory_utilization=0.5, pending_s=30.0, loading_s=20.0, warmup_s=20.0),
        w.arrival_s,
        w.input_tokens,
        w.output_tokens,
        initial_replicas=3,
        gpus_per_replica=1,
    )
    source = SimMetricSource(fleet)
    window = []
    ticks = []
    for i in range(1, int(600 / TICK_S) + 1):
        t = i * TICK_S
        fleet.run_until(t)
        if t == 120.0:
            fleet.scale_to(5, t)
        if t == 420.0:
            fleet.scale_to(3, t)
        obs = source.observe(t)
        window = [*window, obs][-WINDOW_LEN:]
        ticks.append((obs, compute_signals(window)))
    return fleet, ticks


def test_every_catalogue_name_every_tick_in_range(run):
    _, ticks = run
    phases_seen = set()
    for obs, s in ticks:
        assert set(s.values) == set(SIGNALS)
        phases_seen.update(r.phase for r in obs.replicas)
        assert s.get("serving_replicas") == obs.fleet.ready
        assert s.unknown_replicas == 0
        for name, (unit, _, _) in SIGNALS.items():
            v = s.values[name]
            if v.value is None:
                assert v.note, f"{name} invalid without a note at t={obs.time_s}"
                continue
            assert math.isfinite(v.value), name
            if unit in ("ratio", "probability") and name not in ("tenant_drift", "rhythm_decay"):
                assert 0.0 <= v.value <= 1.0, (name, v.value)
            if unit == "%":
                assert 0.0 <= v.value <= 100.0, (name, v.value)
            if unit not in ("%/step", "z", "rad", "ratio"):
                assert v.value >= 0.0, (name, v.value)
        for fam in ("ttft", "e2e", "itl"):
            p95, p99 = s.get(f"{fam}_p95_s"), s.get(f"{fam}_p99_s")
            if p95 is not None and p99 is not None:
                assert p95 <= p99
        assert s.get("queue_waiting") >= (obs.gateway_queue or 0)
    # the run went through the lifecycle the signals must tell apart
    assert {Phase.READY, Phase.PENDING, Phase.LOADING, Phase.WARMUP, Phase.DRAINING} <= phases_seen


def test_windowed_signals_become_valid_after_warm_up(run):
    _, ticks = run
    for obs, s in ticks[5:]:
        for name in (
            "ttft_p99_s",
            "e2e_p95_s",
            "request_rate_rps",
            "generation_tps",
            "throughput_window_ms",
            "kv_growth_pct_per_step",
            "rhythm_amplitude_ratio",
            "load_zscore",
            "oom_risk",
            "p99_predicted_decay_s",
            "effective_vram",
            "bw_saturation_p95",
            "queue_entropy",
            "request_rate_std_rps",
        ):
            assert s.get(name) is not None, (name, obs.time_s, s.values[name].note)


def test_rates_and_percentiles_match_the_simulators_own_records(run):
    fleet, ticks = run
    finish = np.asarray(fleet.finish_at_s)
    e2e = np.asarray(fleet.e2e_s)
    bounds = (*HISTOGRAM_BOUNDS["e2e"], math.inf)
    checked = 0
    for k in range(4, len(ticks)):
        obs, s = ticks[k]
        t = obs.time_s
        span = [o for o, _ in ticks[k - 4 : k + 1]]
        if (
            any(r.phase != Phase.READY for o in span for r in o.replicas)
            or len({tuple(r.replica for r in o.replicas) for o in span}) > 1
        ):
            continue  # around scale events: a replica gone mid-window no longer counts in the rates
        done = (finish > t - 60.0) & (finish <= t)
        truth_rps = float(done.sum()) / 60.0
        assert s.get("request_rate_rps") == pytest.approx(truth_rps, rel=0.02, abs=0.05)
        if done.sum() >= 100:
            truth_p99 = float(np.percentile(e2e[done], 99))
            assert _same_or_adjacent_bucket(s.get("e2e_p99_s"), truth_p99, bounds), (
                t,
                s.get("e2e_p99_s"),
                truth_p99,
            )
            checked += 1
    assert checked >= 5
