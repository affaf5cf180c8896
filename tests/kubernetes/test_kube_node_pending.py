"""A pod waiting for a GPU node, on the real kube-apiserver: on its way, and not asked for again.

The fake kubelet plays a full node pool (``fake-kubelet/max-bound: 1``): of a Deployment's two
pods it binds one, which gets ready, and leaves the other unbound with PodScheduled=False,
reason Unschedulable, as kube-scheduler does when no node fits (the condition the cluster
autoscaler provisions for). ``llmscale run`` then scales the Deployment with ``three-layer``
reading a real vLLM page for the ready pod: 6 requests waiting on one serving replica, over the
policy's 5 per replica, asks for 3 = ceil(2 x 6 / 5) replicas; the pod waiting for a node makes
2 + 1 = 3 on the way, so the spec must stay 2. Counted nowhere (the state before NODE_PENDING
was in ``starting``), the same tick scales to 3 and a third pod joins the queue for a node.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from kube_workloads import create_deployment
from kubernetes import client
from test_kube_run_cli import _start, _stop

from llmscale.cluster.kubernetes import KubernetesCluster, KubeScaleTarget
from llmscale.types import FleetView, Phase
from support.page_server import PageServer, page_server  # noqa: F401  (fixture)
from support.wait import wait_for

#: one serving vLLM replica with 6 requests waiting and 4 running
VLLM_PAGE = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="llama-8b"} 4.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="llama-8b"} 6.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="llama-8b"} 0.4
"""


def _phases(core: client.CoreV1Api, namespace: str) -> dict[str, tuple[bool, str | None]]:
    """pod -> (bound to a node, reason of a PodScheduled=False condition)."""
    out = {}
    for p in core.list_namespaced_pod(namespace, label_selector="app=vllm").items or []:
        reason = next(
            (c.reason for c in p.status.conditions or () if c.type == "PodScheduled" and c.status == "False"),
            None,
        )
        out[p.metadata.name] = (bool(p.spec.node_name), reason)
    return out


def _one_ready_one_waiting(admin: client.ApiClient, namespace: str) -> tuple[str, str]:
    core = client.CoreV1Api(admin)
    cluster = KubernetesCluster(
        KubeScaleTarget(namespace=namespace, kind="Deployment", name="vllm", selector="app=vllm"), admin
    )
    views = wait_for(
        "one pod ready, one waiting for a node",
        lambda: (
            (v := cluster.replicas_view())
            and sorted(r.phase for r in v) == [Phase.READY, Phase.NODE_PENDING]
            and v
        ),
        timeout_s=60.0,
    )
    phases = _phases(core, namespace)
    ready = next(r for r in views if r.phase == Phase.READY)
    waiting = next(r for r in views if r.phase == Phase.NODE_PENDING)
    assert phases[waiting.name] == (False, "Unschedulable"), phases
    assert phases[ready.name][0], phases
    # Its own time: since the scheduler gave up on it, which is after the pod was created.
    assert waiting.since_s >= waiting.created_s - 1.0  # the API's timestamps are whole seconds
    view = FleetView.from_replicas(cluster.spec_replicas, views)
    assert (view.node_pending, view.pending, view.ready, view.starting) == (1, 0, 1, 1)
    return ready.name, waiting.name


def _config(tmp_path: Path, kubeconfig: Path, namespace: str, ready_pod: str, page_url: str) -> Path:
    doc = {
        "target": {"namespace": namespace, "name": "vllm", "selector": {"app": "vllm"}},
        "metrics": {
            "source": "scrape",
            "scrape": {"static_targets": [{"name": ready_pod, "url": page_url}], "timeout_s": 2},
        },
        "policy": {"name": "three-layer"},
        "guards": {"min_replicas": 1, "max_replicas": 5},
        "tick_s": 1,
        "mode": "apply",
        "actuator": {"kind": "kubernetes", "kubernetes": {"kubeconfig": str(kubeconfig)}},
        "server": {"listen": "127.0.0.1:0"},
        "decision_log": {"path": str(tmp_path / "decisions.jsonl")},
        "state": {"store": "file", "path": str(tmp_path / "state.json")},
    }
    path = tmp_path / "llmscale.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _records(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_a_pod_waiting_for_a_node_is_on_its_way_and_not_asked_for_again(
    kube_cluster,
    kube_namespace,
    tmp_path,
    page_server: PageServer,  # noqa: F811
):
    admin = kube_cluster.admin_client()
    create_deployment(admin, kube_namespace, "vllm", replicas=2, max_bound=1)
    ready_pod, waiting_pod = _one_ready_one_waiting(admin, kube_namespace)
    page_server.set("/metrics", VLLM_PAGE)
    config = _config(
        tmp_path, kube_cluster.workdir / "kubeconfig", kube_namespace, ready_pod, page_server.url("/metrics")
    )
    log = tmp_path / "decisions.jsonl"

    def read_queue() -> list[dict]:
        return [r for r in _records(log) if (r.get("inputs") or {}).get("queue_per_replica") == 6.0]

    apps = client.AppsV1Api(admin)
    proc = _start(config)
    try:
        # Three decisions that saw the queue over the threshold and the pod waiting for a node.
        wait_for(
            "three ticks that read the queue with a pod waiting for a node",
            lambda: len(read_queue()) >= 3 or proc.poll() is not None,
            timeout_s=120.0,
        )
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        spec = apps.read_namespaced_deployment_scale("vllm", kube_namespace).spec.replicas
    finally:
        _, err = _stop(proc)
    assert proc.returncode == 0, err[-3000:]
    seen = read_queue()
    for r in seen:
        assert r["replicas"]["node_pending"] == 1, r
        assert r["replicas"]["pending"] == 0, r
        assert r["inputs"]["starting"] == 1.0, r
        assert r["inputs"]["request_layer_replicas"] == 3.0, r  # what the queue alone asks for
        assert r["rule"] == "instances-warming", r
        assert r["desired"] == 2, r
    assert spec == 2
    assert not [r for r in _records(log) if r.get("applied")], "a scale was written"
    # The waiting pod is still the one waiting, and no third pod was created for the queue.
    assert _phases(client.CoreV1Api(admin), kube_namespace) == {
        ready_pod: (True, None),
        waiting_pod: (False, "Unschedulable"),
    }
