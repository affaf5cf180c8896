"""The latency predictors replayed over a decision log, scored as seed 000 3.2 scores them.

Every predictor predicts, at each tick, the P99 of the window ``horizon_s`` ahead (the first
tick at least that much later, as :func:`llmscale.signals.predictors.predictor_records`
pairs them) from what the log holds at that tick:

* ``last value``: the P99 now (the baseline any predictor must beat);
* ``fixed window mean``: the mean P99 over the last ``window_s`` (seed 000 3.2's comparison row,
  "固定窗口均值");
* ``decayed window``: seed 000 3.2's dynamic weights ``exp(-0.5 x steps_ago)`` over the same ticks
  (the catalogue's ``p99_predicted_decay_s`` applies them to histogram buckets, which a log does
  not keep; here to the logged P99s);
* ``queue model``: seed 000 2.3's ``12.8 ms + 0.35 (1 - R) Q`` from ``queue_per_replica``,
  ``running`` and ``queue_waiting`` (:func:`~llmscale.signals.predictors.p99_from_queue_ms`);
* ``coupled model``: seed 003 2.2's formula from the request rate per serving replica and the
  mean prompt length (:func:`~llmscale.signals.predictors.coupled_latency_ms`);
* any ``p99_predicted_*_s`` signal the policy logged, as it was computed live.

A predictor whose inputs the log lacks is listed with what it needs. Scores:
:func:`~llmscale.signals.predictors.predictor_errors` -- seed 000 3.2's MAE and 99th-percentile
error, plus MAPE and bias.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from llmscale.analyze.causal import outcome_after
from llmscale.analyze.log import TickTable
from llmscale.signals.predictors import (
    DECAY_LAMBDA_PER_STEP,
    coupled_latency_ms,
    p99_from_queue_ms,
    predictor_errors,
    resident_ratio,
)

__all__ = ["PredictorScore", "predictions_from_log", "score_predictors"]


@dataclass(frozen=True)
class PredictorScore:
    name: str
    #: None when the log lacks an input: ``missing`` says which
    errors: dict[str, float] | None
    missing: str = ""


def _window_predictions(
    time_s: np.ndarray, p99: np.ndarray, window_s: float
) -> tuple[np.ndarray, np.ndarray]:
    mean = np.full(p99.shape, np.nan)
    decayed = np.full(p99.shape, np.nan)
    for i in range(time_s.size):
        lo = int(np.searchsorted(time_s, time_s[i] - window_s, side="right"))
        vals = p99[lo : i + 1]
        ok = np.isfinite(vals)
        if not ok.any():
            continue
        mean[i] = float(vals[ok].mean())
        steps_ago = (i - np.arange(lo, i + 1))[ok]
        w = np.exp(-DECAY_LAMBDA_PER_STEP * steps_ago)
        decayed[i] = float(np.sum(w * vals[ok]) / w.sum())
    return mean, decayed


def predictions_from_log(table: TickTable, window_s: float = 60.0) -> dict[str, np.ndarray | str]:
    """Predictor name -> per-tick predicted P99 (s), or a string saying what the log lacks."""
    p99 = table.quantity("p99_s")
    if p99 is None:
        return {}
    out: dict[str, np.ndarray | str] = {"last value": p99.copy()}
    mean, decayed = _window_predictions(table.time_s, p99, window_s)
    out["fixed window mean"] = mean
    out["decayed window"] = decayed
    q, running, waiting = (table.quantity(n) for n in ("queue_per_replica", "running", "queue_waiting"))
    if q is None or running is None or waiting is None:
        out["queue model"] = "needs queue_per_replica, running and queue_waiting in the log"
    else:
        out["queue model"] = np.array(
            [
                p99_from_queue_ms(qq, resident_ratio(rr, ww)) / 1000.0
                if math.isfinite(qq + rr + ww)
                else math.nan
                for qq, rr, ww in zip(q, running, waiting, strict=True)
            ]
        )
    rate, ctx = table.quantity("load_rps"), table.quantity("prompt_tokens")
    if rate is None or ctx is None:
        out["coupled model"] = "needs a request rate and prompt_len_mean_tokens in the log"
    else:
        serving = table.serving()
        out["coupled model"] = np.array(
            [
                coupled_latency_ms(r / s, c) / 1000.0 if math.isfinite(r + s + c) and s > 0 else math.nan
                for r, s, c in zip(rate, serving, ctx, strict=True)
            ]
        )
    for name, col in table.signals.items():
        if name.startswith("p99_predicted_") and np.isfinite(col).any():
            out[f"logged {name}"] = col
    return out


def score_predictors(
    table: TickTable, *, horizon_s: float = 60.0, window_s: float = 60.0
) -> list[PredictorScore]:
    """Each predictor's errors against the P99 ``horizon_s`` later (seed 000 3.2's scorer)."""
    p99 = table.quantity("p99_s")
    if p99 is None:
        return []
    observed = outcome_after(table.time_s, p99, horizon_s)
    scores = []
    for name, pred in predictions_from_log(table, window_s).items():
        if isinstance(pred, str):
            scores.append(PredictorScore(name, None, pred))
            continue
        recs = [
            {"predictor": name, "predicted_s": float(p), "observed_s": float(o)}
            for p, o in zip(pred, observed, strict=True)
            if math.isfinite(p) and math.isfinite(o)
        ]
        errs = predictor_errors(recs).get(name)
        scores.append(
            PredictorScore(name, errs, "" if errs else "no tick with both a prediction and a later P99")
        )
    return scores
