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

from itertools import pairwise

from llmscale.signals.histograms import LATENCY_WINDOW_S
from llmscale.signals.window import FleetWindow
from llmscale.types import SignalValue

__all__ = ["arrival_dispersion_signal", "arrival_rate_signal"]


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


#: the median of a chi-square variable of one degree of freedom (the square of a standard normal)
_CHI2_1_MEDIAN = 0.4549364231195724


def arrival_dispersion_signal(fw: FleetWindow, window_s: float = 300.0) -> SignalValue:
    """``arrival_dispersion``: index of dispersion of per-step arrival counts, Var / mean (Poisson: 1).

    Arrivals per controller step are what left (finished requests, the E2E histogram's count
    increase) plus the growth of the requests in the system (waiting + running + gateway): no
    arrivals counter needed, so the same number live and in the backtest. The variance is the
    Allan variance, half the squared difference of consecutive counts, so a ramp in the rate
    does not read as dispersion; and it is the *median* of those halves over 0.455 (the median
    of a chi-square of one degree of freedom: the mean for Gaussian differences), so one step
    in the rate (a flash crowd: one difference of 2,000 among eighteen of ~50) is not read as
    bursts either, while batches, which widen every difference, are. For a batch-Poisson stream
    (batches of X requests at Poisson times, each batch shorter than a step) the index is
    ``E[X^2] / E[X]`` at any time scale longer than a batch, the TTFT's (2 s) included: the
    tail model uses it as that batch size.
    Worked (``tests/signals/test_arrival_dispersion.py``): counts 10, 30, 10, 30, 10 per 15 s
    step -> mean 18, squared differences 400 each, median half 200, / 0.455 = 440, index 24.4.
    None (with a note) with fewer than four steps of counts in ``window_s``.
    """
    obs = fw.observations
    totals = fw.totals
    start_s = fw.newest.time_s - window_s
    counts: list[float] = []
    steps_s: list[float] = []
    for i in range(1, len(obs)):
        if obs[i - 1].time_s < start_s - 1e-6:
            continue
        if obs[i].time_s <= obs[i - 1].time_s:
            continue
        st = fw.step_totals(i)
        before, after = totals[i - 1].load(), totals[i].load()
        if not st.requests_seen or before is None or after is None:
            continue
        finished = st.requests
        if st.missing:
            # Replicas unknown at either end of the step are missing from its finished count (the
            # load is extrapolated over them already). A step that lost more than a tenth of its
            # replicas is no count at all: with 1 of 4 replicas read, a step counts a quarter of
            # its arrivals, and steps alternating between 1 and 4 read out were taken for bursts
            # (an index of 2,000 on a Poisson stream). Up to a tenth is scaled up, as load() is.
            whole = st.counted + st.missing
            if st.missing * 10 > whole or st.counted == 0:
                continue
            finished *= whole / st.counted
        counts.append(max(0.0, finished + after - before))
        steps_s.append(obs[i].time_s - obs[i - 1].time_s)
    if len(counts) < 4:
        return SignalValue(None, f"needs four steps of arrival counts within {window_s:.0f} s")
    mean = sum(counts) / len(counts)
    if mean <= 0.0:
        return SignalValue(None, "no arrivals in the window")
    shortest, longest = min(steps_s), max(steps_s)
    if longest - shortest <= 1e-6 * longest:
        halves = sorted((b - a) ** 2 / 2.0 for a, b in pairwise(counts))
    else:
        # Steps of unequal length (a live loop whose ticks ran late): a count of a longer step
        # is larger for no burst. Compare rates instead: for counts a, b over t1, t2 s of a
        # stream of index D and rate r, (b/t2 - a/t1)^2 has mean D r (1/t1 + 1/t2), so
        # (b/t2 - a/t1)^2 / (1/t1 + 1/t2) x (mean step) estimates what (b - a)^2 / 2 does for
        # equal steps. Worked: a tick that ran 10 s late among 0.5 s ticks at 40 req/s counts
        # 420 next to 20: 80,000 as counts, 0 as rates.
        step_mean = sum(steps_s) / len(steps_s)
        halves = sorted(
            (b / t2 - a / t1) ** 2 / (1.0 / t1 + 1.0 / t2) * step_mean
            for (a, t1), (b, t2) in pairwise(zip(counts, steps_s, strict=True))
        )
        mean = sum(counts) / sum(steps_s) * step_mean
    mid = len(halves) // 2
    median = halves[mid] if len(halves) % 2 else (halves[mid - 1] + halves[mid]) / 2.0
    allan = median / _CHI2_1_MEDIAN
    return SignalValue(allan / mean, f"{len(counts)} steps, {mean:.1f} arrivals per step")
