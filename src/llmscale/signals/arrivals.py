"""``arrival_rate_rps``: the offered load, from the arrivals counter (:attr:`Observation.arrivals_total`).

Completed requests (``request_rate_rps``) stand in for arrivals only while the
fleet keeps up: a saturated fleet of 3 replicas serving ~13.4 req/s each
completes ~40 req/s whatever arrives, so a planner reading completions keeps
asking for 3 replicas (``tests/signals/test_arrivals.py``). The rate is the
counter's increase over the observations of the last ``window_s`` seconds that
carry it; None (with a note) when the source has no arrivals counter (Prometheus
and pod scrapes of vLLM have none) or fewer than two such observations.
"""

from __future__ import annotations

from llmscale.signals.histograms import LATENCY_WINDOW_S
from llmscale.signals.window import FleetWindow
from llmscale.types import SignalValue

__all__ = ["arrival_rate_signal"]


def arrival_rate_signal(fw: FleetWindow, window_s: float = LATENCY_WINDOW_S) -> SignalValue:
    """Arrivals per second over ``window_s``. E.g. counters 1000 at 0 s and 4000 at 60 s -> 50.0."""
    newest = fw.newest
    last = newest.arrivals_total
    if last is None:
        return SignalValue(None, "the source counts no arrivals")
    start_s = newest.time_s - window_s
    first: tuple[float, int] | None = None
    for obs in fw.observations:
        if obs.time_s >= start_s and obs.arrivals_total is not None:
            first = (obs.time_s, obs.arrivals_total)
            break
    if first is None or newest.time_s <= first[0]:
        return SignalValue(None, f"needs two arrival counts within {window_s:.0f} s")
    span_s = newest.time_s - first[0]
    # A counter that went down was reset: count from zero (Prometheus' rate() does the same).
    increase = last - first[1]
    if increase < 0:
        increase = last
    return SignalValue(increase / span_s, f"{increase} arrivals over {span_s:.0f} s")
