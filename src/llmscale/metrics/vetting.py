"""Whether a replica's sample can be read as its load: the metrics llmscale reads are finite, >= 0.

Every quantity the signals read is a count, a counter, a ratio, a percentage, MiB or seconds:
none can be negative, infinite or NaN. A page that says otherwise comes from a broken exporter
(a counter that wrapped, a gauge computed from a division by zero), a proxy in the way, or
an attack; it is not the replica's load. Read as data, one replica's negative counters made
the fleet's request rate read 0.0 for a minute while 0.6 req/s arrived (the per-replica rates
summed to below zero), and the jump back from the negatives read as a 30x spike. So such a
sample makes its replica *unknown*, like a failed scrape: the guards hold scale-down, and a
fleet whose replicas are all unknown never scales down.

Beyond finite and >= 0, every read value must be *plausible* for one replica (issue 19): a queue of
1e9 requests on one vLLM replica is a fault, not load (the ``slo`` policy once planned a fleet of
~2e7 for it and took minutes per tick). :data:`PLAUSIBLE_MAX` bounds each read name: requests held
by a replica at 1e6 (vLLM's default max_num_seqs is 256; a million waiting prompts of 1,000 tokens
would be a GiB of token ids), ratios at 1.5 (0-1 by definition, slack for rounding), percentages
at 101, MiB at 1e8 (100 TiB: 8 x 192 GB is 1.5e6), counters at 2**53 (past it a float cannot
count one more: rates read 0). No sane page reaches them, so what the backtests and a healthy
fleet see is unchanged; a page past one makes its replica unknown (held), never load.

The page is also judged as a whole: a histogram of a read family whose cumulative buckets fall
with ``le`` (beyond a torn scrape's few counts), a read series written twice (folded, a duplicated
queue sample doubled the queue), or more than :data:`MAX_SERIES` series of one read name (10,000
extra queue series were summed into the signal) make the replica unknown too.

Only the names llmscale reads are judged (``metrics/names.py``'s tables, the DCGM fields, the
simulator's own series): an exporter's unrelated series (a summary's NaN quantile, a Go
runtime gauge) must not blind the controller to a healthy replica.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Hashable, Mapping, Sequence
from itertools import islice
from operator import le

from llmscale.metrics.exposition import ParsedPage
from llmscale.metrics.names import DCGM, DERIVED, SIM, TGI, TRITON, VLLM, VLLM_OLD, Names
from llmscale.types import HistogramView

__all__ = [
    "HELD_MAX",
    "MAX_SERIES",
    "PLAUSIBLE_MAX",
    "READ_COUNTERS",
    "READ_HISTOGRAMS",
    "READ_VALUES",
    "CounterHistory",
    "distrust",
    "distrust_shape",
    "implausible",
    "vet_page",
]

_HISTOGRAM_FIELDS = ("ttft", "e2e", "itl", "tpot", "queue_time", "output_tokens", "prompt_lengths")


def _names(tables: tuple[Names, ...], fields: tuple[str, ...]) -> frozenset[str]:
    return frozenset(n for t in tables for f in fields if (n := getattr(t, f)) is not None)


_TABLES = (VLLM, VLLM_OLD, TGI, TRITON)
_VALUE_FIELDS = tuple(f for f in Names.__dataclass_fields__ if f not in _HISTOGRAM_FIELDS)

#: scalar series (gauges, counters) llmscale reads, under every exporter's name
READ_VALUES: frozenset[str] = (
    _names(_TABLES, _VALUE_FIELDS)
    | frozenset(v for k, v in vars(DCGM).items() if k.isupper() and isinstance(v, str))
    | frozenset(v for k, v in vars(SIM).items() if k.isupper() and isinstance(v, str))
    | frozenset({"nv_gpu_utilization"})  # Triton's own GPU gauge (metrics/exposition.py)
)
#: histogram families llmscale reads
READ_HISTOGRAMS: frozenset[str] = _names(_TABLES, _HISTOGRAM_FIELDS)
#: read scalar series that are counters (they only grow, but for a restart to zero)
READ_COUNTERS: frozenset[str] = _names(_TABLES, ("preemptions", "prompt_tokens", "generation_tokens")) | (
    frozenset(n for n in READ_VALUES if n.endswith("_total"))
)

#: a counter past 2**53 cannot count one more in a float (9.0e15 + 1 == 9.0e15)
_COUNTER_MAX = float(2**53)
HELD_MAX = 1e6  # requests waiting or running on one replica (or held by a front door)
_RATIO_MAX = 1.5
_PERCENT_MAX = 101.0
_MIB_MAX = 1e8

#: the largest value a sane replica reports, per read name (see the module docstring); a read
#: name not listed is bounded by the counter limit only
PLAUSIBLE_MAX: dict[str, float] = {
    **{n: HELD_MAX for n in _names(_TABLES, ("running", "waiting"))},
    **{n: _RATIO_MAX for n in _names(_TABLES, ("kv_usage",))},
    DCGM.GPU_UTIL: _PERCENT_MAX,
    DCGM.MEM_COPY_UTIL: _PERCENT_MAX,
    DCGM.FB_USED: _MIB_MAX,
    DCGM.FB_FREE: _MIB_MAX,
    DCGM.GR_ENGINE_ACTIVE: _RATIO_MAX,
    DCGM.SM_ACTIVE: _RATIO_MAX,
    DCGM.SM_OCCUPANCY: _RATIO_MAX,
    DCGM.DRAM_ACTIVE: _RATIO_MAX,
    DCGM.TENSOR_ACTIVE: _RATIO_MAX,
    DERIVED.DRAM_ACTIVE_P95_60S: _RATIO_MAX,
    SIM.L2_MISS: _RATIO_MAX,
    "nv_gpu_utilization": _RATIO_MAX,
}

#: sample names of what llmscale reads, as a page writes them (a histogram's three suffixes)
_READ_SAMPLES: frozenset[str] = READ_VALUES | frozenset(
    f"{f}_{suffix}" for f in READ_HISTOGRAMS for suffix in ("bucket", "count", "sum")
)

#: series of one read name a replica's page may hold: vLLM writes one per engine (data-parallel
#: ranks: 8-64), a pod's DCGM fields one per GPU (8); 10,000 is a label explosion
MAX_SERIES = 256
#: how far a cumulative bucket may fall below the one before it and still be read (as PromQL's
#: ensureMonotonic does): a torn scrape of prometheus_client's per-bucket locks, a few
#: observations landing mid-render; 2 counts plus 0.1% of the histogram's count
_TORN_COUNTS = 2.0
_TORN_SHARE = 1e-3


#: each read value's bound (PLAUSIBLE_MAX, else the counter limit): one look-up per value on a page
_LIMITS: dict[str, float] = {n: PLAUSIBLE_MAX.get(n, _COUNTER_MAX) for n in READ_VALUES}


def _bad(v: float) -> bool:
    return not 0.0 <= v < math.inf  # False for NaN too: every comparison with NaN is False


def implausible(values: Mapping[str, float]) -> str | None:
    """Why a read value of ``values`` cannot be one replica's (past :data:`PLAUSIBLE_MAX`); None: all can.

    E.g. ``vllm:num_requests_waiting = 1e9``: "implausible value(s): vllm:num_requests_waiting =
    1e+09 (at most 1e+06 on one replica)". Cost: one look-up per read name on the page.
    """
    limits = _LIMITS
    inf = math.inf
    off = [
        f"{name} = {v:.6g} (at most {limits[name]:g} on one replica)"
        for name, v in values.items()
        if v > limits.get(name, inf)
    ]
    if off:
        off.sort()
        return f"implausible value(s): {', '.join(off[:3])}{' ...' if len(off) > 3 else ''}"
    return None


def distrust_shape(series: Mapping[str, int], duplicates: Collection[str]) -> str | None:
    """Why the page's series of read names cannot be folded into one replica's values; None: they can.

    ``series``: per sample name, how many series the page holds of it (names with one may be left
    out); ``duplicates``: sample names with a series written twice (``ParsedPage`` has both).
    """
    read_dups = sorted(n for n in duplicates if n in _READ_SAMPLES)
    if read_dups:
        return f"duplicate series of {', '.join(read_dups[:3])}: the page would count them twice"
    # An intersection in C first: a page's series dict holds every histogram's _bucket name.
    crowded = sorted((n, series[n]) for n in series.keys() & _READ_SAMPLES if series[n] > MAX_SERIES)
    if crowded:
        n, k = crowded[0]
        return f"{k} series of {n} (at most {MAX_SERIES}): a label explosion, not one replica"
    return None


#: the last page shape judged, and its verdict: pages read through one layout share its ``series``
#: dict (never changed once built), so a fleet of one deployment is judged once, not per page
_last_shape: tuple[Mapping[str, int], Collection[str], str | None] | None = None


def _shape_verdict(series: Mapping[str, int], duplicates: Collection[str]) -> str | None:
    """:func:`distrust_shape`, remembered for the last ``series`` and ``duplicates`` objects."""
    global _last_shape
    last = _last_shape
    if last is not None and last[0] is series and last[1] is duplicates:
        return last[2]
    verdict = distrust_shape(series, duplicates)
    _last_shape = (series, duplicates, verdict)
    return verdict


def _non_monotonic(cum: Sequence[float]) -> int | None:
    """Index of the first bucket that falls below the one before it by more than a torn scrape."""
    if all(map(le, cum, islice(cum, 1, None))):  # the usual case, in C
        return None
    slack = _TORN_COUNTS + _TORN_SHARE * cum[-1]
    for i in range(1, len(cum)):
        if cum[i] < cum[i - 1] - slack:
            return i
    return None


def distrust(
    values: Mapping[str, float],
    histograms: Mapping[str, HistogramView],
    nan: Collection[str] = (),
    plain: bool = False,
) -> str | None:
    """Why ``values`` / ``histograms`` cannot be read as the replica's load; None when they can.

    ``nan``: names the page had a NaN sample for (a parser leaves those out of ``values``).
    ``plain``: the page's numbers are known finite, in [0, 2**53], and its histograms cumulative
    (``ParsedPage.plain``): only the plausible ranges of the read values are left to check.
    Cost: one C-level min and sum over the values on a clean page (the usual case); the read
    names are walked only when something is off somewhere on the page.
    """
    bad = [n for n in nan if n in READ_VALUES or n in READ_HISTOGRAMS]
    if bad:
        return f"NaN sample(s) of {', '.join(sorted(bad))}: no value is not zero"
    if plain:
        return implausible(values)
    vals = values.values()
    # NaN anywhere makes the sum NaN, a negative value the min negative, an infinity the sum infinite.
    if vals and not (min(vals) >= 0.0 and sum(vals) < math.inf):
        off = sorted(n for n in values.keys() & READ_VALUES if _bad(values[n]))
        if off:
            shown = ", ".join(f"{n} = {values[n]!r}" for n in off[:3])
            return f"impossible value(s): {shown}{' ...' if len(off) > 3 else ''} (must be finite, >= 0)"
    why = implausible(values)
    if why is not None:
        return why
    for family in histograms.keys() & READ_HISTOGRAMS:
        h = histograms[family]
        cum = h.cumulative
        # The usual histogram in one C pass: counts that never fall from a first one >= 0 to a last
        # one within the counter limit are all finite and >= 0 (NaN fails every comparison), and
        # cumulative. Anything else is looked at below, which says what is wrong.
        if (
            cum
            and cum[0] >= 0.0
            and cum[-1] <= _COUNTER_MAX
            and 0.0 <= h.count <= _COUNTER_MAX
            and 0.0 <= h.sum <= _COUNTER_MAX
            and all(map(le, cum, islice(cum, 1, None)))
        ):
            continue
        if (cum and not (min(cum) >= 0.0 and sum(cum) < math.inf)) or _bad(h.count) or _bad(h.sum):
            tail = list(cum)[-3:]
            return f"impossible histogram {family}: counts ...{tail}, sum {h.sum!r} (must be finite, >= 0)"
        if h.count > _COUNTER_MAX or h.sum > _COUNTER_MAX:
            return f"implausible histogram {family}: count {h.count:.6g}, sum {h.sum:.6g} (at most 2**53)"
        at = _non_monotonic(cum)
        if at is not None:
            return (
                f"histogram {family} is not cumulative: {cum[at - 1]:g} observations up to "
                f"le={h.bounds[at - 1]:g}, {cum[at]:g} up to le={h.bounds[at]:g}"
            )
    return None


def vet_page(
    page: ParsedPage, wall_s: float, *, max_sample_age_s: float, max_clock_ahead_s: float
) -> str | None:
    """Why one parsed page cannot be read as its replica's load; None when it can.

    :func:`distrust` of its values and histograms, :func:`distrust_shape` of its series, then its
    read samples' timestamps (Unix seconds; exporters rarely stamp): the oldest older than
    ``max_sample_age_s`` before ``wall_s`` is stale, the newest more than ``max_clock_ahead_s``
    after it is not a fresh sample (a page stamped an hour ahead stayed "fresh" for an hour).
    """
    if page.values.keys().isdisjoint(READ_VALUES) and page.histograms.keys().isdisjoint(READ_HISTOGRAMS):
        # An empty 200 (a proxy between restarts) or a page of other metrics says nothing of this
        # replica's load. Read as known, its span of counters had no request count at one end,
        # and the replica counted neither its rate nor the fleet's mean: 2 such pages among
        # 4 replicas read a true 40 req/s as 20 (tests/metrics/test_page_validation.py).
        return "the page has no series llmscale reads (empty, or another exporter's)"
    why = distrust(page.values, page.histograms, page.nan, page.plain)
    if why is None and (page.series or page.duplicates):
        why = _shape_verdict(page.series, page.duplicates)
    if why is not None or not page.stamped_s:
        return why
    read = {n: t for n, t in page.stamped_s.items() if n in READ_VALUES or n in READ_HISTOGRAMS}
    if not read:
        return None
    name, oldest = min(read.items(), key=lambda kv: kv[1])
    age_s = wall_s - oldest
    if age_s > max_sample_age_s:
        return f"stale: {name} is stamped {age_s:.0f} s ago (limit {max_sample_age_s:g} s)"
    ahead = {n: t for n, t in page.stamped_newest_s.items() if n in read}
    if ahead:
        name, newest = max(ahead.items(), key=lambda kv: kv[1])
        ahead_s = newest - wall_s
        if not ahead_s <= max_clock_ahead_s:
            return (
                f"{name} is stamped {ahead_s:.0f} s in the future "
                f"(limit {max_clock_ahead_s:g} s): not a fresh sample"
            )
    return None


#: a read counter that falls to at most this share of its last value (or to _RESET_FLOOR) restarted
#: from zero; a smaller fall is a broken or hostile exporter (a restart a scrape ago leaves the
#: counter at what one interval added: 2 s of a replica's 10 req/s against its lifetime's count)
_RESET_SHARE = 0.1
_RESET_FLOOR = 10.0
#: a second restart of a replica's counters within this many seconds is not a restart (a replica
#: that restarts every few seconds serves nothing; a page whose counters halve each scrape lies)
_RESET_MIN_GAP_S = 60.0


#: a read histogram's two counters, by family: ``<family>_count`` and ``<family>_sum``
_COUNT_SUM_NAMES: dict[str, tuple[str, str]] = {f: (f"{f}_count", f"{f}_sum") for f in READ_HISTOGRAMS}


class CounterHistory:
    """The read counters of each source at its last page, to tell a restart from a lie.

    A counter only grows, or restarts near zero with its process. A page whose counters fall by
    less (``vllm:e2e_request_latency_seconds_count`` 1,000 -> 990 -> 980 ...) was read as one
    restart per scrape, each a burst of "new" requests that took ``slo`` to its maximum (issue 19).
    Such a fall, or a second restart within a minute, is refused; the counters remembered are the
    latest page's either way, so a replica that really restarted is read again from its next page.

    Nor does a restarted process catch up with the one before it within a minute: a counter back
    at or above its value before the restart is a second process answering at the same address
    (a Service or a load balancer scraped as if it were one pod: its pages alternate between two
    processes' counters, 1,000 -> 50 -> 1,010 -> 52). Read as restarts, every climb back counted
    ~1,000 "new" requests in one scrape interval, a rate of hundreds a second from one replica,
    and the fleet's arrival estimate took ``slo`` from 4 replicas to 16 in two ticks; such a page
    is refused until a minute has passed since the restart.
    Pinned by ``tests/metrics/test_page_validation.py`` and ``tests/metrics/test_fuzz_page_vetting.py``.
    """

    def __init__(self) -> None:
        #: per source: its read counters at its last page, the ``now_s`` of its last restart, and
        #: the counters that fell at that restart with their values before it
        self._last: dict[Hashable, tuple[dict[str, float], float | None, dict[str, float]]] = {}

    def __len__(self) -> int:
        return len(self._last)

    def __contains__(self, key: Hashable) -> bool:
        """Whether a page of ``key`` was read (and not forgotten since)."""
        return key in self._last

    def retain(self, keys: Collection[Hashable]) -> None:
        """Forget sources not in ``keys`` (targets gone)."""
        self._last = {k: v for k, v in self._last.items() if k in keys}

    def went_back(self, key: Hashable, page: ParsedPage, now_s: float) -> str | None:
        """Why ``page``'s read counters cannot follow the last page of ``key``; None when they can.

        ``now_s``: the controller's time of this page (restarts are counted in it).
        """
        values = page.values
        counters = {n: values[n] for n in values.keys() & READ_COUNTERS}
        names = _COUNT_SUM_NAMES
        for family, h in page.histograms.items():
            pair = names.get(family)
            if pair is not None:
                counters[pair[0]] = h.count
                counters[pair[1]] = h.sum
        seen = self._last.get(key)
        if seen is None:
            self._last[key] = (counters, None, {})
            return None
        old, last_reset, before_reset = seen
        # A counter this page lacks keeps its last value: an empty page, or one without the E2E
        # histogram, in between would otherwise wipe the memory, and the page after it could fall
        # to any value (a "restart" from 925 to 192 read as 192 new requests, then 919 more).
        self._last[key] = ({**old, **counters}, last_reset, before_reset)
        recent = last_reset is not None and now_s - last_reset < _RESET_MIN_GAP_S
        if recent:
            assert last_reset is not None
            for name, before in sorted(before_reset.items()):
                now = counters.get(name)
                if now is not None and now >= before:
                    return (
                        f"counter {name} is back at {now:g} {now_s - last_reset:.0f} s after it restarted "
                        f"from {before:g}: two processes answer at this address, not one restarted"
                    )
        # a name the last page lacked is compared with itself: no fall
        falls = [(n, before, v) for n, v in counters.items() if v < (before := old.get(n, v))]
        if not falls:
            return None
        falls.sort()
        for name, before, after in falls:
            if after > _RESET_SHARE * before and after > _RESET_FLOOR:
                # The counters that fell keep their values from before this page: remembered, the
                # lie would be the next page's baseline, and the same old page served again
                # (571 -> 192 refused, 192 again) would pass as "no fall" and sit in the window
                # between 571 and 600, read as a restart: 192 + 408 "new" requests where 29
                # finished (tests/metrics/test_page_validation.py). A real restart this far from
                # zero is read again once it passes the old value: it served more than a tenth of
                # that value since, so it gets there within nine times as long.
                self._last[key] = (
                    {**old, **counters, **{n: b for n, b, _ in falls}},
                    last_reset,
                    before_reset,
                )
                return f"counter {name} went back from {before:g} to {after:g} (a restart starts near 0)"
        if recent:
            assert last_reset is not None
            name, before, after = falls[0]
            return (
                f"counter {name} reset again ({before:g} -> {after:g}) {now_s - last_reset:.0f} s after "
                f"the last reset (at most one a {_RESET_MIN_GAP_S:g} s): not a restart"
            )
        self._last[key] = ({**old, **counters}, now_s, {n: b for n, b, _ in falls})
        return None
