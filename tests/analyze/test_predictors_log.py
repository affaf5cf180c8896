"""The latency predictors replayed over a decision log and scored as seed 000 3.2 scores them."""

from __future__ import annotations

import numpy as np
import pytest
from _logs import backtest_line, write_log

from llmscale.analyze.log import read_decision_log
from llmscale.analyze.predictors import score_predictors
from llmscale.signals.predictors import p99_from_queue_ms, predictor_errors, resident_ratio


def test_the_exact_predictor_scores_zero_and_the_others_do_not(tmp_path):
    # Ticks every 15 s; the P99 60 s (4 ticks) after tick t is exactly seed 000 2.3's queue model
    # at t: 12.8 ms + 0.35 (1 - R) Q ms, with Q = waiting / 4 replicas and R = running / (running +
    # waiting). E.g. waiting 400, running 100: Q 100, R 0.2, 12.8 + 0.35 x 0.8 x 100 = 40.8 ms.
    assert p99_from_queue_ms(100.0, resident_ratio(100.0, 400.0)) == pytest.approx(40.8)
    rng = np.random.default_rng(1)
    n = 80
    waiting = rng.integers(0, 800, n).astype(float)
    running = rng.integers(1, 256, n).astype(float)
    model_s = np.array(
        [
            p99_from_queue_ms(w / 4.0, resident_ratio(r, w)) / 1000.0
            for w, r in zip(waiting, running, strict=True)
        ]
    )
    p99 = np.r_[np.full(4, 0.05), model_s[:-4]]
    lines = [
        backtest_line(
            15.0 * (i + 1),
            spec=4,
            final=4,
            observed={
                "ttft_p99_s": round(float(p99[i]), 6),
                "queue_waiting": float(waiting[i]),
                "queue_per_replica": float(waiting[i]) / 4.0,
                "running": float(running[i]),
                "serving_replicas": 4.0,
            },
        )
        for i in range(n)
    ]
    table = read_decision_log(write_log(tmp_path / "d.jsonl", lines))
    scores = {s.name: s for s in score_predictors(table, horizon_s=60.0)}
    queue = scores["queue model"].errors
    assert queue is not None and queue["n"] == n - 4
    assert queue["mae_s"] < 1e-5 and queue["p99_abs_error_s"] < 1e-5  # the log rounds to 1 us
    for other in ("last value", "fixed window mean", "decayed window"):
        errs = scores[other].errors
        assert errs is not None and errs["mae_s"] > 1e-3, other
    # the coupled model needs a rate and prompt length this log does not carry: said, not scored
    assert (
        scores["coupled model"].errors is None and "prompt_len_mean_tokens" in scores["coupled model"].missing
    )


def test_window_predictors_on_a_worked_series(tmp_path):
    # P99 1, 2, 3, 4, 5 s at ticks 15, 30, 45, 60, 75 s; at t = 60 the 60 s window (0, 60] holds
    # the ticks at 15..60: mean (1 + 2 + 3 + 4) / 4 = 2.5.
    # Decayed: weights e^0, e^-0.5, e^-1, e^-1.5 on 4, 3, 2, 1 -> (4 + 3 x 0.6065 + 2 x 0.3679 +
    # 0.2231) / (1 + 0.6065 + 0.3679 + 0.2231) = 6.778 / 2.1975 = 3.084. Both predict the P99 15 s
    # later (5): errors 2.5 and 1.916.
    lines = [
        backtest_line(15.0 * (i + 1), spec=1, final=1, observed={"ttft_p99_s": float(i + 1)})
        for i in range(5)
    ]
    table = read_decision_log(write_log(tmp_path / "d.jsonl", lines))
    scores = {s.name: s.errors for s in score_predictors(table, horizon_s=15.0, window_s=60.0)}
    mean, decayed, last = scores["fixed window mean"], scores["decayed window"], scores["last value"]
    assert mean is not None and decayed is not None and last is not None
    assert last["mae_s"] == pytest.approx(1.0)  # always one step behind
    # the last pair (t = 60 -> 75) carries the worked numbers; earlier pairs are smaller
    assert mean["p99_abs_error_s"] == pytest.approx(2.5, abs=0.02)
    assert decayed["p99_abs_error_s"] == pytest.approx(5.0 - 6.778 / 2.1975, abs=0.02)


def test_scorer_mae_and_99th_percentile():
    # |errors| 0, 1, ..., 100 (101 pairs): MAE 50, 99th percentile 99 (rank 0.99 x 100 = 99)
    recs = [{"predictor": "x", "predicted_s": float(e), "observed_s": 0.0} for e in range(101)]
    errs = predictor_errors(recs)["x"]
    assert errs["mae_s"] == pytest.approx(50.0) and errs["p99_abs_error_s"] == pytest.approx(99.0)
