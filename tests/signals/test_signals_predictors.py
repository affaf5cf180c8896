"""TTFT P99 predictors (seed 000 3.2, 2.3; seed 003 2.2) and the scorer the backtest uses."""

from __future__ import annotations

import math

import pytest
from signals_fixtures import BOUNDS, hist, obs, sample

from llmscale.metrics.names import VLLM
from llmscale.signals.histograms import WindowHistogram, latency_signals
from llmscale.signals.predictors import (
    coupled_latency_ms,
    decayed_quantile,
    p99_from_queue_ms,
    predictor_errors,
    predictor_records,
    predictor_signals,
    resident_ratio,
)
from llmscale.signals.window import FleetWindow
from llmscale.types import FleetView, Signals, SignalValue


def test_decayed_quantile_worked_example():
    # newest step: 10 fast (<= 0.1); step before: 10 slow (0.1, 0.5]. Weights 1 and exp(-0.5):
    # cumulative (10, 16.07, 16.07, 16.07), rank 15.9 in (0.1, 0.5]: 0.1 + 0.4 x 5.9/6.07
    h = WindowHistogram(BOUNDS, [10, 20, 20, 20], 1, 0, {4: [10, 10, 10, 10], 3: [0, 10, 10, 10]})
    w = math.exp(-0.5)
    rank = 0.99 * (10 + 10 * w)
    assert decayed_quantile(h, 4) == pytest.approx(0.1 + 0.4 * (rank - 10) / (10 * w))
    # an undecayed window would read the plain P99 of 20 requests: 0.1 + 0.4 x 9.8/10 = 0.492
    assert decayed_quantile(h, 4, lam=0.0) == pytest.approx(0.492)


@pytest.mark.parametrize(
    ("q", "r", "expected_ms"),
    [
        pytest.param(40.0, 0.5, 19.8, id="worked-19.8"),
        pytest.param(0.0, 0.2, 12.8, id="empty-queue-base"),
        pytest.param(100.0, 1.0, 12.8, id="all-resident"),
        pytest.param(100.0, 0.0, 47.8, id="none-resident"),
    ],
)
def test_p99_from_queue_ms(q, r, expected_ms):
    assert p99_from_queue_ms(q, r) == pytest.approx(expected_ms)


@pytest.mark.parametrize(
    ("running", "waiting", "expected"),
    [
        pytest.param(30, 10, 0.75, id="3-of-4"),
        pytest.param(0, 0, 1.0, id="empty"),
        pytest.param(0, 5, 0.0, id="all-wait"),
    ],
)
def test_resident_ratio(running, waiting, expected):
    assert resident_ratio(running, waiting) == expected


@pytest.mark.parametrize(
    ("qps", "ctx", "expected_ms"),
    [
        # compute term 8 x 2048^2 x 32 x 1e-4 = 107374.2, / 0.7
        pytest.param(8.0, 2048.0, 107374.1824 / 0.7, id="seed-example-compute-bound"),
        # the seed's own table row (qps 4, ctx 1024, measured 321 ms): the formula gives 19174 ms
        pytest.param(4.0, 1024.0, 13421.7728 / 0.7, id="seed-table-row-off-60x"),
        # ctx 1: bandwidth term 2 x 1 x 8 x 2 / 1600 = 0.02 < compute term 8 x 1 x 32 x 1e-4 = 0.0256
        pytest.param(8.0, 1.0, 0.0256 / 0.7, id="tiny"),
    ],
)
def test_coupled_latency_ms(qps, ctx, expected_ms):
    assert coupled_latency_ms(qps, ctx) == pytest.approx(expected_ms)


def _values(**kw):
    base = {
        "queue_per_replica": 40.0,
        "running": 30.0,
        "queue_waiting": 30.0,
        "request_rate_rps": 8.0,
        "prompt_len_mean_tokens": 2048.0,
        "serving_replicas": 2.0,
    }
    base.update(kw)
    return {k: SignalValue(v) for k, v in base.items()}


def test_predictor_signals_units_and_invalid_inputs():
    out = predictor_signals(None, 0, _values())
    assert out["p99_predicted_decay_s"].value is None
    assert out["p99_predicted_queue_s"].value == pytest.approx(0.0198)  # R = 30/60 = 0.5
    assert out["p99_predicted_coupled_s"].value == pytest.approx(coupled_latency_ms(4.0, 2048.0) / 1000)
    out = predictor_signals(None, 0, _values(running=None, serving_replicas=0.0))
    assert out["p99_predicted_queue_s"].value is None
    assert out["p99_predicted_coupled_s"].value is None


def test_predictor_errors_worked_example():
    records = [
        {"predictor": "decay", "predicted_s": 1.0, "observed_s": 2.0},
        {"predictor": "decay", "predicted_s": 3.0, "observed_s": 2.0},
        {"predictor": "queue", "predicted_s": 0.5, "observed_s": 0.0},  # no APE for o = 0
        {"predictor": "queue", "predicted_s": None, "observed_s": 1.0},  # skipped
        {"predictor": "coupled", "predicted_s": float("nan"), "observed_s": 1.0},  # skipped
    ]
    errs = predictor_errors(records)
    assert errs["decay"] == {
        "n": 2.0,
        "mae_s": pytest.approx(1.0),
        "p99_abs_error_s": pytest.approx(1.0),
        "mape_pct": pytest.approx(50.0),
        "median_ape_pct": pytest.approx(50.0),
        "median_abs_error_s": pytest.approx(1.0),
        "bias_s": pytest.approx(0.0),
    }
    assert errs["queue"]["n"] == 1.0 and math.isnan(errs["queue"]["mape_pct"])
    assert errs["queue"]["bias_s"] == pytest.approx(0.5)
    assert "coupled" not in errs


def _signals(t, **values):
    return Signals(t, FleetView(1), {k: SignalValue(v) for k, v in values.items()})


def test_predictor_records_pair_with_the_tick_a_horizon_later():
    history = [
        _signals(0.0, p99_predicted_decay_s=1.0, p99_predicted_queue_s=0.1, ttft_p99_s=0.5),
        _signals(30.0, p99_predicted_decay_s=2.0, ttft_p99_s=0.7),
        _signals(60.0, ttft_p99_s=0.9),
    ]
    recs = predictor_records(history, horizon_s=60.0)
    assert len(recs) == 3  # only t = 0 has a tick 60 s later
    by_name = {r["predictor"]: r for r in recs}
    assert by_name["decay"] == {"predictor": "decay", "time_s": 0.0, "predicted_s": 1.0, "observed_s": 0.9}
    assert by_name["coupled"]["predicted_s"] is None
    assert predictor_errors(recs)["decay"]["bias_s"] == pytest.approx(0.1)


def test_decay_predictor_from_a_window():
    counts = [(0, 0), (0, 10), (10, 20)]  # (fast, total) cumulative: step 1 = 10 slow, step 2 = 10 fast
    window = [
        obs(15.0 * k, sample("a", histograms={VLLM.ttft: hist((f, t, t, t))}))
        for k, (f, t) in enumerate(counts)
    ]
    fw = FleetWindow.build(window)
    _, ttft = latency_signals(fw)
    out = predictor_signals(ttft, 2, _values())
    w = math.exp(-0.5)
    rank = 0.99 * (10 + 10 * w)
    assert out["p99_predicted_decay_s"].value == pytest.approx(0.1 + 0.4 * (rank - 10) / (10 * w))
