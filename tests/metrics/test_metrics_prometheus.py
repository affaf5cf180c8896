"""PrometheusSource against a real Prometheus scraping a local exposition server; PromQL defaults."""

from __future__ import annotations

import math
import time

import pytest
from metrics_pages import VLLM_NEW, VLLM_OLD, vllm_page

from llmscale.errors import ConfigError
from llmscale.metrics.names import VLLM
from llmscale.metrics.prometheus import PrometheusSource
from llmscale.metrics.promql import default_queries, with_overrides
from llmscale.metrics.scrape import PodScrapeSource
from llmscale.signals.fleet import compute_signals
from llmscale.types import Histogram, Phase
from support.prometheus_server import TargetGroup
from support.wait import wait_for

INF = math.inf


@pytest.fixture
def make_source():
    sources: list[PrometheusSource] = []

    def make(url, **kw):
        s = PrometheusSource(url, **kw)
        sources.append(s)
        return s

    try:
        yield make
    finally:
        for s in sources:
            s.close()


def _group(port: int, pod: str, phase: str) -> TargetGroup:
    # One test server serves every pod's page: the path comes from the target's labels.
    return TargetGroup(
        [f"127.0.0.1:{port}"], {"pod": pod, "phase": phase, "__metrics_path__": f"/{pod}/metrics"}
    )


def _view(h: object) -> tuple[object, ...]:
    """A histogram as its view (bounds, cumulative counts, sum, count), whatever its storage."""
    return (tuple(h.bounds), tuple(h.cumulative), h.sum, h.count)  # type: ignore[attr-defined]


def test_values_histograms_outage_and_recovery(page_server, prometheus_server, make_source):
    srv = page_server
    srv.set("/vllm-0/metrics", VLLM_NEW)
    srv.set("/vllm-1/metrics", VLLM_OLD)
    srv.set("/vllm-2/metrics", "down\n", status=500)
    prom = prometheus_server(
        scrape_interval_s=1.0,
        static_targets=[
            _group(srv.port, "vllm-0", "ready"),
            _group(srv.port, "vllm-1", "warmup"),
            _group(srv.port, "vllm-2", "ready"),
        ],
    )
    prom.wait_for("up", lambda r: len(r) == 3)
    prom.wait_for("vllm:num_requests_waiting", lambda r: len(r) == 3)  # two engines of vllm-0, one of vllm-1

    src = make_source(prom.url, timeout_s=3.0, dcgm=False)
    obs = src.observe(1000.0)
    by = {s.replica: s for s in obs.replicas}
    assert sorted(by) == ["vllm-0", "vllm-1", "vllm-2"]
    assert obs.time_s == 1000.0

    a = by["vllm-0"]
    assert a.ok and a.phase == Phase.READY
    assert a.values[VLLM.waiting] == 7.0 and a.values[VLLM.running] == 7.0
    assert a.values[VLLM.kv_usage] == pytest.approx(0.375)
    assert a.values[VLLM.prompt_tokens] == 1500.0
    # the window packs its histograms (metrics/scrape.py's PackedHistogram): compared as views
    assert _view(a.histograms[VLLM.ttft]) == _view(
        Histogram((0.1, 0.5, 1.0, INF), (3.0, 7.0, 12.0, 15.0), 10.5, 15.0)
    )

    # Old names arrive under the new keys through the `or ... unless on (pod)` fallback.
    b = by["vllm-1"]
    assert b.ok and b.phase == Phase.WARMUP
    assert b.values[VLLM.kv_usage] == pytest.approx(0.75)
    assert _view(b.histograms[VLLM.itl]) == _view(
        Histogram((0.01, 0.025, INF), (10.0, 70.0, 100.0), 2.25, 100.0)
    )

    assert not by["vllm-2"].ok and by["vllm-2"].values == {}  # up == 0: unknown
    assert (obs.fleet.spec_replicas, obs.fleet.ready, obs.fleet.warmup) == (3, 1, 1)
    assert src.errors_total == 0, src.last_errors

    # A direct scrape of the same page folds it the same way.
    with PodScrapeSource([("vllm-0", srv.url("/vllm-0/metrics"))]) as scrape:
        direct = scrape.observe(0.0).replicas[0]
    for key, v in a.values.items():
        assert direct.values[key] == pytest.approx(v), key
    assert _view(direct.histograms[VLLM.ttft]) == _view(a.histograms[VLLM.ttft])

    # A refused query (bad PromQL in an override) drops that metric only, and is counted.
    bad = make_source(
        prom.url, timeout_s=3.0, dcgm=False, queries={VLLM.waiting: "sum by (pod) (", VLLM.running: None}
    )
    obs_bad = bad.observe(1000.0)
    a_bad = {s.replica: s for s in obs_bad.replicas}["vllm-0"]
    assert a_bad.ok and VLLM.waiting not in a_bad.values and VLLM.running not in a_bad.values
    assert a_bad.values[VLLM.kv_usage] == pytest.approx(0.375)
    assert bad.errors_total == 1 and f"value {VLLM.waiting}" in bad.last_errors

    # Read at an instant 30 s after the last scrape, every up sample is stale: unknown, not old values.
    future = make_source(
        prom.url, timeout_s=3.0, dcgm=False, max_sample_age_s=10.0, time_of=lambda _: time.time() + 30.0
    )
    stale = future.observe(1000.0)
    assert [s.ok for s in stale.replicas] == [False, False, False]
    assert "stale" in future.last_errors["vllm-0"]

    # Prometheus stops: every replica known from the last tick is unknown; the error is counted.
    prom.stop()
    down = src.observe(1015.0)
    assert [(s.replica, s.ok) for s in down.replicas] == [
        ("vllm-0", False),
        ("vllm-1", False),
        ("vllm-2", False),
    ]
    assert [s.phase for s in down.replicas] == [Phase.READY, Phase.WARMUP, Phase.READY]
    assert all(s.values == {} and s.histograms == {} for s in down.replicas)
    assert src.errors_total == 1 and "prometheus" in src.last_errors
    assert down.fleet.ready == 0

    # It comes back (same TSDB): once it has scraped again, the replicas are known again.
    prom.start()

    def known_again():
        o = src.observe(1030.0)
        return (
            o
            if {s.replica: s.ok for s in o.replicas} == {"vllm-0": True, "vllm-1": True, "vllm-2": False}
            else None
        )

    recovered = wait_for("replicas known again after the restart", known_again, 20.0, every_s=0.2)
    assert {s.replica: s for s in recovered.replicas}["vllm-0"].values[VLLM.waiting] == 7.0
    assert "prometheus" not in src.last_errors


def test_signals_from_a_prometheus_window(page_server, prometheus_server, make_source):
    """TTFT P95 and queue from two Prometheus observations 15 s apart (controller time).

    Between them the TTFT buckets (0.1, 0.5, 1.0, +Inf) grow from (2, 2, 2, 2) to (4, 8, 10, 10):
    increases (2, 6, 8, 8), P95 rank 7.6 in (0.5, 1.0] holding ranks 6..8: 0.5 + 0.5 x 1.6/2 = 0.9 s.
    """
    srv = page_server
    path = "/vllm-0/metrics"
    srv.set(path, vllm_page(waiting=2, running=1, kv=0.1, ttft_cumulative=(2, 2, 2, 2), ttft_sum=0.1))
    prom = prometheus_server(scrape_interval_s=1.0, static_targets=[_group(srv.port, "vllm-0", "ready")])
    prom.wait_for("vllm:time_to_first_token_seconds_count", lambda r: len(r) == 1 and r[0]["value"][1] == "2")
    src = make_source(prom.url, timeout_s=3.0, dcgm=False)
    first = src.observe(0.0)
    srv.set(path, vllm_page(waiting=9, running=4, kv=0.6, ttft_cumulative=(4, 8, 10, 10), ttft_sum=6.0))
    prom.wait_for(
        "vllm:time_to_first_token_seconds_count", lambda r: len(r) == 1 and r[0]["value"][1] == "10"
    )
    second = src.observe(15.0)
    sig = compute_signals([first, second])
    assert sig.get("queue_waiting") == pytest.approx(9.0)
    assert sig.get("kv_usage_mean") == pytest.approx(0.6)
    assert sig.get("ttft_p95_s") == pytest.approx(0.9)


@pytest.mark.parametrize(
    ("backend", "key", "fragments"),
    [
        pytest.param(
            "vllm", VLLM.waiting, ["sum by (pod) (vllm:num_requests_waiting)"], id="vllm-waiting-sums"
        ),
        pytest.param(
            "vllm",
            VLLM.kv_usage,
            [
                "avg by (pod) (vllm:kv_cache_usage_perc)",
                "unless on (pod)",
                "avg by (pod) (vllm:gpu_cache_usage_perc)",
            ],
            id="vllm-kv-falls-back-to-old-name",
        ),
        pytest.param("tgi", "tgi_queue_size", ["sum by (pod) (tgi_queue_size)"], id="tgi-queue"),
        pytest.param(
            "triton",
            "nv_inference_pending_request_count",
            ["sum by (pod) (nv_inference_pending_request_count)"],
            id="triton-pending",
        ),
        pytest.param(
            "tgi", "DCGM_FI_DEV_GPU_UTIL", ["avg by (pod) (DCGM_FI_DEV_GPU_UTIL)"], id="dcgm-util-avg"
        ),
    ],
)
def test_default_value_queries(backend, key, fragments):
    q = default_queries(backend).values[key]
    for f in fragments:
        assert f in q


def test_default_histogram_queries_and_selector():
    qs = default_queries("vllm", replica_label="kubernetes_pod_name", selector='{namespace="llm"}')
    h = qs.histograms[VLLM.itl]
    assert (
        'sum by (kubernetes_pod_name, le) (vllm:inter_token_latency_seconds_bucket{namespace="llm"})'
        in h.buckets
    )
    assert "vllm:time_per_output_token_seconds_bucket" in h.buckets
    assert h.count.startswith("(sum by (kubernetes_pod_name) (vllm:inter_token_latency_seconds_count")
    assert "tgi_request_duration" in default_queries("tgi").histograms
    assert default_queries("triton").histograms == {}


def test_overrides_replace_add_and_drop():
    base = default_queries("vllm", dcgm=False)
    qs = with_overrides(
        base,
        values={VLLM.waiting: "sum by (pod) (my_queue)", VLLM.running: None, "extra": "sum by (pod) (x)"},
        histograms={VLLM.ttft: 'my_ttft_seconds{job="a"}', VLLM.e2e: None},
    )
    assert qs.values[VLLM.waiting] == "sum by (pod) (my_queue)"
    assert VLLM.running not in qs.values and "extra" in qs.values
    assert qs.histograms[VLLM.ttft].buckets == 'sum by (pod, le) (my_ttft_seconds_bucket{job="a"})'
    assert VLLM.e2e not in qs.histograms


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        pytest.param({"backend": "sglang"}, "backend = 'sglang'", id="unknown-backend"),
        pytest.param({"replica_label": "pod-name"}, "replica_label", id="bad-label"),
        pytest.param({"selector": 'a="1"}, {b="2"'}, "selector", id="bad-selector"),
    ],
)
def test_config_errors(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        default_queries(**kwargs)


def test_source_config_errors():
    with pytest.raises(ConfigError, match="http"):
        PrometheusSource("localhost:9090")


def test_a_counter_that_falls_through_prometheus_is_unknown_not_a_burst(
    page_server, prometheus_server, make_source
):
    """Counters read through Prometheus are judged as a scraped page's are (metrics/vetting.py's
    CounterHistory): 15 -> 14 finished requests is no restart (that starts near 0) but a broken
    exporter, and read as a reset it would be a burst of 14 "new" requests."""
    srv = page_server

    def page(count: float) -> str:
        low = min(count, 2)
        return vllm_page(waiting=1, running=2, kv=0.2, ttft_cumulative=(0, low, low, count), ttft_sum=9.0)

    srv.set("/vllm-0/metrics", page(15))
    prom = prometheus_server(scrape_interval_s=1.0, static_targets=[_group(srv.port, "vllm-0", "ready")])
    count = "vllm:time_to_first_token_seconds_count"
    prom.wait_for(count, lambda r: len(r) == 1 and float(r[0]["value"][1]) == 15.0)
    src = make_source(prom.url, timeout_s=3.0, dcgm=False)
    assert src.observe(1000.0).replicas[0].ok, src.last_errors

    srv.set("/vllm-0/metrics", page(14))
    prom.wait_for(count, lambda r: len(r) == 1 and float(r[0]["value"][1]) == 14.0)
    fell = src.observe(1015.0).replicas[0]
    assert not fell.ok and fell.values == {}
    assert "went back" in src.last_errors["vllm-0"], src.last_errors

    # A real restart (near zero) is read, once: the replica is known again at once.
    srv.set("/vllm-0/metrics", page(1))
    prom.wait_for(count, lambda r: len(r) == 1 and float(r[0]["value"][1]) == 1.0)
    assert src.observe(1030.0).replicas[0].ok, src.last_errors


def test_a_label_explosion_through_prometheus_is_unknown_not_summed(
    page_server, prometheus_server, make_source
):
    """The value queries sum a replica's series (``sum by (pod)``), so 300 extra queue series would
    read as a queue of 300+; the series query counts them per read name and holds the replica."""
    srv = page_server
    healthy = vllm_page(waiting=1, running=2, kv=0.2, ttft_cumulative=(0, 1, 2, 3), ttft_sum=1.0)
    extra = "".join(f'vllm:num_requests_waiting{{engine="x{i}",model_name="m"}} 1\n' for i in range(300))
    srv.set("/vllm-0/metrics", healthy + extra)
    srv.set("/vllm-1/metrics", healthy)
    prom = prometheus_server(
        scrape_interval_s=1.0,
        static_targets=[_group(srv.port, "vllm-0", "ready"), _group(srv.port, "vllm-1", "ready")],
    )
    prom.wait_for(
        "count(vllm:num_requests_waiting)", lambda r: len(r) == 1 and float(r[0]["value"][1]) == 302
    )
    src = make_source(prom.url, timeout_s=3.0, dcgm=False)
    by = {s.replica: s for s in src.observe(1000.0).replicas}
    assert not by["vllm-0"].ok and by["vllm-0"].values == {}
    assert "label explosion" in src.last_errors["vllm-0"], src.last_errors
    assert by["vllm-1"].ok and by["vllm-1"].values[VLLM.waiting] == 1.0
