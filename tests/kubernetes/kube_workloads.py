"""Workloads and waits shared by the Kubernetes tests."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from kubernetes import client

T = TypeVar("T")


def _pod_template(
    app: str, timings: Mapping[str, float], max_bound: int | None = None
) -> client.V1PodTemplateSpec:
    # Read by the fake kubelet: how long each pod stays in each phase.
    annotations = {f"fake-kubelet/{k}-s": str(v) for k, v in timings.items()}
    if max_bound is not None:
        # ... and how many of the namespace's pods it binds at once (a full node pool).
        annotations["fake-kubelet/max-bound"] = str(max_bound)
    return client.V1PodTemplateSpec(
        metadata=client.V1ObjectMeta(labels={"app": app}, annotations=annotations),
        spec=client.V1PodSpec(
            containers=[client.V1Container(name="server", image="registry.invalid/vllm:test")],
            termination_grace_period_seconds=30,
        ),
    )


def create_deployment(
    api: client.ApiClient,
    namespace: str,
    name: str,
    replicas: int = 1,
    *,
    max_bound: int | None = None,
    **timings: float,
) -> client.V1Deployment:
    """A Deployment whose pods carry ``app=<name>``; ``timings`` e.g. ``pending=1.0, warmup=2.0``;
    ``max_bound``: the fake kubelet binds at most so many of them, the rest wait Unschedulable."""
    body = client.V1Deployment(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1DeploymentSpec(
            replicas=replicas,
            selector=client.V1LabelSelector(match_labels={"app": name}),
            template=_pod_template(name, timings, max_bound),
        ),
    )
    return client.AppsV1Api(api).create_namespaced_deployment(namespace, body)


def create_statefulset(api: client.ApiClient, namespace: str, name: str, replicas: int = 1) -> None:
    body = client.V1StatefulSet(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1StatefulSetSpec(
            replicas=replicas,
            service_name=name,
            selector=client.V1LabelSelector(match_labels={"app": name}),
            template=_pod_template(name, {}),
        ),
    )
    client.AppsV1Api(api).create_namespaced_stateful_set(namespace, body)


def ready_replicas(api: client.ApiClient, namespace: str, name: str) -> int:
    status = client.AppsV1Api(api).read_namespaced_deployment_status(name, namespace).status
    return (status.ready_replicas or 0) if status is not None else 0


def pod_names(api: client.ApiClient, namespace: str, app: str) -> list[str]:
    pods = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=f"app={app}").items or []
    return sorted(p.metadata.name for p in pods)
