"""The Prometheus source names the replicas whose samples it cannot date yet.

A target Prometheus began scraping just before ``run`` started may have handed it a cold cache's
old copy first, as a pod scrape's first page may (``Observation.undated_replicas``;
``docs/hostile-inputs.md``). The source asks Prometheus once a tick for the replicas whose read
series all began within the last ``max_sample_age_s`` and have not changed since their first
sample (``metrics/promql.py`` ``undated_query``). Both tests run a real Prometheus and replay the
ticks at chosen evaluation times (``time_of``), so which samples a tick sees is fixed by
Prometheus' own sample times, not by how fast this machine is.

The second test puts four real emulated replicas under a steady 20 req/s behind a cache that
answers each replica's first scrape with a copy kept from :data:`STALE_S` s before; Prometheus
starts scraping the cache just before the controller's first tick. Read as a rate's start, the
copy makes a replica's first rate (1 s + its age) / 1 s of the truth, 5 req/s read as ~50 and
the fleet's 20 as ~65; the source's marks make the rate start at the first sample that changed.
The bound :data:`MAX_OVER_READ`: ticks and scrapes are both 1 s apart, so a span's timing is
that of Prometheus' scrapes, and a 1 s span of a replica at 5 req/s reads 5 +- 1 finished
requests; 2x leaves room for the fleet's count over its shortest span.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import replace

import httpx
import pytest
from metrics_pages import vllm_page

from llmscale.emulate import EmulatorThread
from llmscale.metrics.exposition import parse_exposition
from llmscale.metrics.names import VLLM
from llmscale.metrics.prometheus import PrometheusSource
from llmscale.metrics.promql import QuerySet, default_queries
from llmscale.signals.rates import counter_rates
from llmscale.signals.window import FleetWindow
from llmscale.types import Observation
from support.prometheus_server import PrometheusServer, TargetGroup
from support.stale_fleet import ColdCache, Load, emulated_fleet, finished
from support.wait import wait_for

REPLICAS = 4
RATE_RPS = 20.0  # offered to the fleet: 5 req/s a replica
STALE_S = 8.0  # how old the cache's copies are when it starts
SCRAPE_S = 1.0  # Prometheus' scrape interval, and the replayed ticks' spacing
TICKS = 10
MAX_OVER_READ = 2.0


def _page(done: float, waiting: float = 1.0) -> str:
    return vllm_page(
        waiting=waiting,
        running=3.0,
        kv=0.2,
        ttft_cumulative=(done * 0.2, done * 0.6, done * 0.9, done),
        ttft_sum=done * 0.4,
    )


def _first_and_last(prom: PrometheusServer) -> dict[str, tuple[float, float]]:
    """Per pod, the times of its first and last ``up`` sample Prometheus holds (within 2 min)."""
    return {
        r["metric"]["pod"]: (float(r["values"][0][0]), float(r["values"][-1][0]))
        for r in prom.query("up[2m]")
    }


def _group(port: int, pod: str, path: str) -> TargetGroup:
    return TargetGroup([f"127.0.0.1:{port}"], {"pod": pod, "__metrics_path__": path})


def test_a_replica_is_undated_until_its_series_change_or_age(page_server, prometheus_server) -> None:
    window_s = 6.0  # max_sample_age_s: series older than this are dated, changed or not
    page_server.set("/changing", _page(100))
    page_server.set("/constant", _page(50))
    prom = prometheus_server(
        scrape_interval_s=SCRAPE_S,
        static_targets=[_group(page_server.port, p, f"/{p}") for p in ("changing", "constant")],
    )
    prom.wait_for("vllm:num_requests_waiting", lambda r: len(r) == 2)
    page_server.set("/changing", _page(110, waiting=9.0))
    prom.wait_for('vllm:num_requests_waiting{pod="changing"} == 9', lambda r: len(r) == 1)
    first = {p: t0 for p, (t0, _) in _first_and_last(prom).items()}
    # the first time Prometheus holds the changed page
    (held,) = prom.query('vllm:num_requests_waiting{pod="changing"}[2m]')
    t_changed = min(float(t) for t, v in held["values"] if float(v) == 9.0)
    t_aged = first["constant"] + window_s + 1.5
    wait_for(
        "Prometheus to scrape past the window",
        lambda: min(last for _, last in _first_and_last(prom).values()) > t_aged,
        window_s + 20.0,
        every_s=0.2,
    )

    with PrometheusSource(
        prom.url, dcgm=False, max_sample_age_s=window_s, time_of=lambda s: s, activator_query=None
    ) as source:
        assert source.undated_query is not None
        at_first = source.observe(max(first.values()) + 0.001)
        before_change = source.observe(t_changed - 0.01)
        # the instant Prometheus holds the changed page; its query looks at the last whole second
        at_change = source.observe(t_changed + 0.001)
        aged = source.observe(t_aged)
        assert not source.last_errors, source.last_errors
        listed = httpx.get(
            f"{prom.url}/api/v1/query",
            params={"query": source.undated_query, "time": f"{t_changed + 0.001:.3f}"},
        ).json()["data"]["result"]
    window = [at_first, before_change, at_change, aged]
    assert all(s.ok for o in window for s in o.replicas)
    # one sample each (or the same bytes again): nothing says when they were rendered
    assert at_first.undated_replicas == before_change.undated_replicas == {"changing", "constant"}
    # "changing" changed since its first sample: rendered after Prometheus first asked. The query
    # has not seen it yet (unless the change fell in the last millisecond of a second), but the
    # values differ from those read while undated
    if math.floor(t_changed + 0.001) < t_changed:
        assert {r["metric"]["pod"] for r in listed} == {"changing", "constant"}
    assert t_changed - first["constant"] < window_s  # (the premise of the next line)
    assert at_change.undated_replicas == {"constant"}
    # no rate from the old copy: "changing" read the same first page twice, then the changed one
    # 0.011 s later (read from the second copy: 1,000 tokens over 0.011 s, ~90,000 tokens/s);
    # "constant" read the same page three times (0)
    fw = FleetWindow.build(window[:3])
    assert counter_rates(fw).generation_tps in (None, 0.0)
    # "constant" has been scraped for longer than the window: dated, as an idle replica must be
    assert aged.undated_replicas == frozenset()


def test_a_query_set_without_read_series_marks_nothing(page_server, prometheus_server) -> None:
    page_server.set("/a", _page(100))
    prom = prometheus_server(scrape_interval_s=SCRAPE_S, static_targets=[_group(page_server.port, "a", "/a")])
    prom.wait_for("vllm:num_requests_waiting", lambda r: len(r) == 1)
    queries = replace(default_queries("vllm", dcgm=False), read_series=None)
    assert isinstance(queries, QuerySet)
    with PrometheusSource(prom.url, queries=queries, activator_query=None) as source:
        assert source.undated_query is None
        obs = source.observe(1.0)
    assert [s.ok for s in obs.replicas] == [True]
    assert obs.undated_replicas == frozenset()


@pytest.fixture
def fleet() -> Iterator[tuple[EmulatorThread, list[str]]]:
    yield from emulated_fleet(REPLICAS)


def _rates(window: list[Observation]) -> list[float | None]:
    """The fleet request rate read at each tick of ``window``."""
    out: list[float | None] = []
    fw: FleetWindow | None = None
    for k in range(len(window)):
        fw = FleetWindow.build(window[: k + 1], previous=fw)
        out.append(counter_rates(fw).request_rps)
    return out


def test_an_old_first_copy_scraped_by_prometheus_does_not_inflate_the_rate(fleet, prometheus_server) -> None:
    emu, urls = fleet
    pods = {f"r{i}" for i in range(REPLICAS)}
    with Load(emu.base_url, lambda t: RATE_RPS):
        wait_for("the fleet to finish requests", lambda: finished(urls) >= RATE_RPS, 60.0, every_s=0.2)
        copies = [httpx.get(u, timeout=5.0).content for u in urls]
        kept = sum(parse_exposition(c.decode()).histograms[VLLM.e2e].count for c in copies)
        wait_for(
            f"{STALE_S} s of requests after the copies",
            lambda: finished(urls) >= kept + RATE_RPS * STALE_S,
            60.0,
            every_s=0.1,
        )
        with ColdCache(urls, copies) as cache:
            prom = prometheus_server(
                scrape_interval_s=SCRAPE_S,
                static_targets=[_group(cache.port, f"r{i}", cache.path(i)) for i in range(REPLICAS)],
            )
            wait_for(
                f"{TICKS + 2} scrapes of every replica",
                lambda: (
                    len(seen := prom.query("count_over_time(up[2m])")) == REPLICAS
                    and all(float(r["value"][1]) >= TICKS + 2 for r in seen)
                ),
                (TICKS + 2) * SCRAPE_S + 30.0,
                every_s=0.2,
            )
            first = _first_and_last(prom)
            # the controller's first tick, just after Prometheus' first scrape of every replica: the
            # replica scraped last still holds only its old copy (its second scrape is 1 s later)
            t0 = max(t for t, _ in first.values()) + 0.2
            with PrometheusSource(prom.url, dcgm=False, time_of=lambda s: s, activator_query=None) as source:
                window = [source.observe(t0 + k * SCRAPE_S) for k in range(TICKS)]
                assert not source.last_errors, source.last_errors
    assert cache.served == set(range(REPLICAS))
    assert all(s.ok for o in window for s in o.replicas) and {s.replica for s in window[0].replicas} == pods
    assert window[0].undated_replicas, "the replica scraped last holds only its old copy"
    # every replica's second sample (fresh) is at most 1.2 s old at the third tick, so seen by a
    # whole second of the query's window
    assert all(not o.undated_replicas for o in window[2:]), [o.undated_replicas for o in window]
    marked = _rates(window)
    plain = _rates([replace(o, undated_replicas=frozenset()) for o in window])
    # read from the old copies, as before the marks: the rate the marks prevent
    assert max(r for r in plain if r is not None) > MAX_OVER_READ * RATE_RPS, plain
    read = [r for r in marked if r is not None]
    assert read and marked[3] is not None, marked  # the tick after every replica is dated
    assert max(read) <= MAX_OVER_READ * RATE_RPS, (marked, plain)
    assert read[-1] >= RATE_RPS / MAX_OVER_READ, (marked, plain)
