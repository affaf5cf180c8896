"""The measured latency cliff (seed 003 2.3's knee) as a floor under the capacity-model policies:
a P99 curve with a known knee -> the cliff -> the replicas a policy plans for a rate."""

from __future__ import annotations

import math

import numpy as np
import pytest

from llmscale.analyze.cliff_config import cliff_policy_config
from llmscale.analyze.knee import latency_cliff_rps_per_replica
from llmscale.deployment import Deployment
from llmscale.errors import ConfigError
from llmscale.policies.base import create_policy
from llmscale.types import FleetView, Signals, SignalValue

CTX = Deployment(min_replicas=1, max_replicas=100)
X0, W = 6.0, 0.5  # the P99 curve bends around 6 req/s per replica, over half a req/s


def measured_cliff() -> float:
    """400 ticks evenly over 0.05..10 req/s per replica on fleets of 2 and 4, P99 a soft hockey
    stick ``0.3 + 0.2 w ln(1 + e^((x - 6) / w))``: its second derivative first reaches 0.8 of its
    peak at ``6 + 0.5 ln(0.2764 / 0.7236) = 5.519``; the binned rule returns its bin, 5.773
    (20 bins of 0.4975)."""
    per_replica = np.linspace(0.05, 10.0, 400)
    serving = np.where(np.arange(400) % 2 == 0, 2.0, 4.0)
    p99 = 0.3 + 0.2 * W * np.log1p(np.exp((per_replica - X0) / W))
    cliff = latency_cliff_rps_per_replica(per_replica * serving, serving, p99)
    assert cliff is not None
    return cliff


def test_the_knee_of_the_constructed_curve():
    exact = X0 + W * math.log((1 - math.sqrt(0.2)) / (1 + math.sqrt(0.2)))
    assert exact == pytest.approx(5.519, abs=1e-3)
    cliff = measured_cliff()
    assert cliff == pytest.approx(5.773, abs=1e-3)
    assert abs(cliff - exact) <= 0.4975  # within a bin


def steady(rate_rps: float = 60.0, ready: int = 4) -> Signals:
    """One tick of a fleet serving ``rate_rps`` of 1,000 / 200-token requests, nothing waiting."""
    values = {
        "request_rate_rps": rate_rps,
        "queue_waiting": 0.0,
        "queue_per_replica": 0.0,
        "running": 40.0,
        "prompt_len_mean_tokens": 1000.0,
        "decode_steps_mean": 200.0,
    }
    fleet = FleetView(spec_replicas=ready, ready=ready)
    return Signals(time_s=0.0, fleet=fleet, values={k: SignalValue(v) for k, v in values.items()})


def test_slo_keeps_off_the_measured_cliff():
    """60 req/s: slo's own capacity model plans 5 replicas (~15.7 req/s each at 0.95); with the
    measured cliff 5.773 and margin 0.9 no replica may plan more than 5.196 req/s:
    ceil(60 / 5.196) = ceil(11.55) = 12."""
    cliff = measured_cliff()
    plain = create_policy("slo", CTX)
    d0, _ = plain.decide(steady(), plain.initial_state(), 0.0)
    assert (d0.desired, d0.rule) == (5, "forecast")
    assert not any(k.startswith("cliff") for k in d0.inputs)
    capped = create_policy("slo", CTX, cliff_policy_config(cliff)["slo"])
    d, _ = capped.decide(steady(), capped.initial_state(), 0.0)
    assert (d.desired, d.rule) == (12, "cliff-margin")
    assert d.inputs["cliff_floor_replicas"] == 12.0 and d.inputs["cliff_margin"] == 0.9
    # a margin of its own: ceil(60 / (0.5 x 5.773)) = ceil(20.8) = 21
    half = create_policy("slo", CTX, {"cliff_rps_per_replica": cliff, "cliff_margin": 0.5})
    assert half.decide(steady(), half.initial_state(), 0.0)[0].desired == 21


def test_a_cliff_beyond_the_models_capacity_changes_nothing():
    """A cliff of 27 req/s per replica floors 60 req/s at ceil(60 / 24.3) = 3 < 5: slo's plan stands."""
    policy = create_policy("slo", CTX, {"cliff_rps_per_replica": 27.0})
    d, _ = policy.decide(steady(), policy.initial_state(), 0.0)
    assert (d.desired, d.rule) == (5, "forecast")
    assert d.inputs["cliff_floor_replicas"] == 3.0


def test_capacity_calibrated_keeps_off_the_measured_cliff():
    """capacity-calibrated: 60 req/s x 224 tokens (the 32-token bucket of 200) x t(256) -> ~1,100
    sequences in flight / 256 per replica -> 5 replicas; the cliff floors it at 12 as for slo."""
    cliff = measured_cliff()
    plain = create_policy("capacity-calibrated", CTX)
    d0, _ = plain.decide(steady(), plain.initial_state(), 0.0)
    assert (d0.desired, d0.rule) == (5, "capacity")
    capped = create_policy("capacity-calibrated", CTX, cliff_policy_config(cliff)["capacity-calibrated"])
    d, _ = capped.decide(steady(), capped.initial_state(), 0.0)
    assert (d.desired, d.rule) == (12, "cliff-margin")


@pytest.mark.parametrize("bad", [0.0, -3.0, math.inf])
def test_a_cliff_that_is_no_load_is_refused(bad):
    with pytest.raises(ConfigError, match=r"slo\.cliff_rps_per_replica"):
        cliff_policy_config(bad)
