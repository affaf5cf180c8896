"""vLLM's sleep mode on emulated replicas over real HTTP, and the standby pool a controller keeps with it.

emulate runs with ``sleep_mode`` (``--enable-sleep-mode``); cold starts take 30 s here, so a replica
serving seconds after a scale-up can only have been woken from the pool, in the catalogue's
sleeping tier (``perf.start_tiers(...).sleeping``: 1.6 s for Llama-3-8B on one H100).
"""

from __future__ import annotations

import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from llmscale.cluster.base import StandbyCapable
from llmscale.emulate import EmulateCluster, EmulateConfig, EmulatorThread
from llmscale.metrics.names import VllmMetric
from llmscale.perf import start_tiers
from llmscale.types import Phase
from support.emulate_proc import start_emulate, stop_emulate

TOKEN = "sleep-mode-admin-token-9012"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
WAKE_S = start_tiers("llama-3-8b", "h100-80gb", 1).sleeping.total_s
COMPLETION = {"prompt": "hello", "max_tokens": 4}


@pytest.fixture
def fleet():
    cfg = EmulateConfig(
        replicas=3,
        port=0,
        admin_api=True,
        admin_token=TOKEN,
        sleep_mode=True,
        pending_s=0.0,
        loading_s=20.0,
        warmup_s=10.0,
    )
    f = EmulatorThread(cfg)
    f.start()
    try:
        yield f
    finally:
        f.stop()


def _doc(base: str) -> dict:
    return httpx.get(base + "/admin/replicas", headers=AUTH, timeout=5).json()


def _url(base: str, doc: dict, name: str) -> str:
    port = next(r["port"] for r in doc["replicas"] if r["name"] == name)
    return f"http://127.0.0.1:{port}"


def _sleep_state(page: str) -> dict[str, float]:
    """vLLM's one-hot ``vllm:engine_sleep_state`` from a replica's page, by its sleep_state label."""
    out = {}
    for fam in text_string_to_metric_families(page):
        if fam.name == VllmMetric.ENGINE_SLEEP_STATE:
            out = {s.labels["sleep_state"]: s.value for s in fam.samples}
    return out


def test_the_catalogue_wake_tier_is_what_the_emulator_uses():
    assert 1.5 <= WAKE_S <= 1.7  # Llama-3-8B, H100: 16 GB back at 25 GB/s plus 1 s


def test_a_replica_sleeps_and_wakes_through_vllms_endpoints(fleet):
    base = fleet.base_url
    doc = _doc(base)
    assert doc["spec_replicas"] == 3 and doc["standby_replicas"] == 0
    name = doc["replicas"][0]["name"]
    url = _url(base, doc, name)
    assert httpx.get(url + "/is_sleeping", timeout=5).json() == {"is_sleeping": False}

    assert httpx.post(url + "/sleep?level=2", timeout=5).status_code == 400  # level 1 only
    assert httpx.post(url + "/sleep?level=1", timeout=10).status_code == 200
    assert httpx.get(url + "/is_sleeping", timeout=5).json() == {"is_sleeping": True}
    doc = _doc(base)
    assert doc["spec_replicas"] == 2 and doc["standby_replicas"] == 1
    assert {r["name"]: r["phase"] for r in doc["replicas"]}[name] == "sleeping"
    # asleep: no completions on its port, its page still answers, the front door routes around it
    assert httpx.post(url + "/v1/completions", json=COMPLETION, timeout=5).status_code == 503
    page = httpx.get(url + "/metrics", timeout=5).text
    assert _sleep_state(page) == {"awake": 0.0, "weights_offloaded": 1.0, "discard_all": 0.0}
    served = httpx.post(base + "/v1/completions", json=COMPLETION, timeout=30)
    assert served.status_code == 200 and served.headers["x-llmscale-replica"] != name

    t0 = time.monotonic()
    woke = httpx.post(url + "/wake_up", timeout=30)
    wall_s = time.monotonic() - t0
    assert woke.status_code == 200
    assert float(woke.headers["x-llmscale-wake-s"]) == pytest.approx(WAKE_S, abs=0.01)
    assert WAKE_S - 0.05 <= wall_s < WAKE_S + 2.0, wall_s
    assert httpx.get(url + "/is_sleeping", timeout=5).json() == {"is_sleeping": False}
    assert _sleep_state(httpx.get(url + "/metrics", timeout=5).text)["awake"] == 1.0
    assert httpx.post(url + "/v1/completions", json=COMPLETION, timeout=30).status_code == 200
    assert _doc(base)["spec_replicas"] == 3


def test_a_standby_capable_cluster_puts_k_to_sleep_and_wakes_them_in_seconds(fleet):
    base = fleet.base_url
    with EmulateCluster(base, token=TOKEN) as cluster:
        assert isinstance(cluster, StandbyCapable)
        cluster.set_standby(2, 0.0)
        doc = _doc(base)
        assert doc["standby_starting"] == 2 and doc["standby_replicas"] == 0  # cold: 30 s away
        # The scale-down fills the pool: two ready replicas go to sleep through their /sleep.
        cluster.scale_to(1, 1.0)
        assert cluster.standby_replicas == 2
        doc = _doc(base)
        assert doc["spec_replicas"] == 1 and doc["standby_starting"] == 0  # their places given up
        phases = sorted(v.phase for v in cluster.replicas_view())
        assert phases == [Phase.READY, Phase.SLEEPING, Phase.SLEEPING]
        asleep = [v.name for v in cluster.replicas_view() if v.phase == Phase.SLEEPING]

        # The scale-up wakes both, each in the sleeping tier: serving in ~1.6 s, not the 30 s cold start.
        t0 = time.monotonic()
        cluster.scale_to(3, 2.0)
        took_s = time.monotonic() - t0
        assert sorted(w.replica for w in cluster.wakes) == sorted(asleep)
        for w in cluster.wakes:
            assert w.reported_s == pytest.approx(WAKE_S, abs=0.01)
            assert WAKE_S - 0.05 <= w.wall_s < WAKE_S + 2.0, w
        assert took_s < WAKE_S + 5.0  # woken together, not one after the other
        doc = _doc(base)
        assert doc["spec_replicas"] == 3 and cluster.standby_replicas == 0
        assert [r["phase"] for r in doc["replicas"]] == ["ready"] * 3
        for name in asleep:  # served after the wake, on the woken replicas' own ports
            answer = httpx.post(_url(base, doc, name) + "/v1/completions", json=COMPLETION, timeout=30)
            assert answer.status_code == 200, answer.text


def test_set_standby_on_an_emulator_without_sleep_mode_says_how_to_start_it():
    cfg = EmulateConfig(replicas=1, port=0, admin_api=True, admin_token=TOKEN, pending_s=0.0)
    with EmulatorThread(cfg) as f, EmulateCluster(f.base_url, token=TOKEN) as cluster:
        from llmscale.errors import ActuationError

        with pytest.raises(ActuationError, match="--enable-sleep-mode"):
            cluster.set_standby(1, 0.0)
        ports = f.server.replica_ports()
        (port,) = ports.values()
        assert httpx.post(f"http://127.0.0.1:{port}/sleep", timeout=5).status_code == 404  # as vLLM


def test_admin_standby_refuses_what_it_cannot_do(fleet):
    base = fleet.base_url
    for body in ({"replicas": -1}, {"replicas": "2"}, {"replicas": True}, {}):
        answer = httpx.post(base + "/admin/standby", json=body, headers=AUTH, timeout=5)
        assert answer.status_code == 400, body
    too_many = httpx.post(base + "/admin/standby", json={"replicas": 17}, headers=AUTH, timeout=5)
    assert too_many.status_code == 400 and "--admin-max-scale-up" in too_many.text
    assert httpx.post(base + "/admin/standby", json={"replicas": 1}, timeout=5).status_code == 401


def test_the_cli_flags_turn_sleep_mode_on_with_the_given_wake_time():
    ep = start_emulate("--replicas", "1", "--pending-s", "0", "--enable-sleep-mode", "--wake-s", "0.5")
    try:
        (url,) = ep.replica_urls.values()
        assert httpx.post(url + "/sleep", timeout=10).status_code == 200  # level 1 by default
        assert httpx.get(url + "/is_sleeping", timeout=5).json() == {"is_sleeping": True}
        woke = httpx.post(url + "/wake_up", timeout=10)
        assert woke.status_code == 200
        assert float(woke.headers["x-llmscale-wake-s"]) == pytest.approx(0.5, abs=0.01)
    finally:
        stop_emulate(ep.proc)


def test_the_live_loop_sees_a_sleeping_replica_as_neither_capacity_nor_unknown(fleet):
    """What run's source reads of a fleet with one replica asleep: the cluster's view says sleeping,
    the fleet counts 2 ready of spec 2, the signals 2 serving and none unknown (its page is not
    missed: a sleeper is not expected to serve)."""
    from llmscale.controller.live import ClusterAlignedSource
    from llmscale.metrics.scrape import PodScrapeSource
    from llmscale.signals.fleet import compute_signals
    from llmscale.wiring import EmulateTargets

    base = fleet.base_url
    doc = _doc(base)
    name = doc["replicas"][-1]["name"]
    assert httpx.post(_url(base, doc, name) + "/sleep", timeout=10).status_code == 200
    with (
        EmulateCluster(base, token=TOKEN) as cluster,
        PodScrapeSource(EmulateTargets(base, "/metrics", 5.0, token=TOKEN)) as scrape,
    ):
        obs = ClusterAlignedSource(scrape, cluster).observe(1.0)
    assert obs.fleet.spec_replicas == 2 and obs.fleet.ready == 2 and obs.fleet.active == 2
    assert {s.replica: s.phase for s in obs.replicas}[name] == Phase.SLEEPING
    signals = compute_signals([obs])
    assert signals.get("serving_replicas") == 2.0 and signals.get("unknown_replicas") == 0.0
