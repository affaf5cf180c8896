"""Seed 000 3.1: ``composite``, the 0.3 / 0.4 / 0.3 score of prompt length, decode steps and KV growth."""

from __future__ import annotations

from dataclasses import replace

import pytest

from llmscale.deployment import Deployment
from llmscale.guards import GuardConfig, GuardState, apply_guards
from llmscale.policies.base import create_policy
from llmscale.policies.composite import CompositeConfig, composite_score
from llmscale.types import FleetView, Signals, SignalValue

CTX = Deployment(min_replicas=1, max_replicas=20)
BASE = Signals(time_s=0.0, fleet=FleetView(spec_replicas=4, ready=4), values={})
#: long requests, the cache steady, something queued, KV half full: nothing fires
STEADY = {
    "prompt_len_mean_tokens": 532.0,
    "decode_steps_mean": 300.0,
    "kv_growth_pct_per_step": 0.0,
    "queue_per_replica": 2.0,
    "kv_usage_mean": 0.5,
}


def sig(now_s: float = 0.0, spec: int = 4, **values: float | None) -> Signals:
    merged = {**STEADY, **values}
    return replace(
        BASE,
        time_s=now_s,
        fleet=replace(BASE.fleet, spec_replicas=spec, ready=spec),
        values={k: SignalValue(v) for k, v in merged.items()},
    )


@pytest.mark.parametrize(
    ("prompt", "decode", "growth", "score"),
    [
        # 532 / 665 = 0.8, 300 / 300 = 1, 7 / 10 = 0.7: 0.24 + 0.4 + 0.21
        pytest.param(532.0, 300.0, 7.0, 0.85, id="worked-0.85"),
        pytest.param(532.0, 300.0, 8.0, 0.88, id="worked-0.88"),
        pytest.param(1330.0, 900.0, 30.0, 1.0, id="terms-capped-at-1"),
        pytest.param(0.0, 0.0, -20.0, 0.0, id="shrinking-cache-counts-0"),
        pytest.param(66.5, 30.0, 1.0, 0.1, id="tenths"),
    ],
)
def test_score_formula(prompt, decode, growth, score):
    assert composite_score(CompositeConfig(), prompt, decode, growth)[0] == pytest.approx(score)


@pytest.mark.parametrize(
    ("values", "spec", "desired", "rule"),
    [
        pytest.param({"kv_growth_pct_per_step": 7.0}, 4, 4, "hold", id="score-0.85-is-not-above"),
        pytest.param({"kv_growth_pct_per_step": 8.0}, 4, 5, "score-high", id="score-0.88-up"),
        pytest.param(
            {"prompt_len_mean_tokens": 100.0, "decode_steps_mean": 50.0, "kv_growth_pct_per_step": -6.0},
            4,
            2,
            "aggressive-down",
            id="kv-shrinking-prompts-100-halve",
        ),
        pytest.param(
            {"prompt_len_mean_tokens": 100.0, "decode_steps_mean": 50.0, "kv_growth_pct_per_step": -6.0},
            5,
            3,
            "aggressive-down",
            id="halve-rounds-up",
        ),
        pytest.param(
            {"prompt_len_mean_tokens": 128.0, "decode_steps_mean": 50.0, "kv_growth_pct_per_step": -6.0},
            4,
            4,
            "hold",
            id="prompts-128-not-short",
        ),
        pytest.param(
            {"prompt_len_mean_tokens": 100.0, "decode_steps_mean": 50.0, "kv_growth_pct_per_step": -4.0},
            4,
            4,
            "hold",
            id="growth-slowing-is-not-a-drop",
        ),
        pytest.param(
            {"kv_growth_pct_per_step": 0.0, "queue_per_replica": 0.0, "kv_usage_mean": 0.2},
            4,
            3,
            "idle-down",
            id="idle-kv-0.2-queue-0",
        ),
        pytest.param(
            {"kv_growth_pct_per_step": 0.0, "queue_per_replica": 0.0, "kv_usage_mean": 0.3},
            4,
            4,
            "hold",
            id="idle-needs-kv-below-0.3",
        ),
        pytest.param(
            {
                "prompt_len_mean_tokens": None,
                "decode_steps_mean": None,
                "kv_growth_pct_per_step": 0.0,
                "queue_per_replica": 0.0,
                "kv_usage_mean": 0.0,
            },
            4,
            3,
            "idle-down",
            id="no-request-finished-idle-fleet",
        ),
        pytest.param({"decode_steps_mean": None}, 4, 4, "no-data", id="decode-missing"),
        pytest.param({"kv_growth_pct_per_step": None}, 4, 4, "no-data", id="growth-missing"),
    ],
)
def test_rules(values, spec, desired, rule):
    policy = create_policy("composite", CTX)
    d, _ = policy.decide(sig(spec=spec, **values), policy.initial_state(), 0.0)
    assert (d.desired, d.rule) == (desired, rule)


def test_idle_rule_can_be_switched_off():
    policy = create_policy("composite", CTX, {"idle_down": False})
    d, _ = policy.decide(sig(queue_per_replica=0.0, kv_usage_mean=0.1), None, 0.0)
    assert d.rule == "hold"


def test_three_consecutive_periods_via_the_guard():
    policy = create_policy("composite", CTX)
    assert dict(policy.guard_overrides) == {"confirm_up_ticks": 3}
    cfg = GuardConfig(min_replicas=1, max_replicas=20).merged(policy.guard_overrides)
    gs = GuardState()
    finals = []
    for now_s, growth in ((0.0, 8.0), (15.0, 8.0), (30.0, 3.0), (45.0, 8.0), (60.0, 8.0), (75.0, 8.0)):
        s = sig(now_s, kv_growth_pct_per_step=growth)
        d, _ = policy.decide(s, None, now_s)
        out, gs = apply_guards(d, s, cfg, gs, now_s)
        finals.append(out.desired)
    # two high periods, a dip that resets the count, then three in a row
    assert finals == [4, 4, 4, 4, 4, 5]
