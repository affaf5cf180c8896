"""deploy/vllm/ and deploy/rbac/scale-down/: the preStop drain is wired and fits its grace period."""

from __future__ import annotations

import importlib.util

import yaml
from _deploy import DEPLOY

from llmscale.config import ScrapeConfig
from llmscale.metrics.names import VLLM

VLLM_DIR = DEPLOY / "vllm"


def _flags(args: list[str]) -> dict[str, str]:
    return dict(a.removeprefix("--").split("=", 1) for a in args if a.startswith("--") and "=" in a)


def _deployment() -> dict:
    return yaml.safe_load((VLLM_DIR / "deployment.yaml").read_text())


def _script():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("drain_prestop", VLLM_DIR / "drain-prestop.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_prestop_runs_the_generated_script_within_the_grace_period() -> None:
    dep = _deployment()
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    command = c["lifecycle"]["preStop"]["exec"]["command"]
    assert command[:2] == ["python3", "/llmscale/drain-prestop.py"]
    hook = _flags(command[2:])
    vllm = _flags(c["args"])
    # The hook and vLLM's own drain after SIGTERM fit before the kubelet's SIGKILL.
    budget_s = float(hook["settle-s"]) + float(hook["max-wait-s"]) + float(vllm["shutdown-timeout"])
    assert budget_s < pod["terminationGracePeriodSeconds"], budget_s
    # The script is the ConfigMap the kustomization generates, mounted where the hook runs it.
    (mount,) = c["volumeMounts"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    kust = yaml.safe_load((VLLM_DIR / "kustomization.yaml").read_text())
    (gen,) = kust["configMapGenerator"]
    assert volume["configMap"]["name"] == gen["name"] and mount["mountPath"] == "/llmscale"
    assert gen["files"] == ["drain-prestop.py"] and (VLLM_DIR / "drain-prestop.py").is_file()
    assert kust["resources"] == ["deployment.yaml"]


def test_prestop_reads_the_pods_own_metrics_port_with_vllms_gauges() -> None:
    (c,) = _deployment()["spec"]["template"]["spec"]["containers"]
    (port,) = c["ports"]
    url = _flags(c["lifecycle"]["preStop"]["exec"]["command"][2:])["url"]
    assert url == f"http://127.0.0.1:{port['containerPort']}/metrics" and port["name"] == "http"
    # llmscale reads the pods' loads on metrics.scrape's port: by default the same one.
    assert port["containerPort"] == ScrapeConfig().port
    assert (VLLM.running, VLLM.waiting) == _script().DEFAULT_GAUGES


def test_prestop_sums_every_label_set() -> None:
    page = (
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{model_name="m",engine="0"} 2.0\n'
        'vllm:num_requests_running{model_name="m",engine="1"} 1.0\n'
        "vllm:num_requests_waiting 4\n"
        "vllm:num_requests_running_total 99\n"
    )
    assert _script().in_flight(page, _script().DEFAULT_GAUGES) == 7.0


def test_deployment_is_the_controllers_target() -> None:
    cm = yaml.safe_load((DEPLOY / "controller" / "configmap.yaml").read_text())
    target = yaml.safe_load(cm["data"]["llmscale.yaml"])["target"]
    dep = _deployment()
    assert dep["metadata"]["name"] == target["name"] and dep["metadata"]["namespace"] == target["namespace"]
    assert dep["spec"]["selector"]["matchLabels"] == target["selector"]
    assert dep["spec"]["template"]["metadata"]["labels"] == target["selector"]


def test_scale_down_role_grants_only_pod_patch_and_delete_to_the_controller() -> None:
    docs = list(yaml.safe_load_all((DEPLOY / "rbac" / "scale-down" / "role.yaml").read_text()))
    (role,) = [d for d in docs if d["kind"] == "Role"]
    (binding,) = [d for d in docs if d["kind"] == "RoleBinding"]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["patch", "delete"]}]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "llmscale", "namespace": "llmscale"}]
