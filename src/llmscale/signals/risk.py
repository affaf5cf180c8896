"""OOM risk (seed 003 3.2): a logistic of KV usage, its slope and the preemption rate.

``p = 1 / (1 + exp(-(b0 + b1 kv + b2 slope + b3 preempt_rate)))`` per serving
replica, where ``kv`` is its KV-cache usage (0..1) now, ``slope`` the change of
that usage per second over the last 60 s, and ``preempt_rate`` its preemptions
per second over the same span (a replica seen once has slope and rate 0). The
fleet's ``oom_risk`` is the highest replica's: the probability that the replica
most at risk preempts within the next minute. (vLLM does not crash when the KV
pool is exhausted; it preempts and recomputes, which is the "OOM" that costs
latency; seed 003's trigger pairs it with P95 latency at p > 0.35.)

The seed fits its model on JVM/eBPF telemetry (AUC 0.927); these coefficients
are fitted on simulated runs by :mod:`llmscale.offline.oom_fit`, label = the
replica preempts in the next 60 s. Regenerate with::

    .venv/bin/python -m llmscale.offline.oom_fit

and paste the printed constants below.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from llmscale.signals.histograms import LATENCY_WINDOW_S, counter_increase
from llmscale.signals.window import KV_USAGE, PREEMPTIONS, FleetWindow, first_value, start_index
from llmscale.types import SignalValue

__all__ = ["OOM_COEFFICIENTS", "OomFeatures", "oom_features", "oom_probability", "oom_signals"]

# Fitted by `.venv/bin/python -m llmscale.offline.oom_fit` (8 scenarios x 2 seeds, Llama-3-8B on
# H100, llmscale.perf; see offline/oom_fit.py). Train (seed 1): 6960 replica-ticks, 1551 preempting within
# 60 s; AUC 0.970, log-loss 0.171 nats (base rate 0.531). Held out (seed 2): 6960 rows, 1562
# positives; AUC 0.973, log-loss 0.162 (base rate 0.533). Reading: a full pool (kv 0.99) with
# no slope and no preemption yet is a coin flip (p = 0.51); 0.9 preemptions/s on top makes it
# 0.94; kv 0.5 reads 0.05. Order: (b0, b1 per unit KV usage, b2 per unit/s of KV slope,
# b3 per preemption/s).
OOM_COEFFICIENTS: tuple[float, float, float, float] = (-5.8655, 5.9473, 120.1889, 3.0476)


@dataclass(frozen=True, slots=True)
class OomFeatures:
    """One serving replica's inputs to the OOM logistic."""

    replica: str
    kv: float  # KV usage now, 0..1
    kv_slope_per_s: float  # d(kv)/dt over the window, 1/s
    preemptions_per_s: float


def oom_probability(
    kv: float,
    kv_slope_per_s: float,
    preemptions_per_s: float,
    coefficients: tuple[float, float, float, float] = OOM_COEFFICIENTS,
) -> float:
    """The logistic of seed 003 3.2. Worked with the fitted coefficients: kv 0.9, slope 0.002/s
    (+12 % a minute), no preemption: z = -5.8655 + 5.3526 + 0.2404 = -0.2726, p = 0.432."""
    b0, b1, b2, b3 = coefficients
    z = b0 + b1 * kv + b2 * kv_slope_per_s + b3 * preemptions_per_s
    if z >= 0.0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)  # no overflow for very negative z
    return e / (1.0 + e)


def oom_features(fw: FleetWindow, window_s: float = LATENCY_WINDOW_S) -> list[OomFeatures]:
    """Features of each serving replica with a KV reading; slope and rate over its samples in ``window_s``."""
    start = start_index(fw, window_s)
    spans = fw.spans(start)
    obs = fw.observations
    out = []
    for s_now in fw.known:
        kv = first_value(s_now.values, KV_USAGE)
        if kv is None:
            continue
        slope = rate = 0.0
        span = spans.get(s_now.replica)
        if span is not None and span.count >= 2:
            i_old, s_old = span.first
            dt = obs[-1].time_s - obs[i_old].time_s
            kv_old = first_value(s_old.values, KV_USAGE)
            if dt > 0.0 and kv_old is not None:
                slope = (kv - kv_old) / dt
                name = next((n for n in PREEMPTIONS if n in s_now.values), None)
                if name is not None:
                    if span.restarted:
                        counts = [s.values[name] for s in span.samples if name in s.values]
                        rate = counter_increase(counts) / dt
                    elif name in s_old.values:
                        rate = (s_now.values[name] - s_old.values[name]) / dt
        out.append(OomFeatures(s_now.replica, kv, slope, rate))
    return out


def oom_signals(
    fw: FleetWindow, coefficients: tuple[float, float, float, float] = OOM_COEFFICIENTS
) -> dict[str, SignalValue]:
    """``oom_risk``: the highest replica's probability, with that replica's inputs in the note."""
    feats = oom_features(fw)
    if not feats:
        return {"oom_risk": SignalValue(None, "no serving replica reports KV usage")}
    best, worst = -1.0, feats[0]
    for f in feats:
        p = oom_probability(f.kv, f.kv_slope_per_s, f.preemptions_per_s, coefficients)
        if p > best:
            best, worst = p, f
    note = (
        f"{worst.replica}: kv {worst.kv:.2f}, slope {worst.kv_slope_per_s * 60.0:+.3f}/min, "
        f"{worst.preemptions_per_s:.2f} preempt/s"
    )
    return {"oom_risk": SignalValue(best, note)}
