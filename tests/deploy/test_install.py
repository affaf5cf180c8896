"""deploy/install: the kustomize overlays render with the real kustomize (``kubectl kustomize``)
and their pieces agree. The real API server's dry run of the same output, with KEDA's and
prometheus-operator's CRDs, is tests/kubernetes/test_install_dry_run.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from _deploy import DEPLOY

from llmscale.config import parse_config
from support.kustomize import OVERLAYS, docs


def one(overlay: str, kind: str, name: str) -> dict[str, Any]:
    found = [d for d in docs(overlay) if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{overlay}: expected one {kind} {name}, found {len(found)}"
    return found[0]


def config(overlay: str) -> dict[str, Any]:
    return yaml.safe_load(one(overlay, "ConfigMap", "llmscale-config")["data"]["llmscale.yaml"])


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_config_loads_and_differs_from_the_base_only_in_its_actuator(overlay: str) -> None:
    doc = config(overlay)
    cfg = parse_config(doc, source=f"{overlay}/llmscale.yaml")
    assert cfg.actuator.kind == overlay
    base = yaml.safe_load(
        yaml.safe_load((DEPLOY / "controller" / "configmap.yaml").read_text())["data"]["llmscale.yaml"]
    )
    changed = {k for k in base.keys() | doc.keys() if base.get(k) != doc.get(k)}
    assert changed <= {"actuator", "leader_election"}, changed
    replicas = one(overlay, "Deployment", "llmscale")["spec"]["replicas"]
    # Leader election needs actuator kubernetes: the publishing overlays run one controller.
    assert (replicas > 1) == cfg.leader_election.enabled, (replicas, cfg.leader_election.enabled)


def test_hpa_overlay_pieces_agree() -> None:
    cfg = parse_config(config("hpa"), source="hpa/llmscale.yaml")
    assert cfg.actuator.hpa is not None
    (container,) = one("hpa", "Deployment", "llmscale")["spec"]["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["metrics-api"] == cfg.actuator.hpa.listen.port
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    tls = cfg.actuator.hpa.tls
    for path in (tls.cert_file, tls.key_file, tls.client_ca_file):
        assert path is not None and str(Path(path).parent) in mounts, (path, mounts)
    service = one("hpa", "Service", "llmscale-external-metrics")
    api = one("hpa", "APIService", "v1beta1.external.metrics.k8s.io")["spec"]
    assert api["service"] == {"name": "llmscale-external-metrics", "namespace": "llmscale", "port": 443}
    (svc_port,) = service["spec"]["ports"]
    assert svc_port["port"] == 443 and svc_port["targetPort"] == "metrics-api"
    hpa = one("hpa", "HorizontalPodAutoscaler", "vllm-llama3-8b")["spec"]
    assert hpa["scaleTargetRef"]["name"] == cfg.target.name
    (metric,) = hpa["metrics"]
    assert metric["external"]["metric"]["name"] == cfg.actuator.hpa.metric_name
    assert metric["external"]["target"] == {"type": "AverageValue", "averageValue": "1"}
    # The NetworkPolicy opens the metrics API port, or the aggregator cannot reach it.
    ingress = one("hpa", "NetworkPolicy", "llmscale")["spec"]["ingress"]
    assert any(p["port"] == "metrics-api" for rule in ingress for p in rule.get("ports", ()))


def test_keda_overlay_scaledobject_reaches_the_controller() -> None:
    cfg = parse_config(config("keda"), source="keda/llmscale.yaml")
    (so,) = [d for d in docs("keda") if d["kind"] == "ScaledObject"]
    assert so["spec"]["scaleTargetRef"]["name"] == cfg.target.name
    (trigger,) = so["spec"]["triggers"]
    host, _, port = trigger["metadata"]["scalerAddress"].rpartition(":")
    assert host.startswith("llmscale.llmscale.svc") and int(port) == cfg.actuator.keda.listen.port
    assert not [d for d in docs("kubernetes") if d["kind"] in ("ScaledObject", "HorizontalPodAutoscaler")]
