"""Ghost replicas (seed 000 chapter 1) and tenant drift (seed 000 2.5)."""

from __future__ import annotations

import pytest
from signals_fixtures import obs, sample, vllm_values

from llmscale.signals.diagnostics import (
    coefficient_of_variation,
    ghost_replicas,
    is_ghost_sample,
    tenant_drift,
)
from llmscale.signals.window import FleetWindow
from llmscale.types import Phase

IDLE = vllm_values(running=0, waiting=0, gpu_util=1.0, fb_used_mib=60_000, fb_free_mib=20_000)
BUSY = vllm_values(running=12, waiting=0, gpu_util=40.0)


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        pytest.param(IDLE, True, id="resident-idle"),
        pytest.param(BUSY, False, id="busy"),
        pytest.param(vllm_values(running=0, waiting=0, gpu_util=5.0), False, id="computing"),
        pytest.param(vllm_values(running=0, waiting=3, gpu_util=0.0), False, id="queued"),
        pytest.param(
            vllm_values(running=0, waiting=0, gpu_util=0.0, fb_used_mib=1_000, fb_free_mib=79_000),
            False,
            id="not-resident",
        ),
        pytest.param({"vllm:num_requests_running": 0.0}, None, id="metrics-missing"),
    ],
)
def test_is_ghost_sample(values, expected):
    assert is_ghost_sample(values) == expected


def _history(*phases_and_values, tick=15.0):
    return [obs(tick * k, sample("a", v, phase=p)) for k, (p, v) in enumerate(phases_and_values)]


R = Phase.READY


@pytest.mark.parametrize(
    ("window", "expected"),
    [
        # READY and idle in every sample of the last 60 s (5 samples at 15 s)
        pytest.param(_history(*[(R, IDLE)] * 5), 1, id="idle-for-60s"),
        # became READY 45 s ago: idle for a good reason (no traffic routed yet)
        pytest.param(_history((Phase.WARMUP, IDLE), *[(R, IDLE)] * 4), 0, id="just-ready"),
        # served a request 30 s ago
        pytest.param(_history(*[(R, IDLE)] * 3, (R, BUSY), (R, IDLE)), 0, id="busy-recently"),
        # busy more than 60 s ago, idle since: a ghost now
        pytest.param(_history((R, BUSY), *[(R, IDLE)] * 5), 1, id="idle-since-busy-long-ago"),
        pytest.param(_history(*[(R, IDLE)] * 4, (R, BUSY)), 0, id="busy-now"),
    ],
)
def test_ghost_replicas(window, expected):
    g = ghost_replicas(FleetWindow.build(window))
    assert g.value == expected


def test_ghosts_need_metrics_and_no_fleet_is_zero():
    assert ghost_replicas(FleetWindow.build([obs(0.0, sample("a", {"x": 1.0}))])).value is None
    assert ghost_replicas(FleetWindow.build([obs(0.0)])).value == 0.0


@pytest.mark.parametrize(
    ("xs", "expected"),
    [
        pytest.param((4, 4, 8), 0.3536, id="worked"),
        pytest.param((4, 4, 4), 0.0, id="equal"),
        pytest.param((4,), None, id="one"),
        pytest.param((0, 0), None, id="zero-mean"),
    ],
)
def test_coefficient_of_variation(xs, expected):
    got = coefficient_of_variation(xs)
    assert got == (None if expected is None else pytest.approx(expected, abs=1e-4))


@pytest.mark.parametrize(
    ("replicas", "expected"),
    [
        # SM activity (40, 40, 80) % over (10, 10, 10) running -> per request (4, 4, 8): CV 0.354
        pytest.param([(40, 10), (40, 10), (80, 10)], 0.3536, id="one-drifting"),
        # the third carries twice the load: (4, 4, 4) -> 0
        pytest.param([(40, 10), (40, 10), (80, 20)], 0.0, id="proportional"),
        # an idle replica has no load share to compare: left out
        pytest.param([(40, 10), (40, 10), (3, 0)], 0.0, id="idle-left-out"),
        pytest.param([(40, 10)], None, id="one-loaded"),
    ],
)
def test_tenant_drift(replicas, expected):
    # GPU_UTIL reads 100 on every loaded replica: the drift must not come from it
    samples = [
        sample(f"r{i}", vllm_values(gpu_util=100.0 if n else 0.0, sm_active=u / 100, mem_copy=0.0, running=n))
        for i, (u, n) in enumerate(replicas)
    ]
    got = tenant_drift(FleetWindow.build([obs(0.0, *samples)])).value
    assert got == (None if expected is None else pytest.approx(expected, abs=1e-4))
