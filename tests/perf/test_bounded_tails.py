"""Issue 19: the tail model and the policies that plan with it decide in bounded time on any number.

A page reporting a waiting queue of 1e9 on one replica once read as ~1e8 req/s of growth; `slo`
then searched a fleet of ~2e7 replicas, and ``_poisson_at_least`` added 2e7 terms per call: no
decision for minutes. Replicas with such values are now refused at the page (metrics/vetting.py),
and the model's own loops are bounded whatever reaches them:

* ``_poisson_at_least`` is the exact sum up to 4,096 terms (every backtest's fleet: logs unchanged)
  and agrees with an exactly rounded sum past it, in milliseconds for any fleet size;
* ``slo`` and ``dynamo-sla`` decide within a second on absurd but finite signals (1e9 .. 1e15).
"""

from __future__ import annotations

import math
import time

import pytest

from llmscale.perf import replica_tails
from llmscale.policies.dynamo.capacity import chunked_prefill_s
from llmscale.policies.slo import MAX_SEARCHED_REPLICAS, SloConfig, SloPolicy, SloState
from llmscale.types import FleetView, Signals, SignalValue


def _exact(mean: float, n: int) -> float:
    log_mean = math.log(mean)
    below = math.fsum(math.exp(j * log_mean - mean - math.lgamma(j + 1.0)) for j in range(n))
    return min(1.0, max(0.0, 1.0 - below))


@pytest.mark.parametrize(
    ("n", "per"),
    [
        pytest.param(5_000, 0.9, id="5k-light"),
        pytest.param(5_000, 1.0, id="5k-even"),
        pytest.param(5_000, 1.1, id="5k-heavy"),
        pytest.param(20_000, 0.99, id="20k-just-under"),
        pytest.param(20_000, 1.0, id="20k-even"),
    ],
)
def test_poisson_tail_past_the_exact_range_agrees_with_the_full_sum(n: int, per: float) -> None:
    got = replica_tails._poisson_at_least(n * per, n)
    assert got == pytest.approx(_exact(n * per, n), abs=1e-9)


def test_poisson_tail_is_the_same_sum_within_the_exact_range() -> None:
    # Up to 4,096 terms nothing changed: the backtests' decision logs depend on these bits.
    mean, n = 2.9, 6
    log_mean = math.log(mean)
    old = 1.0 - sum(math.exp(j * log_mean - mean - math.lgamma(j + 1.0)) for j in range(n))
    assert replica_tails._poisson_at_least(mean, n) == min(1.0, max(0.0, old))


@pytest.mark.parametrize("n", [10**5, 10**7, 10**9, 10**12])
def test_poisson_tail_of_any_fleet_takes_milliseconds(n: int) -> None:
    t0 = time.perf_counter()
    for per in (0.5, 1.0, 2.0):
        p = replica_tails._poisson_at_least(n * per, n)
        assert 0.0 <= p <= 1.0
    assert time.perf_counter() - t0 < 0.5
    assert replica_tails._poisson_at_least(math.inf, n) == 1.0


def _signals(queue: float, rate: float, prompt: float) -> Signals:
    return Signals(
        time_s=0.0,
        fleet=FleetView(spec_replicas=2, ready=2),
        values={
            "request_rate_rps": SignalValue(rate),
            "queue_waiting": SignalValue(queue),
            "running": SignalValue(10.0),
            "prompt_len_mean_tokens": SignalValue(prompt),
            "decode_steps_mean": SignalValue(200.0),
            "ttft_p99_s": SignalValue(0.5),
        },
    )


@pytest.mark.parametrize(
    ("queue", "rate", "prompt"),
    [
        pytest.param(1e9, 1.0, 1000.0, id="queue-1e9"),
        pytest.param(1e12, 1.0, 1000.0, id="queue-1e12"),
        pytest.param(0.0, 1e9, 1000.0, id="rate-1e9"),
        pytest.param(1e15, 1e15, 1e15, id="everything-1e15"),
    ],
)
def test_slo_decides_on_absurd_signals_within_a_second(queue: float, rate: float, prompt: float) -> None:
    policy = SloPolicy(SloConfig(min_replicas=1, max_replicas=64))
    state = SloState()
    t0 = time.perf_counter()
    d, state = policy.decide(_signals(0.0, 1.0, 1000.0), state, 15.0)
    d, state = policy.decide(_signals(queue, rate, prompt), state, 30.0)
    took = time.perf_counter() - t0
    assert took < 5.0, took  # was minutes (issue 19); ~0.1 s here, 5 s leaves a loaded VM room
    assert 1 <= d.desired <= MAX_SEARCHED_REPLICAS + 1, d


def test_chunked_prefill_of_an_absurd_queue_is_priced_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from llmscale.policies.dynamo import capacity

    calls: list[float] = []

    def iteration_s(perf: object, chunk: float, *rest: object) -> float:
        calls.append(chunk)
        return 0.01

    monkeypatch.setattr(capacity, "iteration_s", iteration_s)
    perf = object()
    small = chunked_prefill_s(perf, 3 * 8192.0, 100.0, 8192, 0.0, 1)  # type: ignore[arg-type]
    assert len(calls) == 4 and small == pytest.approx(0.04)
    calls.clear()
    t0 = time.perf_counter()
    big = chunked_prefill_s(perf, 1e12, 100.0, 8192, 0.0, 1)  # type: ignore[arg-type]
    assert time.perf_counter() - t0 < 0.1 and len(calls) <= 3
    assert big == pytest.approx((1e12 + 100.0) / 8192 * 0.01, rel=1e-6)
    assert chunked_prefill_s(perf, math.inf, 100.0, 8192, 0.0, 1) == math.inf  # type: ignore[arg-type]
