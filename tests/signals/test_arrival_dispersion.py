"""``arrival_dispersion``: Allan variance / mean of per-step arrivals (signals/arrivals.py)."""

from __future__ import annotations

import math
from itertools import pairwise

import numpy as np
import pytest
from signals_fixtures import hist, obs, sample, vllm_values

from llmscale.metrics.names import VLLM
from llmscale.signals import compute_signals

BOUNDS = (1.0, 10.0, math.inf)


def _window(arrivals_per_step, running=None, tick_s=15.0):
    """One replica: each step's arrivals all finish within the step (E2E count), except that
    ``running[i]`` are still in the batch at observation i."""
    running = running or [0.0] * (len(arrivals_per_step) + 1)
    finished = 0.0
    out = []
    for i in range(len(arrivals_per_step) + 1):
        if i > 0:
            finished += arrivals_per_step[i - 1] - (running[i] - running[i - 1])
        values = vllm_values(running=running[i], waiting=0.0, kv=0.1, gen_tokens=0.0, prompt_tokens=0.0,
                             preemptions=0.0)  # fmt: skip
        e2e = hist((0.0, finished, finished), BOUNDS)
        out.append(obs(tick_s * i, sample("a", values, {VLLM.e2e: e2e})))
    return out


def test_the_worked_number():
    # counts 10, 30, 10, 30, 10 -> mean 18, median half-square 200, / 0.455, index 24.4
    value = compute_signals(_window([10, 30, 10, 30, 10])).get("arrival_dispersion")
    assert value == pytest.approx(200.0 / 0.4549364231195724 / 18.0)


def test_requests_still_in_flight_count_as_arrived():
    # The same arrivals with some still running at each observation: departures + growth.
    value = compute_signals(_window([10, 30, 10, 30, 10], running=[0, 5, 2, 8, 1, 4])).get(
        "arrival_dispersion"
    )
    assert value == pytest.approx(200.0 / 0.4549364231195724 / 18.0)


@pytest.mark.parametrize(
    ("batch", "expected"),
    [
        pytest.param(1, 1.0, id="poisson"),
        pytest.param(10, 10.0, id="batches-of-ten"),
    ],
)
def test_batch_poisson_reads_its_batch_size(batch, expected):
    # Batches of a fixed size X at Poisson times: E[X^2] / E[X] = X. Nineteen 15 s steps (the
    # controller's window) at 20 req/s; the estimate's own noise is ~30% with so few steps, so
    # the mean over 40 windows is compared.
    rng = np.random.default_rng(1)
    reads = []
    for _ in range(40):
        counts = rng.poisson(20.0 * 15.0 / batch, 19) * batch
        reads.append(compute_signals(_window([float(c) for c in counts])).get("arrival_dispersion"))
    assert float(np.mean(reads)) == pytest.approx(expected, rel=0.15)


def test_a_ramp_is_not_dispersion():
    # A rate rising by 2 requests per step: consecutive differences are constant, the Allan
    # variance is 2 (half of 2^2), far below the raw variance of the ramp.
    counts = [float(100 + 2 * i) for i in range(19)]
    value = compute_signals(_window(counts)).get("arrival_dispersion")
    assert value is not None and value < 0.05


def test_a_step_in_the_rate_is_not_dispersion():
    # A flash crowd: 900 per step (Poisson), then 2,700 from the tenth step on. The one
    # difference at the step would make the mean Allan variance ~90x the Poisson one; the
    # median reads the steady steps.
    rng = np.random.default_rng(2)
    counts = [float(c) for c in rng.poisson(900.0, 10)] + [float(c) for c in rng.poisson(2700.0, 9)]
    value = compute_signals(_window(counts)).get("arrival_dispersion")
    assert value is not None and value < 4.0


def test_too_few_steps_is_no_value():
    s = compute_signals(_window([10, 30, 10]))
    assert s.get("arrival_dispersion") is None


def _fleet_window(counts_per_replica, known, times):
    """Four replicas, each finishing ``counts_per_replica[i]`` requests in step i (none left
    running); ``known[i]``: the replicas read at observation i (the others unknown, as a failed
    scrape or a refused page leaves them); ``times[i]``: observation i's time."""
    names = ("a", "b", "c", "d")
    finished = 0.0
    out = []
    for i, t in enumerate(times):
        if i > 0:
            finished += counts_per_replica[i - 1]
        reps = []
        for n in names:
            if n in known[i]:
                values = vllm_values(running=0.0, waiting=0.0, kv=0.1, gen_tokens=0.0, prompt_tokens=0.0,
                                     preemptions=0.0)  # fmt: skip
                reps.append(sample(n, values, {VLLM.e2e: hist((0.0, finished, finished), BOUNDS)}))
            else:
                reps.append(sample(n, ok=False))
        out.append(obs(t, *reps))
    return out


def test_replicas_unknown_at_a_step_are_no_lull():
    # A steady 10 requests per replica per 15 s step (index ~0: no noise at all), but at every
    # other observation three of the four replicas are unread. Summed over whoever was read, the
    # steps alternated 40 / 10 / 40 ...: an index of ~40 from no burst at all. Those steps are
    # no counts; the fully read ones say the stream is steady.
    n = 19
    known = [set("abcd") if i % 3 != 1 else {"a"} for i in range(n + 1)]
    value = compute_signals(_fleet_window([10.0] * n, known, [15.0 * i for i in range(n + 1)])).get(
        "arrival_dispersion"
    )
    assert value is not None and value < 0.01, value


def test_steps_of_unequal_length_are_compared_as_rates():
    # 10 req/s per replica throughout, read every 0.5 s, but every other tick ran 10 s late: its
    # step counts 420 requests next to 20. Compared as counts that is an index in the thousands;
    # as rates, none.
    times = [0.0]
    for i in range(19):
        times.append(times[-1] + (10.5 if i % 2 else 0.5))
    counts = [10.0 * (b - a) for a, b in pairwise(times)]
    window = _fleet_window(counts, [set("abcd")] * len(times), times)
    value = compute_signals(window).get("arrival_dispersion")
    assert value is not None and value < 0.01, value
