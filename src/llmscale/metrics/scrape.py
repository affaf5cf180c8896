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
  samples say how old they are; the clock is ``wall_clock``, Unix time).

These checks cost ~30 us a page (hashing the emulator's 19 KB, 199-line page ~14 us,
vetting its values ~16 us), against ~100 us to read it through its layout: ~15 ms of a
500-replica tick.

The target list comes from a callable, so the same source reads a static list
or the pods a Kubernetes discovery function finds (the caller passes it: this
module does not import the Kubernetes client). Parsing runs after all fetches
finished, outside their time-outs, so a slow parse of one page never times out
another target's fetch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from llmscale.clock import Clock, UnixClock
from llmscale.metrics._http import HttpError, LeanClient, Unsupported
from llmscale.metrics._loop import LoopThread
from llmscale.metrics.exposition import ExpositionError, PageReader, ParsedPage
from llmscale.metrics.vetting import READ_HISTOGRAMS, READ_VALUES, distrust
from llmscale.types import FleetView, Observation, Phase, ReplicaSample

__all__ = ["PodScrapeSource", "ScrapeTarget", "TargetSpec", "fleet_view_of"]


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
    ) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s = {timeout_s}, must be > 0")
        if not 0 < max_sample_age_s < float("inf"):
            raise ValueError(f"max_sample_age_s = {max_sample_age_s}, must be > 0 and finite")
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency = {max_concurrency}, must be >= 1")
        if callable(targets):
            self._targets_fn: Callable[[], Iterable[TargetSpec]] = targets
        else:
            fixed = tuple(targets)
            self._targets_fn = lambda: fixed
        self.timeout_s = timeout_s
        self.max_concurrency = max_concurrency
        self.dcgm_pod_label = dcgm_pod_label
        self.lean_http = lean_http
        self._headers = {"Accept": "text/plain;version=0.0.4;q=1,*/*;q=0.1", **(headers or {})}
        self._loop = LoopThread("llmscale-scrape")
        self._lean: LeanClient | None = None  # created and used on the loop thread only
        self._session: Any = None  # aiohttp.ClientSession for _full_urls, created on the loop thread
        self._full_urls: set[str] = set()  # URLs the lean client does not handle (see metrics/_http.py)
        self._urls: set[str] = set()  # last tick's, to close connections only gone targets used
        self._reader = PageReader()
        self._last_targets: tuple[ScrapeTarget, ...] = ()
        self.max_sample_age_s = max_sample_age_s
        self._wall = wall_clock or UnixClock()
        #: per URL: the hash of its last page and the ``now_s`` that page first came
        self._pages: dict[str, tuple[int, float]] = {}
        self.errors_total = 0
        self.last_errors: dict[str, str] = {}

    @property
    def layout_reads(self) -> int:
        return self._reader.layout_reads

    @property
    def line_reads(self) -> int:
        return self._reader.line_reads

    def __enter__(self) -> PodScrapeSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
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
        urls = {t.url for t in targets} | {t.dcgm_url for t in targets if t.dcgm_url}
        if len(self._reader) > len(urls):  # targets went: their page layouts go too
            self._reader.retain(urls)
        if len(self._pages) > len(urls):
            self._pages = {u: v for u, v in self._pages.items() if u in urls}
        # Generous outer bound: every fetch has its own time-out; this only guards a wedged loop.
        waves = 1 + len(targets) // self.max_concurrency
        try:
            pages = self._loop.run(
                lambda: self._fetch_all(targets), timeout_s=self.timeout_s * 2 * waves + 30
            )
        except Exception as e:  # the loop itself failed: every replica is unknown this tick
            errors["scrape"] = f"scrape loop failed: {type(e).__name__}: {e}"
            pages = {}
        samples = self._samples(targets, pages, errors, now_s)
        self.errors_total += len(errors)
        self.last_errors = errors
        return Observation(time_s=now_s, fleet=fleet_view_of(samples), replicas=tuple(samples))

    def _samples(
        self,
        targets: tuple[ScrapeTarget, ...],
        pages: dict[str, bytes | str],
        errors: dict[str, str],
        now_s: float,
    ) -> list[ReplicaSample]:
        samples: list[ReplicaSample] = []
        wall_s = self._wall.now_s()
        for t in targets:
            body = pages.get(t.url)
            if not isinstance(body, bytes):
                errors[t.replica] = body if isinstance(body, str) else "not fetched"
                samples.append(ReplicaSample(t.replica, t.phase, ok=False))
                continue
            try:
                page = self._reader.parse(body.decode("utf-8", errors="replace"), key=t.url, source=t.url)
            except ExpositionError as e:
                errors[t.replica] = str(e)
                samples.append(ReplicaSample(t.replica, t.phase, ok=False))
                continue
            why = self._stale(t.url, body, now_s) or self._untrusted(page, wall_s)
            if why is not None:
                errors[t.replica] = f"{t.url}: {why}"
                samples.append(ReplicaSample(t.replica, t.phase, ok=False))
                continue
            values = page.values
            if t.dcgm_url is not None:
                values = self._merge_dcgm(t, values, pages.get(t.dcgm_url), errors, now_s, wall_s)
            samples.append(
                ReplicaSample(t.replica, t.phase, ok=True, values=values, histograms=page.histograms)
            )
        return samples

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
        """Why ``page`` cannot be read as its replica's load: an impossible value or an old timestamp."""
        why = distrust(page.values, page.histograms, page.nan)
        if why is not None or not page.stamped_s:
            return why
        read = {n: t for n, t in page.stamped_s.items() if n in READ_VALUES or n in READ_HISTOGRAMS}
        if not read:
            return None
        name, oldest = min(read.items(), key=lambda kv: kv[1])
        age_s = wall_s - oldest
        if age_s > self.max_sample_age_s:
            return f"stale: {name} is stamped {age_s:.0f} s ago (limit {self.max_sample_age_s:g} s)"
        return None

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
            text = body.decode("utf-8", errors="replace")
            gpu = self._reader.parse(text, key=t.dcgm_url, select=select, source=t.dcgm_url)
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

    async def _fetch_all(self, targets: tuple[ScrapeTarget, ...]) -> dict[str, bytes | str]:
        """URL -> body (bytes) or the reason it failed (str). Each distinct URL is fetched once."""
        urls = list(dict.fromkeys([t.url for t in targets] + [t.dcgm_url for t in targets if t.dcgm_url]))
        if self._lean is None:
            self._lean = LeanClient(self._headers)
        if set(urls) != self._urls:  # targets came or went: drop connections only gone ones used
            self._urls = set(urls)
            self._lean.forget(self._urls)
            self._full_urls &= self._urls
        out: dict[str, bytes | str] = {}
        todo = urls[::-1]

        # max_concurrency workers, each fetching one URL after another: at most that many requests
        # are open, and a URL's time-out starts when its worker takes it (not while it waits for
        # a free worker). Cheaper than a task per URL behind a semaphore (~0.1 ms a request here).
        async def worker() -> None:
            while todo:
                url = todo.pop()
                out[url] = await self._fetch(url)

        await asyncio.gather(*(worker() for _ in range(min(self.max_concurrency, len(urls)))))
        return out

    async def _fetch(self, url: str) -> bytes | str:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        try:
            if self.lean_http and url not in self._full_urls:
                assert self._lean is not None
                try:
                    status, body = await self._lean.get(url, deadline)
                except Unsupported:
                    self._full_urls.add(url)  # from now on (and for the rest of this time-out): aiohttp
                else:
                    return body if status == 200 else f"{url}: HTTP {status}"
            return await self._fetch_full(url, deadline)
        except TimeoutError:
            return f"{url}: no answer within {self.timeout_s:g} s"
        except (OSError, HttpError, ValueError) as e:
            return f"{url}: {type(e).__name__}: {e}"

    async def _fetch_full(self, url: str, deadline: float) -> bytes | str:
        """aiohttp's GET (redirects followed, answers decompressed, https), by ``deadline``."""
        import aiohttp

        if self._session is None:
            # limit=0: concurrency is bounded by the workers of _fetch_all, outside each time-out.
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=60), headers=self._headers
            )
        try:
            async with asyncio.timeout_at(deadline), self._session.get(url) as resp:
                if resp.status != 200:
                    return f"{url}: HTTP {resp.status}"
                body: bytes = await resp.read()
                return body
        except aiohttp.ClientError as e:
            return f"{url}: {type(e).__name__}: {e}"
