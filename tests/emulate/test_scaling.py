"""Scaling an emulated fleet through the Cluster protocol (in-process fleet, real HTTP, short lifecycles)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from llmscale.emulate import EmulateCluster, EmulateConfig, EmulatorThread
from llmscale.errors import ActuationError
from llmscale.types import Phase
from support.wait import wait_for

MODEL = "llama-3-8b"
TOKEN = "scaling-test-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
PHASE_S = 0.4  # each of Pending, Loading, Warmup: long enough to be seen by a 20 ms poll
#: ~3.7 s of decoding at ~12.4 ms a token: still streaming when the test shrinks the fleet, even
#: after a slow client start on a busy machine
LONG_TOKENS = 300


@pytest.fixture
def fleet() -> Iterator[EmulatorThread]:
    cfg = EmulateConfig(
        replicas=2,
        port=0,
        pending_s=PHASE_S,
        loading_s=PHASE_S,
        warmup_s=PHASE_S,
        grace_s=0.3,
        admin_api=True,
        admin_token=TOKEN,
    )
    with EmulatorThread(cfg) as t:
        yield t


def test_scale_up_walks_the_lifecycle_and_the_new_replica_gets_a_port(fleet: EmulatorThread) -> None:
    with EmulateCluster(fleet.base_url, token=TOKEN) as cluster, httpx.Client(timeout=10.0) as http:
        assert cluster.spec_replicas == 2
        cluster.scale_to(3, now_s=0.0)
        assert cluster.spec_replicas == 3
        new = next(r for r in cluster.document()["replicas"] if r["name"] == "replica-3")
        assert new["phase"] == "pending" and new["port"] is None  # no container, nothing to scrape
        seen: list[str] = []
        metrics_before_ready = None
        deadline = time.monotonic() + 15.0
        while time.monotonic() < deadline:
            r = next(r for r in cluster.document()["replicas"] if r["name"] == "replica-3")
            if not seen or seen[-1] != r["phase"]:
                seen.append(r["phase"])
            if r["phase"] in ("loading", "warmup") and metrics_before_ready is None:
                url = f"http://127.0.0.1:{r['port']}"
                metrics_before_ready = http.get(url + "/metrics").status_code
                refused = http.post(url + "/v1/completions", json={"model": MODEL, "prompt": "tok"})
                assert refused.status_code == 503 and "not ready" in refused.json()["error"]["message"]
            if r["phase"] == "ready":
                break
            time.sleep(0.02)
        assert seen[0] == "pending" and seen[-1] == "ready"
        assert seen == [p for p in ("pending", "loading", "warmup", "ready") if p in seen]  # in order
        assert len(seen) >= 3  # Loading and/or Warmup was observed on the way
        assert metrics_before_ready == 200  # /metrics answers once the container exists
        views = {v.name: v for v in cluster.replicas_view()}
        assert views["replica-3"].phase == Phase.READY
        assert views["replica-3"].since_s - views["replica-3"].created_s == pytest.approx(
            3 * PHASE_S, abs=1e-6
        )
        port = next(r["port"] for r in cluster.document()["replicas"] if r["name"] == "replica-3")
        url = f"http://127.0.0.1:{port}"
        ok = http.post(url + "/v1/completions", json={"model": MODEL, "prompt": "tok", "max_tokens": 2})
        assert ok.status_code == 200 and ok.headers["x-llmscale-replica"] == "replica-3"
        assert "vllm:num_requests_running" in http.get(url + "/metrics").text
        targets = http.get(fleet.base_url + "/admin/targets", headers=AUTH).json()
        assert {t["labels"]["pod"] for t in targets} == {"replica-1", "replica-2", "replica-3"}


def _stream_tokens(url: str, max_tokens: int, out: dict[str, object]) -> None:
    body = {"model": MODEL, "prompt": "tok tok", "max_tokens": max_tokens, "stream": True}
    tokens, tail = 0, ""
    with (
        httpx.Client(timeout=30.0, verify=False) as http,
        http.stream("POST", url + "/v1/completions", json=body) as resp,
    ):
        for line in resp.iter_lines():
            if line.startswith('data: {"id"'):
                tokens += 1
            if line.startswith("data:"):
                tail = line
    out["tokens"], out["tail"] = tokens, tail


def _busy_replica_drain(fleet: EmulatorThread, drain_until_idle: bool) -> tuple[dict[str, object], str, int]:
    """Stream a long request on each replica, shrink to 1; return the drained one's stream and port."""
    doc = httpx.get(fleet.base_url + "/admin/replicas", timeout=10.0, headers=AUTH).json()
    ports = {r["name"]: r["port"] for r in doc["replicas"]}
    results = {name: {} for name in ports}
    threads = [
        threading.Thread(target=_stream_tokens, args=(f"http://127.0.0.1:{p}", LONG_TOKENS, results[n]))
        for n, p in ports.items()
    ]
    # Clients are made before the streams start: on a busy machine making one can take seconds.
    with EmulateCluster(fleet.base_url, token=TOKEN) as cluster, httpx.Client(timeout=10.0) as http:
        for th in threads:
            th.start()
        try:
            wait_for(
                "both requests in flight", lambda: fleet.call(lambda s: s.emu.in_flight) == 2, every_s=0.02
            )
            cluster.scale_to(1, now_s=0.0, drain_until_idle=drain_until_idle)
            phases = {r["name"]: r["phase"] for r in cluster.document()["replicas"]}
            draining = [n for n, ph in phases.items() if ph == "draining"]
            assert len(draining) == 1, phases
            drained = draining[0]
            refused = http.post(
                f"http://127.0.0.1:{ports[drained]}/v1/completions", json={"model": MODEL, "prompt": "tok"}
            )
            assert refused.status_code == 503
        finally:
            for th in threads:
                th.join(30.0)
    return results[drained], drained, ports[drained]


def test_scale_down_with_drain_until_idle_finishes_in_flight_work(fleet: EmulatorThread) -> None:
    result, drained, port = _busy_replica_drain(fleet, drain_until_idle=True)
    assert result["tokens"] == LONG_TOKENS and result["tail"] == "data: [DONE]"  # not killed
    with EmulateCluster(fleet.base_url, token=TOKEN) as cluster:
        wait_for(
            "the drained replica gone",
            lambda: drained not in {v.name for v in cluster.replicas_view()},
            every_s=0.02,
        )
    wait_for(
        "its port refused", lambda: _refused(port), every_s=0.02
    )  # its listener is closed once it is gone


def test_scale_down_past_the_grace_period_kills_the_stream(fleet: EmulatorThread) -> None:
    result, _, _ = _busy_replica_drain(fleet, drain_until_idle=False)
    assert isinstance(result["tokens"], int) and result["tokens"] < LONG_TOKENS  # grace 0.3 s << ~3.7 s
    assert result["tail"] == "data: [DONE]"  # the stream ends with an error event, then [DONE]


def _refused(port: int) -> bool:
    try:
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=2.0)
    except httpx.ConnectError:
        return True
    return False


def test_cluster_errors_are_actuation_errors(fleet: EmulatorThread) -> None:
    with EmulateCluster(fleet.base_url, token=TOKEN) as cluster:
        with pytest.raises(ActuationError, match="400"):
            cluster.scale_to(10_000, now_s=0.0)
        with pytest.raises(ActuationError):
            cluster.scale_to(-1, now_s=0.0)
    with (
        EmulateCluster(fleet.base_url) as anonymous,
        pytest.raises(ActuationError, match=r"401.*no token sent"),
    ):
        anonymous.scale_to(3, now_s=0.0)
    with (
        EmulateCluster(fleet.base_url, token="not-the-token-0123456789") as wrong,
        pytest.raises(ActuationError, match=r"401.*not the one"),
    ):
        wrong.replicas_view()
    with EmulateCluster("http://127.0.0.1:9", timeout_s=2.0) as dead, pytest.raises(ActuationError):
        dead.replicas_view()


def test_replicas_take_the_ports_after_the_front_door() -> None:
    """Without --port 0, replica k listens on the next free port above the front door (P+1, P+2)."""
    for base in range(39100, 39900, 50):  # a free run of three ports; skip runs in use
        try:
            with EmulatorThread(EmulateConfig(replicas=2, port=base)) as t:
                ports = sorted(t.call(lambda s: s.replica_ports()).values())
                if t.server.front_port == base and ports == [base + 1, base + 2]:
                    return
        except Exception:
            continue
    pytest.fail("no run of free ports P..P+2 found, or replicas did not take P+1, P+2")
