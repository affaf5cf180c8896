"""deploy/ manifests: each parses, and the pieces agree with each other and with the controller config.

What must agree: names (ScaledObject -> Deployment, Service -> pods, monitors -> Service/pods),
ports (probes, Service, config listen addresses, KEDA scalerAddress), the ConfigMap's
llmscale.yaml (valid for ``llmscale run``, policy slo, dry-run) and the numbers other files
repeat from it (SLO in the alert, replica bounds in the ScaledObjects, mode label).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml
from _deploy import DEPLOY, PROM_DIR, YAML_LOADER, exporter_metric_names, load_rules, require, unknown_names

#: rbac/ belongs to another room; its own tests check it.
MANIFEST_DIRS = ("controller", "monitoring", "keda")


def _manifest_files() -> list[Path]:
    files = []
    for d in MANIFEST_DIRS:
        files += [p for p in sorted((DEPLOY / d).glob("*.yaml")) if p.name != "kustomization.yaml"]
    return files


def _docs(path: Path) -> list[dict]:
    return [d for d in yaml.load_all(path.read_text(), Loader=YAML_LOADER) if d is not None]


def _all_docs() -> list[dict]:
    return [d for p in _manifest_files() for d in _docs(p)]


def _one(kind: str, name: str | None = None, api: str | None = None) -> dict:
    found = [
        d
        for d in _all_docs()
        if d["kind"] == kind
        and (name is None or d["metadata"]["name"] == name)
        and (api is None or d["apiVersion"] == api)
    ]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def _config() -> dict:
    return yaml.safe_load(_one("ConfigMap", "llmscale-config")["data"]["llmscale.yaml"])


def _container() -> dict:
    (c,) = _one("Deployment", "llmscale")["spec"]["template"]["spec"]["containers"]
    return c


def _port(address: str) -> int:
    return int(address.rpartition(":")[2])


def _scaled_objects() -> list[tuple[Path, dict]]:
    return [
        (p, d)
        for p in sorted((DEPLOY / "keda").glob("*.yaml"))
        if p.name != "kustomization.yaml"
        for d in _docs(p)
    ]


# ---- every manifest -------------------------------------------------------------------


@pytest.mark.parametrize("path", _manifest_files(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_manifest_documents_are_kubernetes_objects(path: Path) -> None:
    docs = _docs(path)
    assert docs, f"{path} has no documents"
    for d in docs:
        assert isinstance(d.get("apiVersion"), str) and d["apiVersion"], path
        assert isinstance(d.get("kind"), str) and d["kind"], path
        assert d.get("metadata", {}).get("name"), f"{path}: {d['kind']} without metadata.name"


def test_kustomization_lists_existing_files() -> None:
    kust = yaml.safe_load((DEPLOY / "controller" / "kustomization.yaml").read_text())
    for res in kust["resources"]:
        assert (DEPLOY / "controller" / res).is_file(), res
    listed = set(kust["resources"])
    on_disk = {p.name for p in (DEPLOY / "controller").glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == on_disk


def test_namespaced_objects_are_in_llmscale() -> None:
    for d in _docs(DEPLOY / "controller" / "deployment.yaml") + _docs(DEPLOY / "controller" / "service.yaml"):
        assert d["metadata"]["namespace"] == "llmscale"


# ---- the controller's config ----------------------------------------------------------


def test_config_is_the_safe_default() -> None:
    cfg = _config()
    assert cfg["policy"]["name"] == "slo"
    assert cfg["mode"] == "dry-run"
    assert cfg["target"] == {
        **cfg["target"],
        "name": "vllm-llama3-8b",
        "backend": "vllm",
        "kind": "Deployment",
    }
    assert cfg["metrics"]["source"] == "prometheus"
    assert cfg["guards"]["hold_on_missing_data"] is True


def test_config_validates_as_llmscale_run_would() -> None:
    from llmscale import config

    parsed = config.parse_config(_config(), source="deploy/controller/configmap.yaml")
    assert parsed.policy.name == "slo"
    assert parsed.mode.value == "dry-run"


def test_config_is_mounted_where_args_point() -> None:
    c = _container()
    args = c["args"]
    path = args[args.index("--config") + 1]
    mount = next(m for m in c["volumeMounts"] if path.startswith(m["mountPath"] + "/"))
    volumes = _one("Deployment", "llmscale")["spec"]["template"]["spec"]["volumes"]
    vol = next(v for v in volumes if v["name"] == mount["name"])
    assert vol["configMap"]["name"] == "llmscale-config"
    assert path.removeprefix(mount["mountPath"] + "/") in _one("ConfigMap", "llmscale-config")["data"]
    assert args[0] == "run"


def test_mode_label_matches_config() -> None:
    """Alerts read the mode from the pod label; it must say what the config does."""
    labels = _one("Deployment", "llmscale")["spec"]["template"]["metadata"]["labels"]
    assert labels["llmscale.io/mode"] == _config()["mode"]
    relabel = _one("ServiceMonitor", "llmscale")["spec"]["endpoints"][0]["relabelings"]
    assert {
        "sourceLabels": ["__meta_kubernetes_pod_label_llmscale_io_mode"],
        "targetLabel": "mode",
    } in relabel


# ---- Deployment, Service, ServiceMonitor -----------------------------------------------


def test_deployment_runs_as_the_rbac_service_account_without_privileges() -> None:
    pod = _one("Deployment", "llmscale")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "llmscale"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    sc = _container()["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert _container()["resources"]["limits"]["memory"]
    assert _container()["image"] == "ghcr.io/llmscale/llmscale:0.1.0"


def test_two_replicas_one_writer() -> None:
    """Two replicas only with leader election on, each named in the Lease by its pod name."""
    spec = _one("Deployment", "llmscale")["spec"]
    assert spec["replicas"] == 2
    le = _config()["leader_election"]
    assert le["enabled"] is True
    assert le["renew_deadline_s"] < le["lease_duration_s"]
    env = {e["name"]: e for e in _container()["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    (lease,) = _docs(DEPLOY / "rbac" / "lease.yaml")
    assert lease["metadata"]["name"] == f"llmscale-leader-{_config()['target']['name']}"
    # at most one replica down during an upgrade: the other keeps (or takes) the lease
    assert spec["strategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}


def test_probes_hit_the_server_port() -> None:
    c = _container()
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    for probe in ("livenessProbe", "readinessProbe"):
        assert ports[c[probe]["httpGet"]["port"]] == 9464
    cfg = _config()
    assert _port(cfg["server"]["listen"]) == 9464
    assert cfg["server"]["listen"].startswith("0.0.0.0:"), "a pod must listen beyond loopback"
    assert _port(cfg["actuator"]["keda"]["listen"]) == ports["grpc-keda"]


def test_service_selects_the_pods_and_targets_named_ports() -> None:
    svc = _one("Service", "llmscale")
    pod_labels = _one("Deployment", "llmscale")["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    container_ports = {p["name"]: p["containerPort"] for p in _container()["ports"]}
    for port in svc["spec"]["ports"]:
        assert container_ports[port["targetPort"]] == port["port"], port


def test_servicemonitor_scrapes_the_service_metrics_port() -> None:
    sm = _one("ServiceMonitor", "llmscale")
    svc = _one("Service", "llmscale")
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    names = {p["name"] for p in svc["spec"]["ports"]}
    (ep,) = sm["spec"]["endpoints"]
    assert ep["port"] in names and ep["path"] == "/metrics"
    # prometheus-operator names the job after the Service; the controller alerts select job="llmscale"
    assert svc["metadata"]["name"] == "llmscale"
    assert any('job="llmscale"' in r["expr"] for r in load_rules() if "alert" in r)


def test_vllm_podmonitor_selects_the_target_pods() -> None:
    pm = _one("PodMonitor", "vllm-llama3-8b")
    target = _config()["target"]
    assert pm["metadata"]["namespace"] == target["namespace"]
    assert pm["spec"]["selector"]["matchLabels"] == target["selector"]
    targets = {r["targetLabel"] for r in pm["spec"]["podMetricsEndpoints"][0]["relabelings"]}
    # HighErrorRate and the Alertmanager inhibit rule key on these
    assert targets >= {"experiment_id", "experiment_phase"}


def test_dcgm_servicemonitor_keeps_the_workload_pod_labels() -> None:
    sm = _one("ServiceMonitor", "nvidia-dcgm-exporter")
    assert all(ep["honorLabels"] is True for ep in sm["spec"]["endpoints"])


# ---- numbers repeated from the config -------------------------------------------------


def _alert(name: str) -> dict:
    (rule,) = [r for r in load_rules() if r.get("alert") == name]
    return rule


def test_ttft_alert_threshold_is_the_configured_slo() -> None:
    expr = _alert("LLMTTFTP99OverSLO")["expr"]
    threshold = float(re.search(r">\s*([\d.]+)\s*$", expr).group(1))
    assert threshold == _config()["slo"]["ttft_s"]


def test_stale_tick_alert_is_later_than_readiness() -> None:
    """/readyz fails after three ticks; the alert must not fire before that."""
    expr = _alert("LlmscaleTicksStale")["expr"]
    threshold = float(re.search(r">\s*([\d.]+)\s*$", expr).group(1))
    assert threshold >= 3 * _config()["tick_s"]


# ---- KEDA ScaledObjects ---------------------------------------------------------------


def test_scaled_objects_target_the_configured_deployment() -> None:
    target = _config()["target"]
    sos = _scaled_objects()
    assert {p.name for p, _ in sos} == {
        "scaledobject-external.yaml",
        "scaledobject-external-push.yaml",
        "scaledobject-seed002-prometheus.yaml",
    }
    for path, so in sos:
        assert so["apiVersion"] == "keda.sh/v1alpha1" and so["kind"] == "ScaledObject", path
        ref = so["spec"]["scaleTargetRef"]
        assert ref["name"] == target["name"], path
        assert ref.get("kind", "Deployment") == target["kind"], path
        assert so["metadata"]["namespace"] == target["namespace"], path
        assert so["spec"]["minReplicaCount"] >= 1, f"{path}: never to zero (a cold start is minutes)"


@pytest.mark.parametrize("trigger_type", ["external", "external-push"])
def test_external_scaler_points_at_the_controller(trigger_type: str) -> None:
    (so,) = [so for _, so in _scaled_objects() if so["spec"]["triggers"][0]["type"] == trigger_type]
    (trigger,) = so["spec"]["triggers"]
    host, _, port = trigger["metadata"]["scalerAddress"].rpartition(":")
    svc = _one("Service", "llmscale")
    assert host.split(".")[:2] == [svc["metadata"]["name"], svc["metadata"]["namespace"]]
    grpc_port = next(p for p in svc["spec"]["ports"] if p["name"] == "grpc-keda")
    assert int(port) == grpc_port["port"]
    # the controller answers KEDA for the ScaledObject named actuator.keda.scaled_object, by
    # default the target's own name, in the target's namespace
    keda_cfg = _config()["actuator"]["keda"]
    assert so["metadata"]["name"] == (keda_cfg.get("scaled_object") or _config()["target"]["name"])
    # the scaler serves desired replicas against a target of 1: only AverageValue turns that into N
    assert trigger.get("metricType", "AverageValue") == "AverageValue"
    # KEDA's bounds are the controller's, so KEDA never clips a guarded decision
    guards = _config()["guards"]
    assert so["spec"]["minReplicaCount"] == guards["min_replicas"]
    assert so["spec"]["maxReplicaCount"] == guards["max_replicas"]
    # and the HPA adds no second stabilisation on top of the guards'
    behavior = so["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    assert behavior["scaleDown"]["stabilizationWindowSeconds"] == 0


def test_external_scaler_metric_name_is_the_servers_default() -> None:
    from llmscale.cluster.keda import server

    for _, so in _scaled_objects():
        trig = so["spec"]["triggers"][0]
        if trig["type"].startswith("external"):
            assert trig["metadata"]["metricName"] == server.DEFAULT_METRIC_NAME


def _seed002() -> dict:
    return _docs(DEPLOY / "keda" / "scaledobject-seed002-prometheus.yaml")[0]


def test_seed002_triggers_and_cooldowns() -> None:
    spec = _seed002()["spec"]
    queue, latency = spec["triggers"]
    assert queue["type"] == latency["type"] == "prometheus"
    assert queue["metricType"] == "AverageValue" and queue["metadata"]["threshold"] == "20"
    assert "vllm:num_requests_waiting" in queue["metadata"]["query"]
    assert latency["metricType"] == "Value" and float(latency["metadata"]["threshold"]) == 2.0
    assert "histogram_quantile(0.99" in latency["metadata"]["query"]
    assert "_bucket" in latency["metadata"]["query"]
    for trig in (queue, latency):
        # missing data must not read as 0 (KEDA's default would)
        assert trig["metadata"]["ignoreNullValues"] == "false"
        assert unknown_names(trig["metadata"]["query"]) == []
    behavior = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    assert behavior["scaleUp"]["policies"][0]["periodSeconds"] == 120
    assert behavior["scaleDown"]["stabilizationWindowSeconds"] == 600
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (2, 10)
    assert "vllm:e2e_request_latency_seconds_bucket" in exporter_metric_names()


def test_seed002_queries_answer_right_with_promtool(tmp_path: Path) -> None:
    """Run the two trigger queries on synthetic series: loaded, idle, and no data at all.

    KEDA needs exactly one number; idle must be 0 (not NaN, which KEDA would reject) and a
    missing histogram must stay empty (an error for KEDA, so the HPA holds).
    """
    promtool = require("promtool")
    queue_q, latency_q = (t["metadata"]["query"] for t in _seed002()["spec"]["triggers"])
    pod = 'namespace="llmscale", model_name="llama3-8b"'
    a = f'{pod}, pod="vllm-llama3-8b-5d9f-a"'
    busy = [
        # two replicas waiting 30 and 20
        {"series": f"vllm:num_requests_waiting{{{a}}}", "values": "30x20"},
        {"series": f'vllm:num_requests_waiting{{{pod}, pod="vllm-llama3-8b-5d9f-b"}}', "values": "20x20"},
        # a pod of another Deployment in the namespace is not counted
        {"series": f'vllm:num_requests_waiting{{{pod}, pod="other-7c4b-a"}}', "values": "99x20"},
        # per 15 s: 2.0:90 5.0:100 -> P99 = 2 + 3 x 9 / 10 = 4.7 s
        *[
            {
                "series": f'vllm:e2e_request_latency_seconds_bucket{{{a}, le="{le}"}}',
                "values": f"0+{n}x20",
            }
            for le, n in (("2.0", 90), ("5.0", 100), ("+Inf", 100))
        ],
        {
            "series": f"vllm:e2e_request_latency_seconds_count{{{a}}}",
            "values": "0+100x20",
        },
    ]
    idle = [
        {
            "series": f'vllm:e2e_request_latency_seconds_bucket{{{a}, le="+Inf"}}',
            "values": "7x20",
        },
        {
            "series": f"vllm:e2e_request_latency_seconds_count{{{a}}}",
            "values": "7x20",
        },
    ]
    doc = {
        "rule_files": [],
        "evaluation_interval": "15s",
        "tests": [
            {
                "name": "loaded",
                "interval": "15s",
                "input_series": busy,
                "promql_expr_test": [
                    {"expr": queue_q, "eval_time": "3m", "exp_samples": [{"labels": "{}", "value": 50}]},
                    {
                        "expr": f"round({latency_q}, 0.0001)",
                        "eval_time": "3m",
                        "exp_samples": [{"labels": "{}", "value": 4.7}],
                    },
                ],
            },
            {
                "name": "idle",
                "interval": "15s",
                "input_series": idle,
                "promql_expr_test": [
                    {"expr": latency_q, "eval_time": "3m", "exp_samples": [{"labels": "{}", "value": 0}]},
                ],
            },
            {
                "name": "no data",
                "interval": "15s",
                "input_series": [{"series": 'up{job="x"}', "values": "1x20"}],
                "promql_expr_test": [{"expr": latency_q, "eval_time": "3m", "exp_samples": []}],
            },
        ],
    }
    path = tmp_path / "keda_queries_test.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    out = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_prometheus_dir_has_only_rules_and_tests() -> None:
    """Keep deploy/prometheus loadable with one glob (rule_files: [deploy/prometheus/*.rules.yml])."""
    for p in PROM_DIR.iterdir():
        assert p.name.endswith(".rules.yml") or p.name == "tests", p


# ---- agreement with deploy/rbac (another room's files) --------------------------------


def _rbac(kind: str) -> dict:
    files = [p for p in sorted((DEPLOY / "rbac").glob("*.yaml")) if p.name != "kustomization.yaml"]
    docs = [d for p in files for d in _docs(p) if d["kind"] == kind]
    assert len(docs) == 1, f"deploy/rbac: expected one {kind}, found {len(docs)}"
    return docs[0]


def test_rbac_grants_the_controller_its_target() -> None:
    assert (DEPLOY / "rbac").is_dir(), "deploy/rbac is missing (the controller's RBAC)"
    pod_ns = _one("Deployment", "llmscale")["metadata"]["namespace"]
    target = _config()["target"]
    sa = _rbac("ServiceAccount")
    assert (sa["metadata"]["name"], sa["metadata"]["namespace"]) == ("llmscale", pod_ns)
    binding = _rbac("RoleBinding")
    assert {"kind": "ServiceAccount", "name": "llmscale", "namespace": pod_ns}.items() <= binding["subjects"][
        0
    ].items()
    role = _rbac("Role")
    assert role["metadata"]["namespace"] == target["namespace"]
    scale_rule = next(r for r in role["rules"] if "deployments/scale" in r["resources"])
    assert target["name"] in scale_rule["resourceNames"]


# ---- NetworkPolicy --------------------------------------------------------------------


def test_network_policy_admits_only_prometheus_and_keda_to_their_ports() -> None:
    """The controller binds 0.0.0.0 in its pod; the policy is what keeps other pods out."""
    np = _one("NetworkPolicy", "llmscale")
    spec = np["spec"]
    pod_labels = _one("Deployment", "llmscale")["spec"]["template"]["metadata"]["labels"]
    assert spec["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert np["metadata"]["namespace"] == _one("Deployment", "llmscale")["metadata"]["namespace"]
    # Ingress only is listed: a policy without Ingress in policyTypes would admit everyone.
    assert spec["policyTypes"] == ["Ingress"]
    ports = {p["name"]: p["containerPort"] for p in _container()["ports"]}
    admitted = {}
    for rule in spec["ingress"]:
        (port,) = rule["ports"]
        assert port["protocol"] == "TCP" and port["port"] in ports, port
        (peer,) = rule["from"]  # one peer per port; an empty "from" would admit every source
        # Both selectors in one peer: pods with these labels *in* that namespace (two peers
        # would admit the whole namespace, and the labels in any namespace).
        assert set(peer) == {"namespaceSelector", "podSelector"}, peer
        assert peer["namespaceSelector"]["matchLabels"] and peer["podSelector"]["matchLabels"]
        admitted[port["port"]] = peer["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
    assert admitted == {"http-metrics": "monitoring", "grpc-keda": "keda"}
    cfg = _config()
    assert _port(cfg["server"]["listen"]) == ports["http-metrics"]
    assert _port(cfg["actuator"]["keda"]["listen"]) == ports["grpc-keda"]


def test_prometheus_reaches_the_metrics_port_from_where_the_network_policy_admits() -> None:
    """The ServiceMonitor's Prometheus (prometheus-operator in `monitoring`) is the admitted peer."""
    np = _one("NetworkPolicy", "llmscale")
    sm = _one("ServiceMonitor", "llmscale")
    (ep,) = sm["spec"]["endpoints"]
    (rule,) = [r for r in np["spec"]["ingress"] if r["ports"][0]["port"] == ep["port"]]
    assert rule["from"][0]["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "prometheus"}
