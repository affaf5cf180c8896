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
from metrics_pages import DCGM_TWO_GPUS, vllm_page

from llmscale.emulate import EmulatorThread
from llmscale.metrics.exposition import parse_exposition
from llmscale.metrics.names import VLLM
from llmscale.metrics.prometheus import PrometheusSource
from llmscale.metrics.promql import QuerySet, default_queries
from llmscale.signals.rates import counter_rates
from llmscale.signals.window import FleetWindow
from support.prometheus_server import PrometheusServer, TargetGroup
from support.stale_fleet import ColdCache, Load, emulated_fleet, finished, fleet_request_rates
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


def _up_spans(prom: PrometheusServer) -> list[tuple[str, float, float]]:
    """Per ``up`` series (target): its pod and the times of the first and last sample Prometheus
    holds (within 2 min)."""
    return [
        (r["metric"]["pod"], float(r["values"][0][0]), float(r["values"][-1][0]))
        for r in prom.query("up[2m]")
    ]


def _first_at(prom: PrometheusServer, selector: str, value: float) -> float:
    """The time of the first sample of the one series ``selector`` whose value is ``value``."""
    (series,) = prom.query(f"{selector}[2m]")
    return min(float(t) for t, v in series["values"] if float(v) == value)


def _group(port: int, pod: str, path: str, **labels: str) -> TargetGroup:
    return TargetGroup([f"127.0.0.1:{port}"], {"pod": pod, "__metrics_path__": path, **labels})


def test_a_replica_is_undated_until_its_series_change_or_age(page_server, prometheus_server) -> None:
    window_s = 6.0  # max_sample_age_s: series older than this are dated, changed or not
    page_server.set("/changing", _page(100))
    page_server.set("/constant", _page(50))
    page_server.set("/dcgm", DCGM_TWO_GPUS)  # "constant"'s GPUs: another exporter, not behind the cache
    prom = prometheus_server(
        scrape_interval_s=SCRAPE_S,
        static_targets=[
            _group(page_server.port, "changing", "/changing"),
            _group(page_server.port, "constant", "/constant"),
            # its own label: two targets of one pod need two ``up`` series
            _group(page_server.port, "constant", "/dcgm", exporter="dcgm"),
        ],
    )
    prom.wait_for("vllm:num_requests_waiting", lambda r: len(r) == 2)
    prom.wait_for("DCGM_FI_DEV_GPU_UTIL", lambda r: len(r) == 2)
    page_server.set("/changing", _page(110, waiting=9.0))
    page_server.set("/dcgm", DCGM_TWO_GPUS.replace("} 80\n", "} 90\n"))
    prom.wait_for('vllm:num_requests_waiting{pod="changing"} == 9', lambda r: len(r) == 1)
    prom.wait_for("DCGM_FI_DEV_GPU_UTIL == 90", lambda r: len(r) == 1)
    spans = _up_spans(prom)
    t_first = max(first for _, first, _ in spans) + 0.001
    # the first samples Prometheus holds of the changed pages
    t_changed = _first_at(prom, 'vllm:num_requests_waiting{pod="changing"}', 9.0)
    t_gpu = _first_at(prom, 'DCGM_FI_DEV_GPU_UTIL{gpu="0"}', 90.0)
    t_aged = t_first + window_s + 1.5
    wait_for(
        "Prometheus to scrape past the window",
        lambda: min(last for _, _, last in _up_spans(prom)) > t_aged,
        window_s + 20.0,
        every_s=0.2,
    )

    # the instants Prometheus holds a changed page: its query looks at the last whole second
    t_change, t_gpu_change = t_changed + 0.001, t_gpu + 0.001
    times = {
        "first": t_first,
        "before": (t_first + min(t_changed, t_gpu)) / 2,
        "change": t_change,
        "gpu": t_gpu_change,
        "aged": t_aged,
    }
    with PrometheusSource(
        prom.url, max_sample_age_s=window_s, time_of=lambda s: s, activator_query=None
    ) as source:
        assert source.undated_query is not None
        obs = {}
        for what, t in sorted(times.items(), key=lambda kv: kv[1]):
            obs[what] = source.observe(t)
            assert not source.last_errors, (what, source.last_errors)
        listed = httpx.get(
            f"{prom.url}/api/v1/query", params={"query": source.undated_query, "time": f"{t_change:.3f}"}
        ).json()["data"]["result"]
    assert all(s.ok for o in obs.values() for s in o.replicas)
    assert {s.replica for s in obs["first"].replicas} == {"changing", "constant"}
    # one sample each (or the same bytes again): nothing says when they were rendered
    assert obs["first"].undated_replicas == obs["before"].undated_replicas == {"changing", "constant"}
    # "changing" changed since its first sample: rendered after Prometheus first asked. The query
    # has not seen it yet (unless the change fell in the last millisecond of a second), but the
    # values differ from those read while undated
    if math.floor(t_change) < t_changed:
        assert {r["metric"]["pod"] for r in listed} == {"changing", "constant"}
    # (the premise of the next lines: no series older than the window yet)
    assert max(t_changed, t_gpu) - min(first for _, first, _ in spans) < window_s
    assert obs["change"].undated_replicas == {"constant"}
    # "constant"'s GPUs read another value, its engine's page the same: still undated
    assert "constant" in obs["gpu"].undated_replicas
    # no rate from the old copy: "changing" read the same first page twice, then the changed one
    # 0.011 s later (read from the second copy: 1,000 tokens over 0.011 s, ~90,000 tokens/s);
    # "constant" read the same page each time (0)
    window = [o for what, o in obs.items() if times[what] <= t_change]
    assert counter_rates(FleetWindow.build(window)).generation_tps in (None, 0.0)
    # "constant" has been scraped for longer than the window: dated, as an idle replica must be
    assert obs["aged"].undated_replicas == frozenset()


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
            # the controller's first tick, just after Prometheus' first scrape of every replica: the
            # replica scraped last still holds only its old copy (its second scrape is 1 s later)
            t0 = max(first for _, first, _ in _up_spans(prom)) + 0.2
            with PrometheusSource(prom.url, dcgm=False, time_of=lambda s: s, activator_query=None) as source:
                window = [source.observe(t0 + k * SCRAPE_S) for k in range(TICKS)]
                assert not source.last_errors, source.last_errors
    assert cache.served == set(range(REPLICAS))
    # every replica read at the first tick (a later scrape of the cache may miss Prometheus' 1 s
    # time-out on a busy machine: that replica is then unknown for a tick, held at its last rate)
    assert all(s.ok for s in window[0].replicas) and {s.replica for s in window[0].replicas} == pods
    assert window[0].undated_replicas, "the replica scraped last holds only its old copy"
    # every replica's second sample (fresh) is at most 1.2 s old at the third tick, so seen by a
    # whole second of the query's window
    assert all(not o.undated_replicas for o in window[2:]), [o.undated_replicas for o in window]
    marked = fleet_request_rates(window)
    plain = fleet_request_rates([replace(o, undated_replicas=frozenset()) for o in window])
    # read from the old copies, as before the marks: the rate the marks prevent
    assert max(r for r in plain if r is not None) > MAX_OVER_READ * RATE_RPS, plain
    read = [r for r in marked if r is not None]
    assert read and marked[3] is not None, marked  # the tick after every replica is dated
    assert max(read) <= MAX_OVER_READ * RATE_RPS, (marked, plain)
    assert read[-1] >= RATE_RPS / MAX_OVER_READ, (marked, plain)
