"""A scale-down on a real kube-apiserver removes the least-loaded pod and kills no request.

Each pod of the Deployment is played by an emulated vLLM replica (its own ``EmulatorThread``)
under a bounded load: 1, 5 and 3 long streamed requests. llmscale reads each pod's load from
that replica's /metrics, annotates the pods' ``pod-deletion-cost`` and, since this v1.20 API
server ignores the annotation, deletes the least-loaded pod itself before lowering the count.
The fake kubelet then runs the shipped preStop hook (deploy/vllm/drain-prestop.py) against the
removed pod's replica and stops the replica ("SIGTERM") only when the hook returns, recording
what was still in flight.

Left to itself, v1.20's ReplicaSet controller removes the most recently ready pod: the test
makes that the pod with 3 requests, so it fails if the choice is not llmscale's.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from kube_workloads import create_deployment, create_statefulset, pod_names, ready_replicas
from kubernetes import client

from llmscale.cluster.keda import KedaScaler
from llmscale.cluster.kubernetes import KubernetesCluster, KubeScaleTarget
from llmscale.cluster.scale_down import DELETION_COST_ANNOTATION, PodLoad, ScrapePodLoad, deletion_cost
from llmscale.emulate import EmulateConfig, EmulatorThread
from support.wait import wait_for

PRESTOP = Path(__file__).resolve().parents[2] / "deploy" / "vllm" / "drain-prestop.py"
MODEL = "llama-3-8b"
#: ~7.5 s of decoding at ~12.5 ms a token: the victim's request is mid-stream when its pod is
#: deleted, and the drain has to wait for it
LONG_TOKENS = 600
#: requests in flight per pod, oldest pod first; the newest pod (the ReplicaSet's own pick) has 3
LOADS = (1, 5, 3)
#: the pods' mean output length before any request finished (ScrapePodLoad's default)
DEFAULT_MEAN_TOKENS = 256.0


def stream(url: str, out: dict[str, object]) -> None:
    body = {"model": MODEL, "prompt": "tok tok", "max_tokens": LONG_TOKENS, "stream": True}
    tokens, tail, errors = 0, "", []
    with httpx.Client(timeout=120.0) as http, http.stream("POST", url + "/v1/completions", json=body) as r:
        out["status"] = r.status_code
        for line in r.iter_lines():
            if line.startswith('data: {"id"'):
                tokens += 1
            elif '"error"' in line:
                errors.append(line)
            if line.startswith("data:"):
                tail = line
    out.update(tokens=tokens, tail=tail, errors=errors)


class PreStop:
    """The kubelet's part for a terminating pod: run the shipped preStop hook against the pod's
    replica, bounded by the pod's grace period, then stop the replica, noting what it still held."""

    def __init__(self, fleets: dict[str, EmulatorThread]) -> None:
        self.fleets = fleets
        self.done: dict[str, threading.Event] = {}
        self.in_flight_at_stop: dict[str, int] = {}
        self.hook_s: dict[str, float] = {}
        self.logs: dict[str, str] = {}

    def __call__(self, pod: client.V1Pod) -> bool | None:
        name = pod.metadata.name
        if name not in self.fleets:
            return None  # e.g. a replacement pod: the fake kubelet's default
        if name not in self.done:
            self.done[name] = threading.Event()
            grace_s = float(pod.spec.termination_grace_period_seconds or 30)
            threading.Thread(target=self._terminate, args=(name, grace_s), daemon=True).start()
        return self.done[name].is_set()

    def _terminate(self, name: str, grace_s: float) -> None:
        fleet = self.fleets[name]
        port = fleet.call(lambda s: next(iter(s.replica_ports().values())))
        started = time.monotonic()
        cmd = [sys.executable, str(PRESTOP), f"--url=http://127.0.0.1:{port}/metrics"]
        cmd += ["--settle-s=0.5", "--poll-s=0.2", f"--max-wait-s={grace_s - 2}"]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=grace_s)
            self.logs[name] = proc.stderr
        except subprocess.TimeoutExpired:
            self.logs[name] = "killed at the grace period"
        self.hook_s[name] = time.monotonic() - started
        # SIGTERM: whatever is still in flight now is killed (emulate aborts it on stop).
        self.in_flight_at_stop[name] = fleet.call(lambda s: s.emu.in_flight)
        fleet.stop()
        self.done[name].set()


@pytest.fixture
def kubelet_hook(kube_cluster) -> Iterator[None]:
    yield
    kube_cluster.kubelet.on_terminate = None


def target(ns: str, name: str, kind: str = "Deployment") -> KubeScaleTarget:
    return KubeScaleTarget(namespace=ns, kind=kind, name=name, selector=f"app={name}")  # type: ignore[arg-type]


def pods_by_age(admin: client.ApiClient, ns: str, app: str) -> list[client.V1Pod]:
    pods = client.CoreV1Api(admin).list_namespaced_pod(ns, label_selector=f"app={app}").items
    return sorted(pods, key=lambda p: (p.metadata.creation_timestamp, p.metadata.name))


def costs(admin: client.ApiClient, ns: str, app: str) -> dict[str, str | None]:
    return {
        p.metadata.name: (p.metadata.annotations or {}).get(DELETION_COST_ANNOTATION)
        for p in pods_by_age(admin, ns, app)
    }


def test_scale_down_removes_the_least_loaded_pod_after_it_drained(
    kube_cluster, kube_namespace, kubelet_hook, caplog
):
    admin = kube_cluster.admin_client()
    ns = kube_namespace
    create_deployment(admin, ns, "vllm", replicas=2)
    wait_for("2 ready", lambda: ready_replicas(admin, ns, "vllm") == 2, timeout_s=60.0)
    # Ready times have one-second resolution: the third pod must be ready a second later than
    # the others, so the ReplicaSet's own choice (the most recently ready) is that pod.
    time.sleep(1.2)
    client.AppsV1Api(admin).patch_namespaced_deployment_scale("vllm", ns, {"spec": {"replicas": 3}})
    wait_for("3 ready", lambda: ready_replicas(admin, ns, "vllm") == 3, timeout_s=60.0)
    names = [p.metadata.name for p in pods_by_age(admin, ns, "vllm")]
    assert len(names) == 3
    least, busiest, newest = names  # loads 1, 5, 3

    fleets: dict[str, EmulatorThread] = {}
    results: dict[str, list[dict[str, object]]] = {}
    threads: list[threading.Thread] = []
    try:
        for name in names:
            cfg = EmulateConfig(replicas=1, port=0, pending_s=0.0, loading_s=0.0, warmup_s=0.0)
            fleets[name] = EmulatorThread(cfg).start()
        ports = {n: f.call(lambda s: next(iter(s.replica_ports().values()))) for n, f in fleets.items()}
        prestop = PreStop(dict(fleets))
        kube_cluster.kubelet.on_terminate = prestop

        for name, load in zip(names, LOADS, strict=True):
            results[name] = [{} for _ in range(load)]
            for out in results[name]:
                url = f"http://127.0.0.1:{ports[name]}"
                th = threading.Thread(target=stream, args=(url, out), daemon=True)
                threads.append(th)
                th.start()
        wait_for(
            "every request in flight",
            lambda: [fleets[n].call(lambda s: s.emu.in_flight) for n in names] == list(LOADS),
            timeout_s=30.0,
        )

        reader = ScrapePodLoad(url_of=lambda name, _ip: f"http://127.0.0.1:{ports[name]}/metrics")
        cluster = KubernetesCluster(target(ns, "vllm"), admin, pod_load=reader)
        with caplog.at_level(logging.WARNING, logger="llmscale.cluster.kubernetes"):
            assert cluster.check_scale_down() == "explicit"
        assert any("v1.20" in r.getMessage() and "Deployment" in r.getMessage() for r in caplog.records)

        cluster.scale_to(2, now_s=0.0)

        # Annotations from each pod's real metrics: k requests, none finished yet -> 256 k + k.
        expected = {
            n: str(deletion_cost(PodLoad(load, 0, load * DEFAULT_MEAN_TOKENS)))
            for n, load in zip(names, LOADS, strict=True)
        }
        # (Only the three: the ReplicaSet may already have made a replacement for the deleted pod.)
        annotated = costs(admin, ns, "vllm")
        assert {n: annotated[n] for n in names} == expected
        assert expected == {least: "257", busiest: "1285", newest: "771"}
        # The victim is the least-loaded pod, terminating; its request is still streaming.
        terminating = {
            p.metadata.name for p in pods_by_age(admin, ns, "vllm") if p.metadata.deletion_timestamp
        }
        assert least in terminating and busiest not in terminating and newest not in terminating
        assert results[least][0].get("tokens") is None  # not finished when its pod was deleted

        wait_for("the drained pod gone", lambda: least not in pod_names(admin, ns, "vllm"), timeout_s=60.0)
        # A replacement the ReplicaSet may have made between the delete and the lower count
        # goes too: what stays is exactly the two busier pods.
        wait_for(
            "the two busier pods left",
            lambda: (
                pod_names(admin, ns, "vllm") == sorted([busiest, newest])
                and ready_replicas(admin, ns, "vllm") == 2
            ),
            timeout_s=60.0,
        )
        assert prestop.in_flight_at_stop == {least: 0}, prestop.logs
        assert "idle after" in prestop.logs[least]
        # The hook waited for the stream: it did not return at once.
        assert prestop.hook_s[least] > 1.0, prestop.hook_s

        for th in threads:
            th.join(60.0)
        for name in names:
            for out in results[name]:
                assert out["status"] == 200 and out["errors"] == [], (name, out)
                assert out["tokens"] == LONG_TOKENS and out["tail"] == "data: [DONE]", (name, out)
    finally:
        kube_cluster.kubelet.on_terminate = None
        for f in fleets.values():
            f.stop()


def test_keda_annotates_before_it_publishes_a_lower_count(kube_cluster, kube_namespace, caplog):
    admin = kube_cluster.admin_client()
    ns = kube_namespace
    create_deployment(admin, ns, "vllm", replicas=3)
    wait_for("3 ready", lambda: ready_replicas(admin, ns, "vllm") == 3, timeout_s=60.0)
    names = [p.metadata.name for p in pods_by_age(admin, ns, "vllm")]
    loads = dict(zip(names, (4, 0, 2), strict=True))
    cluster = KubernetesCluster(
        target(ns, "vllm"),
        admin,
        pod_load=lambda pods: {n: PodLoad(loads[n], 0, loads[n] * 100.0) for n, _ in pods},
    )
    with caplog.at_level(logging.WARNING, logger="llmscale.cluster.kubernetes"):
        assert cluster.check_scale_down(via_keda=True) == "annotate-only"
    assert any("KEDA" in r.getMessage() for r in caplog.records)

    seen: list[tuple[int | None, dict[str, str | None]]] = []
    scaler: KedaScaler

    def before(current: int, n: int) -> None:
        cluster.prepare_scale_down(current, n, via_keda=True)
        seen.append((scaler.desired_replicas, costs(admin, ns, "vllm")))

    scaler = KedaScaler("vllm", ns, initial_replicas=3, before_scale_down=before)
    scaler.scale_to(2, now_s=1.0)

    ((published_then, annotated),) = seen
    assert published_then is None  # the hook ran before KEDA could read the lower count
    assert annotated == {names[0]: "404", names[1]: "0", names[2]: "202"}
    assert scaler.desired_replicas == 2
    # Through KEDA llmscale only annotates: no pod was deleted.
    assert not any(p.metadata.deletion_timestamp for p in pods_by_age(admin, ns, "vllm"))
    scaler.scale_to(3, now_s=2.0)  # a scale-up runs no hook
    assert len(seen) == 1


def test_statefulset_scale_down_is_left_to_kubernetes_with_a_warning(kube_cluster, kube_namespace, caplog):
    admin = kube_cluster.admin_client()
    ns = kube_namespace
    create_statefulset(admin, ns, "tgi", replicas=2)
    wait_for("2 pods", lambda: len(pod_names(admin, ns, "tgi")) == 2, timeout_s=60.0)
    calls: list[object] = []
    cluster = KubernetesCluster(
        target(ns, "tgi", "StatefulSet"), admin, pod_load=lambda pods: calls.append(pods) or {}
    )
    with caplog.at_level(logging.WARNING, logger="llmscale.cluster.kubernetes"):
        assert cluster.check_scale_down() == "off"
    (warning,) = [r.getMessage() for r in caplog.records]
    assert f"StatefulSet {ns}/tgi" in warning and "highest ordinal" in warning
    cluster.scale_to(1, now_s=0.0)
    assert calls == []  # no load read, nothing annotated
    wait_for("tgi-1 gone", lambda: pod_names(admin, ns, "tgi") == ["tgi-0"], timeout_s=60.0)
    assert costs(admin, ns, "tgi") == {"tgi-0": None}
