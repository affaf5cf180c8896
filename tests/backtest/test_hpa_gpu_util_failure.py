"""HPA on GPU utilisation, with DCGM's meaning, over-provisions a light LLM load: reproduced.

``DCGM_FI_DEV_GPU_UTIL`` is the share of time a kernel was executing. A vLLM replica
iterates whenever a request is in flight, so the field reads ~100 % on a replica serving a
handful of requests, however much room its batch has left. An HPA holding it at a 70 % target
therefore adds replicas for as long as the router keeps more than ~70 % of them busy: a light
but steady load, which the least-outstanding router spreads over every replica, drives the
fleet to its maximum. The workload: the ``bandwidth-bound`` preset (256-token prompts,
900-token answers) at 1 request/s for 15 minutes, a handful of requests in flight at any time.
"""

from __future__ import annotations

import io
import json

import pytest

from llmscale.backtest.runner import BacktestSettings, PolicyResult, run_policy
from llmscale.workloads import make_preset, window

MAX_REPLICAS = 12
HPA_TARGET_PCT, HPA_TOLERANCE = 70.0, 0.1  # hpa-gpu-util's target and HPA's tolerance (its defaults)


@pytest.fixture(scope="module")
def light_load():
    return window(make_preset("bandwidth-bound", seed=0, rate_rps_mean=1.0), 0.0, 900.0)


def _settings(policy: str, initial: int, params: dict | None = None) -> BacktestSettings:
    return BacktestSettings(
        min_replicas=1,
        max_replicas=MAX_REPLICAS,
        initial_replicas=initial,
        policy_params={policy: params or {}},
    ).with_cold_start()


@pytest.fixture(scope="module")
def one_replica(light_load) -> PolicyResult:
    return run_policy(light_load, "static", _settings("static", 1, {"replicas": 1}))


@pytest.fixture(scope="module")
def hpa(light_load) -> tuple[PolicyResult, list[dict]]:
    out = io.StringIO()
    r = run_policy(light_load, "hpa-gpu-util", _settings("hpa-gpu-util", 2), decisions_out=out)
    return r, [json.loads(line) for line in out.getvalue().splitlines()]


def test_one_replica_serves_the_light_load_within_the_slo_and_reads_busy(one_replica):
    row = one_replica.summary
    assert row["slo_attainment"] >= 0.99
    assert row["replicas_max"] == 1
    # with a request in flight nearly all the time, GPU_UTIL reads busy
    assert row["mean_gpu_util"] >= 0.9


def test_hpa_on_gpu_util_scales_to_its_maximum_for_a_load_one_replica_serves(hpa, one_replica):
    r, decisions = hpa
    # every scale-up was HPA seeing GPU utilisation above its 70 % target (beyond the tolerance)
    ups = [d for d in decisions if d["desired"] > d["replicas"]["spec"]]
    assert ups
    for d in ups:
        assert d["inputs"]["target"] == HPA_TARGET_PCT
        assert d["inputs"]["metric_mean"] > HPA_TARGET_PCT * (1.0 + HPA_TOLERANCE)
    # ...up to max_replicas
    assert max(r.series["desired_replicas"]) == MAX_REPLICAS
    # the same SLO, bought with several times the replicas and GPU-hours one replica needs
    assert r.summary["slo_attainment"] >= one_replica.summary["slo_attainment"] - 0.01
    assert r.summary["replicas_mean"] >= 4.0
    assert r.summary["gpu_hours"] >= 4.0 * one_replica.summary["gpu_hours"]
