"""check_ownership: refuse a target that an HPA or a KEDA ScaledObject already scales."""

from __future__ import annotations

import pytest
from kube_workloads import create_deployment
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from llmscale.cluster.kubernetes import KubernetesCluster, KubeScaleTarget
from llmscale.errors import ConfigError
from support.wait import wait_for


def make_cluster(api: client.ApiClient, ns: str, name: str) -> KubernetesCluster:
    return KubernetesCluster(KubeScaleTarget(ns, "Deployment", name, f"app={name}"), api)


def hpa_body(name: str, target: str) -> dict:
    return {
        "apiVersion": "autoscaling/v2beta2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
            "minReplicas": 1,
            "maxReplicas": 4,
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}},
                }
            ],
        },
    }


def test_no_other_autoscaler_passes(kube_cluster, kube_namespace):
    admin = kube_cluster.admin_client()
    create_deployment(admin, kube_namespace, "vllm")
    create_deployment(admin, kube_namespace, "other")
    # An HPA on a different Deployment is not ours to worry about.
    client.CustomObjectsApi(admin).create_namespaced_custom_object(
        "autoscaling", "v2beta2", kube_namespace, "horizontalpodautoscalers", hpa_body("other-hpa", "other")
    )
    make_cluster(admin, kube_namespace, "vllm").check_ownership()


def test_hpa_on_target_is_refused_with_its_name(kube_cluster, kube_namespace):
    admin = kube_cluster.admin_client()
    create_deployment(admin, kube_namespace, "vllm")
    client.CustomObjectsApi(admin).create_namespaced_custom_object(
        "autoscaling", "v2beta2", kube_namespace, "horizontalpodautoscalers", hpa_body("vllm-cpu", "vllm")
    )
    with pytest.raises(ConfigError) as info:
        make_cluster(admin, kube_namespace, "vllm").check_ownership()
    msg = str(info.value)
    assert f"HorizontalPodAutoscaler {kube_namespace}/vllm-cpu" in msg
    # v1.20 serves no autoscaling/v2: the check fell back to v2beta2.
    assert "autoscaling/v2beta2" in msg
    assert f"Deployment {kube_namespace}/vllm" in msg


def test_hpa_created_through_autoscaling_v1_is_seen(kube_cluster, kube_namespace):
    admin = kube_cluster.admin_client()
    create_deployment(admin, kube_namespace, "vllm")
    hpa = client.V1HorizontalPodAutoscaler(
        metadata=client.V1ObjectMeta(name="legacy"),
        spec=client.V1HorizontalPodAutoscalerSpec(
            scale_target_ref=client.V1CrossVersionObjectReference(
                api_version="apps/v1", kind="Deployment", name="vllm"
            ),
            min_replicas=1,
            max_replicas=3,
        ),
    )
    client.AutoscalingV1Api(admin).create_namespaced_horizontal_pod_autoscaler(kube_namespace, hpa)
    with pytest.raises(ConfigError, match=f"HorizontalPodAutoscaler {kube_namespace}/legacy"):
        make_cluster(admin, kube_namespace, "vllm").check_ownership()


def test_missing_target_is_a_config_error(kube_cluster, kube_namespace):
    with pytest.raises(ConfigError, match=f"Deployment {kube_namespace}/nope not found"):
        make_cluster(kube_cluster.admin_client(), kube_namespace, "nope").check_ownership()


SCALEDOBJECT_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "scaledobjects.keda.sh"},
    "spec": {
        "group": "keda.sh",
        "scope": "Namespaced",
        "names": {
            "kind": "ScaledObject",
            "plural": "scaledobjects",
            "singular": "scaledobject",
            "listKind": "ScaledObjectList",
        },
        "versions": [
            {
                "name": "v1alpha1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                },
            }
        ],
    },
}


def test_keda_scaledobject_on_target_is_refused_with_its_name(kube_cluster, kube_namespace):
    admin = kube_cluster.admin_client()
    custom = client.CustomObjectsApi(admin)
    try:
        custom.create_cluster_custom_object(
            "apiextensions.k8s.io", "v1", "customresourcedefinitions", SCALEDOBJECT_CRD
        )
    except ApiException as e:
        if e.status != 409:  # another test of this session installed it already
            raise
    create_deployment(admin, kube_namespace, "vllm")
    body = {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": "vllm-queue"},
        # kind left out on purpose: KEDA defaults it to Deployment
        "spec": {"scaleTargetRef": {"name": "vllm"}, "triggers": []},
    }

    def create() -> bool:
        try:
            custom.create_namespaced_custom_object(
                "keda.sh", "v1alpha1", kube_namespace, "scaledobjects", body
            )
        except ApiException as e:
            if e.status == 404:  # the CRD is not established yet
                return False
            raise
        return True

    wait_for("the ScaledObject CRD to be served", create, timeout_s=30)
    with pytest.raises(ConfigError, match=f"KEDA ScaledObject {kube_namespace}/vllm-queue"):
        make_cluster(admin, kube_namespace, "vllm").check_ownership()
