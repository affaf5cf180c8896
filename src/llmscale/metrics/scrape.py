"""Direct scrapes of the replicas' ``/metrics`` pages: :class:`PodScrapeSource`.

Each tick fetches every target concurrently, each under its own time-out,
over keep-alive connections reused from tick to tick (``metrics/_http.py``'s
lean client; aiohttp for what it does not handle: https, redirects, compressed
answers), then parses the pages with a :class:`~llmscale.metrics.exposition.PageReader`
(what :func:`~llmscale.metrics.exposition.parse_exposition` returns, reusing each
target's page layout from tick to tick). A target that
times out, answers non-200 or serves malformed text is *unknown* this tick
(``ok=False``), never zero load; its error is counted in ``errors_total`` and
described in ``last_errors``. So is a target whose page cannot be its load:

* a negative, infinite or NaN sample of a metric llmscale reads (``metrics/vetting.py``);
* a stale page: the same bytes for longer than ``max_sample_age_s`` (a hung exporter, a
  cache in front of it: a live vLLM page moves every scrape, its process CPU counter at
  least), or samples stamped with a time older than that (exporters that stamp their
  samples say how old they are; the clock is ``wall_clock``, Unix time);
* a page that cannot be one replica's (issue 19, ``metrics/vetting.py``): a read value past its
  plausible range (a queue of 1e9), a histogram whose buckets fall, a read series written twice
  or in more than 256 series, a sample stamped more than ``max_clock_ahead_s`` in the future, or
  a read counter that went back since the last scrape other than a restart near zero (and at
  most one restart a minute: counters that fall steadily are not resets);
* a page larger than ``max_page_bytes`` (8 MiB; a vLLM page is ~20 KiB, a node's DCGM page
  ~100 KiB) on every path, a compressed answer included (it is inflated at most that far: a
  gzip bomb inflating to 1 GiB once took the controller to 5.5 GB), or with more than
  ``max_page_lines`` lines; a redirect (not followed unless ``follow_redirects="same-host"``,
  and then only to the same scheme, host and port: a 302 from a replica must not make another
  URL's body its load).

So the memory a scrape needs is bounded: a page in flight holds at most ``max_page_bytes`` (its
read buffer up to twice that), and a parse of it a few times its size
(``tests/metrics/test_scrape_limits.py`` measures the RSS of a controller scraping a 50 MB page
and a gzip bomb: it stays within the 512Mi of deploy/).

On the emulator's 34 KB, 352-line page these checks cost ~25 us: hashing it ~13 us, the
counter history ~8 us, vetting ~4 us when the page was read through its layout (the read
established its numbers' bounds and its histograms' order at once: ``ParsedPage.plain``) and
~30 us value by value otherwise; reading it through its layout costs ~60 us (the C scan of
``metrics/_scan.c``), line by line ~1.3 ms. ``benchmarks/controller_tick.py`` prints the reader's.

An activator's page (``activator_url``: a front door that holds requests while no replica is
ready, such as ``llmscale emulate``'s) is fetched with the replicas; its
:attr:`~llmscale.metrics.names.ACTIVATOR.REQUESTS_HELD` becomes ``Observation.gateway_queue``, the
demand of a fleet at zero that no replica can report. A failed or impossible activator page leaves
``gateway_queue`` None (unknown, never 0) and counts as an error (``"activator"``). Its page is not
held to the staleness limit: a front door that holds nothing serves the same bytes for hours.

The target list comes from a callable, so the same source reads a static list
or the pods a Kubernetes discovery function finds (the caller passes it: this
module does not import the Kubernetes client). Parsing runs after all fetches
finished, outside their time-outs, so a slow parse of one page never times out
another target's fetch.
"""

from __future__ import annotations

import asyncio
import importlib
import sys
import zlib
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urljoin, urlsplit

from llmscale.clock import Clock, UnixClock
from llmscale.metrics._http import ByteBudget, HttpError, LeanClient, Unsupported
from llmscale.metrics._loop import LoopThread
from llmscale.metrics._shards import ShardPool, shard_of
from llmscale.metrics.exposition import (
    ExpositionError,
    PackedHistogram,
    PageReader,
    ParsedPage,
    parse_exposition,
)
from llmscale.metrics.names import ACTIVATOR
from llmscale.metrics.vetting import HELD_MAX, READ_HISTOGRAMS, READ_VALUES, CounterHistory, vet_page
from llmscale.types import FleetView, Observation, Phase, ReplicaSample

__all__ = ["PackedHistogram", "PodScrapeSource", "ScrapeTarget", "TargetSpec", "fleet_view_of"]


@dataclass(frozen=True, slots=True)
class ScrapeTarget:
    """One replica to scrape: its name (the pod name), its metrics URL, optionally its GPUs' DCGM page.

    ``dcgm_url`` may be a node's DCGM exporter shared by several pods: it is
    fetched once per tick and each replica keeps the series labelled with its
    own pod name (see ``dcgm_pod_label`` of :class:`PodScrapeSource`).
    """

    replica: str
    url: str
    dcgm_url: str | None = None
    phase: Phase = Phase.READY


#: a target as the callable may give it: a ScrapeTarget or a plain ``(replica, url)`` pair
TargetSpec = ScrapeTarget | tuple[str, str]

#: what a scrape does with a redirect: refuse it, or follow it within the same scheme, host and port
RedirectPolicy = Literal["never", "same-host"]
_REDIRECT_POLICIES = ("never", "same-host")
#: hops a same-host redirect chain may take
_MAX_REDIRECTS = 3
#: scrape worker processes a source may start (metrics/_shards.py)
_MAX_WORKERS = 64
#: what a tick's pages may hold together past 128 KiB each (metrics/_http.py ByteBudget), unless the
#: largest page allowed is larger: eight pages of the 8 MiB limit at once, or one of 64 MiB
_LARGE_PAGE_BUDGET_BYTES = 64 * 1024 * 1024
#: beyond its fetch time-outs, how long a scrape worker's answer is waited for (a wedged worker)
WORKER_GRACE_S = 30.0


def _packed(histograms: dict[str, Any]) -> dict[str, PackedHistogram]:
    """The page's histograms packed for the window; a layout read packed them already (PageReader)."""
    return {
        name: h
        if type(h) is PackedHistogram
        else PackedHistogram(h.bounds, array("d", h.cumulative), h.sum, h.count)
        for name, h in histograms.items()
    }


def fleet_view_of(samples: Sequence[ReplicaSample]) -> FleetView:
    """What a source knows of the fleet: every sample in ``spec``, scraped ones by phase.

    An unknown replica counts in ``spec_replicas`` only; the live loop replaces
    this view with the cluster's (docs/notes/live-controller-contracts.md).
    """
    counts = [0] * len(Phase)
    for s in samples:
        if s.ok:
            counts[s.phase] += 1
    return FleetView(
        spec_replicas=len(samples),
        pending=counts[Phase.PENDING],
        loading=counts[Phase.LOADING],
        warmup=counts[Phase.WARMUP],
        ready=counts[Phase.READY],
        draining=counts[Phase.DRAINING],
        node_pending=counts[Phase.NODE_PENDING],
    )


def _as_target(spec: TargetSpec) -> ScrapeTarget:
    if isinstance(spec, ScrapeTarget):
        return spec
    replica, url = spec
    return ScrapeTarget(str(replica), str(url))


class PodScrapeSource:
    """A :class:`~llmscale.metrics.source.MetricSource` over the replicas' own ``/metrics``.

    ``targets`` is a sequence or a callable returning one (called each tick).
    ``timeout_s`` bounds each fetch; ``max_concurrency`` bounds open requests.
    ``dcgm_pod_label`` names the label a shared DCGM page uses for the pod
    (None: read DCGM pages whole). ``lean_http=False`` fetches every page with
    aiohttp instead of the lean client (``metrics/_http.py``): same pages, ~3x
    the CPU per request. ``max_sample_age_s``: the staleness limit of a page
    that does not change and of sample timestamps (see the module docstring);
    page ages count in the ``now_s`` given to :meth:`observe`, timestamps against
    ``wall_clock``.

    After each :meth:`observe`: ``errors_total`` counts every failed fetch,
    parse or target listing since construction, ``last_errors`` maps what
    failed this tick (a replica name, ``"<name> dcgm"`` or ``"targets"``) to why;
    ``layout_reads`` and ``line_reads`` count pages read through a learnt page
    layout and line by line (see :class:`~llmscale.metrics.exposition.PageReader`).
    Call :meth:`close` (or use ``with``) to release connections and the loop thread.
    """

    kind = "scrape"

    def __init__(
        self,
        targets: Callable[[], Iterable[TargetSpec]] | Iterable[TargetSpec],
        *,
        timeout_s: float = 2.0,
        max_concurrency: int = 256,
        dcgm_pod_label: str | None = "pod",
        headers: dict[str, str] | None = None,
        lean_http: bool = True,
        max_sample_age_s: float = 60.0,
        wall_clock: Clock | None = None,
        max_page_bytes: int = 8 * 1024 * 1024,
        max_page_lines: int = 100_000,
        follow_redirects: RedirectPolicy = "never",
        max_clock_ahead_s: float = 10.0,
        activator_url: str | None = None,
        workers: int = 0,
        large_page_budget_bytes: int | None = None,
    ) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s = {timeout_s}, must be > 0")
        if not 0 < max_sample_age_s < float("inf"):
            raise ValueError(f"max_sample_age_s = {max_sample_age_s}, must be > 0 and finite")
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency = {max_concurrency}, must be >= 1")
        if max_page_bytes < 1024:
            raise ValueError(f"max_page_bytes = {max_page_bytes}, must be >= 1024")
        if max_page_lines < 1:
            raise ValueError(f"max_page_lines = {max_page_lines}, must be >= 1")
        if large_page_budget_bytes is None:
            large_page_budget_bytes = max(_LARGE_PAGE_BUDGET_BYTES, max_page_bytes)
        if large_page_budget_bytes < max_page_bytes:
            raise ValueError(
                f"large_page_budget_bytes = {large_page_budget_bytes}, must be >= max_page_bytes "
                f"({max_page_bytes}): else a page of the largest size allowed could never be read"
            )
        self.large_page_budget_bytes = large_page_budget_bytes
        if not 0 <= workers <= _MAX_WORKERS:
            raise ValueError(f"workers = {workers}, must be in [0, {_MAX_WORKERS}]")
        if follow_redirects not in _REDIRECT_POLICIES:
            raise ValueError(f"follow_redirects = {follow_redirects!r}, must be one of {_REDIRECT_POLICIES}")
        if not 0 <= max_clock_ahead_s < float("inf"):
            raise ValueError(f"max_clock_ahead_s = {max_clock_ahead_s}, must be >= 0 and finite")
        self.max_page_bytes = max_page_bytes
        self.max_page_lines = max_page_lines
        self.follow_redirects = follow_redirects
        self.max_clock_ahead_s = max_clock_ahead_s
        if callable(targets):
            self._targets_fn: Callable[[], Iterable[TargetSpec]] = targets
        else:
            fixed = tuple(targets)
            self._targets_fn = lambda: fixed
        self.timeout_s = timeout_s
        #: seconds from the start of the last scrape to its slowest page received
        self._slowest_page_s = 0.0
        self.max_concurrency = max_concurrency
        self.dcgm_pod_label = dcgm_pod_label
        self.lean_http = lean_http
        # Identity: nothing to inflate from a server that honours it (one that does not is inflated
        # at most to max_page_bytes, see _inflate).
        self._headers = {
            "Accept": "text/plain;version=0.0.4;q=1,*/*;q=0.1",
            "Accept-Encoding": "identity",
            **(headers or {}),
        }
        self._loop = LoopThread("llmscale-scrape")
        self._lean: LeanClient | None = None  # created and used on the loop thread only
        self._session: Any = None  # aiohttp.ClientSession for _full_urls, created on the loop thread
        self._full_urls: set[str] = set()  # URLs the lean client does not handle (see metrics/_http.py)
        self._urls: set[str] = set()  # last tick's, to close connections only gone targets used
        # Only what llmscale reads is kept (the window holds WINDOW_LEN observations of every
        # replica): see PageReader and benchmarks/controller_tick.py.
        self._reader = PageReader(keep_values=READ_VALUES, keep_histograms=READ_HISTOGRAMS, packed=True)
        self._last_targets: tuple[ScrapeTarget, ...] = ()
        self.max_sample_age_s = max_sample_age_s
        self._wall = wall_clock or UnixClock()
        #: per URL: the hash of its last page and the ``now_s`` that page first came
        self._pages: dict[str, tuple[int, float]] = {}
        #: per URL: its read counters at the last scrape (counters only grow, or restart near 0)
        self._counters = CounterHistory()
        #: URLs whose last accepted page could not be dated (``Observation.undated_replicas``)
        self._undated: set[str] = set()
        #: the activator's metrics page (see the module docstring), or None
        self.activator_url = activator_url
        self.errors_total = 0
        self.last_errors: dict[str, str] = {}
        #: scrape worker processes (0: scrape and parse in this process); see metrics/_shards.py
        self.workers = workers
        self._pool: ShardPool | None = None
        self._closed = False
        self._shard_reads = [0, 0]  # pages the workers read through a layout, line by line
        #: CPU seconds the workers spent on the last observe (not in this process's own CPU time)
        self.last_worker_cpu_s = 0.0
        # What each worker's own source is built with (its targets and wall clock come per tick).
        self._worker_settings: dict[str, Any] = {
            "timeout_s": timeout_s,
            "max_concurrency": max(1, -(-max_concurrency // max(1, workers))),
            "dcgm_pod_label": dcgm_pod_label,
            "headers": headers,
            "lean_http": lean_http,
            "max_sample_age_s": max_sample_age_s,
            "max_page_bytes": max_page_bytes,
            "max_page_lines": max_page_lines,
            "follow_redirects": follow_redirects,
            "max_clock_ahead_s": max_clock_ahead_s,
            "activator_url": activator_url,
            "large_page_budget_bytes": large_page_budget_bytes,
        }

    @property
    def layout_reads(self) -> int:
        return self._reader.layout_reads + self._shard_reads[0]

    @property
    def line_reads(self) -> int:
        return self._reader.line_reads + self._shard_reads[1]

    def worker_pids(self) -> list[int]:
        """Process ids of the running scrape workers (none before the first tick or after :meth:`close`)."""
        return [] if self._pool is None else self._pool.pids()

    def __enter__(self) -> PodScrapeSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._closed = True  # no worker is started again (an abandoned tick may still call observe)
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()
        session, self._session = self._session, None
        lean, self._lean = self._lean, None

        async def shut() -> None:
            if lean is not None:
                lean.close()
            if session is not None:
                await session.close()

        self._loop.close(shut)

    # -- one tick ---------------------------------------------------------------------------

    def _list_targets(self, errors: dict[str, str]) -> tuple[ScrapeTarget, ...]:
        try:
            targets = tuple(_as_target(t) for t in self._targets_fn())
        except Exception as e:  # any failure of the caller's discovery: keep scraping the last list
            errors["targets"] = f"listing targets failed: {type(e).__name__}: {e}"
            return self._last_targets
        self._last_targets = targets
        return targets

    def observe(self, now_s: float) -> Observation:
        """Scrape every target once; never raises (failed replicas come back ``ok=False``).

        ``now_s`` only stamps the observation (controller time, not wall time).
        """
        errors: dict[str, str] = {}
        targets = self._list_targets(errors)
        if self.workers:
            return self._observe_sharded(targets, errors, now_s)
        urls = {t.url for t in targets} | {t.dcgm_url for t in targets if t.dcgm_url}
        extra = () if self.activator_url is None else (self.activator_url,)
        if len(self._reader) > len(urls):  # targets went: their page layouts go too
            self._reader.retain(urls)
        if len(self._pages) > len(urls):
            self._pages = {u: v for u, v in self._pages.items() if u in urls}
        if len(self._counters) > len(urls):
            self._counters.retain(urls)
        self._undated &= urls
        # Generous outer bound: every fetch has its own time-out; this only guards a wedged loop.
        waves = 1 + len(targets) // self.max_concurrency
        try:
            pages = self._loop.run(
                lambda: self._fetch_all(targets, extra), timeout_s=self.timeout_s * 2 * waves + 30
            )
        except Exception as e:  # the loop itself failed: every replica is unknown this tick
            errors["scrape"] = f"scrape loop failed: {type(e).__name__}: {e}"
            pages = {}
        undated: set[str] = set()
        samples = self._samples(targets, pages, errors, now_s, undated)
        held = None if self.activator_url is None else self._held(pages.get(self.activator_url), errors)
        self.errors_total += len(errors)
        self.last_errors = errors
        return Observation(
            time_s=now_s,
            fleet=fleet_view_of(samples),
            replicas=tuple(samples),
            gateway_queue=held,
            sample_lag_s=self._slowest_page_s,
            undated_replicas=frozenset(undated),
        )

    def _observe_sharded(
        self, targets: tuple[ScrapeTarget, ...], errors: dict[str, str], now_s: float
    ) -> Observation:
        """:meth:`observe` by the worker processes, each over its shard of ``targets``
        (``metrics/_shards.py``)."""
        n = self.workers
        if self._closed:
            for t in targets:
                errors[t.replica] = "the source is closed: its scrape workers are stopped"
            samples = [ReplicaSample(t.replica, t.phase, ok=False) for t in targets]
            self.errors_total += len(errors)
            self.last_errors = errors
            return Observation(time_s=now_s, fleet=fleet_view_of(samples), replicas=tuple(samples))
        if self._pool is None:
            self._pool = ShardPool(n, self._worker_settings)
        pool = self._pool
        shards: list[list[ScrapeTarget]] = [[] for _ in range(n)]
        for t in targets:
            shards[shard_of(t.url, n)].append(t)
        per_worker = self._worker_settings["max_concurrency"]
        # As the in-process bound: every fetch has its own time-out, this only guards a wedged worker.
        bounds = [self.timeout_s * 2 * (1 + len(s) // per_worker) + WORKER_GRACE_S for s in shards]
        replies = pool.observe(shards, now_s, self._wall.now_s(), bounds)
        by_shard: list[Iterator[ReplicaSample]] = []
        held: int | None = None
        cpu_s = 0.0
        # the slowest page of any shard: a rate's span is judged against it (signals/rates.py)
        lag_s = 0.0
        undated: set[str] = set()
        for k, (shard, reply) in enumerate(zip(shards, replies, strict=True)):
            if isinstance(reply, str):  # the worker failed: its replicas are unknown this tick
                for t in shard:
                    errors[t.replica] = reply
                if k == 0 and self.activator_url is not None:
                    errors["activator"] = reply
                by_shard.append(iter([ReplicaSample(t.replica, t.phase, ok=False) for t in shard]))
                continue
            errors.update(reply.errors)
            self._shard_reads[0] += reply.layout_reads
            self._shard_reads[1] += reply.line_reads
            cpu_s += reply.cpu_s
            lag_s = max(lag_s, reply.sample_lag_s)
            undated.update(reply.undated_replicas)
            if k == 0:
                held = reply.gateway_queue
            bounds_of = [pool.shared_bounds(b) for b in reply.bounds]
            by_shard.append(
                iter(
                    [
                        ReplicaSample(
                            t.replica,
                            t.phase,
                            ok=True,
                            values=values,
                            histograms={
                                family: PackedHistogram(bounds_of[b], counts, total, count)
                                for family, b, counts, total, count in hists
                            },
                        )
                        if ok and values is not None
                        else ReplicaSample(t.replica, t.phase, ok=False)
                        for t, (ok, values, hists) in zip(shard, reply.samples, strict=True)
                    ]
                )
            )
        samples = [next(by_shard[shard_of(t.url, n)]) for t in targets]
        self.last_worker_cpu_s = cpu_s
        self.errors_total += len(errors)
        self.last_errors = errors
        return Observation(
            time_s=now_s,
            fleet=fleet_view_of(samples),
            replicas=tuple(samples),
            gateway_queue=held,
            sample_lag_s=lag_s,
            undated_replicas=frozenset(undated),
        )

    def _held(self, body: bytes | str | None, errors: dict[str, str]) -> int | None:
        """The requests the activator holds, from its page; None (and an error) when unknown."""
        if not isinstance(body, bytes):
            errors["activator"] = body if isinstance(body, str) else "not fetched"
            return None
        try:
            page = parse_exposition(body.decode("utf-8", errors="replace"), source=self.activator_url)
        except ExpositionError as e:
            errors["activator"] = str(e)
            return None
        v = page.values.get(ACTIVATOR.REQUESTS_HELD)
        # A front door holds what its memory holds: a million requests is the same bound as one
        # replica's queue (metrics/vetting.py), so one absurd page cannot take the fleet to its maximum.
        if v is None or not (0 <= v <= HELD_MAX):
            what = "has no" if v is None else f"has an impossible value {v:g} of"
            errors["activator"] = f"{self.activator_url}: the page {what} {ACTIVATOR.REQUESTS_HELD}"
            return None
        return round(v)

    def _samples(
        self,
        targets: tuple[ScrapeTarget, ...],
        pages: dict[str, bytes | str],
        errors: dict[str, str],
        now_s: float,
        undated: set[str],
    ) -> list[ReplicaSample]:
        """The targets' samples; adds to ``undated`` the replicas whose accepted page cannot be dated."""
        samples: list[ReplicaSample] = []
        wall_s = self._wall.now_s()
        for t in targets:
            body = pages.get(t.url)
            if not isinstance(body, bytes):
                errors[t.replica] = body if isinstance(body, str) else "not fetched"
                samples.append(ReplicaSample(t.replica, t.phase, ok=False))
                continue
            try:
                page = self._parse(body, key=t.url, source=t.url)
            except ExpositionError as e:
                errors[t.replica] = str(e)
                samples.append(ReplicaSample(t.replica, t.phase, ok=False))
                continue
            seen = self._pages.get(t.url)
            same_bytes = seen is not None and seen[0] == hash(body)  # bytes cache their hash
            first_page = t.url not in self._counters
            why = (
                self._stale(t.url, body, now_s)
                or self._untrusted(page, wall_s)
                or self._counters.went_back(t.url, page, now_s)
            )
            if why is not None:
                errors[t.replica] = f"{t.url}: {why}"
                samples.append(ReplicaSample(t.replica, t.phase, ok=False))
                continue
            # The first page accepted from a target, and the same bytes again, cannot be dated: a
            # cache (or a sidecar exporter) that starts cold hands over the copy it last kept, and
            # refreshes behind it. Read as a rate's baseline, a copy 4 s old followed by a fresh
            # page 0.5 s later read 9x the replica's rate (signals/rates.py; docs/hostile-inputs.md).
            if first_page or (same_bytes and t.url in self._undated):
                self._undated.add(t.url)
                undated.add(t.replica)
            else:
                self._undated.discard(t.url)
            values = page.values
            if t.dcgm_url is not None:
                values = self._merge_dcgm(t, values, pages.get(t.dcgm_url), errors, now_s, wall_s)
            samples.append(
                ReplicaSample(t.replica, t.phase, ok=True, values=values, histograms=_packed(page.histograms))
            )
        return samples

    def _parse(
        self, body: bytes, *, key: str, source: str, select: tuple[str, str] | None = None
    ) -> ParsedPage:
        """The page of ``body``; ExpositionError also for one with more than ``max_page_lines`` lines.

        The line count is checked first (a C scan, ~2 us on a 20 KiB page): a page of 4 million
        one-sample lines fits 8 MiB and would take ~500 MB of line objects to parse. A page of no
        more bytes than the limit has no more lines either, so it is not scanned (a vLLM page of
        ~34 KB against the default 100,000: the scan cost ~20 us a page, 0.1 s of a 5,000-replica
        tick, on the loaded 2-core VM).
        """
        lines = 0 if len(body) <= self.max_page_lines else body.count(b"\n")
        if lines > self.max_page_lines:
            raise ExpositionError(f"{lines} lines (limit {self.max_page_lines}): not parsed", source=source)
        text = body.decode("utf-8", errors="replace")
        return self._reader.parse(text, key=key, select=select, source=source)

    def _stale(self, url: str, body: bytes, now_s: float) -> str | None:
        """Why the page at ``url`` is stale: the same bytes for longer than the limit (None: fresh).

        The clock is the page's first appearance, so the limit counts from when the page last
        changed, not from the first scrape that saw it unchanged.
        """
        digest = hash(body)
        seen = self._pages.get(url)
        if seen is None or seen[0] != digest:
            self._pages[url] = (digest, now_s)
            return None
        frozen_s = now_s - seen[1]
        if frozen_s > self.max_sample_age_s:
            return f"stale: the page has not changed for {frozen_s:.0f} s (limit {self.max_sample_age_s:g} s)"
        return None

    def _untrusted(self, page: ParsedPage, wall_s: float) -> str | None:
        """Why ``page`` cannot be read as its replica's load (:func:`~llmscale.metrics.vetting.vet_page`)."""
        return vet_page(
            page, wall_s, max_sample_age_s=self.max_sample_age_s, max_clock_ahead_s=self.max_clock_ahead_s
        )

    def _merge_dcgm(
        self,
        t: ScrapeTarget,
        values: dict[str, float],
        body: bytes | str | None,
        errors: dict[str, str],
        now_s: float,
        wall_s: float,
    ) -> dict[str, float]:
        """The replica's values plus its GPUs' DCGM fields; a failed, stale or impossible DCGM page
        leaves them out.

        The engine's own page answered, so the replica stays known: GPU signals
        average over the replicas that report DCGM fields, and this one does not.
        """
        key = f"{t.replica} dcgm"
        if not isinstance(body, bytes):
            errors[key] = body if isinstance(body, str) else "not fetched"
            return values
        select = None if self.dcgm_pod_label is None else (self.dcgm_pod_label, t.replica)
        try:
            assert t.dcgm_url is not None
            gpu = self._parse(body, key=t.dcgm_url, select=select, source=t.dcgm_url)
        except ExpositionError as e:
            errors[key] = str(e)
            return values
        assert t.dcgm_url is not None
        # A node's page shared by its pods reads alike for each: its age counts from its first sight.
        why = self._stale(t.dcgm_url, body, now_s) or self._untrusted(gpu, wall_s)
        if why is not None:
            errors[key] = f"{t.dcgm_url}: {why}"
            return values
        return {**gpu.values, **values}

    # -- fetching (on the loop thread) ------------------------------------------------------

    async def _fetch_all(
        self, targets: tuple[ScrapeTarget, ...], extra: tuple[str, ...] = ()
    ) -> dict[str, bytes | str]:
        """URL -> body (bytes) or the reason it failed (str). Each distinct URL is fetched once;
        ``extra`` URLs (the activator's page) are fetched with the targets'."""
        pages = [t.url for t in targets] + [t.dcgm_url for t in targets if t.dcgm_url]
        urls = list(dict.fromkeys(pages + list(extra)))
        if self._lean is None:
            self._lean = LeanClient(self._headers, max_body_bytes=self.max_page_bytes)
        if set(urls) != self._urls:  # targets came or went: drop connections only gone ones used
            self._urls = set(urls)
            self._lean.forget(self._urls)
            self._full_urls &= self._urls
        out: dict[str, bytes | str] = {}
        todo = urls[::-1]
        budget = ByteBudget(self.large_page_budget_bytes)

        # max_concurrency workers, each fetching one URL after another: at most that many requests
        # are open, and a URL's time-out starts when its worker takes it (not while it waits for
        # a free worker). Cheaper than a task per URL behind a semaphore (~0.1 ms a request here).
        # The slowest page that came: its counters were rendered at most this long after the
        # tick's stamp (Observation.sample_lag_s; signals/rates.py MIN_SPAN_LAGS).
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        self._slowest_page_s = 0.0

        async def worker() -> None:
            while todo:
                url = todo.pop()
                got = out[url] = await self._fetch(url, budget)
                if isinstance(got, bytes):
                    self._slowest_page_s = max(self._slowest_page_s, loop.time() - t0)

        await asyncio.gather(*(worker() for _ in range(min(self.max_concurrency, len(urls)))))
        return out

    async def _fetch(self, url: str, budget: ByteBudget | None = None) -> bytes | str:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        try:
            if self.lean_http and url not in self._full_urls:
                assert self._lean is not None
                try:
                    status, body = await self._lean.get(url, deadline, budget)
                except Unsupported:
                    self._full_urls.add(url)  # from now on (and for the rest of this time-out): aiohttp
                else:
                    return body if status == 200 else f"{url}: HTTP {status}"
            if "aiohttp" not in sys.modules:
                # The first fetch that needs aiohttp imports it: ~0.27 s here on a quiet core (asyncio
                # and ssl already loaded), over a second in a fresh scrape worker on a loaded machine,
                # where it timed the page out. That is the controller's own cost, not the target's:
                # the time-out is moved by it. In a thread, so the loop keeps serving the other
                # fetches' answers and timers meanwhile.
                t0 = loop.time()
                await asyncio.to_thread(importlib.import_module, "aiohttp")
                deadline += loop.time() - t0
            return await self._fetch_full(url, deadline, budget)
        except TimeoutError:
            return f"{url}: no answer within {self.timeout_s:g} s"
        except (OSError, HttpError, ValueError) as e:
            return f"{url}: {type(e).__name__}: {e}"

    async def _fetch_full(self, url: str, deadline: float, budget: ByteBudget | None = None) -> bytes | str:
        """aiohttp's GET (https, compressed answers, redirects as ``follow_redirects`` says), by
        ``deadline``; at most ``max_page_bytes`` read and at most that many inflated."""
        import aiohttp

        if self._session is None:
            # limit=0: concurrency is bounded by the workers of _fetch_all, outside each time-out.
            # auto_decompress=False: aiohttp would inflate a gzip bomb whole (see _inflate).
            # force_close: a connection per request. aiohttp keeps what a server sends after an
            # answer for the next request on that connection: a server that answered one GET twice
            # (the second 50 ms late) had the next tick read its stale second answer as the page
            # (tests/fuzz/test_hostile_scrape_servers.py). The lean client drops a connection that
            # receives bytes while idle; aiohttp has no such check, and only the pages the lean
            # client leaves (https, compressed, redirected) come here.
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=60, force_close=True),
                headers=self._headers,
                auto_decompress=False,
            )
        try:
            async with asyncio.timeout_at(deadline):
                where = url
                for _ in range(_MAX_REDIRECTS + 1):
                    async with self._session.get(where, allow_redirects=False) as resp:
                        if resp.status in (301, 302, 303, 307, 308):
                            nxt = urljoin(where, resp.headers.get("Location", ""))
                            if self.follow_redirects == "never" or not _same_origin(url, nxt):
                                return f"{url}: HTTP {resp.status} redirect to {nxt[:200]!r} not followed"
                            where = nxt
                            continue
                        if resp.status != 200:
                            return f"{url}: HTTP {resp.status}"
                        return await self._read_bounded(url, resp, budget)
                return f"{url}: more than {_MAX_REDIRECTS} redirects"
        except aiohttp.ClientError as e:
            return f"{url}: {type(e).__name__}: {e}"

    async def _read_bounded(self, url: str, resp: Any, budget: ByteBudget | None = None) -> bytes | str:
        """The body of ``resp``, inflated, or why not: at most ``max_page_bytes`` either way, and
        past 128 KiB only what ``budget`` (the tick's) still gives (metrics/_http.py ByteBudget)."""
        limit = self.max_page_bytes
        length = resp.content_length
        if length is not None and length > limit:
            return f"{url}: page of {length} bytes (limit {limit})"
        allowed = 0 if budget is None else budget.free_bytes
        kept = 0  # bytes the page holds once read (0 while it may still be refused)
        try:
            parts: list[bytes] = []
            got = 0
            async for chunk in resp.content.iter_chunked(64 * 1024):
                got += len(chunk)
                if got > limit:
                    return f"{url}: page larger than {limit} bytes"
                if budget is not None and got > allowed:
                    allowed = budget.grant(allowed, got)
                parts.append(chunk)
            body = b"".join(parts)
            encoding = resp.headers.get("Content-Encoding", "").strip().lower()
            page = body if encoding in ("", "identity") else _inflate(url, body, encoding, limit)
            if isinstance(page, bytes) and budget is not None and len(page) > allowed:
                allowed = budget.grant(allowed, len(page))  # inflated, it holds more
            kept = len(page) if isinstance(page, bytes) else 0
            return page
        except HttpError as e:
            return f"{url}: {e}"
        finally:
            if budget is not None:
                budget.settle(allowed, kept)


def _same_origin(a: str, b: str) -> bool:
    pa, pb = urlsplit(a), urlsplit(b)
    return (pa.scheme, pa.hostname, pa.port) == (pb.scheme, pb.hostname, pb.port)


def _inflate(url: str, body: bytes, encoding: str, limit: int) -> bytes | str:
    """``body`` decompressed (gzip or deflate), or why not: never more than ``limit`` bytes out.

    One ``decompress`` with ``max_length``: zlib stops there, so a 1 MiB gzip bomb of zeros (1 GiB
    inflated) costs ``limit`` bytes, not the GiB aiohttp's own decompression allocated.
    """
    if encoding not in ("gzip", "x-gzip", "deflate"):
        return f"{url}: Content-Encoding {encoding[:40]!r} not supported"
    # wbits 32 + 15: a gzip or zlib header, detected; "deflate" is zlib-wrapped per RFC 9110.
    d = zlib.decompressobj(32 + zlib.MAX_WBITS)
    try:
        out = d.decompress(body, limit + 1)
    except zlib.error as e:
        return f"{url}: bad {encoding} body: {e}"
    if len(out) > limit or d.unconsumed_tail:
        return f"{url}: page inflates past {limit} bytes ({encoding}): not read"
    return out
