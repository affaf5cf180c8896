"""KubernetesCluster against a real kube-apiserver + controller-manager (and the fake kubelet)."""

from __future__ import annotations

from typing import Any

import pytest
from kube_workloads import create_deployment, create_statefulset, pod_names, ready_replicas
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from llmscale.cluster.kubernetes import KubeActuationError, KubernetesCluster, KubeScaleTarget, RetryConfig
from llmscale.types import Phase
from support.wait import wait_for


def target(ns: str, name: str, kind: Any = "Deployment") -> KubeScaleTarget:
    return KubeScaleTarget(namespace=ns, kind=kind, name=name, selector=f"app={name}")


def test_scale_deployment_and_ready_replicas_follow(kube_cluster, kube_namespace):
    admin = kube_cluster.admin_client()
    create_deployment(admin, kube_namespace, "vllm", replicas=1)
    cluster = KubernetesCluster(target(kube_namespace, "vllm"), admin)

    assert cluster.spec_replicas == 1
    cluster.scale_to(3, now_s=0.0)
    assert cluster.spec_replicas == 3
    wait_for("3 ready replicas", lambda: ready_replicas(admin, kube_namespace, "vllm") == 3, timeout_s=60.0)
    view = wait_for(
        "3 READY pods in replicas_view",
        lambda: (
            (v := cluster.replicas_view()) and all(r.phase == Phase.READY for r in v) and len(v) == 3 and v
        ),
        timeout_s=60.0,
    )
    assert sorted(r.name for r in view) == pod_names(admin, kube_namespace, "vllm")

    targets = cluster.pod_targets()
    assert [name for name, _ in targets] == sorted(r.name for r in view)
    assert all(ip.startswith("10.244.") for _, ip in targets)

    cluster.scale_to(1, now_s=1.0)
    wait_for("one pod left", lambda: len(pod_names(admin, kube_namespace, "vllm")) == 1, timeout_s=60.0)
    wait_for("1 ready replica", lambda: ready_replicas(admin, kube_namespace, "vllm") == 1, timeout_s=60.0)
    assert cluster.spec_replicas == 1


def test_scale_to_same_value_writes_nothing(kube_cluster, kube_namespace):
    admin = kube_cluster.admin_client()
    create_deployment(admin, kube_namespace, "vllm", replicas=2)
    recording = RacingApps(client.AppsV1Api(admin), client.AppsV1Api(admin), races=0, value=0)
    KubernetesCluster(target(kube_namespace, "vllm"), admin, apps_api=recording).scale_to(2, now_s=0.0)
    assert recording.replace_statuses == []
    assert client.AppsV1Api(admin).read_namespaced_deployment("vllm", kube_namespace).metadata.generation == 1


def test_scale_statefulset(kube_cluster, kube_namespace):
    admin = kube_cluster.admin_client()
    create_statefulset(admin, kube_namespace, "tgi", replicas=1)
    cluster = KubernetesCluster(target(kube_namespace, "tgi", "StatefulSet"), admin)
    cluster.scale_to(2, now_s=0.0)
    assert cluster.spec_replicas == 2

    def ready() -> bool:
        st = client.AppsV1Api(admin).read_namespaced_stateful_set("tgi", kube_namespace).status
        return (st.ready_replicas or 0) == 2

    wait_for("StatefulSet 2 ready", ready, timeout_s=60.0)
    assert [r.name for r in cluster.replicas_view()] == ["tgi-0", "tgi-1"]


class RacingApps:
    """AppsV1Api whose scale reads are each followed by a competing write from another client.

    The competitor writes between our read and our replace, which is exactly the window
    optimistic concurrency protects; the server answers our stale replace with 409.
    """

    def __init__(
        self, real: client.AppsV1Api, competitor: client.AppsV1Api, *, races: int, value: int
    ) -> None:
        self._real = real
        self._competitor = competitor
        self.races_left = races
        self.value = value
        self.replace_statuses: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def read_namespaced_deployment_scale(self, name: str, namespace: str, **kw: Any) -> Any:
        scale = self._real.read_namespaced_deployment_scale(name, namespace, **kw)
        if self.races_left > 0:
            self.races_left -= 1
            self.value += 1  # a new value each time, so every race really changes the object
            self._competitor.patch_namespaced_deployment_scale(
                name,
                namespace,
                {"spec": {"replicas": self.value}},
                _content_type="application/merge-patch+json",
            )
        return scale

    def replace_namespaced_deployment_scale(self, name: str, namespace: str, body: Any, **kw: Any) -> Any:
        try:
            out = self._real.replace_namespaced_deployment_scale(name, namespace, body, **kw)
        except ApiException as e:
            self.replace_statuses.append(e.status)
            raise
        self.replace_statuses.append(200)
        return out


def test_concurrent_writer_causes_409_that_is_retried(kube_cluster, kube_namespace):
    admin = kube_cluster.admin_client()
    create_deployment(admin, kube_namespace, "vllm", replicas=1)
    # Let the deployment controller finish its own status writes first: they change the
    # resourceVersion too, and would add conflicts the test did not arrange.
    wait_for(
        "the Deployment to settle", lambda: ready_replicas(admin, kube_namespace, "vllm") == 1, timeout_s=60.0
    )
    racing = RacingApps(
        client.AppsV1Api(admin), client.AppsV1Api(kube_cluster.admin_client()), races=1, value=4
    )
    cluster = KubernetesCluster(target(kube_namespace, "vllm"), admin, apps_api=racing)

    cluster.scale_to(3, now_s=0.0)

    # A real conflict from the server on the write after the race, then our retry lands.
    # (A late status write by the controller could add another 409 in between; that is retried alike.)
    assert racing.replace_statuses[0] == 409 and racing.replace_statuses[-1] == 200
    assert set(racing.replace_statuses[:-1]) == {409}
    assert client.AppsV1Api(admin).read_namespaced_deployment_scale("vllm", kube_namespace).spec.replicas == 3


def test_writer_racing_every_time_gives_conflict_error(kube_cluster, kube_namespace):
    admin = kube_cluster.admin_client()
    create_deployment(admin, kube_namespace, "vllm", replicas=1)
    racing = RacingApps(
        client.AppsV1Api(admin), client.AppsV1Api(kube_cluster.admin_client()), races=99, value=4
    )
    cluster = KubernetesCluster(
        target(kube_namespace, "vllm"), admin, apps_api=racing, retry=RetryConfig(conflict_retries=2)
    )
    with pytest.raises(KubeActuationError, match="changed under us 3 times") as info:
        cluster.scale_to(2, now_s=0.0)
    assert info.value.reason == "conflict"
    assert racing.replace_statuses == [409, 409, 409]


def test_replicas_view_follows_the_pod_lifecycle(kube_cluster, kube_namespace):
    admin = kube_cluster.admin_client()
    create_deployment(
        admin, kube_namespace, "vllm", replicas=0, pending=1.5, loading=1.5, warmup=1.5, drain=1.5
    )
    cluster = KubernetesCluster(target(kube_namespace, "vllm"), admin)
    cluster.scale_to(1, now_s=0.0)

    seen: list[Phase] = []

    def record_until(phase: Phase) -> bool:
        view = cluster.replicas_view()
        if view and (not seen or seen[-1] != view[0].phase):
            seen.append(view[0].phase)
        return bool(view) and view[0].phase == phase

    wait_for("the pod to become READY", lambda: record_until(Phase.READY), every_s=0.05, timeout_s=60.0)
    assert seen == [Phase.PENDING, Phase.LOADING, Phase.WARMUP, Phase.READY]
    (ready,) = cluster.replicas_view()
    assert ready.since_s >= ready.created_s

    cluster.scale_to(0, now_s=10.0)
    wait_for(
        "the pod to drain",
        lambda: [r.phase for r in cluster.replicas_view()] == [Phase.DRAINING],
        timeout_s=60.0,
    )
    wait_for("the pod to be gone", lambda: cluster.replicas_view() == (), timeout_s=60.0)
