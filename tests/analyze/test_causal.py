"""The effect of scale actions on P99, recovered from a simulated decision log with a known effect."""

from __future__ import annotations

import math

import numpy as np
import pytest
from _logs import backtest_line, write_log

from llmscale.analyze.analysis import AnalysisSettings, analyze_table
from llmscale.analyze.causal import outcome_after
from llmscale.analyze.log import read_decision_log

pytest.importorskip("statsmodels")

EFFECT_S = -0.3


def _confounded_log(tmp_path, n: int = 600, seed: int = 2):
    """Ticks every 15 s. Load L_t ~ U(10, 50) req/s; the controller scales up with probability
    logistic((L_t - 30) / 5) (busy ticks are scaled: the confounding); the P99 of the next tick is
    0.2 + 0.02 L_t - 0.3 [scaled] + N(0, 0.05) s. A scaled tick has E[L] about 14 req/s higher, so
    the naive difference is -0.3 + 0.02 x 14 = about -0.02 s: "scaling did nothing"."""
    rng = np.random.default_rng(seed)
    load = rng.uniform(10.0, 50.0, n)
    treated = rng.random(n) < 1.0 / (1.0 + np.exp(-(load - 30.0) / 5.0))
    p99 = np.empty(n)
    p99[0] = 0.6
    p99[1:] = 0.2 + 0.02 * load[:-1] + EFFECT_S * treated[:-1] + 0.05 * rng.standard_normal(n - 1)
    lines = [
        backtest_line(
            15.0 * (i + 1),
            spec=4,
            final=5 if treated[i] else 4,
            observed={
                "request_rate_rps": float(load[i]),
                "ttft_p99_s": float(p99[i]),
                "serving_replicas": 4.0,
            },
        )
        for i in range(n)
    ]
    return write_log(tmp_path / "decisions.jsonl", lines)


def test_ate_of_a_scale_up_is_recovered_within_its_interval(tmp_path):
    table = read_decision_log(_confounded_log(tmp_path))
    a = analyze_table(table, AnalysisSettings(effect_horizon_s=15.0))
    (up,) = [e for e in a.effects if e.action == "scale up"]
    assert up.ci_low_s < EFFECT_S < up.ci_high_s
    assert up.ci_high_s - up.ci_low_s < 0.05  # n = 600 pins it: SE ~ 0.05 / sqrt(n / 4)
    assert up.helped is True
    # the naive comparison is confounded by load: far outside the interval, near zero
    assert up.naive_diff_s > up.ci_high_s + 0.1
    # serving replicas are constant here: dropped as carrying nothing (a singular design otherwise)
    assert up.covariates == ("p99_now_s", "load_rps")
    assert up.num_treated + up.num_control == 599  # the last tick has no later P99
    assert "effect scale down" in a.notes  # no scale-down in this log: said, not estimated


def test_no_effect_gives_an_interval_around_zero(tmp_path):
    rng = np.random.default_rng(4)
    n = 400
    load = rng.uniform(10.0, 50.0, n)
    treated = rng.random(n) < 1.0 / (1.0 + np.exp(-(load - 30.0) / 5.0))
    p99 = np.r_[0.6, 0.2 + 0.02 * load[:-1] + 0.05 * rng.standard_normal(n - 1)]
    lines = [
        backtest_line(
            15.0 * (i + 1),
            spec=4,
            final=5 if treated[i] else 4,
            observed={"request_rate_rps": float(load[i]), "ttft_p99_s": float(p99[i])},
        )
        for i in range(n)
    ]
    a = analyze_table(
        read_decision_log(write_log(tmp_path / "d.jsonl", lines)), AnalysisSettings(effect_horizon_s=15.0)
    )
    (up,) = a.effects
    assert up.ci_low_s < 0.0 < up.ci_high_s and up.helped is None


def test_outcome_is_the_first_tick_a_horizon_later():
    t = np.array([0.0, 15.0, 30.0, 45.0, 70.0])
    v = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    out = outcome_after(t, v, 30.0)
    # 0 -> 30 (3.0); 15 -> 45 (4.0); 30 -> 70 (5.0, the first at or after 60); 45 -> 75: none
    assert out[:3].tolist() == [3.0, 4.0, 5.0] and all(math.isnan(x) for x in out[3:])
