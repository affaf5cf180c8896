"""OOM risk (seed 003 3.2): the logistic, its features, and the fitting code."""

from __future__ import annotations

import math

import numpy as np
import pytest
from signals_fixtures import obs, sample

from llmscale.metrics.names import VLLM
from llmscale.offline.oom_fit import OomRun, auc, evaluate, fit_oom_coefficients, label_run, log_loss
from llmscale.signals.risk import OOM_COEFFICIENTS, oom_features, oom_probability, oom_signals
from llmscale.signals.window import FleetWindow


@pytest.mark.parametrize(
    ("kv", "slope", "rate", "coef", "expected"),
    [
        # fitted: z = -5.8655 + 5.9473 x 0.9 + 120.1889 x 0.002 = -0.2726 -> 0.432
        pytest.param(0.9, 0.002, 0.0, OOM_COEFFICIENTS, 0.4323, id="fitted-worked"),
        pytest.param(0.5, 0.0, 0.0, OOM_COEFFICIENTS, 0.0526, id="half-full"),
        pytest.param(0.99, 0.0, 0.9, OOM_COEFFICIENTS, 0.9408, id="full-and-preempting"),
        pytest.param(0.0, 0.0, 0.0, (0.0, 1.0, 1.0, 1.0), 0.5, id="z0"),
        pytest.param(0.0, 0.0, 0.0, (-1000.0, 0.0, 0.0, 0.0), 0.0, id="no-underflow-error"),
        pytest.param(0.0, 0.0, 0.0, (1000.0, 0.0, 0.0, 0.0), 1.0, id="no-overflow-error"),
    ],
)
def test_oom_probability(kv, slope, rate, coef, expected):
    assert oom_probability(kv, slope, rate, coef) == pytest.approx(expected, abs=1e-4)


def test_coefficients_increase_risk_with_each_input():
    _, b1, b2, b3 = OOM_COEFFICIENTS
    assert b1 > 0 and b2 > 0 and b3 > 0


def _r(name, kv, preempt):
    return sample(name, {VLLM.kv_usage: kv, VLLM.preemptions: preempt})


def test_oom_features_slope_and_rate_over_60s():
    # a: kv 0.40 -> 0.70 over 60 s = 0.005/s; 6 preemptions in 60 s = 0.1/s (t = 0 is outside: 90 - 60 = 30)
    window = [
        obs(0.0, _r("a", 0.1, 0)),
        obs(30.0, _r("a", 0.40, 10)),
        obs(60.0, _r("a", 0.55, 12)),
        obs(90.0, _r("a", 0.70, 16), _r("new", 0.2, 0)),
    ]
    feats = {f.replica: f for f in oom_features(FleetWindow.build(window))}
    assert feats["a"].kv == pytest.approx(0.70)
    assert feats["a"].kv_slope_per_s == pytest.approx(0.005)
    assert feats["a"].preemptions_per_s == pytest.approx(0.1)
    # seen once: slope and rate 0
    assert (feats["new"].kv_slope_per_s, feats["new"].preemptions_per_s) == (0.0, 0.0)


def test_oom_signal_is_the_riskiest_replica():
    window = [obs(0.0, _r("a", 0.2, 0), _r("b", 0.9, 0)), obs(15.0, _r("a", 0.2, 0), _r("b", 0.95, 3))]
    v = oom_signals(FleetWindow.build(window))["oom_risk"]
    expected = oom_probability(0.95, 0.05 / 15, 3 / 15)
    assert v.value == pytest.approx(expected)
    assert v.note.startswith("b:")
    assert oom_signals(FleetWindow.build([obs(0.0, sample("a", ok=False))]))["oom_risk"].value is None


@pytest.mark.parametrize(
    ("scores", "labels", "expected"),
    [
        pytest.param((0.1, 0.4, 0.35, 0.8), (0, 0, 1, 1), 0.75, id="worked-0.75"),
        pytest.param((0.1, 0.2, 0.3), (0, 1, 1), 1.0, id="perfect"),
        pytest.param((0.5, 0.5), (0, 1), 0.5, id="tie"),
    ],
)
def test_auc(scores, labels, expected):
    assert auc(scores, labels) == pytest.approx(expected)


def test_log_loss_of_a_coin():
    assert log_loss(np.array([0.5, 0.5]), np.array([0, 1])) == pytest.approx(math.log(2))


def test_fit_recovers_known_coefficients():
    rng = np.random.default_rng(7)
    true = (-6.0, 6.0, 100.0, 3.0)
    kv = rng.uniform(0, 1, 20_000)
    slope = rng.normal(0, 0.01, 20_000)
    rate = rng.exponential(0.3, 20_000)
    z = true[0] + true[1] * kv + true[2] * slope + true[3] * rate
    y = (rng.uniform(0, 1, 20_000) < 1 / (1 + np.exp(-z))).astype(int)
    run = OomRun("synthetic", list(zip(kv, slope, rate, strict=True)), y.tolist())
    fit = fit_oom_coefficients([run])
    assert fit.coefficients == pytest.approx(true, rel=0.15)
    assert fit.rows == 20_000 and fit.positives == int(y.sum())
    assert fit.log_loss < fit.base_log_loss
    held = evaluate(fit.coefficients, [run])
    assert held.auc == pytest.approx(fit.auc)


def test_fit_needs_rows():
    with pytest.raises(ValueError, match="no training rows"):
        fit_oom_coefficients([OomRun("empty", [], [])])


def test_label_run_labels_preemptions_in_the_next_minute():
    # ticks every 15 s; "a" preempts between 60 and 75 s: rows at 15..60 (within 60 s of it) are 1
    counts = [0, 0, 0, 0, 0, 2, 2, 2, 2, 2]
    window = [obs(15.0 * k, _r("a", 0.5, c)) for k, c in enumerate(counts)]
    run = label_run("hand", window)
    assert run.labels == [0, 1, 1, 1, 1, 0]  # ticks 0..75 have a tick 60 s later
    assert len(run.features) == 6
