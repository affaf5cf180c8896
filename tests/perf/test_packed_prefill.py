"""``packed_prefill_tokens_s``: what a disaggregated prefill replica with a queue prefills per second.

The rate ``slo-disagg`` plans its prefill pool on. Checked against the simulator itself: one
prefill replica fed twice what the formula says it holds, its throughput measured in the middle
of the run, when every iteration is full. One prompt at a time (``prefill_capacity_tokens_s``)
is the slower figure the pool used to be planned on, and the gap is widest for short prompts.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from llmscale.perf import get_perf_model
from llmscale.perf.replica_tails import packed_prefill_tokens_s
from llmscale.sim.config import SimConfig
from llmscale.sim.disagg import DisaggFleet, get_interconnect

PERF = get_perf_model("llama-3-8b", "h100-80gb", 1)
BUDGET = 8192


def _saturated_rate(prompts: np.ndarray, duration_s: float = 40.0) -> float:
    """Prompt tokens/s one simulated prefill replica finishes between 10 s and 30 s of an overload."""
    rng = np.random.default_rng(11)
    arrivals = np.sort(rng.uniform(0.0, duration_s, prompts.size))
    cfg = replace(SimConfig(), step_noise=0.0, timeout_s=1e9)
    fleet = DisaggFleet(
        PERF,
        cfg,
        arrivals,
        prompts.astype(np.int64),
        np.ones(prompts.size, dtype=np.int64),
        prefill_replicas=1,
        decode_replicas=1,
        gpus_per_replica=1.0,
        link=get_interconnect("infiniband"),
    )
    fleet.run_until(duration_s)
    finish = np.asarray(fleet.prefill.finish_at_s)
    done = (finish >= 10.0) & (finish < 30.0)
    return float(prompts[done].sum()) / 20.0


@pytest.mark.parametrize(
    ("mean", "cv"),
    [
        pytest.param(256, 0.0, id="256-fixed"),
        pytest.param(1314, 0.0, id="1314-fixed"),
        pytest.param(6000, 0.0, id="6000-longer-than-an-iteration"),
        pytest.param(600, 1.0, id="600-lognormal-cv1"),
        pytest.param(1314, 1.0, id="1314-lognormal-cv1"),
    ],
)
def test_packed_rate_is_what_a_saturated_simulated_prefill_replica_runs(mean, cv):
    rng = np.random.default_rng(5)
    first_guess = packed_prefill_tokens_s(PERF, BUDGET, mean, cv)
    n = int(2.0 * first_guess * 40.0 / mean)  # twice what it holds: a queue throughout
    if cv:
        s2 = np.log1p(cv * cv)
        prompts = np.round(rng.lognormal(np.log(mean) - s2 / 2.0, np.sqrt(s2), n))
        prompts = np.clip(prompts, 1, 7000)
    else:
        prompts = np.full(n, float(mean))
    # the formula at the sample's own mean and spread (the clip and the draw move both a little)
    model = packed_prefill_tokens_s(
        PERF, BUDGET, float(prompts.mean()), float(prompts.std() / prompts.mean())
    )
    measured = _saturated_rate(prompts)
    assert measured == pytest.approx(model, rel=0.02)
    single = float(PERF.prefill_capacity_tokens_s(BUDGET, mean))
    if mean <= 1314:
        # one prompt at a time leaves most of an iteration's fixed cost unshared
        assert measured > 1.2 * single
    else:
        assert measured == pytest.approx(single, rel=0.03)


def test_longer_prompts_and_wider_spreads_cost_more_attention():
    rates = [packed_prefill_tokens_s(PERF, BUDGET, p, 0.0) for p in (256, 1000, 2048, 4096)]
    assert rates == sorted(rates, reverse=True)
    assert packed_prefill_tokens_s(PERF, BUDGET, 2048, 1.0) < packed_prefill_tokens_s(PERF, BUDGET, 2048, 0.0)
