"""``token-rate`` (seed 000 2.4): HPA target tracking on generated tokens/s per replica, read over
the seed's adaptive window, the raw 100 ms, or the tick."""

from __future__ import annotations

import io
import itertools
import json
from dataclasses import replace

import pytest

from llmscale.backtest.runner import BacktestSettings, run_policy
from llmscale.deployment import Deployment
from llmscale.errors import ConfigError
from llmscale.policies.base import POLICIES, create_policy
from llmscale.policies.token_rate import WINDOW_SIGNALS, slo_tokens_per_replica
from llmscale.signals.rates import adaptive_window_ms, population_std
from llmscale.types import FleetView, Signals, SignalValue
from llmscale.workloads.synthetic import poisson

CTX = Deployment(min_replicas=1, max_replicas=50)


@pytest.mark.parametrize(
    ("seconds_tps", "std", "window_ms"),
    [
        # the seed's own cases, as five one-second throughputs around 1,000 tokens/s
        pytest.param([1000.0] * 5, 0.0, 1000.0, id="steady-1000ms"),
        # +-15%: 850/1150 alternating, mean 970, population std 146.97 -> int(1000 / 3.94) = 253 ms
        pytest.param([850.0, 1150.0] * 2 + [850.0], 146.97, 253.0, id="pm15pct-253ms"),
        # +-40%: std 391.9 -> int(1000 / 8.84) = 113 -> the 200 ms floor
        pytest.param([600.0, 1400.0] * 2 + [600.0], 391.92, 200.0, id="pm40pct-floor-200ms"),
        # the 68% spread of the seed's 100 ms samples, had the one-second ones kept it: 1000 +- 760
        # four times and 1000 once, std 760 x sqrt(4/5) = 679.8 -> int(1000 / 14.6) = 68 -> 200 ms
        pytest.param([240.0, 1760.0, 240.0, 1760.0, 1000.0], 679.77, 200.0, id="std-68pct-floor"),
    ],
)
def test_the_seeds_window_formula(seconds_tps, std, window_ms):
    """``base = max(200, int(1000 / (1 + std x 0.02)))``, clamped to 100..2000 ms, on the seed's
    fluctuations: the larger the spread, the *narrower* the window (the formula as written; the
    seed's sentence says wider, see signals/rates.py's adaptive_window_ms)."""
    got_std = population_std(seconds_tps)
    assert got_std == pytest.approx(std, abs=0.01)
    assert adaptive_window_ms(got_std) == window_ms


def signals(tps: float | None, ready: int = 4, loading: int = 0, signal: str = "generation_tps_tick"):
    fleet = FleetView(spec_replicas=ready + loading, ready=ready, loading=loading)
    return Signals(time_s=0.0, fleet=fleet, values={signal: SignalValue(tps)})


GIVEN = {"target_tps_per_replica": 2000.0}


@pytest.mark.parametrize(
    ("s", "desired", "rule"),
    [
        # 12,000 / 4 = 3,000 per replica, / 2,000 = 1.5 -> ceil(1.5 x 4) = 6
        pytest.param(signals(12_000.0), 6, "scale-up", id="ratio-1.5-4-to-6"),
        # 8,400 / 4 = 2,100: ratio 1.05 is within HPA's 0.1 tolerance
        pytest.param(signals(8_400.0), 4, "within-tolerance", id="ratio-1.05-holds"),
        # 8,900 / 4 = 2,225: ratio 1.1125 is not -> ceil(4.45) = 5
        pytest.param(signals(8_900.0), 5, "scale-up", id="ratio-1.11-4-to-5"),
        # 4,000 / 4 = 1,000: ratio 0.5 -> 2
        pytest.param(signals(4_000.0), 2, "scale-down", id="ratio-0.5-halves"),
        # 2 ready read 4,000 each (ratio 2), 2 loading are missing, at 0 on a scale-up:
        # (8,000 + 0) / 4 pods / 2,000 = 1.0 -> within tolerance, as HPA counts them
        pytest.param(signals(8_000.0, ready=2, loading=2), 4, "within-tolerance", id="loading-at-0-up"),
        # 2 ready at 500 (ratio 0.25), 2 loading at the target on a scale-down:
        # (1,000 + 4,000) / 4 / 2,000 = 0.625 -> ceil(2.5) = 3
        pytest.param(signals(1_000.0, ready=2, loading=2), 3, "scale-down", id="loading-at-target-down"),
        pytest.param(signals(None), 4, "no-data", id="no-token-counts"),
        pytest.param(signals(0.0), 0, "scale-down", id="idle-to-zero-then-the-bounds"),
    ],
)
def test_hpa_arithmetic(s, desired, rule):
    policy = create_policy("token-rate", CTX, GIVEN)
    d, _ = policy.decide(s, policy.initial_state(), 0.0)
    assert (d.desired, d.rule) == (desired, rule)
    if rule != "no-data":
        assert d.inputs["target"] == 2000.0


@pytest.mark.parametrize("window", sorted(WINDOW_SIGNALS))
def test_the_window_chooses_the_signal_read(window):
    """Each window reads its own signal; the others are ignored (3,000 / 2,000 x 4 = 6)."""
    policy = create_policy("token-rate", CTX, {**GIVEN, "window": window})
    s = signals(12_000.0, signal=WINDOW_SIGNALS[window])
    others = {n: SignalValue(100.0) for n in WINDOW_SIGNALS.values() if n != WINDOW_SIGNALS[window]}
    s = replace(s, values={**s.values, **others})
    assert policy.decide(s, None, 0.0)[0].desired == 6
    assert set(POLICIES["token-rate"].reads) == set(WINDOW_SIGNALS.values())


def test_the_default_target_is_the_step_time_model_at_the_tpot_slo():
    """Llama-3-8B on one H100, 1,000 / 200 tokens, TPOT 0.1 s: the capacity model's mean mode stops
    where the batch nears vLLM's 256 sequences, before the SLO (B = 248 at a mean ITL of 89 ms),
    248 / 0.089 s = 2,794 tokens/s; x 0.8 = 2,236 per replica. A tighter SLO (40 ms) leaves a
    smaller batch and fewer tokens/s: the target follows the deployment."""
    b, tps = slo_tokens_per_replica(CTX, 1000.0, 200.0)
    assert b == pytest.approx(248.3, rel=0.01) and tps == pytest.approx(2794.0, rel=0.01)
    policy = create_policy("token-rate", CTX)
    assert policy.hpa.target == pytest.approx(0.8 * tps)
    tight = replace(CTX, slo_tpot_s=0.04)
    b_tight, tps_tight = slo_tokens_per_replica(tight, 1000.0, 200.0)
    assert 1 <= b_tight < 256 and tps_tight < tps
    assert create_policy("token-rate", tight).hpa.target == pytest.approx(0.8 * tps_tight)
    assert create_policy("token-rate", CTX, GIVEN).hpa.target == 2000.0


def test_an_unknown_window_is_refused():
    with pytest.raises(ConfigError, match=r"token-rate\.window"):
        create_policy("token-rate", CTX, {"window": "1s"})


def _direction_changes(window: str, seed: int) -> tuple[int, int]:
    """(changes of direction, scale-up proposals) of the policy's own proposals on a fleet held at 3
    replicas (bounds 3..3), 34 req/s of Poisson arrivals for 10 simulated minutes, a 5 s tick."""
    settings = BacktestSettings(
        min_replicas=3,
        max_replicas=3,
        initial_replicas=3,
        policy_params={"token-rate": {"window": window, "tick_s": 5.0}},
    ).with_cold_start()
    out = io.StringIO()
    run_policy(poisson(34.0, 600.0, seed=seed), "token-rate", settings, decisions_out=out)
    rules = [json.loads(line)["rule"] for line in out.getvalue().splitlines()]
    assert len(rules) >= 115, len(rules)
    dirs = [1 if r == "scale-up" else -1 for r in rules if r in ("scale-up", "scale-down")]
    return sum(a != b for a, b in itertools.pairwise(dirs)), rules.count("scale-up")


def test_the_raw_100ms_reading_flaps_more_than_the_adaptive_window():
    """Seed 000 2.4's claim on a steady load. The fleet is held at 3 replicas, which 34 req/s keeps
    near the target (the tick's reading averages ~0.96 of it), so every proposal is the trigger
    alone, and with the same seed the three windows read the very same token series.

    Measured with this very set-up (5 seeds x 10 minutes, summed): the 100 ms reading spreads by
    ~36% of its mean (the seed: 68%), the adaptive window by ~31% (it sits at its 200 ms floor:
    two buckets), the whole tick by ~12%; the proposals changed direction 151 / 120 / 5 times and
    proposed a scale-up 210 / 190 / 40 times in 610 ticks (151 / 124 / 5 and 199 / 183 / 32 with
    the 1.2% higher target of the step-time copy before the one capacity model). Per seed the
    adaptive window was never worse than the raw reading (one tie in five, both targets); over 3
    seeds x 5 minutes the gap was 44 / 39 (the earlier target), too close to pin, so the test sums
    the longer run. The adaptive window helps by less than the
    seed suggests; reading the whole tick helps most."""
    totals = {w: [0, 0] for w in WINDOW_SIGNALS}
    for window in WINDOW_SIGNALS:
        for seed in range(5):
            changes, ups = _direction_changes(window, seed)
            totals[window][0] += changes
            totals[window][1] += ups
    assert totals["fixed_100ms"][0] > totals["adaptive"][0] > totals["tick"][0], totals
    assert totals["fixed_100ms"][1] > totals["tick"][1], totals


def test_a_plan_shape_the_kv_cache_cannot_hold_is_refused_naming_the_deployment():
    # Found by the policy-config fuzzer: 449,767 prompt tokens fit no Llama-3-8B KV cache on one
    # H100, so B / t(B) was 0 tokens/s and the factory failed with a message about utilization.
    # A request longer than the model's context (8,192) is refused as well: vLLM rejects it, and
    # the capacity model, which clips lengths at the context, would price one that never runs.
    with pytest.raises(ConfigError, match=r"449767 \+ 200 tokens does not fit llama-3-8b's context") as e:
        create_policy("token-rate", CTX, {"plan_prompt_tokens": 449_767.0})
    assert e.value.param == "plan_prompt_tokens"  # type: ignore[attr-defined]
    with pytest.raises(
        ConfigError,
        match=r"8000 \+ 200 tokens does not fit llama-3-8b's context on 1 x h100-80gb .8192 tokens",
    ):
        create_policy("token-rate", CTX, {"plan_prompt_tokens": 8000.0})
    assert create_policy("token-rate", CTX, {"plan_prompt_tokens": 7992.0}).hpa.target > 0.0
