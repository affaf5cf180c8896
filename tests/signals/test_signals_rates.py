"""Counter rates, request shape, per-step rates and seed 000 2.4's adaptive window."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from signals_fixtures import hist, obs, sample

from llmscale.metrics.names import VLLM
from llmscale.signals.rates import adaptive_window_ms, counter_rates, population_std, rate_signals, step_rates
from llmscale.signals.window import FleetWindow
from llmscale.types import Phase


def _replica(name, *, gen, prompt, done, preempt=0.0, phase=Phase.READY):
    return sample(
        name,
        {VLLM.generation_tokens: gen, VLLM.prompt_tokens: prompt, VLLM.preemptions: preempt},
        {VLLM.e2e: hist((0, done, done, done))},
        phase=phase,
    )


def _fleet():
    """a: whole window; b: appears at 30 s; c: gone before the newest; d: its newest scrape failed."""
    rows = []
    for k, t in enumerate((0.0, 15.0, 30.0, 45.0, 60.0)):
        f = t / 60.0
        samples = [_replica("a", gen=6000 * f, prompt=30000 * f, done=120 * f, preempt=3 * f)]
        if t >= 30.0:
            g = (t - 30.0) / 30.0
            samples.append(_replica("b", gen=3000 * g, prompt=15000 * g, done=30 * g))
        if t <= 45.0:
            samples.append(_replica("c", gen=9999 * f, prompt=9999 * f, done=99 * f))
        samples.append(
            _replica("d", gen=1200 * f, prompt=0.0, done=12 * f) if k < 4 else sample("d", ok=False)
        )
        rows.append(obs(t, *samples))
    return rows


def test_counter_rates_worked_example():
    # a: 6000 tokens / 60 s = 100 tok/s, 120 requests = 2 rps; b: 3000 / 30 s = 100 tok/s, 1 rps;
    # c: gone (its load moved to the others): not counted; d: last known rate 1200 x 0.75 / 45 = 20 tok/s.
    r = counter_rates(FleetWindow.build(_fleet()))
    assert r.replicas == 3
    assert r.generation_tps == pytest.approx(100 + 100 + 20)
    assert r.request_rps == pytest.approx(2 + 1 + 0.2)
    assert r.prompt_tps == pytest.approx(500 + 500 + 0)
    assert r.preemptions_per_s == pytest.approx(0.05)
    # request shape over the same replicas: prompts (30000 + 15000 + 0) / (120 + 30 + 9) finished
    assert r.prompt_tokens / r.finished == pytest.approx(45000 / 159)
    assert r.generation_tokens / r.finished == pytest.approx((6000 + 3000 + 900) / 159)


@pytest.mark.parametrize(
    ("std", "expected_ms"),
    [
        pytest.param(0.0, 1000.0, id="steady-1000"),
        pytest.param(12.5, 800.0, id="int(1000/1.25)"),
        pytest.param(50.0, 500.0, id="int(1000/2)"),
        pytest.param(1000.0, 200.0, id="floor-200"),
        pytest.param(1e9, 200.0, id="never-below-200"),
    ],
)
def test_adaptive_window_ms(std, expected_ms):
    assert adaptive_window_ms(std) == expected_ms


def test_population_std():
    assert population_std([1.0, 2.0, 1.0]) == pytest.approx(math.sqrt(2.0 / 9.0))


def test_step_rates_and_request_rate_std():
    # finished counts 0, 15, 45, 60 every 15 s: 1, 2, 1 req/s; mean 4/3, std sqrt(2/9) = 0.471
    counts = (0, 15, 45, 60)
    window = [obs(15.0 * k, _replica("a", gen=100.0 * c, prompt=0.0, done=c)) for k, c in enumerate(counts)]
    fw = FleetWindow.build(window)
    steps = step_rates(fw)
    assert steps.requests_rps == pytest.approx([1.0, 2.0, 1.0])
    assert steps.generation_tps == pytest.approx([100.0, 200.0, 100.0])
    values, _ = rate_signals(fw)
    assert values["request_rate_std_rps"].value == pytest.approx(math.sqrt(2.0 / 9.0))
    # generation std = 100 x sqrt(2/9) = 47.14 -> int(1000 / 1.943) = 514 ms
    assert values["throughput_window_ms"].value == 514.0


def test_step_rates_skip_gaps_and_handle_restarts():
    # b's scrape fails at step 2, a restarts at step 3 (30 -> 5 counts as 5)
    window = [
        obs(0.0, _replica("a", gen=0, prompt=0, done=0), _replica("b", gen=0, prompt=0, done=0)),
        obs(10.0, _replica("a", gen=0, prompt=0, done=20), _replica("b", gen=0, prompt=0, done=10)),
        obs(20.0, _replica("a", gen=0, prompt=0, done=30), sample("b", ok=False)),
        obs(30.0, _replica("a", gen=0, prompt=0, done=5), _replica("b", gen=0, prompt=0, done=30)),
    ]
    steps = step_rates(FleetWindow.build(window))
    assert steps.requests_rps == pytest.approx([3.0, 1.0, 0.5])


@pytest.mark.parametrize(
    ("window", "name"),
    [
        pytest.param(
            [obs(0.0, _replica("a", gen=0, prompt=0, done=0))], "request_rate_rps", id="one-observation"
        ),
        pytest.param([obs(0.0), obs(15.0)], "generation_tps", id="no-replica"),
        pytest.param(
            [
                obs(0.0, _replica("a", gen=0, prompt=0, done=0)),
                obs(15.0, _replica("a", gen=0, prompt=0, done=0)),
            ],
            "prompt_len_mean_tokens",
            id="nothing-finished",
        ),
        pytest.param(
            [obs(0.0, _replica("a", gen=0, prompt=0, done=0))], "throughput_window_ms", id="no-steps"
        ),
    ],
)
def test_rates_invalid_without_data(window, name):
    values, _ = rate_signals(FleetWindow.build(window))
    assert values[name].value is None
    assert values[name].note


def test_prompt_length_divides_by_prefills_not_completions():
    # A surge: over 60 s a replica prefills 200 requests (the TTFT count) of 1,000 prompt tokens
    # each, while only 80 requests finish. Prompt tokens / finished would read 2,500 tokens; the
    # TTFT count gives the 1,000 the requests have. A replica without a TTFT histogram falls back
    # to the finished count.
    def at(t, with_ttft):
        f = t / 60.0
        hists = {VLLM.e2e: hist((0, 80 * f, 80 * f, 80 * f))}
        if with_ttft:
            hists[VLLM.ttft] = hist((0, 200 * f, 200 * f, 200 * f))
        return sample("a", {VLLM.generation_tokens: 8000 * f, VLLM.prompt_tokens: 200000 * f}, hists)

    surge = FleetWindow.build([obs(t, at(t, True)) for t in (0.0, 30.0, 60.0)])
    values, _ = rate_signals(surge)
    assert values["prompt_len_mean_tokens"].value == pytest.approx(1000.0)
    assert values["decode_steps_mean"].value == pytest.approx(100.0)
    bare = FleetWindow.build([obs(t, at(t, False)) for t in (0.0, 30.0, 60.0)])
    values, _ = rate_signals(bare)
    assert values["prompt_len_mean_tokens"].value == pytest.approx(2500.0)


def _lagged_fleet(lag_s: float, ticks: int):
    """4 replicas finishing 10 req/s each, scraped every 0.5 s with pages stamped at the tick's
    start; "a"'s first page was rendered on time, every later one a full time-out (``lag_s``) late."""
    rows = []
    for k in range(ticks):
        t = 0.5 * k
        late = lag_s if k else 0.0
        samples = [_replica("a", gen=0.0, prompt=0.0, done=10.0 * (t + late))]
        samples += [_replica(n, gen=0.0, prompt=0.0, done=10.0 * t) for n in "bcd"]
        rows.append(replace(obs(t, *samples), sample_lag_s=lag_s))
    return rows


def test_a_rate_over_a_span_shorter_than_a_few_time_outs_does_not_count():
    # Two ticks 0.5 s apart, the second page 1 s late: "a" reads 10 x 1.5 / 0.5 = 30 req/s.
    # Stamped with the scrape's time-out, its span (0.5 s < 4 x 1 s) gives no rate yet, nor does
    # anyone's: no rate rather than 60 for a true 40.
    assert counter_rates(FleetWindow.build(_lagged_fleet(1.0, 2))).request_rps is None
    # Past 4 s of samples the rates count: "a" reads (4.5 + 1) / 4.5 x 10 = 12.2, the fleet 42.2.
    r = counter_rates(FleetWindow.build(_lagged_fleet(1.0, 10)))
    assert r.request_rps == pytest.approx(40.0 + 10.0 / 4.5)
    # Without a lag (the simulator's samples), two ticks are a rate at once, as before.
    assert counter_rates(FleetWindow.build(_lagged_fleet(0.0, 2))).request_rps == pytest.approx(40.0)
