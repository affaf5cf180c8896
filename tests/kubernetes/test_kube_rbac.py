"""The shipped deploy/rbac/ manifests, applied for real: the ServiceAccount does its job, nothing else."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from kube_workloads import create_deployment, pod_names, wait_for
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from llmscale.cluster.kubernetes import KubeActuationError, KubernetesCluster, KubeScaleTarget
from llmscale.cluster.state_store import AnnotationStateStore

RBAC_DIR = Path(__file__).resolve().parents[2] / "deploy" / "rbac"
SHIPPED_TARGET = "vllm-llama3-8b"  # the placeholder in role.yaml's resourceNames


def load_manifests(namespace: str, target_name: str) -> list[dict[str, Any]]:
    """The shipped YAML with the namespace and the target name filled in, as an operator would."""
    docs = []
    for path in sorted(RBAC_DIR.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc:
                continue
            doc["metadata"]["namespace"] = namespace
            for rule in doc.get("rules", ()):
                if "resourceNames" in rule:
                    assert rule["resourceNames"] == [SHIPPED_TARGET], f"{path.name}: unexpected placeholder"
                    rule["resourceNames"] = [target_name]
            for subject in doc.get("subjects", ()):
                subject["namespace"] = namespace
            docs.append(doc)
    return docs


def apply(api: client.ApiClient, docs: list[dict[str, Any]]) -> str:
    """Create the manifests; returns the ServiceAccount's name."""
    sa_name = ""
    for doc in docs:
        ns = doc["metadata"]["namespace"]
        if doc["kind"] == "ServiceAccount":
            client.CoreV1Api(api).create_namespaced_service_account(
                ns, client.V1ServiceAccount.from_dict(doc)
            )
            sa_name = doc["metadata"]["name"]
        elif doc["kind"] == "Role":
            client.RbacAuthorizationV1Api(api).create_namespaced_role(ns, client.V1Role.from_dict(doc))
        elif doc["kind"] == "RoleBinding":
            client.RbacAuthorizationV1Api(api).create_namespaced_role_binding(
                ns, client.V1RoleBinding.from_dict(doc)
            )
        else:
            raise AssertionError(f"unexpected kind {doc['kind']} in deploy/rbac")
    assert sa_name, "deploy/rbac ships no ServiceAccount"
    return sa_name


def test_manifests_are_least_privilege_by_construction():
    docs = load_manifests("ns", "my-model")
    (role,) = [d for d in docs if d["kind"] == "Role"]
    writes = {"create", "update", "patch", "delete", "deletecollection", "escalate", "bind", "impersonate"}
    for rule in role["rules"]:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"]
        if writes & set(rule["verbs"]):
            # Every write is pinned to the one target by name.
            assert rule.get("resourceNames") == ["my-model"], rule
        assert "secrets" not in rule["resources"]


@pytest.fixture
def sa_setup(kube_cluster, kube_namespace):
    admin = kube_cluster.admin_client()
    create_deployment(admin, kube_namespace, "llama", replicas=1)
    create_deployment(admin, kube_namespace, "other", replicas=1)
    sa_name = apply(admin, load_manifests(kube_namespace, "llama"))
    sa_api = kube_cluster.service_account_client(kube_namespace, sa_name)
    return admin, sa_api, kube_namespace


def test_service_account_can_run_the_controller_on_its_target(sa_setup):
    _, sa_api, ns = sa_setup
    cluster = KubernetesCluster(KubeScaleTarget(ns, "Deployment", "llama", "app=llama"), sa_api)

    cluster.check_ownership()  # reads the scale, HPAs and ScaledObjects (404 without KEDA)
    cluster.scale_to(2, now_s=0.0)
    assert cluster.spec_replicas == 2
    wait_for("2 replicas in the view", lambda: len(cluster.replicas_view()) == 2)
    assert len(cluster.pod_targets()) <= 2

    store = AnnotationStateStore(sa_api, cluster.target)
    store.save({"last_desired": 2})
    assert store.load() == {"last_desired": 2}


def expect_forbidden(call: Any) -> None:
    with pytest.raises(ApiException) as info:
        call()
    assert info.value.status == 403, info.value


def test_service_account_is_forbidden_everything_else(sa_setup):
    admin, sa_api, ns = sa_setup
    other = KubernetesCluster(KubeScaleTarget(ns, "Deployment", "other", "app=other"), sa_api)
    with pytest.raises(KubeActuationError) as info:
        other.scale_to(3, now_s=0.0)
    assert info.value.reason == "forbidden"
    assert "deployments/scale" in str(info.value) and "ServiceAccount" in str(info.value)
    assert client.AppsV1Api(admin).read_namespaced_deployment_scale("other", ns).spec.replicas == 1

    apps = client.AppsV1Api(sa_api)
    core = client.CoreV1Api(sa_api)
    wait_for("a pod of llama", lambda: pod_names(admin, ns, "llama"))
    pod = pod_names(admin, ns, "llama")[0]
    expect_forbidden(lambda: core.delete_namespaced_pod(pod, ns))
    expect_forbidden(lambda: core.list_namespaced_secret(ns))
    token_secret = client.CoreV1Api(admin).list_namespaced_secret(ns).items[0].metadata.name
    expect_forbidden(lambda: core.read_namespaced_secret(token_secret, ns))
    expect_forbidden(lambda: apps.delete_namespaced_deployment("llama", ns))
    expect_forbidden(
        lambda: apps.patch_namespaced_deployment(
            "other", ns, {"metadata": {"labels": {"x": "y"}}}, _content_type="application/merge-patch+json"
        )
    )
    new_deployment = client.AppsV1Api(admin).read_namespaced_deployment("other", ns)
    new_deployment.metadata = client.V1ObjectMeta(name="new")
    new_deployment.status = None
    expect_forbidden(lambda: apps.create_namespaced_deployment(ns, new_deployment))
    expect_forbidden(lambda: apps.list_namespaced_deployment(ns))
    expect_forbidden(lambda: core.list_namespaced_pod("default"))
    expect_forbidden(lambda: core.list_namespace())
