"""Counter rates and request shape: requests/s, tokens/s, preemptions/s, prompt and decode lengths.

Rates (seed 000 3.1 names the request-shape signals; 2.4 the adaptive window):

* each replica present in the newest observation (serving, starting or
  draining; scrape ok or not) contributes its counter increase between its
  oldest and newest successful samples within ``window_s``, divided by *its*
  sampled span, and the fleet rate is the sum (PromQL's ``sum(rate(...))``).
  A counter that goes down was reset, as PromQL's ``rate`` reads it: the
  increase of that step is the new value (120 -> 30 is +30, not -90), so a
  restarted replica never reads as a negative rate nor, once back, as a spike.
  A restart resets every counter of a process at once, so one witness counter
  finds it (``signals/window.py``); a counter that ends below where it started
  is walked as well, witness or not. Samples that are no load at all (negative,
  NaN, a frozen page) never get here: the sources mark those replicas unknown
  (``metrics/vetting.py``), so a replica back from such a stretch counts from
  its last good sample, over the time since (no spike).
  A replica's span starts at its first sample the source could date
  (``Observation.undated_replicas``: a pod scrape's first page of a target,
  or Prometheus' first samples of one, may be a cold cache's old copy; see
  :func:`_dated`).
  So a replica made ready 30 s ago counts at its current rate, not at half
  of it; a replica whose latest scrape failed counts at its last known rate
  (unknown is not zero load), and a serving one unknown for the whole window
  at the mean rate of the serving replicas known; a replica gone from the fleet
  no longer counts, because its load has moved to the survivors and would be
  counted twice;
* finished requests are the increase of the E2E histogram's count;
* ``prompt_len_mean_tokens`` = prompt-token increase / increase of the TTFT
  histogram's count: vLLM adds a request's prompt tokens when its prefill is
  done, the moment it observes its TTFT, so the two move together even while
  load changes. (Dividing by *finished* requests instead reads ~1.6x high in
  a surge, whose prefills run ahead of its completions: a capacity planner
  would then see the replicas' capacity fall just when it matters.) Without
  a TTFT histogram the finished count stands in.
* ``decode_steps_mean`` = generation-token increase / finished-request
  increase, summed over the same replicas: tokens are counted when generated
  and requests when finished, so it is the mean output of requests *seen* in
  the window, exact in steady state.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from operator import add

from llmscale.signals.arrivals import arrival_rate_signal
from llmscale.signals.catalog import SIGNALS
from llmscale.signals.histograms import LATENCY_WINDOW_S, counter_increase
from llmscale.signals.window import (
    E2E,
    GENERATION_TOKENS,
    PREEMPTIONS,
    PROMPT_TOKENS,
    TTFT,
    FleetWindow,
    Span,
    start_index,
)
from llmscale.types import Observation, Phase, ReplicaSample, SignalValue

__all__ = [
    "RATE_SIGNALS",
    "RAW_WINDOW_S",
    "THROUGHPUT_HISTORY_STEPS",
    "CounterRates",
    "StepRates",
    "adaptive_throughput_signals",
    "adaptive_window_ms",
    "counter_rate_signals",
    "counter_rates",
    "fleet_tokens_per_bucket",
    "population_std",
    "rate_signals",
    "step_rate_signals",
    "step_rates",
    "step_window_ms",
]

#: seed 000 2.4: the adaptive window looks at the last 5 throughput samples
THROUGHPUT_HISTORY_STEPS = 5
#: seed 000 2.4: those samples are one second apart ("history: the last 5 one-second samples")
THROUGHPUT_SAMPLE_S = 1.0
#: seed 000 2.4: the raw sampling window whose token rate spreads by 68% of its mean
RAW_WINDOW_S = 0.1


@dataclass(frozen=True, slots=True)
class CounterRates:
    """Fleet rates over the window (None: no replica has two samples of that counter)."""

    request_rps: float | None
    prompt_tps: float | None
    generation_tps: float | None
    preemptions_per_s: float | None
    finished: float  # requests finished in the window, over replicas with both counters
    prompt_tokens: float  # prompt tokens over the replicas counted in ``finished``
    generation_tokens: float  # generated tokens over the replicas counted in ``finished``
    replicas: int  # replicas with two samples in the window
    prefilled: float = 0.0  # first tokens in the window (TTFT count), over replicas with prompt tokens too
    prefill_prompt_tokens: float = 0.0  # prompt tokens over the replicas counted in ``prefilled``


def _scalar(s: ReplicaSample, names: tuple[str, ...]) -> str | None:
    vals = s.values
    for n in names:
        if n in vals:
            return n
    return None


def _histogram_name(s: ReplicaSample, names: tuple[str, ...]) -> str | None:
    for n in names:
        if n in s.histograms:
            return n
    return None


def _e2e_name(s: ReplicaSample) -> str | None:
    return _histogram_name(s, E2E)


def _count_increase(span: Span, first: ReplicaSample, last: ReplicaSample, name: str | None) -> float | None:
    """Increase of a histogram's count over a replica's span (reset-aware when it restarted)."""
    if name is None:
        return None
    if span.restarted:
        return counter_increase([s.histograms[name].count for s in span.samples if name in s.histograms])
    if name in first.histograms:
        inc = last.histograms[name].count - first.histograms[name].count
        if inc < 0.0:  # this counter went down though the witness did not: a reset all the same
            return counter_increase([s.histograms[name].count for s in span.samples if name in s.histograms])
        return inc
    return None


#: a replica's rate counts once its span is this many times the newest observation's
#: ``sample_lag_s`` (its scrape's slowest page): each end of the span may have been rendered up
#: to one lag after its stamp, so the rate reads up to (span + lag) / span of the truth; at 4 lags
#: that is 1.25x. At 0.5 s ticks, a page 1 s late made two samples 0.5 s apart read 3x.
MIN_SPAN_LAGS = 4.0


def _dated(span: Span, obs: tuple[Observation, ...]) -> Span | None:
    """``span`` from its first sample that can be dated (``Observation.undated_replicas``).

    A page's counters are whatever its renderer last read: vLLM reads its registry when it
    answers, but a cache or a sidecar exporter in front of it that starts cold hands over the
    copy it last kept, and refreshes behind it. Nothing on the page says how old that copy is,
    so a rate from it is off by (span + its age) / span: a copy 4 s old followed by a fresh page
    0.5 s later read the replica at 9x, and the fleet at ~5x for the first ticks, the replicas
    still without a rate standing in at the mean of the inflated ones
    (``tests/live/test_stale_first_page.py``). The first page read from a target and the same
    bytes again since are such pages; the rate starts from the first page that differs, which
    the renderer made after the controller first asked. An honest busy replica's second page
    already differs (its counters moved), so its rate comes one tick later than before.
    Samples that are all undated are the same bytes, an increase of 0 from any of them (an idle
    replica whose page never changes): the span then starts at its second sample, for the same
    one tick. None when what is left has one sample.
    """
    i_first, first = span.first
    if first.replica not in obs[i_first].undated_replicas:
        return span
    entries = span.entries
    k = next((k for k, (i, s) in enumerate(entries) if s.replica not in obs[i].undated_replicas), 1)
    return span.later(k) if k < span.count - 1 else None


def counter_rates(fw: FleetWindow, window_s: float = LATENCY_WINDOW_S) -> CounterRates:
    """Sum of per-replica counter rates over ``window_s``; see the module docstring for who counts.

    A replica whose samples span less than :data:`MIN_SPAN_LAGS` sample lags has no rate yet,
    and is counted as one with none (blind when serving all along): with pages answered within
    0.1 s any span of 0.4 s or more counts; after a scrape whose slowest page took 1 s, 4 s.
    """
    min_span_s = MIN_SPAN_LAGS * fw.newest.sample_lag_s
    start = start_index(fw, window_s)
    spans = fw.spans(start)
    obs = fw.observations
    rates: list[float | None] = [None, None, None, None]  # requests, prompt, generation, preemptions
    # READY replicas with a rate of each counter: their sum and number, to stand in for the
    # unknown ones that have none (below)
    ready_sum = [0.0, 0.0, 0.0, 0.0]
    ready_n = [0, 0, 0, 0]
    blind = 0  # READY replicas with no rate in the window that were serving all along (below)
    ready_at_start: set[str] | None = None
    finished = prompt = gen = prefilled = prefill_prompt = 0.0
    replicas = 0
    ready = Phase.READY
    for s_now in fw.newest.replicas:
        span = spans.get(s_now.replica)
        if span is not None and span.count >= 2:
            span = _dated(span, obs)
        dt = 0.0
        if span is not None and span.count >= 2:
            (i_first, first), (i_last, last) = span.first, span.last
            dt = obs[i_last].time_s - obs[i_first].time_s
        if not (dt > 0.0 and dt >= min_span_s) or span is None:
            if s_now.phase == ready:
                # Unknown now, or serving since the window began and back with one good sample
                # only (a replica just made ready has no rate yet, and is not guessed one).
                if ready_at_start is None:
                    ready_at_start = {s.replica for s in obs[start].replicas if s.phase == ready}
                if not s_now.ok or s_now.replica in ready_at_start:
                    blind += 1
            continue
        incs: list[float | None] = [None, None, None, None]
        incs[0] = _count_increase(span, first, last, _e2e_name(last))
        for k, names in ((1, PROMPT_TOKENS), (2, GENERATION_TOKENS), (3, PREEMPTIONS)):
            name = _scalar(last, names)
            if name is None:
                continue
            if span.restarted:
                incs[k] = counter_increase([s.values[name] for s in span.samples if name in s.values])
            else:
                v0 = first.values.get(name)
                if v0 is not None:
                    inc = last.values[name] - v0
                    if inc < 0.0:  # a reset of this counter alone (the witness did not go down)
                        inc = counter_increase([s.values[name] for s in span.samples if name in s.values])
                    incs[k] = inc
        if not s_now.ok and s_now.phase == ready and not any(incs) and any(i is not None for i in incs):
            # Unknown now, and its last known samples show no traffic at all: what a page that
            # froze reads as until it is found stale. Its last known rate (0) would be zero load
            # from a replica known to be unreadable; it counts at the fleet's mean instead.
            blind += 1
            continue
        replicas += 1
        for k in range(4):
            got = incs[k]
            if got is not None:
                prev = rates[k]
                rates[k] = got / dt if prev is None else prev + got / dt
                if s_now.phase == ready:
                    ready_sum[k] += got / dt
                    ready_n[k] += 1
        n_done, n_prompt, n_gen = incs[0], incs[1], incs[2]
        if n_done is not None and n_prompt is not None and n_gen is not None:
            finished += n_done
            prompt += n_prompt
            gen += n_gen
        n_first = _count_increase(span, first, last, _histogram_name(last, TTFT))
        if n_first is not None and n_prompt is not None:
            prefilled += n_first
            prefill_prompt += n_prompt
    if blind:
        # A serving replica unknown for the whole window (its scrapes fail, or its pages are
        # impossible or frozen) still takes its share of the traffic: it counts at the mean of
        # the serving replicas with a rate, as ObsTotals.load() does for the gauges. 2 replicas at
        # 0.3 req/s each, one unknown for a minute: 0.6, not 0.3 (and None if none is known);
        # the same on its first good sample back, until it has two in the window again.
        for k in range(4):
            r = rates[k]
            if r is not None and ready_n[k]:
                rates[k] = r + blind * ready_sum[k] / ready_n[k]
    return CounterRates(
        rates[0], rates[1], rates[2], rates[3], finished, prompt, gen, replicas, prefilled, prefill_prompt
    )


@dataclass(frozen=True, slots=True)
class StepRates:
    """Fleet rates of each controller step in the window, oldest first (steps with no data left out)."""

    requests_rps: list[float]
    generation_tps: list[float]


def step_rates(fw: FleetWindow) -> StepRates:
    """Per-step fleet rates of finished requests and generated tokens over the whole window.

    A step's rate sums the replicas with a successful sample at both of its
    ends (reset-aware, like :func:`counter_increase`); a replica with a failed
    scrape at either end is left out of that step, so a failed scrape makes
    that step's rate read low by the replica's share (a gap, not a zero: the
    replica is back in the next step). Steps no replica covers are skipped.
    """
    by_steps = _step_rates_by_steps(fw)
    return by_steps if by_steps is not None else _step_rates_by_replica(fw)


def _step_rates_by_replica(fw: FleetWindow) -> StepRates:
    """:func:`step_rates` walking each replica's samples (any names, any counter values)."""
    obs = fw.observations
    n = len(obs)
    req = [0.0] * n
    gen = [0.0] * n
    req_seen = [False] * n
    gen_seen = [False] * n
    # Replicas sampled at every observation with both counters never going down (the
    # usual case) are summed per observation in bulk: one comprehension per replica and
    # one C-level add, instead of a Python step per sample. 20 x 500 samples: ~3x faster.
    bulk_req = [0.0] * n
    bulk_gen = [0.0] * n
    bulk = 0
    base = fw.base
    # replicas with a page that cannot be dated start no step from it (see _dated): walked
    undated: set[str] = set()
    for o in obs:
        undated |= o.undated_replicas
    for name, ser in fw.series.items():
        samples = ser.samples
        if len(samples) < 2:
            continue
        last = samples[-1]
        g_name = _scalar(last, GENERATION_TOKENS)
        e2e = _e2e_name(last)
        if len(samples) == n and g_name is not None and e2e is not None and name not in undated:
            try:
                gs = [s.values[g_name] for s in samples]
                cs = [s.histograms[e2e].count for s in samples]
            except KeyError:
                pass
            else:
                if gs == sorted(gs) and cs == sorted(cs):
                    bulk_gen = list(map(add, bulk_gen, gs))
                    bulk_req = list(map(add, bulk_req, cs))
                    bulk += 1
                    continue
        prev_i = -2
        prev_g: float | None = None
        prev_c: float | None = None
        for q, s in zip(ser.seqs, samples, strict=True):
            i = q - base
            g = s.values.get(g_name) if g_name is not None else None
            h = s.histograms.get(e2e) if e2e is not None else None
            c = h.count if h is not None else None
            if i == prev_i + 1 and name not in obs[prev_i].undated_replicas:
                if g is not None and prev_g is not None:
                    gen[i] += g - prev_g if g >= prev_g else g
                    gen_seen[i] = True
                if c is not None and prev_c is not None:
                    req[i] += c - prev_c if c >= prev_c else c
                    req_seen[i] = True
            prev_i, prev_g, prev_c = i, g, c
    if bulk:
        for i in range(1, n):
            gen[i] += bulk_gen[i] - bulk_gen[i - 1]
            req[i] += bulk_req[i] - bulk_req[i - 1]
            gen_seen[i] = req_seen[i] = True
    requests: list[float] = []
    generation: list[float] = []
    for i in range(1, n):
        dt = obs[i].time_s - obs[i - 1].time_s
        if dt > 0.0:
            if req_seen[i]:
                requests.append(req[i] / dt)
            if gen_seen[i]:
                generation.append(gen[i] / dt)
    return StepRates(requests, generation)


def _step_rates_by_steps(fw: FleetWindow) -> StepRates | None:
    """:func:`step_rates` from the window's per-step totals, each computed once and carried from
    tick to tick (:meth:`FleetWindow.step_totals`); None when they cannot give the same numbers.

    The same sums, grouped by step instead of by replica: equal when every
    replica's counters are read under the names the totals use (its newest
    sample in the window has vLLM's generation-token counter and E2E
    histogram, the names step_rates picks) and every counter is a whole number
    (sums of whole floats below 2**53 are exact in any order). A 2 s tick
    then adds one step a tick instead of re-walking 20 samples per replica.
    """
    g_name, e2e = GENERATION_TOKENS[0], E2E[0]
    series = fw.series
    if len(series) > 1024:
        return None  # beyond what StepTotals.exact vouches for
    if not fw.carried:
        # A window indexed afresh has no step to reuse, and will pass none on: summing each
        # replica's samples in one comprehension (the general path) is ~3x cheaper than
        # computing its 19 steps. A carried window computes only the steps it lacks (one per
        # tick, or all of them once after a stretch of ticks that did not read the rates).
        return None
    for ser in series.values():
        last = ser.samples[-1]
        if g_name not in last.values or e2e not in last.histograms:
            return None
    obs = fw.observations
    requests: list[float] = []
    generation: list[float] = []
    for i, st in enumerate(fw.all_step_totals(), start=1):
        if not st.exact:
            return None
        dt = obs[i].time_s - obs[i - 1].time_s
        if dt > 0.0:
            if st.requests_seen:
                requests.append(st.requests / dt)
            if st.generation_seen:
                generation.append(st.generation / dt)
    return StepRates(requests, generation)


def population_std(xs: list[float]) -> float:
    """Standard deviation with divisor n (``np.std``'s default, which seed 000 2.4 calls)."""
    n = len(xs)
    mean = sum(xs) / n
    return math.sqrt(sum((x - mean) ** 2 for x in xs) / n)


def adaptive_window_ms(std_tps: float) -> float:
    """Seed 000 2.4's adaptive throughput window, verbatim.

    ``base = max(200, int(1000 / (1 + 0.02 * std)))``, then clamped to 100..2000 ms.
    Worked: std 0 -> 1000 ms; std 50 tokens/s -> int(1000/2) = 500 ms;
    std 1000 -> int(1000/21) = 47 -> 200 ms. As written the result always
    lies in [200, 1000] ms (``max(200, .)`` and ``1000/(1+x) <= 1000`` make the
    100..2000 clamp inert), and a *larger* spread gives a *narrower* window,
    although the seed's prose says "the larger the fluctuation, the wider the
    window". The formula is implemented as written; the contradiction is noted
    here for whoever tunes it.
    """
    base = max(200, int(1000.0 / (1.0 + std_tps * 0.02)))
    return float(min(max(base, 100), 2000))


def rate_signals(
    fw: FleetWindow, window_s: float = LATENCY_WINDOW_S
) -> tuple[dict[str, SignalValue], CounterRates]:
    """The rate, request-shape and throughput-window signals; also the raw rates for the predictors."""
    counter, r = counter_rate_signals(fw, window_s)
    step = step_rate_signals(fw)
    return {name: (counter[name] if name in counter else step[name]) for name in RATE_SIGNALS}, r


#: the names :func:`rate_signals` fills, in its order: the catalogue's counter and step rates
RATE_SIGNALS: tuple[str, ...] = tuple(
    name for name, signal in SIGNALS.items() if signal.group in ("counter_rates", "step_rates")
)


def counter_rate_signals(
    fw: FleetWindow, window_s: float = LATENCY_WINDOW_S
) -> tuple[dict[str, SignalValue], CounterRates]:
    """Rates and request shape from counter increases over ``window_s`` (:func:`counter_rates`)."""
    r = counter_rates(fw, window_s)
    short = f"no replica has two samples within {window_s:.0f} s"
    note = f"{r.replicas} replica(s) over {window_s:.0f} s"

    def rate(v: float | None, what: str) -> SignalValue:
        return SignalValue(v, note) if v is not None else SignalValue(None, f"{short} of {what}")

    if r.finished > 0.0:
        decode = SignalValue(r.generation_tokens / r.finished, f"{r.finished:.0f} finished requests")
    else:
        decode = SignalValue(None, "no request finished in the window")
    if r.prefilled > 0.0:
        prompt_len = SignalValue(
            r.prefill_prompt_tokens / r.prefilled, f"{r.prefilled:.0f} prefills (TTFT count)"
        )
    elif r.finished > 0.0:
        prompt_len = SignalValue(
            r.prompt_tokens / r.finished, f"{r.finished:.0f} finished requests (no TTFT count)"
        )
    else:
        prompt_len = SignalValue(None, "no request prefilled or finished in the window")
    values = {
        "request_rate_rps": rate(r.request_rps, "the E2E histogram count"),
        "arrival_rate_rps": arrival_rate_signal(fw, window_s),
        "prompt_tps": rate(r.prompt_tps, "prompt tokens"),
        "generation_tps": rate(r.generation_tps, "generation tokens"),
        "preemptions_per_s": rate(r.preemptions_per_s, "preemptions"),
        "prompt_len_mean_tokens": prompt_len,
        "decode_steps_mean": decode,
    }
    return values, r


def fleet_tokens_per_bucket(fw: FleetWindow, span_s: float) -> tuple[float, list[float]] | None:
    """The fleet's generated tokens per sub-tick period over the last ``span_s``, oldest first, and
    the period; None when the newest observation carries no per-replica token counts.

    Every replica's buckets lie on one grid (bucket ``j`` is ``[j x period, (j+1) x period)``), so
    the fleet's bucket is the sum of the replicas' (draining ones too: their tokens are throughput).
    A replica's newest buckets lag by the step it is running, so the fleet's series ends at the
    oldest of the replicas' newest ends: a bucket some replica has not handed over yet is not summed.
    """
    obs = fw.observations
    newest_ends: list[int] = []
    period = 0.0
    for s in obs[-1].replicas:
        series = s.sub_tick.get(GENERATION_TOKENS[0])
        if series is not None and series.values:
            period = series.period_s
            newest_ends.append(round(series.end_s / period))
    if not newest_ends:
        return None
    end = min(newest_ends)
    first = end - math.ceil(span_s / period - 1e-9)
    totals: dict[int, float] = {}
    start = max(0, start_index(fw, span_s) - 1)  # the observation before holds the span's start
    for o in obs[start:]:
        for s in o.replicas:
            series = s.sub_tick.get(GENERATION_TOKENS[0])
            if series is None:
                continue
            j_last = round(series.end_s / series.period_s)
            n = len(series.values)
            for i, v in enumerate(series.values):
                j = j_last - (n - 1 - i)
                if first < j <= end:
                    totals[j] = totals.get(j, 0.0) + v
    if not totals:
        return None
    lo = min(totals)
    return period, [totals.get(j, 0.0) for j in range(lo, end + 1)]


def adaptive_throughput_signals(fw: FleetWindow) -> dict[str, SignalValue]:
    """Seed 000 2.4 at its own resolution: the window from the last 5 one-second throughputs, and
    the fleet's generated tokens per second over that window.

    From 100 ms token counts (``ReplicaSample.sub_tick``): the last 50 buckets make 5 one-second
    throughputs; their standard deviation sets the window (:func:`adaptive_window_ms`), rounded
    to whole buckets; ``generation_tps_adaptive`` is the tokens of the window's last buckets over
    its length. Worked: seconds of 1000, 1000, 1000, 1000, 1100 tokens -> std 40 tokens/s ->
    int(1000 / 1.8) = 555 ms -> 6 buckets; 660 tokens in them -> 1100 tokens/s. A source without
    the counts gives the window from the per-tick throughputs (:func:`step_rate_signals`) and no
    windowed throughput. ``generation_tps_100ms`` is the newest 100 ms bucket's tokens / 0.1 s:
    the raw reading whose spread (68% of its mean in the seed) the window is there to damp.
    """
    history_s = THROUGHPUT_HISTORY_STEPS * THROUGHPUT_SAMPLE_S
    got = fleet_tokens_per_bucket(fw, history_s)
    if got is None:
        no_counts = SignalValue(None, "needs 100 ms token counts (sub-tick samples)")
        return {
            "generation_tps_adaptive": no_counts,
            "throughput_window_ms": step_window_ms(fw),
            "generation_tps_100ms": no_counts,
        }
    period, buckets = got
    # The seed's raw reading: the newest 100 ms alone (one bucket of the simulator's 100 ms grid).
    n_raw = max(1, round(RAW_WINDOW_S / period))
    raw = SignalValue(
        sum(buckets[-n_raw:]) / (n_raw * period), f"over the last {n_raw * period * 1000:.0f} ms"
    )
    per_sample = round(THROUGHPUT_SAMPLE_S / period)
    n_samples = len(buckets) // per_sample
    if n_samples < 2:
        missing = SignalValue(None, f"needs 2 one-second token counts, has {len(buckets)} x {period:g} s")
        return {
            "generation_tps_adaptive": missing,
            "throughput_window_ms": missing,
            "generation_tps_100ms": raw,
        }
    tail = buckets[len(buckets) - n_samples * per_sample :]
    tps = [sum(tail[k * per_sample : (k + 1) * per_sample]) / THROUGHPUT_SAMPLE_S for k in range(n_samples)]
    window_ms = adaptive_window_ms(population_std(tps))
    n = max(1, round(window_ms / 1000.0 / period))
    rate = sum(buckets[-n:]) / (n * period)
    return {
        "throughput_window_ms": SignalValue(
            window_ms, f"std of the last {n_samples} one-second generation throughputs (seed: 5)"
        ),
        "generation_tps_adaptive": SignalValue(rate, f"over the last {n * period * 1000:.0f} ms"),
        "generation_tps_100ms": raw,
    }


def step_window_ms(fw: FleetWindow) -> SignalValue:
    """The adaptive window from the per-step generation throughputs (one per observation, not per second)."""
    steps = step_rates(fw).generation_tps[-THROUGHPUT_HISTORY_STEPS:]
    if len(steps) >= 2:
        return SignalValue(
            adaptive_window_ms(population_std(steps)),
            f"std of the last {len(steps)} per-step generation tokens/s (seed: 5 one-second samples)",
        )
    return SignalValue(None, "needs generation-token throughput of 2 steps or more")


def step_rate_signals(fw: FleetWindow) -> dict[str, SignalValue]:
    """The spread of the per-step request rate (:func:`step_rates`), seed 000 2.4's adaptive
    throughput window with the throughput over it and over the newest 100 ms
    (:func:`adaptive_throughput_signals`), and the throughput of the last step."""
    per_step = step_rates(fw)
    return {
        "request_rate_std_rps": SignalValue(
            population_std(per_step.requests_rps), f"over {len(per_step.requests_rps)} step(s)"
        )
        if len(per_step.requests_rps) >= 2
        else SignalValue(None, "needs the request rate of 2 steps or more"),
        **adaptive_throughput_signals(fw),
        "generation_tps_tick": SignalValue(per_step.generation_tps[-1], "over the last step")
        if per_step.generation_tps
        else SignalValue(None, "needs generation-token counts at 2 observations"),
    }
