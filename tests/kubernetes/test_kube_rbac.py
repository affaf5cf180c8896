"""The shipped deploy/rbac/ manifests, applied for real: the ServiceAccount does its job, nothing else."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from kube_workloads import create_deployment, pod_names
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from llmscale.clock import ManualClock
from llmscale.cluster.kubernetes import KubeActuationError, KubernetesCluster, KubeScaleTarget
from llmscale.cluster.leader import LeaseElector, LeaseSettings, lease_name
from llmscale.cluster.state_store import ConfigMapStateStore, state_configmap_name
from llmscale.controller.live import LiveController, PolicyRun
from llmscale.controller.server import ControllerMetrics
from llmscale.deployment import Deployment
from llmscale.guards import GuardConfig
from llmscale.policies.base import create_policy
from llmscale.types import FleetView, Mode, Observation
from support.wait import wait_for

RBAC_DIR = Path(__file__).resolve().parents[2] / "deploy" / "rbac"
SHIPPED_TARGET = "vllm-llama3-8b"  # the placeholder in role.yaml's resourceNames
SHIPPED_NAMES = {SHIPPED_TARGET, state_configmap_name(SHIPPED_TARGET), lease_name(SHIPPED_TARGET)}
LLMSCALE = Path(sys.executable).with_name("llmscale")


def load_manifests(namespace: str, target_name: str) -> list[dict[str, Any]]:
    """The shipped YAML with the namespace and the target name filled in, as an operator would."""
    docs = []
    for path in sorted(p for p in RBAC_DIR.glob("*.yaml") if p.name != "kustomization.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc:
                continue
            doc["metadata"]["namespace"] = namespace
            doc["metadata"]["name"] = doc["metadata"]["name"].replace(SHIPPED_TARGET, target_name)
            for rule in doc.get("rules", ()):
                if "resourceNames" in rule:
                    (name,) = rule["resourceNames"]
                    assert name in SHIPPED_NAMES, f"{path.name}: unexpected placeholder {name}"
                    rule["resourceNames"] = [name.replace(SHIPPED_TARGET, target_name)]
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
        elif doc["kind"] == "ConfigMap":
            client.CoreV1Api(api).create_namespaced_config_map(ns, client.V1ConfigMap.from_dict(doc))
        elif doc["kind"] == "Lease":
            client.CoordinationV1Api(api).create_namespaced_lease(ns, doc)
        else:
            raise AssertionError(f"unexpected kind {doc['kind']} in deploy/rbac")
    assert sa_name, "deploy/rbac ships no ServiceAccount"
    return sa_name


def test_manifests_are_least_privilege_by_construction():
    docs = load_manifests("ns", "my-model")
    (role,) = [d for d in docs if d["kind"] == "Role"]
    writes = {"create", "update", "patch", "delete", "deletecollection", "escalate", "bind", "impersonate"}
    written = set()
    for rule in role["rules"]:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"]
        if writes & set(rule["verbs"]):
            # Every write is pinned to one object by name: the target's scale, the state ConfigMap,
            # the leader-election Lease.
            assert rule.get("resourceNames") in (
                ["my-model"],
                ["llmscale-state-my-model"],
                ["llmscale-leader-my-model"],
            ), rule
            assert set(rule["verbs"]) & writes == {"update"}, rule
            written |= set(rule["resources"])
        assert "secrets" not in rule["resources"]
    # Nothing on the workload objects themselves: a write there could change the pod template.
    assert written == {"deployments/scale", "statefulsets/scale", "configmaps", "leases"}
    assert not any({"deployments", "statefulsets"} & set(r["resources"]) for r in role["rules"])
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap"]
    assert cm["metadata"]["name"] == state_configmap_name("my-model")
    (lease,) = [d for d in docs if d["kind"] == "Lease"]
    assert lease["metadata"]["name"] == lease_name("my-model")


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
    wait_for("2 replicas in the view", lambda: len(cluster.replicas_view()) == 2, timeout_s=60.0)
    assert len(cluster.pod_targets()) <= 2

    store = ConfigMapStateStore(sa_api, ns, state_configmap_name("llama"))
    assert store.load() is None  # the shipped ConfigMap, empty
    store.save({"last_desired": 2})
    assert store.load() == {"last_desired": 2}


def expect_forbidden(call: Any) -> None:
    with pytest.raises(ApiException) as info:
        call()
    assert info.value.status == 403, info.value


def test_service_account_leads_on_the_shipped_lease_and_no_other(sa_setup):
    """get/update on its one Lease suffice to elect; other Leases and creating one are forbidden."""
    admin, sa_api, ns = sa_setup
    settings = LeaseSettings(ns, lease_name("llama"), "pod-a", retry_period_s=0.5, request_timeout_s=2.0)
    elector = LeaseElector(sa_api, settings)
    assert elector.try_once() and elector.term == 1  # the shipped Lease had no holder
    assert elector.try_once()  # renewed
    elector.stop()  # released
    lease = client.CoordinationV1Api(admin).read_namespaced_lease(lease_name("llama"), ns)
    assert lease.spec.holder_identity is None

    coord = client.CoordinationV1Api(sa_api)
    body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "kube-scheduler"}}
    expect_forbidden(lambda: coord.create_namespaced_lease(ns, body))
    client.CoordinationV1Api(admin).create_namespaced_lease(ns, body)
    expect_forbidden(lambda: coord.read_namespaced_lease("kube-scheduler", ns))
    other = LeaseElector(sa_api, LeaseSettings(ns, "llmscale-leader-other", "pod-a", request_timeout_s=2.0))
    assert not other.try_once() and other.errors == 1  # no Lease, and no right to create it


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
    wait_for("a pod of llama", lambda: pod_names(admin, ns, "llama"), timeout_s=60.0)
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


def test_service_account_cannot_change_its_targets_pod_template(sa_setup):
    """Scaling needs the scale subresource and nothing else: the Deployment's spec (its image, its
    command), labels and annotations stay out of reach, whatever the verb."""
    admin, sa_api, ns = sa_setup
    apps = client.AppsV1Api(sa_api)
    image_patch = {"spec": {"template": {"spec": {"containers": [{"name": "server", "image": "evil:1"}]}}}}
    expect_forbidden(
        lambda: apps.patch_namespaced_deployment(
            "llama", ns, image_patch, _content_type="application/strategic-merge-patch+json"
        )
    )
    expect_forbidden(
        lambda: apps.patch_namespaced_deployment(
            "llama",
            ns,
            {"metadata": {"annotations": {"x": "y"}}},
            _content_type="application/merge-patch+json",
        )
    )
    mine = client.AppsV1Api(admin).read_namespaced_deployment("llama", ns)
    mine.spec.template.spec.containers[0].image = "evil:1"
    expect_forbidden(lambda: apps.replace_namespaced_deployment("llama", ns, mine))
    expect_forbidden(lambda: apps.read_namespaced_deployment("llama", ns))
    expect_forbidden(
        lambda: apps.patch_namespaced_deployment_scale(
            "llama", ns, {"spec": {"replicas": 4}}, _content_type="application/merge-patch+json"
        )
    )
    image = (
        client.AppsV1Api(admin).read_namespaced_deployment("llama", ns).spec.template.spec.containers[0].image
    )
    assert image == "registry.invalid/vllm:test"


def test_service_account_reaches_no_other_configmap(sa_setup):
    admin, sa_api, ns = sa_setup
    core = client.CoreV1Api(sa_api)
    other = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="app-settings"), data={"k": "v"})
    client.CoreV1Api(admin).create_namespaced_config_map(ns, other)
    expect_forbidden(lambda: core.read_namespaced_config_map("app-settings", ns))
    expect_forbidden(lambda: core.replace_namespaced_config_map("app-settings", ns, other))
    expect_forbidden(lambda: core.list_namespaced_config_map(ns))
    expect_forbidden(
        lambda: core.create_namespaced_config_map(
            ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="x"))
        )
    )
    expect_forbidden(lambda: core.delete_namespaced_config_map(state_configmap_name("llama"), ns))


class _StateAtScale:
    """The target's AppsV1Api, reading the state ConfigMap (as the admin) at the moment the scale
    write is sent; ``kill`` raises instead of sending it, as a controller killed between the two."""

    class Killed(BaseException):
        """Not an Exception: the live loop's broad except must not catch it (a SIGKILL is not caught)."""

    def __init__(self, apps: client.AppsV1Api, admin: client.ApiClient, ns: str, kill: bool) -> None:
        self._apps = apps
        self._core = client.CoreV1Api(admin)
        self._ns = ns
        self.kill = kill
        self.seen: list[dict[str, Any] | None] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._apps, name)

    def replace_namespaced_deployment_scale(self, *args: Any, **kwargs: Any) -> Any:
        cm = self._core.read_namespaced_config_map(state_configmap_name("llama"), self._ns)
        text = (cm.data or {}).get("state.json")
        self.seen.append(None if text is None else json.loads(text))
        if self.kill:
            raise self.Killed
        return self._apps.replace_namespaced_deployment_scale(*args, **kwargs)


def _live(
    sa_api: client.ApiClient, ns: str, apps: Any, cooldown_up_s: float, clock: ManualClock
) -> LiveController:
    cluster = KubernetesCluster(
        KubeScaleTarget(ns, "Deployment", "llama", "app=llama"), sa_api, apps_api=apps
    )
    guards = GuardConfig(min_replicas=1, max_replicas=5, cooldown_up_s=cooldown_up_s, drain_aware=False)
    params = {"replicas": 3}
    return LiveController(
        source=StaticTargetsNowhere(),
        cluster=cluster,
        primary=PolicyRun(create_policy("static", Deployment(), params), guards, "static:test"),
        mode=Mode.APPLY,
        target=f"{ns}/llama",
        metrics=ControllerMetrics(f"{ns}/llama", "scrape"),
        tick_s=15.0,
        clock=clock,
        store=ConfigMapStateStore(sa_api, ns, state_configmap_name("llama"), target=f"{ns}/llama"),
    )


class StaticTargetsNowhere:
    """A metric source that reaches no replica (every one unknown): the static policy needs none."""

    def observe(self, now_s: float) -> Observation:
        return Observation(now_s, FleetView(0), ())


def test_state_is_in_the_configmap_before_the_scale_is_sent(sa_setup):
    admin, sa_api, ns = sa_setup
    clock = ManualClock(1000.0)
    apps = _StateAtScale(client.AppsV1Api(sa_api), admin, ns, kill=False)
    entry = _live(sa_api, ns, apps, 600.0, clock).tick(1000.0)
    assert entry is not None and entry.record.applied and entry.record.final == 3
    (seen,) = apps.seen
    # What the ConfigMap held when the scale request left: this very scale-up, its cooldown clock.
    assert seen is not None and seen["last_decision"]["final"] == 3
    assert seen["guard_state"]["last_up_s"] == 1000.0
    assert client.AppsV1Api(admin).read_namespaced_deployment_scale("llama", ns).spec.replicas == 3


def test_a_kill_between_save_and_scale_keeps_the_cooldown_clock(sa_setup):
    """Killed after saving and before scaling, the restarted controller still knows the clock:
    it waits out the cooldown (one cooldown late, at worst) instead of acting twice."""
    admin, sa_api, ns = sa_setup
    clock = ManualClock(1000.0)
    killed = _StateAtScale(client.AppsV1Api(sa_api), admin, ns, kill=True)
    with pytest.raises(_StateAtScale.Killed):
        _live(sa_api, ns, killed, 600.0, clock).tick(1000.0)
    assert client.AppsV1Api(admin).read_namespaced_deployment_scale("llama", ns).spec.replicas == 1

    clock.advance_to(1030.0)
    restarted = _live(sa_api, ns, client.AppsV1Api(sa_api), 600.0, clock)
    entry = restarted.tick(1030.0)
    assert entry is not None and entry.record.guard == "cooldown" and not entry.record.applied
    assert client.AppsV1Api(admin).read_namespaced_deployment_scale("llama", ns).spec.replicas == 1


def _service_account_kubeconfig(kube_cluster: Any, ns: str, sa_name: str, path: Path) -> Path:
    """A kubeconfig that authenticates as the ServiceAccount (its token), as the pod would."""
    token = kube_cluster.service_account_token(ns, sa_name)
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "test",
                        "cluster": {
                            "server": kube_cluster.host,
                            "certificate-authority": kube_cluster.ca_file,
                        },
                    }
                ],
                "users": [{"name": sa_name, "user": {"token": token}}],
                "contexts": [
                    {"name": "sa", "context": {"cluster": "test", "user": sa_name, "namespace": ns}}
                ],
                "current-context": "sa",
            }
        )
    )
    return path


def test_llmscale_run_as_the_service_account_scales_and_saves_its_state(kube_cluster, sa_setup, tmp_path):
    """The shipped Role is enough for the real controller: it scales, and its state is in the
    ConfigMap (written before the scale), with nothing on the Deployment but its scale."""
    admin, _, ns = sa_setup
    before = client.AppsV1Api(admin).read_namespaced_deployment("llama", ns)
    kubeconfig = _service_account_kubeconfig(kube_cluster, ns, "llmscale", tmp_path / "sa-kubeconfig")
    doc = {
        "target": {"namespace": ns, "name": "llama", "selector": {"app": "llama"}},
        "metrics": {
            "source": "scrape",
            "scrape": {
                "static_targets": [{"name": "nowhere", "url": "http://127.0.0.1:9/metrics"}],
                "timeout_s": 0.5,
            },
        },
        "policy": {"name": "static", "params": {"replicas": 3}},
        "guards": {"min_replicas": 1, "max_replicas": 5},
        "tick_s": 1,
        "mode": "apply",
        "actuator": {"kind": "kubernetes", "kubernetes": {"kubeconfig": str(kubeconfig)}},
        "server": {"listen": "127.0.0.1:0"},
        "decision_log": {"path": str(tmp_path / "decisions.jsonl")},
        "state": {"store": "configmap"},
    }
    config = tmp_path / "llmscale.yaml"
    config.write_text(yaml.safe_dump(doc))
    apps = client.AppsV1Api(admin)
    core = client.CoreV1Api(admin)

    def saved() -> dict[str, Any] | None:
        text = (core.read_namespaced_config_map(state_configmap_name("llama"), ns).data or {}).get(
            "state.json"
        )
        return None if text is None else json.loads(text)

    proc = subprocess.Popen(
        [str(LLMSCALE), "run", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:

        def scaled_and_saved() -> bool:
            if proc.poll() is not None:
                return True  # exited: the assertion below says why
            last = (saved() or {}).get("last_decision") or {}
            return (
                apps.read_namespaced_deployment_scale("llama", ns).spec.replicas == 3
                and last.get("final") == 3
            )

        wait_for("the scale at 3 and the state saying so", scaled_and_saved, timeout_s=90.0)
        assert proc.poll() is None, proc.communicate()[1][-3000:]
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            _, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    assert proc.returncode == 0, err[-3000:]
    assert "forbidden" not in err.lower(), err[-3000:]
    state = saved()
    assert state is not None and state["target"] == f"{ns}/llama"
    after = apps.read_namespaced_deployment("llama", ns)
    assert after.spec.template == before.spec.template
    # (the Deployment controller adds its revision annotation by itself; llmscale adds none)
    assert not any(k.startswith("llmscale") for k in after.metadata.annotations or {})


def test_the_shipped_network_policy_is_accepted_by_the_api_server(kube_cluster, kube_namespace):
    """Schema check by the real API server (enforcing it needs a network plugin this harness lacks;
    tests/deploy checks what it admits)."""
    path = Path(__file__).resolve().parents[2] / "deploy" / "controller" / "networkpolicy.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["metadata"]["namespace"] = kube_namespace
    api = client.NetworkingV1Api(kube_cluster.admin_client())
    created = api.create_namespaced_network_policy(kube_namespace, doc)
    assert created.spec.policy_types == ["Ingress"]
    ports = sorted(str(r.ports[0].port) for r in created.spec.ingress)
    assert ports == ["grpc-keda", "http-metrics"]
