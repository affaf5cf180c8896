"""PodScrapeSource against a real local HTTP server: ok, slow, failing, malformed and absent targets."""

from __future__ import annotations

import time

import pytest
from metrics_pages import DCGM_TWO_GPUS, TGI, VLLM_NEW, dcgm_node_page, vllm_page

from llmscale.metrics.names import DCGM, VLLM
from llmscale.metrics.scrape import PodScrapeSource, ScrapeTarget
from llmscale.signals.fleet import compute_signals
from llmscale.types import Phase
from support.prometheus_server import free_port


@pytest.fixture
def make_source():
    sources: list[PodScrapeSource] = []

    def make(targets, **kw):
        s = PodScrapeSource(targets, **kw)
        sources.append(s)
        return s

    try:
        yield make
    finally:
        for s in sources:
            s.close()


def test_failed_targets_are_unknown_and_counted(page_server, make_source):
    srv = page_server
    srv.set("/a", VLLM_NEW)
    srv.set("/b", TGI)
    srv.set("/slow", VLLM_NEW, delay_s=5.0)
    srv.set("/err", "internal error\n", status=500)
    srv.set("/bad", "<html>not metrics</html>\n")
    closed = f"http://127.0.0.1:{free_port()}/metrics"  # nothing listens there
    src = make_source(
        [
            ("pod-a", srv.url("/a")),
            ("pod-b", srv.url("/b")),
            ("pod-slow", srv.url("/slow")),
            ("pod-err", srv.url("/err")),
            ("pod-bad", srv.url("/bad")),
            ("pod-gone", closed),
        ],
        timeout_s=0.5,
    )
    t0 = time.monotonic()
    obs = src.observe(100.0)
    elapsed = time.monotonic() - t0
    assert elapsed < 4.0  # the slow target is cut at its time-out, not waited for (it sleeps 5 s)
    by = {s.replica: s for s in obs.replicas}
    assert [s.replica for s in obs.replicas] == [
        "pod-a",
        "pod-b",
        "pod-slow",
        "pod-err",
        "pod-bad",
        "pod-gone",
    ]
    assert by["pod-a"].ok and by["pod-a"].values[VLLM.waiting] == 7.0
    assert by["pod-b"].ok and by["pod-b"].values["tgi_queue_size"] == 6.0
    for name in ("pod-slow", "pod-err", "pod-bad", "pod-gone"):
        assert not by[name].ok
        assert by[name].values == {}  # unknown, never zero load
    assert set(src.last_errors) == {"pod-slow", "pod-err", "pod-bad", "pod-gone"}
    assert "HTTP 500" in src.last_errors["pod-err"]
    assert "line 1" in src.last_errors["pod-bad"]
    assert src.errors_total == 4
    assert obs.time_s == 100.0
    assert (obs.fleet.spec_replicas, obs.fleet.ready) == (6, 2)

    # The failures clear: the next tick reads them, and the error count keeps its total.
    srv.set("/err", VLLM_NEW)
    srv.set("/bad", TGI)
    obs = src.observe(115.0)
    by = {s.replica: s for s in obs.replicas}
    assert by["pod-err"].ok and by["pod-bad"].ok
    assert set(src.last_errors) == {"pod-slow", "pod-gone"}
    assert src.errors_total == 6


def test_shared_dcgm_page_is_fetched_once_and_split_by_pod(page_server, make_source):
    srv = page_server
    srv.set("/a", VLLM_NEW)
    srv.set("/b", VLLM_NEW)
    srv.set("/c", VLLM_NEW)
    srv.set("/node-dcgm", dcgm_node_page([("0", "pod-a", 90), ("1", "pod-a", 50), ("2", "pod-b", 20)]))
    srv.set("/own-dcgm", DCGM_TWO_GPUS)
    dcgm = srv.url("/node-dcgm")
    src = make_source(
        lambda: [
            ScrapeTarget("pod-a", srv.url("/a"), dcgm_url=dcgm),
            ScrapeTarget("pod-b", srv.url("/b"), dcgm_url=dcgm),
            ScrapeTarget("pod-c", srv.url("/c"), dcgm_url=srv.url("/own-dcgm"), phase=Phase.WARMUP),
        ]
    )
    obs = src.observe(0.0)
    by = {s.replica: s for s in obs.replicas}
    assert by["pod-a"].values[DCGM.GPU_UTIL] == pytest.approx(70.0)
    assert by["pod-b"].values[DCGM.GPU_UTIL] == pytest.approx(20.0)
    assert by["pod-c"].values[DCGM.GPU_UTIL] == pytest.approx(60.0)  # its own page, no pod labels
    assert by["pod-a"].values[VLLM.waiting] == 7.0  # the engine's values are kept beside the GPU's
    assert srv.hits["/node-dcgm"] == 1
    assert by["pod-c"].phase == Phase.WARMUP
    assert (obs.fleet.ready, obs.fleet.warmup) == (2, 1)

    # A failing DCGM page leaves the GPU fields out; the engine answered, so the replica stays known.
    srv.set("/node-dcgm", "", status=503)
    obs = src.observe(15.0)
    by = {s.replica: s for s in obs.replicas}
    assert by["pod-a"].ok and DCGM.GPU_UTIL not in by["pod-a"].values
    assert "pod-a dcgm" in src.last_errors


def test_failing_target_listing_keeps_the_last_list(page_server, make_source):
    page_server.set("/a", VLLM_NEW)
    calls = {"n": 0}

    def targets():
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("kube-apiserver: 503")
        return [("pod-a", page_server.url("/a"))]

    src = make_source(targets)
    assert src.observe(0.0).replicas[0].ok
    obs = src.observe(15.0)
    assert [s.replica for s in obs.replicas] == ["pod-a"] and obs.replicas[0].ok
    assert "503" in src.last_errors["targets"]
    assert src.errors_total == 1


def test_500_targets_are_fetched_concurrently(page_server, make_source):
    # Every page answers after 0.2 s: fetched one after another they would take 100 s.
    n = 500
    for i in range(n):
        page_server.set(f"/p{i}", VLLM_NEW, delay_s=0.2)
    src = make_source([(f"pod-{i}", page_server.url(f"/p{i}")) for i in range(n)], timeout_s=20.0)
    t0 = time.monotonic()
    obs = src.observe(0.0)
    elapsed = time.monotonic() - t0
    assert sum(s.ok for s in obs.replicas) == n, src.last_errors
    assert elapsed < 15.0, f"{n} targets took {elapsed:.1f} s"
    print(f"{n} targets scraped and parsed in {elapsed:.2f} s")


def test_signals_from_scraped_window(page_server, make_source):
    """Two ticks 15 s apart from two replicas: queue from gauges, TTFT P95 from bucket increases.

    Between the ticks pod-a adds 10 TTFTs (4 <= 0.1 s, 4 in (0.1, 0.5], 2 in (0.5, 1.0]) and
    pod-b 10 more in (0.1, 0.5]: 20 in all, P95 has rank 19, the 1st of 2 in (0.5, 1.0]:
    0.5 + 0.5 x 1/2 = 0.75 s. Waiting 3 + 5 = 8.
    """
    srv = page_server
    srv.set("/a", vllm_page(waiting=1, running=2, kv=0.2, ttft_cumulative=(0, 0, 0, 0), ttft_sum=0))
    srv.set("/b", vllm_page(waiting=0, running=1, kv=0.4, ttft_cumulative=(5, 5, 5, 5), ttft_sum=0.2))
    src = make_source([("pod-a", srv.url("/a")), ("pod-b", srv.url("/b"))])
    first = src.observe(0.0)
    srv.set("/a", vllm_page(waiting=3, running=4, kv=0.6, ttft_cumulative=(4, 8, 10, 10), ttft_sum=3.0))
    srv.set("/b", vllm_page(waiting=5, running=4, kv=0.8, ttft_cumulative=(5, 15, 15, 15), ttft_sum=3.0))
    second = src.observe(15.0)
    sig = compute_signals([first, second])
    assert sig.get("queue_waiting") == pytest.approx(8.0)
    assert sig.get("running") == pytest.approx(8.0)
    assert sig.get("kv_usage_mean") == pytest.approx(0.7)
    assert sig.get("ttft_p95_s") == pytest.approx(0.75)
    assert sig.unknown_replicas == 0
