"""The Prometheus HTTP API as a metric source: :class:`PrometheusSource`.

One tick is one evaluation time and a batch of instant queries
(``/api/v1/query?query=...&time=T``), run concurrently:

1. the liveness query (default ``up{selector}``) lists the replicas, by the
   replica label, and gives ``T``: the evaluation time Prometheus stamped on
   its answer (or ``time_of(now_s)`` when given), so every later query of the
   tick reads the same instant without this process reading a wall clock;
2. ``timestamp(liveness)`` at ``T``: a replica whose last ``up`` sample is
   older than ``max_sample_age_s`` is stale — Prometheus answers with the
   last sample for 5 minutes after a target stops being scraped (e.g. after
   Prometheus itself restarted), and an old value must not pass for a fresh one;
3. the value and histogram queries of :mod:`llmscale.metrics.promql`.

Between 1 and 3, with the activator's query below, one query names the replicas whose samples
Prometheus cannot date yet (:func:`~llmscale.metrics.promql.undated_query`): every read series
began within the last ``max_sample_age_s`` and none has changed since its first sample. A target
Prometheus began scraping just before ``run`` started may have handed it a cold cache's old copy
first, as a pod scrape's first page may (``Observation.undated_replicas``; a counter rate starts
only at a dated sample). It is asked before the values, not with them: an answer that says
"changed" then holds for the values read after it, which can only be newer (Prometheus may append
a scrape between two queries of one instant). The query looks at the window every whole second, so
the value read at an instant may already have changed where the query has not seen it yet: a
replica the query lists is still dated when its engine's values (DCGM's are another exporter's)
differ from those it was last read with while undated (the first sample's copy is one value; a
different one was rendered later), and a replica once dated stays dated. So a replica's undated
reads are all the same values, as a pod scrape's undated pages are the same bytes
(``signals/rates.py`` relies on it). A fleet scraped for longer than the window has no replica
undated, and its observations are what they were without the query.

A replica is known (``ok=True``) when all its ``up`` series are 1 and fresh, and
no metric llmscale reads has a negative, infinite or NaN value for it
(``metrics/vetting.py``: such a value is a broken exporter, not a load).
``activator_query`` (default ``sum(llmscale:activator_requests_held)``) reads the requests an
activator holds while no replica is ready (``llmscale emulate``'s front door exports the gauge; see
:class:`~llmscale.metrics.names.ACTIVATOR`) into ``Observation.gateway_queue``; it runs even when no
replica exists, since that is when it matters. No series (nothing exports it) leaves
``gateway_queue`` None, as does a refused query (counted as an error).

When Prometheus is unreachable, misses a request's deadline (``timeout_s``, on the
whole request: see :mod:`llmscale.metrics.promapi`), answers 5xx, or answers with
something that is not its API's documented shape, every replica of the last
successful tick comes back unknown (``ok=False``) and the error is counted: the
source never raises and never invents zeros. A single query that Prometheus
refuses (4xx: a bad override), or whose well-formed result is not an instant
vector, leaves that metric out and is counted; the other metrics still arrive.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from llmscale.errors import ConfigError
from llmscale.metrics._loop import LoopThread
from llmscale.metrics.exposition import ParsedPage, build_histogram
from llmscale.metrics.names import ACTIVATOR
from llmscale.metrics.promapi import (
    PrometheusRefused,
    PrometheusUnavailable,
    fetch,
    new_client,
    range_series,
)
from llmscale.metrics.promql import (
    BACKENDS,
    DCGM_FIELDS,
    QuerySet,
    default_queries,
    undated_query,
    with_overrides,
)
from llmscale.metrics.scrape import fleet_view_of
from llmscale.metrics.vetting import (
    HELD_MAX,
    MAX_SERIES,
    READ_HISTOGRAMS,
    READ_VALUES,
    CounterHistory,
    distrust,
)
from llmscale.types import HistogramView, Observation, Phase, ReplicaSample, SubTickSeries

__all__ = [
    "PrometheusSource",
    "query_range_values",
    "query_ranges",
]

_PHASES = {p.label: p for p in Phase}
#: the activator's held requests, summed over every front door Prometheus scrapes
DEFAULT_ACTIVATOR_QUERY = f"sum({ACTIVATOR.REQUESTS_HELD})"


def _override(base: QuerySet, overrides: Mapping[str, str | None]) -> QuerySet:
    values = {k: v for k, v in overrides.items() if k not in base.histograms}
    hists = {k: v for k, v in overrides.items() if k in base.histograms}
    return with_overrides(base, values=values, histograms=hists)


@dataclass(slots=True)
class _Replica:
    up: float = 1.0
    #: time of its oldest ``up`` sample among its series (None: unknown, or found stale)
    up_sample_s: float | None = None
    phase: Phase = Phase.READY
    values: dict[str, float] = field(default_factory=dict)
    buckets: dict[str, dict[float, float]] = field(default_factory=dict)
    sums: dict[str, float] = field(default_factory=dict)
    counts: dict[str, float] = field(default_factory=dict)
    #: metric names and histogram families that came back NaN for it
    nan: set[str] = field(default_factory=set)
    #: why its series cannot be one replica's (a label explosion), or None
    crowded: str | None = None
    #: Prometheus holds its read series unchanged since their first sample, all recent
    #: (:func:`~llmscale.metrics.promql.undated_query`)
    undated: bool = False


Vector = list[tuple[Mapping[str, str], float, float]]  # (labels, sample time, value)


def _nothing_read(
    values: Mapping[str, float], hists: Mapping[str, HistogramView], nan: set[str]
) -> str | None:
    """Why a replica that is up has nothing to read: no series of a read name in any answer.

    The pod scrape refuses such a page (``metrics/vetting.py``: read as known, a replica without
    a request count stood in for nothing, and 2 of 4 read a true 40 req/s as 20); Prometheus gives
    the same for an ``up`` target whose series its answers left out (a ``status: success`` with
    partial data, a query that matches other pods). NaN series count as read: ``distrust`` names them.
    """
    if values.keys().isdisjoint(READ_VALUES) and hists.keys().isdisjoint(READ_HISTOGRAMS) and not nan:
        return "up, but no series llmscale reads in Prometheus's answers (partial data, or other pods')"
    return None


class PrometheusSource:
    """A :class:`~llmscale.metrics.source.MetricSource` over Prometheus's HTTP API.

    ``queries`` is a whole :class:`~llmscale.metrics.promql.QuerySet`, or
    overrides of :func:`~llmscale.metrics.promql.default_queries` for
    ``backend``: metric name -> PromQL (None drops it); for a histogram family
    the value is the family name to read instead (``'my_ttft{job="a"}'``).
    ``selector`` (label matchers) narrows the engine's series and the liveness
    query; ``dcgm`` adds the DCGM fields. ``phase_label``, when the liveness series carry it
    (``llmscale emulate``'s targets do), gives each replica's lifecycle phase;
    otherwise replicas are READY. ``time_of`` maps controller time to Unix time
    for replays; by default the evaluation time is Prometheus's own "now".

    After each :meth:`observe`: ``errors_total`` counts errors since
    construction and ``last_errors`` says what failed this tick.
    """

    kind = "prometheus"

    def __init__(
        self,
        base_url: str,
        *,
        backend: str = "vllm",
        replica_label: str = "pod",
        selector: str = "",
        dcgm: bool = True,
        queries: QuerySet | Mapping[str, str | None] | None = None,
        liveness_query: str | None = None,
        phase_label: str | None = "phase",
        max_sample_age_s: float = 60.0,
        timeout_s: float = 5.0,
        time_of: Callable[[float], float] | None = None,
        headers: Mapping[str, str] | None = None,
        queue_per_s: bool = False,
        activator_query: str | None = DEFAULT_ACTIVATOR_QUERY,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ConfigError(f"prometheus url = {base_url!r}, must start with http:// or https://")
        if timeout_s <= 0:
            raise ConfigError(f"timeout_s = {timeout_s}, must be > 0")
        if max_sample_age_s <= 0:
            raise ConfigError(f"max_sample_age_s = {max_sample_age_s}, must be > 0")
        self.base_url = base_url.rstrip("/")
        if isinstance(queries, QuerySet):
            self.queries = queries
        else:
            base = default_queries(backend, replica_label=replica_label, selector=selector, dcgm=dcgm)
            self.queries = _override(base, queries or {})
        label = self.queries.replica_label
        sel = selector.strip().strip("{}")
        self.liveness_query = liveness_query or (f"up{{{sel}}}" if sel else "up")
        self.replica_label = label
        self.phase_label = phase_label
        self.max_sample_age_s = max_sample_age_s
        #: the replicas Prometheus cannot date yet (see the module docstring); None with a whole
        #: :class:`QuerySet` that names no read series
        read = self.queries.read_series
        self.undated_query = None if read is None else undated_query(read, label, max_sample_age_s)
        self.timeout_s = timeout_s
        self._time_of = time_of
        #: per replica listed undated so far: what it was last read with (the engine's values,
        #: buckets, sums, counts); a read that differs was rendered after the first sample, and is
        #: dated
        self._undated_reads: dict[str, tuple[object, ...]] = {}
        #: replicas dated since Prometheus listed them (they stay dated)
        self._dated: set[str] = set()
        self._headers = dict(headers or {})
        self._loop = LoopThread("llmscale-prometheus")
        self._client: Any = None  # httpx.AsyncClient, created on the loop thread
        self._known: dict[str, Phase] = {}
        #: per replica: its read counters at the last tick (counters only grow, or restart near 0)
        self._counters = CounterHistory()
        #: read the fleet's waiting queue once a second between ticks (seed 004's q[t]); needs the
        #: engines scraped every second, else the range query repeats one sample (its look-back)
        self.queue_query: str | None = None
        if queue_per_s:
            waiting = BACKENDS[backend][0].waiting
            per_replica = None if waiting is None else self.queries.values.get(waiting)
            if per_replica is None:
                raise ConfigError(f"queue_per_s: backend {backend!r} has no waiting-queue query to sum")
            self.queue_query = f"sum({per_replica})"
        #: Prometheus time of the last one-second queue sample read (the next range starts after it)
        self._queue_until: float | None = None
        self._queue_series: SubTickSeries | None = None
        #: the requests an activator holds (None: not read); see the module docstring
        self.activator_query = activator_query.strip() if activator_query else None
        self._held: int | None = None
        self.errors_total = 0
        self.last_errors: dict[str, str] = {}

    def __enter__(self) -> PrometheusSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        client, self._client = self._client, None

        async def shut() -> None:
            if client is not None:
                await client.aclose()

        self._loop.close(shut)

    # -- one tick ---------------------------------------------------------------------------

    def observe(self, now_s: float) -> Observation:
        """Query Prometheus once; never raises. ``now_s`` stamps the observation."""
        errors: dict[str, str] = {}
        at = None if self._time_of is None else self._time_of(now_s)
        self._held = None
        undated: frozenset[str] = frozenset()
        try:
            replicas = self._loop.run(
                lambda: self._bounded_tick(at, errors), timeout_s=self.timeout_s * 4 + 10
            )
        except Exception as e:  # unreachable, time-out, 5xx, malformed: hold what we knew as unknown
            errors["prometheus"] = str(e) or type(e).__name__
            samples = [ReplicaSample(name, phase, ok=False) for name, phase in sorted(self._known.items())]
        else:
            samples = self._samples(replicas, errors, now_s)
            undated = self._date(replicas, samples)
        self.errors_total += len(errors)
        self.last_errors = errors
        queue, self._queue_series = self._queue_series, None
        if queue is not None:
            # Prometheus' clock to the observation's: the newest second ends at now_s
            queue = SubTickSeries(queue.period_s, now_s, queue.values)
        return Observation(
            time_s=now_s,
            fleet=fleet_view_of(samples),
            replicas=tuple(samples),
            queue_per_s=queue,
            gateway_queue=self._held,
            undated_replicas=undated,
        )

    def _samples(
        self, replicas: dict[str, _Replica] | None, errors: dict[str, str], now_s: float
    ) -> list[ReplicaSample]:
        samples: list[ReplicaSample] = []
        current: dict[str, Phase] = {}
        for name, r in sorted((replicas or {}).items()):
            current[name] = r.phase
            if r.up != 1.0 or r.up_sample_s is None:
                samples.append(ReplicaSample(name, r.phase, ok=False))
                continue
            hists: dict[str, HistogramView] = {}
            for family, buckets in r.buckets.items():
                h = build_histogram(buckets, r.sums.get(family, 0.0), r.counts.get(family))
                if h is not None:
                    hists[family] = h
            # The same judgement as a scraped page's: a counter that falls other than a restart near
            # zero is a broken exporter or a proxy, not load (each fall read as a reset is a burst).
            why = (
                r.crowded
                or _nothing_read(r.values, hists, r.nan)
                or distrust(r.values, hists, r.nan)
                or self._counters.went_back(name, ParsedPage(values=r.values, histograms=hists), now_s)
            )
            if why is not None:
                errors[name] = why
                samples.append(ReplicaSample(name, r.phase, ok=False))
                continue
            samples.append(ReplicaSample(name, r.phase, ok=True, values=r.values, histograms=hists))
        # Replicas of the last tick that no longer have an ``up`` series: unknown this tick, then forgotten
        # (the live loop adds an unknown sample for any the cluster still lists).
        for name, phase in sorted(self._known.items()):
            if name not in current:
                samples.append(ReplicaSample(name, phase, ok=False))
                errors.setdefault(name, "no up series this tick")
        self._known = current
        if len(self._counters) > len(current):
            self._counters.retain(current)
        return samples

    def _date(self, replicas: dict[str, _Replica], samples: list[ReplicaSample]) -> frozenset[str]:
        """The replicas of ``samples`` (accepted ones) whose values cannot be dated (module docstring).

        Worked, 1 s scrapes and 0.5 s ticks: Prometheus first scrapes a cache's old copy A at
        10.7 and a fresh page B at 11.7; ticks at 10.8 and 11.3 read A, the tick at 11.8 reads
        B while the query, looking at 11.0, lists the replica still. B differs from A: dated, and
        the rate starts at B instead of reading A -> B over 0.5 s.
        """
        undated: set[str] = set()
        for s in samples:
            r = replicas.get(s.replica)
            if not s.ok or r is None:
                continue
            name = s.replica
            # the engine's values only, as the query reads: a GPU's utilisation moves under a
            # cached copy of the engine's page (another exporter, not behind the cache)
            engine = {k: v for k, v in r.values.items() if k not in DCGM_FIELDS}
            read = (engine, r.buckets, r.sums, r.counts)
            if r.undated and name not in self._dated:
                before = self._undated_reads.get(name)
                if before is None or before == read:
                    self._undated_reads[name] = read
                    undated.add(name)
                    continue
            self._dated.add(name)
            self._undated_reads.pop(name, None)
        self._dated.intersection_update(replicas)
        for name in [n for n in self._undated_reads if n not in replicas]:
            del self._undated_reads[name]
        return frozenset(undated)

    # -- querying (on the loop thread) ------------------------------------------------------

    async def _bounded_tick(self, at: float | None, errors: dict[str, str]) -> dict[str, _Replica]:
        """:meth:`_tick` within its four rounds' deadlines (liveness; the activator's and the undated
        replicas' queries; the batch; the queue range).

        Each request ends within ``timeout_s`` already; this bound cancels the tick on the loop
        itself (a time-out of :meth:`LoopThread.run` would leave it running there), so a tick
        never outlives its ``observe``. Worked: timeout_s 5 -> every tick over by 20.5 s.
        """
        bound_s = self.timeout_s * 4 + 0.5
        try:
            async with asyncio.timeout(bound_s):
                return await self._tick(at, errors)
        except TimeoutError:
            raise PrometheusUnavailable(
                self.base_url, self.liveness_query, f"the tick's queries did not end within {bound_s:g} s"
            ) from None

    async def _tick(self, at: float | None, errors: dict[str, str]) -> dict[str, _Replica]:
        if self._client is None:
            self._client = new_client(self.timeout_s, self._headers)
        label = self.replica_label
        up = await self._query(self.liveness_query, at)
        replicas: dict[str, _Replica] = {}
        for labels, t, v in up:
            name = labels.get(label)
            if name is None:
                continue
            if at is None:
                at = t  # Prometheus's evaluation time: every other query of the tick reads this instant
            r = replicas.get(name)
            if r is None:
                r = replicas[name] = _Replica(up=v)
            elif v != 1.0:  # several targets per pod: all must be up (NaN is not up: min() would skip it)
                r.up = v
            phase = None if self.phase_label is None else labels.get(self.phase_label)
            if phase in _PHASES:
                r.phase = _PHASES[phase]
        first: list[Awaitable[None]] = []
        if self.activator_query is not None:
            first.append(self._read_held(at, errors))
        if replicas and self.undated_query is not None:
            first.append(self._read_undated(self.undated_query, at, replicas, errors))
        for done in await asyncio.gather(*first, return_exceptions=True):
            if isinstance(done, BaseException):
                raise done
        if not replicas:
            return replicas

        names = ["timestamp"]
        exprs = [f"timestamp({self.liveness_query})"]
        for key, q in self.queries.values.items():
            names.append(f"value {key}")
            exprs.append(q)
        for family, hq in self.queries.histograms.items():
            for part, q in (("buckets", hq.buckets), ("sum", hq.sum), ("count", hq.count)):
                if q:
                    names.append(f"{part} {family}")
                    exprs.append(q)
        if self.queries.series:
            names.append("series")
            exprs.append(self.queries.series)
        results = await asyncio.gather(*(self._query(q, at) for q in exprs), return_exceptions=True)
        for what, res in zip(names, results, strict=True):
            if isinstance(res, BaseException):
                # refused: that metric is left out; unavailable or malformed: the whole tick is
                # unknown (a server that garbles one answer is not trusted for the others)
                if not isinstance(res, PrometheusRefused):
                    raise res
                errors[what] = str(res)
                continue
            self._fold(what, res, replicas, at, errors)
        if self.queue_query is not None and at is not None:
            await self._queue_samples(at, errors)
        return replicas

    async def _read_held(self, at: float | None, errors: dict[str, str]) -> None:
        """The activator's held requests at ``at`` (one series, or none when nothing exports it)."""
        try:
            vector = await self._query(self.activator_query or "", at)
        except PrometheusRefused as e:
            errors["activator"] = str(e)
            return
        if len(vector) > 1:
            errors["activator"] = f"{self.activator_query!r}: {len(vector)} series, need one (sum them)"
            return
        if vector:
            v = vector[0][2]
            # bounded as one replica's queue is (metrics/vetting.py): one absurd series must not
            # take a fleet at zero to its maximum
            if 0 <= v <= HELD_MAX:
                self._held = round(v)
            else:
                errors["activator"] = f"{self.activator_query!r}: impossible value {v}"

    async def _read_undated(
        self, expr: str, at: float | None, replicas: dict[str, _Replica], errors: dict[str, str]
    ) -> None:
        """Marks the replicas Prometheus cannot date yet; refused, it marks none (as before it was
        asked: a query refused at every tick must not leave the fleet without rates)."""
        try:
            vector = await self._query(expr, at)
        except PrometheusRefused as e:
            errors["undated"] = str(e)
            return
        for labels, _, _ in vector:
            r = replicas.get(labels.get(self.replica_label, ""))
            if r is not None:
                r.undated = True

    async def _queue_samples(self, at: float, errors: dict[str, str]) -> None:
        """The fleet's waiting queue each second since the last tick's (at most the last 30 s).

        One range query at a 1 s step; the series is the unbroken run of seconds that ends at the
        tick (a gap cuts it: Prometheus keeps nothing before its first scrape of the engines). No
        second up to the tick gives no series, and the entropy falls back to one value per
        observation (its note says which it used).
        """
        start = (
            at - QUEUE_WINDOW_S if self._queue_until is None else max(self._queue_until, at - QUEUE_WINDOW_S)
        )
        steps = int((at - start) // 1.0)
        if steps < 1:
            return
        first = at - (steps - 1)
        try:
            points = await self._range(self.queue_query or "", first, at, 1.0)
        except PrometheusRefused as e:
            errors["queue_per_s"] = str(e)
            return
        self._queue_until = at
        # the unbroken run of seconds that ends now (Prometheus has none before its first scrape)
        run: list[float] = []
        expect = at
        for t, v in reversed(points):
            if abs(t - expect) > 0.01:
                break
            run.append(v)
            expect -= 1.0
        if not run:
            errors["queue_per_s"] = f"no one-second queue sample up to the tick ({len(points)} earlier)"
            return
        self._queue_series = SubTickSeries(1.0, at, tuple(reversed(run)))

    async def _range(self, expr: str, start: float, end: float, step: float) -> list[tuple[float, float]]:
        """One range query of a single series -> [(time, value)], NaN left out (raises PrometheusError)."""
        params = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
        answer = await fetch(
            self._client, self.base_url, "/api/v1/query_range", params, query=expr, timeout_s=self.timeout_s
        )
        answer.expect("matrix")
        if len(answer.series) > 1:
            raise PrometheusRefused(self.base_url, expr, f"{len(answer.series)} series, need one")
        return [(t, v) for s in answer.series for t, v in s.points if v == v]

    def _fold(
        self,
        what: str,
        vector: Vector,
        replicas: dict[str, _Replica],
        at: float | None,
        errors: dict[str, str],
    ) -> None:
        part, _, key = what.partition(" ")
        label = self.replica_label
        if part == "series":
            for labels, _, v in vector:
                r = replicas.get(labels.get(label, ""))
                if r is not None and v > MAX_SERIES and r.crowded is None:
                    name = labels.get("__name__", "a read name")
                    r.crowded = (
                        f"{v:.0f} series of {name} (at most {MAX_SERIES}): a label explosion, not one replica"
                    )
            return
        if part == "timestamp":
            for labels, _, v in vector:
                r = replicas.get(labels.get(label, ""))
                if r is None:
                    continue
                if not math.isfinite(v):  # no time to judge freshness by: NaN would pass as fresh
                    r.up_sample_s = -math.inf
                else:
                    r.up_sample_s = v if r.up_sample_s is None else min(r.up_sample_s, v)
            for name, r in replicas.items():
                if r.up_sample_s is None or r.up_sample_s == -math.inf:
                    errors.setdefault(name, "no up sample time")
                    r.up_sample_s = None
                elif at is not None and at - r.up_sample_s > self.max_sample_age_s:
                    errors[name] = f"stale: last up sample {at - r.up_sample_s:.0f} s old"
                    r.up_sample_s = None
            return
        for labels, _, v in vector:
            r = replicas.get(labels.get(label, ""))
            if r is None:  # a series of no current replica
                continue
            if v != v:  # NaN: no value, which the replica's verdict must hear of (not read as absent)
                r.nan.add(key)
                continue
            if part == "value":
                r.values[key] = v
            elif part == "buckets":
                le = labels.get("le")
                try:
                    bound = float(le) if le is not None else math.nan
                except ValueError:
                    bound = math.nan
                if bound != bound:
                    errors[what] = f"bucket series with le = {le!r}, need a number"
                    return
                r.buckets.setdefault(key, {})[bound] = v
            elif part == "sum":
                r.sums[key] = v
            else:
                r.counts[key] = v

    async def _query(self, expr: str, at: float | None) -> Vector:
        """One instant query -> [(labels, sample time, value)]; raises a PrometheusError."""
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        answer = await fetch(
            self._client, self.base_url, "/api/v1/query", params, query=expr, timeout_s=self.timeout_s
        )
        answer.expect("vector")
        return [(s.labels, t, v) for s in answer.series for t, v in s.points]


#: seed 004's queue-entropy window, 30 one-second queue lengths (signals.gpu.ENTROPY_WINDOW_S; the
#: metrics layer does not import the signals layer)
QUEUE_WINDOW_S = 30.0


def query_range_values(
    base_url: str, expr: str, start_s: float, end_s: float, step_s: float, *, timeout_s: float = 30.0
) -> dict[float, float]:
    """One PromQL range query that returns a single series: timestamp -> value (NaN, +-Inf skipped).

    For offline analysis (``llmscale calibrate --prometheus``), not the controller's tick path.
    Raises :class:`~llmscale.errors.ConfigError` for a range Prometheus would refuse, and a
    :class:`~llmscale.metrics.promapi.PrometheusError` (exit code 2) naming the URL and the query
    when Prometheus cannot be reached within ``timeout_s``, refuses the query, answers with more
    than one series or with something that is not its API's answer.
    """
    return query_ranges(base_url, {"q": expr}, start_s, end_s, step_s, timeout_s=timeout_s)["q"]


def query_ranges(
    base_url: str,
    queries: Mapping[str, str],
    start_s: float,
    end_s: float,
    step_s: float,
    *,
    timeout_s: float = 30.0,
) -> dict[str, dict[float, float]]:
    """:func:`query_range_values` for several queries at once (name -> series), over one client."""
    if not (end_s > start_s and step_s > 0 and (end_s - start_s) / step_s <= 11_000):
        raise ConfigError(
            f"range {start_s}..{end_s} step {step_s}: end must follow start and the range hold "
            "at most 11,000 steps (Prometheus' limit)"
        )
    if not (math.isfinite(timeout_s) and timeout_s > 0):
        raise ConfigError(f"timeout_s = {timeout_s}, must be a finite number > 0")
    return range_series(base_url, queries, start_s, end_s, step_s, timeout_s=timeout_s)
