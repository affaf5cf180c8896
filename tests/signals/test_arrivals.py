"""arrival_rate_rps: the offered load from the arrivals counter; on a saturated simulated fleet it
keeps the true arrival rate while the completion rate is capped by what the fleet serves."""

from __future__ import annotations

import numpy as np
import pytest

from llmscale.signals import compute_signals
from llmscale.signals.arrivals import arrival_rate_signal
from llmscale.signals.window import FleetWindow
from llmscale.sim.config import SimConfig
from llmscale.sim.exporter import SimMetricSource
from llmscale.sim.fleet import Fleet
from llmscale.types import FleetView, Observation


def obs(t: float, arrivals: int | None) -> Observation:
    return Observation(
        time_s=t, fleet=FleetView(spec_replicas=1, ready=1), replicas=(), arrivals_total=arrivals
    )


@pytest.mark.parametrize(
    ("counts", "expected"),
    [
        pytest.param([(0.0, 1000), (60.0, 4000)], 50.0, id="3000-over-60s"),
        pytest.param([(0.0, 0), (30.0, 900), (90.0, 2700)], 1800 / 60, id="only-the-last-60s"),
        pytest.param([(0.0, 500), (60.0, 120)], 2.0, id="reset-counts-from-zero"),
        pytest.param([(0.0, None), (30.0, 10), (60.0, 40)], 1.0, id="first-count-in-window"),
        pytest.param([(60.0, 40)], None, id="one-count-is-not-a-rate"),
        pytest.param([(0.0, 10), (60.0, None)], None, id="no-counter-no-rate"),
    ],
)
def test_arrival_rate(counts, expected):
    value = arrival_rate_signal(FleetWindow.build([obs(t, n) for t, n in counts])).value
    assert value == (None if expected is None else pytest.approx(expected))


def test_saturated_fleet_completes_less_than_arrives():
    from llmscale.perf import get_perf_model

    # 1 replica offered 40 req/s of 1000-token prompts and 200-token outputs for 3 minutes: far more
    # than one H100 serves (~13 req/s on the default workload), so the queue grows.
    rate_rps, duration_s = 40.0, 180.0
    n = int(rate_rps * duration_s)
    arrival_s = np.arange(n, dtype=np.float64) / rate_rps
    fleet = Fleet(
        get_perf_model("llama-3-8b", "h100-80gb", 1),
        SimConfig(),
        arrival_s,
        np.full(n, 1000, dtype=np.int64),
        np.full(n, 200, dtype=np.int64),
        initial_replicas=1,
        gpus_per_replica=1,
    )
    source = SimMetricSource(fleet)
    window = []
    for t in (120.0, 150.0, 180.0):
        fleet.run_until(t)
        window.append(source.observe(t))
    s = compute_signals(window)
    # Arrivals at 40/s: the counter reads 4800 at 120 s and 7200 at 180 s (one request at each 1/40 s).
    assert s.get("arrival_rate_rps") == pytest.approx(rate_rps, rel=0.01)
    assert s.get("request_rate_rps") < 0.75 * rate_rps
