"""The `slo` policy: capacity from the calibrated model, forecast, reactive path (explicit now_s steps)."""

from __future__ import annotations

import math

import pytest

from llmscale.policies.slo import SloConfig, SloPolicy, SloState
from llmscale.types import FleetView, Signals, SignalValue

CFG = SloConfig(min_replicas=1, max_replicas=64, cold_start_s=108.0)


def sig(spec: int, **values: float | None) -> Signals:
    return Signals(
        time_s=0.0,
        fleet=FleetView(spec_replicas=spec, ready=spec),
        values={k: SignalValue(v) for k, v in values.items()},
    )


def steady(rate: float, queue: float = 0.0, ttft: float = 0.2) -> dict[str, float]:
    return {
        "request_rate_rps": rate,
        "queue_waiting": queue,
        "running": 100.0,
        "prompt_len_mean_tokens": 1155.0,
        "decode_steps_mean": 211.0,
        "ttft_p99_s": ttft,
    }


def test_capacity_of_an_azure_like_mix_on_h100():
    # Llama-3-8B, 1 x H100, prompt 1,155 / output 211, TPOT 0.1 s, TTFT 2 s: the one capacity
    # model in mode "tail" (perf/replica_tails.py; compared with the simulator's probe in
    # tests/perf/test_one_capacity_model.py): ~13.5 req/s per replica.
    policy = SloPolicy(CFG)
    cap = policy.capacity(1155.0, 211.0)
    assert 12.0 < cap < 15.0, cap
    # Longer outputs hold decode slots longer: capacity falls.
    assert policy.capacity(1155.0, 900.0) < cap


@pytest.mark.parametrize(
    ("values", "rule"),
    [
        pytest.param(
            {"request_rate_rps": None, "queue_waiting": 0.0, "running": 1.0}, "no-data", id="no-rate"
        ),
        pytest.param(
            {"request_rate_rps": 10.0, "queue_waiting": None, "running": 1.0}, "no-data", id="no-queue"
        ),
    ],
)
def test_missing_inputs_hold(values, rule):
    d, _ = SloPolicy(CFG).decide(sig(7, **values), SloState(), 15.0)
    assert (d.desired, d.rule) == (7, rule)


def test_steady_rate_plans_rate_over_capacity():
    policy = SloPolicy(CFG)
    state = SloState()
    for k in range(10):
        d, state = policy.decide(sig(10, **steady(60.0)), state, 15.0 * (k + 1))
    assert d.rule == "forecast"
    # The fewest replicas each planned at target_utilization (0.95) of its capacity within a
    # fleet of that size (a replica of a larger fleet holds a little more).
    n = d.desired
    u = CFG.target_utilization
    assert n * policy.capacity(1155.0, 211.0, 2.0, n) * u >= 60.0
    assert (n - 1) * policy.capacity(1155.0, 211.0, 2.0, n - 1) * u < 60.0
    assert n <= math.ceil(60.0 / (policy.capacity(1155.0, 211.0) * u))


def test_backlog_adds_what_drains_it_over_a_cold_start():
    policy = SloPolicy(CFG)
    _, state = policy.decide(sig(10, **steady(60.0)), SloState(), 15.0)
    d, _ = policy.decide(sig(10, **steady(60.0, queue=500.0)), state, 30.0)
    assert d.rule == "backlog"
    # arrivals include the queue's growth over the tick: 60 + 500/15
    arrivals = 60.0 + 500.0 / 15.0
    assert d.desired == policy.replicas_for(arrivals + 500.0 / 108.0, 1155.0, 211.0, 2.0)


def test_rising_trend_is_planned_one_cold_start_ahead():
    policy = SloPolicy(CFG)
    state = SloState()
    for k in range(8):
        d, state = policy.decide(sig(10, **steady(40.0 + 2.0 * k)), state, 15.0 * (k + 1))
    assert d.inputs["trend_rps_per_s"] > 0
    assert d.inputs["forecast_rps"] > d.inputs["level_rps"]


def test_a_step_is_not_extrapolated_past_the_growth_cap():
    # 40 req/s, then a step to 120: through the smoothing (alpha 0.4) the level climbs 72 -> 91.2
    # -> 102.7 over three ticks and the slope fitted over them (0.63 req/s per s) would add 68 req/s
    # over a 108 s cold start; a cap of 0.3 holds the extrapolated growth to 0.3 x level.
    cfg = SloConfig(min_replicas=1, max_replicas=64, cold_start_s=108.0, max_trend_growth=0.3)
    policy = SloPolicy(cfg)
    state = SloState()
    rates = [40.0] * 6 + [120.0] * 3
    for k, r in enumerate(rates):
        d, state = policy.decide(sig(10, **steady(r)), state, 15.0 * (k + 1))
    level = d.inputs["level_rps"]
    assert level == pytest.approx(102.72, abs=0.01)
    assert d.inputs["trend_rps_per_s"] * cfg.cold_start_s > 0.3 * level
    assert d.inputs["forecast_rps"] == pytest.approx(level * 1.3, rel=1e-3)


def test_a_queue_the_clients_abandon_before_a_cold_start_is_sized_for_its_refill():
    # Client time-out 60 s < cold start 108 s: the 500 queued requests will have given up before a
    # replica asked for now serves, but under saturation the queue refills as fast as clients give
    # up, ~500 / 60 s = 8.3 req/s the arrival estimate never saw: the plan carries that rate on top
    # of the arrivals (60 + 500 / 15 from the queue's growth), where it carried nothing before.
    cfg = SloConfig(min_replicas=1, max_replicas=64, cold_start_s=108.0, client_timeout_s=60.0)
    policy = SloPolicy(cfg)
    _, state = policy.decide(sig(10, **steady(60.0)), SloState(), 15.0)
    d, _ = policy.decide(sig(10, **steady(60.0, queue=500.0)), state, 30.0)
    assert d.rule == "backlog"
    assert d.desired == policy.replicas_for(60.0 + 500.0 / 15.0 + 500.0 / 60.0, 1155.0, 211.0, 2.0)
    # A time-out longer than the start: the queue drains over the start, as a backlog always did.
    slow = SloPolicy(SloConfig(min_replicas=1, max_replicas=64, cold_start_s=108.0, client_timeout_s=300.0))
    _, state = slow.decide(sig(10, **steady(60.0)), SloState(), 15.0)
    d, _ = slow.decide(sig(10, **steady(60.0, queue=500.0)), state, 30.0)
    assert d.desired == slow.replicas_for(60.0 + 500.0 / 15.0 + 500.0 / 108.0, 1155.0, 211.0, 2.0)


def test_abandoned_requests_are_not_negative_arrivals():
    # A saturated fleet of 3 serving 40 req/s whose queue fell from 600 to 420 in 15 s because
    # clients timed out (no replica was added): the in-system count fell by 180, which reads as
    # 40 - 12 = 28 req/s of arrivals; what arrived is at least what was served, 40.
    cfg = SloConfig(min_replicas=1, max_replicas=64, cold_start_s=108.0, client_timeout_s=60.0)
    policy = SloPolicy(cfg)
    _, state = policy.decide(sig(3, **steady(40.0, queue=600.0)), SloState(), 15.0)
    d, _ = policy.decide(sig(3, **steady(40.0, queue=420.0)), state, 30.0)
    assert d.inputs["arrival_rps"] == pytest.approx(40.0)
    # The same fall while replicas start is service catching up, not abandonment.
    growing = Signals(
        time_s=0.0,
        fleet=FleetView(spec_replicas=5, ready=3, pending=2),
        values={k: SignalValue(v) for k, v in steady(40.0, queue=420.0).items()},
    )
    d, _ = policy.decide(growing, state, 30.0)
    assert d.inputs["arrival_rps"] == pytest.approx(28.0)


def test_ttft_over_the_slo_adds_nothing_while_the_queue_shrinks():
    # The P99 window still remembers a backlog the fleet is clearing: queue 300 -> 100 (below the
    # backlog threshold of 4 per replica x 30) holds; a queue that grows again adds a replica.
    policy = SloPolicy(CFG)
    _, state = policy.decide(sig(30, **steady(60.0, queue=300.0, ttft=30.0)), SloState(), 15.0)
    d, state = policy.decide(sig(30, **steady(60.0, queue=100.0, ttft=30.0)), state, 30.0)
    assert d.rule == "forecast" and d.desired < 30
    d, _ = policy.decide(sig(30, **steady(60.0, queue=110.0, ttft=30.0)), state, 45.0)
    assert (d.rule, d.desired) == ("ttft-over-slo", 31)


@pytest.mark.parametrize(
    ("per_1k_s", "rule"),
    [
        pytest.param(0.0, "ttft-over-slo", id="one-target: 2.3 s is over 2 s"),
        # 2 s + 0.5 s x 1,155 / 1,000 = 2.58 s at the window's mean prompt: 2.3 s is within it.
        pytest.param(0.5, "forecast", id="length-aware: 2.3 s is within 2.58 s"),
    ],
)
def test_a_length_aware_ttft_slo_is_judged_at_the_mean_prompt(per_1k_s, rule):
    policy = SloPolicy(
        SloConfig(min_replicas=1, max_replicas=64, cold_start_s=108.0, slo_ttft_per_1k_tokens_s=per_1k_s)
    )
    _, state = policy.decide(sig(30, **steady(60.0, queue=100.0, ttft=2.3)), SloState(), 15.0)
    d, _ = policy.decide(sig(30, **steady(60.0, queue=110.0, ttft=2.3)), state, 30.0)
    assert d.rule == rule


def code_load(rate: float, tpot: float | None, *, itl: float | None = None) -> dict[str, float | None]:
    """A code-completion fleet's signals: 2k-token prompts, 30-token answers, nothing queued."""
    return {
        "request_rate_rps": rate,
        "queue_waiting": 0.0,
        "running": 50.0,
        "prompt_len_mean_tokens": 2000.0,
        "decode_steps_mean": 30.0,
        "ttft_p99_s": 0.4,
        "tpot_p99_s": tpot,
        "itl_p99_s": itl,
    }


CODE_CFG = SloConfig(min_replicas=1, max_replicas=64, cold_start_s=108.0, model="llama-3.1-8b")


@pytest.mark.parametrize(
    ("share", "tpot", "itl", "rule"),
    [
        pytest.param(0.9, 0.15, None, "tpot-over-slo", id="loaded-fleet-tpot-tail-adds-one"),
        pytest.param(0.9, 0.08, None, "forecast", id="tail-within-target"),
        # A fleet at a fifth of its capacity: the model puts misses far under budget, so a tail
        # there is not one that more replicas shorten (a lone huge prompt, the engine itself).
        pytest.param(0.2, 0.15, None, "forecast", id="light-load-tail-is-not-load"),
        # No per-request TPOT histogram (vLLM V0, TGI's names): the inter-token P99 stands in.
        pytest.param(0.9, None, 0.15, "tpot-over-slo", id="itl-when-no-tpot-histogram"),
    ],
)
def test_a_tpot_tail_over_the_slo_adds_a_replica_when_load_drives_it(share, tpot, itl, rule):
    policy = SloPolicy(CODE_CFG)
    fleet = 8
    rate = share * fleet * policy.capacity(2000.0, 30.0, 2.0, fleet)
    state = SloState()
    for k in range(3):
        d, state = policy.decide(sig(fleet, **code_load(rate, tpot, itl=itl)), state, 15.0 * (k + 1))
    assert d.rule == rule, d
    if rule == "tpot-over-slo":
        assert d.desired == fleet + 1


def test_a_tpot_tail_is_read_again_only_a_window_after_replicas_became_ready():
    # The P99 covers the last 60 s: replicas that just became ready have not yet cut the tail it
    # holds, so it adds nothing until a whole window has passed on the larger fleet.
    policy = SloPolicy(CODE_CFG)
    rate = 0.9 * 8 * policy.capacity(2000.0, 30.0, 2.0, 8)
    _, state = policy.decide(sig(8, **code_load(rate, 0.15)), SloState(), 15.0)
    d, state = policy.decide(sig(9, **code_load(rate, 0.15)), state, 30.0)  # one more became ready
    assert d.rule == "forecast"
    d, state = policy.decide(sig(9, **code_load(rate, 0.15)), state, 75.0)  # 45 s later: still held
    assert d.rule == "forecast"
    d, _ = policy.decide(sig(9, **code_load(rate, 0.15)), state, 90.0)  # a whole window later
    assert (d.rule, d.desired) == ("tpot-over-slo", 10)


def test_the_level_counts_growth_over_the_served_rates_window():
    # The served rate is a 60 s window's. A backlog of 600 drained over the last minute: the
    # window served 80 + 600 / 60 = 90 req/s while 80 arrived. The level reads served over the
    # window plus growth over the same window, 90 - 600 / 60 = 80; the last tick's change alone
    # (the queue already empty at the tick before) would read the window's 90 as arrivals.
    policy = SloPolicy(CFG)
    state = SloState()
    for t, queue in ((0.0, 600.0), (15.0, 400.0), (30.0, 200.0), (45.0, 0.0)):
        _, state = policy.decide(sig(8, **steady(80.0, queue=queue)), state, t)
    d, _ = policy.decide(sig(8, **steady(90.0, queue=0.0)), state, 60.0)
    assert d.inputs["arrival_rps"] == pytest.approx(80.0)


def test_a_ttft_tail_is_read_again_only_a_window_after_replicas_became_ready():
    # The P99 still holds the backlog the replicas that just became ready have cleared: with a
    # queue of a few (no backlog) it adds nothing until a whole window has passed on them.
    policy = SloPolicy(CFG)
    _, state = policy.decide(sig(10, **steady(60.0, queue=2.0, ttft=30.0)), SloState(), 15.0)
    d, state = policy.decide(sig(11, **steady(60.0, queue=4.0, ttft=30.0)), state, 30.0)  # one more ready
    assert d.rule == "forecast"
    d, state = policy.decide(sig(11, **steady(60.0, queue=5.0, ttft=30.0)), state, 75.0)
    assert d.rule == "forecast"
    d, _ = policy.decide(sig(11, **steady(60.0, queue=6.0, ttft=30.0)), state, 90.0)
    assert (d.rule, d.desired) == ("ttft-over-slo", 12)


def test_starts_are_kept_while_a_queue_builds():
    # Its guards let a shrink cancel starts (hold_starting off); a proposal below the fleet while
    # the queue still grows keeps them (the level lags a rise), one while it shrinks does not.
    policy = SloPolicy(CFG)
    starting = FleetView(spec_replicas=8, ready=4, pending=4)

    def with_queue(queue: float) -> Signals:
        return Signals(
            time_s=0.0, fleet=starting, values={k: SignalValue(v) for k, v in steady(20.0, queue).items()}
        )

    _, state = policy.decide(with_queue(8.0), SloState(), 15.0)
    d, _ = policy.decide(with_queue(16.0), state, 30.0)
    assert (d.rule, d.desired) == ("hold-starts", 8)
    d, _ = policy.decide(with_queue(4.0), state, 30.0)
    assert d.desired < 8
