"""Direct scrapes of the replicas' ``/metrics`` pages: :class:`PodScrapeSource`.

Each tick fetches every target concurrently, each under its own time-out,
over keep-alive connections reused from tick to tick (``metrics/_http.py``'s
lean client; aiohttp for what it does not handle: https, redirects, compressed
answers), then parses the pages with a :class:`~llmscale.metrics.exposition.PageReader`
(what :func:`~llmscale.metrics.exposition.parse_exposition` returns, reusing each
target's page layout from tick to tick). A target that
times out, answers non-200 or serves malformed text is *unknown* this tick
(``ok=False``), never zero load; its error is counted in ``errors_total`` and
described in ``last_errors``.

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

from llmscale.metrics._http import HttpError, LeanClient, Unsupported
from llmscale.metrics._loop import LoopThread
from llmscale.metrics.exposition import ExpositionError, PageReader
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
    the CPU per request.

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
    ) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s = {timeout_s}, must be > 0")
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
        # Generous outer bound: every fetch has its own time-out; this only guards a wedged loop.
        waves = 1 + len(targets) // self.max_concurrency
        try:
            pages = self._loop.run(
                lambda: self._fetch_all(targets), timeout_s=self.timeout_s * 2 * waves + 30
            )
        except Exception as e:  # the loop itself failed: every replica is unknown this tick
            errors["scrape"] = f"scrape loop failed: {type(e).__name__}: {e}"
            pages = {}
        samples = self._samples(targets, pages, errors)
        self.errors_total += len(errors)
        self.last_errors = errors
        return Observation(time_s=now_s, fleet=fleet_view_of(samples), replicas=tuple(samples))

    def _samples(
        self,
        targets: tuple[ScrapeTarget, ...],
        pages: dict[str, bytes | str],
        errors: dict[str, str],
    ) -> list[ReplicaSample]:
        samples: list[ReplicaSample] = []
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
            values = page.values
            if t.dcgm_url is not None:
                values = self._merge_dcgm(t, values, pages.get(t.dcgm_url), errors)
            samples.append(
                ReplicaSample(t.replica, t.phase, ok=True, values=values, histograms=page.histograms)
            )
        return samples

    def _merge_dcgm(
        self, t: ScrapeTarget, values: dict[str, float], body: bytes | str | None, errors: dict[str, str]
    ) -> dict[str, float]:
        """The replica's values plus its GPUs' DCGM fields; a failed DCGM page leaves them out.

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
