"""KV-cache signals: mean and max usage over serving replicas, and growth per step (seed 000 3.1).

``kv_growth_pct_per_step`` follows seed 000 3.1's ``calc_kv_growth_rate``:
``(curr - prev) / prev / max(steps, 1) * 100``, with the KV *bytes* of one
engine replaced by the fleet's mean KV usage (a ratio of the same pool, so
the relative growth is the same), ``prev`` the mean at the oldest observation
within ``window_s`` and ``steps`` the controller steps between the two. Worked:
mean usage 0.40 a minute ago and 0.52 now, 4 steps of 15 s:
(0.52 - 0.40) / 0.40 / 4 x 100 = 7.5 %/step. Over several steps rather than
one because a single 15 s step of a fleet's mean is mostly noise.
"""

from __future__ import annotations

from llmscale.signals.histograms import LATENCY_WINDOW_S
from llmscale.signals.window import KV_USAGE, FleetWindow, first_value, start_index
from llmscale.types import SignalValue

__all__ = ["kv_growth_pct", "kv_growth_signal", "kv_signals", "kv_usage_signals"]


def kv_growth_pct(prev: float, curr: float, steps: int) -> float | None:
    """Seed 000 3.1: relative growth per step in percent; None when ``prev`` is 0 and ``curr`` is not.

    (0.40, 0.52, 4) -> 7.5; (0, 0, 3) -> 0.0 (nothing cached, nothing grew).
    """
    if prev <= 0.0:
        return 0.0 if curr <= 0.0 else None
    return (curr - prev) / prev / max(steps, 1) * 100.0


def kv_signals(fw: FleetWindow, window_s: float = LATENCY_WINDOW_S) -> dict[str, SignalValue]:
    """kv_usage_mean, kv_usage_max (newest observation) and kv_growth_pct_per_step (over ``window_s``)."""
    values = kv_usage_signals(fw)
    values["kv_growth_pct_per_step"] = kv_growth_signal(fw, window_s)
    return values


def kv_usage_signals(fw: FleetWindow) -> dict[str, SignalValue]:
    """kv_usage_mean and kv_usage_max over the serving replicas of the newest observation."""
    t = fw.newest_totals
    values: dict[str, SignalValue] = {}
    if t.kv_n:
        note = f"{t.kv_n} replica(s)" + (f"; {fw.unknown} unknown left out" if fw.unknown else "")
        kv_max = max(v for s in fw.known if (v := first_value(s.values, KV_USAGE)) is not None)
        values["kv_usage_mean"] = SignalValue(t.kv_sum / t.kv_n, note)
        values["kv_usage_max"] = SignalValue(kv_max, note)
    else:
        what = "no serving replica reports KV usage"
        values["kv_usage_mean"] = values["kv_usage_max"] = SignalValue(None, what)
    return values


def kv_growth_signal(fw: FleetWindow, window_s: float = LATENCY_WINDOW_S) -> SignalValue:
    """kv_growth_pct_per_step: the fleet's mean KV usage now against the oldest mean within ``window_s``."""
    totals = fw.totals
    start = start_index(fw, window_s)
    # the oldest observation in the window with a known mean
    i = start
    n = len(totals) - 1
    while i < n and totals[i].kv_n == 0:
        i += 1
    curr = totals[-1].kv_mean()
    prev = totals[i].kv_mean()
    if curr is None or prev is None or i == n:
        return SignalValue(None, "needs mean KV usage at two observations")
    g = kv_growth_pct(prev, curr, n - i)
    note = f"{prev:.3f} -> {curr:.3f} over {n - i} step(s)" if g is not None else "grew from empty"
    return SignalValue(g, note)
