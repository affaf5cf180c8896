"""5xx and connection failures between the controller and a real API server: back off, then give up."""

from __future__ import annotations

import time

import pytest
from kube_workloads import create_deployment
from kubernetes import client

from llmscale.cluster.kubernetes import KubeActuationError, KubernetesCluster, KubeScaleTarget, RetryConfig
from support.fault_proxy import FaultProxy
from support.kube_cluster import ADMIN_TOKEN, free_port, make_client

FAST = RetryConfig(backoff_initial_s=0.05, backoff_max_s=0.4, budget_s=20.0, request_timeout_s=5.0)


def test_transient_503s_are_retried_until_the_write_lands(kube_cluster, kube_namespace):
    admin = kube_cluster.admin_client()
    create_deployment(admin, kube_namespace, "vllm", replicas=1)
    with FaultProxy(kube_cluster.host, kube_cluster.ca_file, fail_first=3) as proxy:
        api = kube_cluster.token_client(ADMIN_TOKEN, host=proxy.url)
        cluster = KubernetesCluster(
            KubeScaleTarget(kube_namespace, "Deployment", "vllm", "app=vllm"), api, retry=FAST
        )
        cluster.scale_to(4, now_s=0.0)
        assert proxy.failed == 3
        assert proxy.forwarded >= 2  # the read and the replace got through after the 503s
    assert client.AppsV1Api(admin).read_namespaced_deployment_scale("vllm", kube_namespace).spec.replicas == 4


def test_permanent_503_raises_after_bounded_time_and_recovers(kube_cluster, kube_namespace):
    admin = kube_cluster.admin_client()
    create_deployment(admin, kube_namespace, "vllm", replicas=1)
    retry = RetryConfig(backoff_initial_s=0.05, backoff_max_s=0.4, budget_s=2.0, request_timeout_s=5.0)
    with FaultProxy(kube_cluster.host, kube_cluster.ca_file, fail_always=True) as proxy:
        api = kube_cluster.token_client(ADMIN_TOKEN, host=proxy.url)
        cluster = KubernetesCluster(
            KubeScaleTarget(kube_namespace, "Deployment", "vllm", "app=vllm"), api, retry=retry
        )
        t0 = time.monotonic()
        with pytest.raises(KubeActuationError) as info:
            cluster.scale_to(3, now_s=0.0)
        elapsed_s = time.monotonic() - t0
        assert info.value.reason == "server_error"
        assert "injected by FaultProxy" in str(info.value)
        # Worked bound: the budget (2 s) plus one back-off step and request; far below the 5 s time-out.
        assert 2.0 <= elapsed_s < 4.0, elapsed_s
        assert proxy.failed >= 5  # 0.05 + 0.1 + 0.2 + 0.4 + 0.4 ... s of back-off: several attempts
        assert proxy.forwarded == 0

        # The same cluster object keeps working once the server is healthy again.
        proxy.fail_always = False
        cluster.scale_to(3, now_s=1.0)
    assert client.AppsV1Api(admin).read_namespaced_deployment_scale("vllm", kube_namespace).spec.replicas == 3


def test_unreachable_server_raises_server_error_after_budget():
    # A port nobody listens on: every attempt is a refused connection.
    api = make_client(f"http://127.0.0.1:{free_port()}", "no-token", None)
    retry = RetryConfig(backoff_initial_s=0.05, backoff_max_s=0.2, budget_s=1.0, request_timeout_s=2.0)
    cluster = KubernetesCluster(
        KubeScaleTarget("default", "Deployment", "vllm", "app=vllm"), api, retry=retry
    )
    t0 = time.monotonic()
    with pytest.raises(KubeActuationError, match="kept failing") as info:
        _ = cluster.spec_replicas
    assert info.value.reason == "server_error"
    assert time.monotonic() - t0 < 3.0
