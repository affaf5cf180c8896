"""An HPA scales a Deployment from llmscale's external metric, on the real control plane.

``llmscale run`` with ``actuator.kind: hpa`` serves ``external.metrics.k8s.io/v1beta1`` over TLS on
127.0.0.1; an APIService registers it with the real kube-apiserver's aggregation layer (the
session cluster runs with front-proxy certificates); a Service of type ExternalName points the
aggregator at 127.0.0.1, since no kube-proxy routes a ClusterIP here. A second
kube-controller-manager runs only the HPA controller (1 s sync), which reads the metric through
the API server and writes the Deployment's scale subresource: no pods need to be ready for that.
"""

from __future__ import annotations

import base64
import contextlib
import os
import signal
import socket
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from kube_workloads import create_deployment
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from support.certs import make_ca
from support.kube_cluster import ADMIN_TOKEN, FRONT_PROXY_CN, KubeCluster, kube_binaries, start_process
from support.wait import wait_for

LLMSCALE = Path(sys.executable).with_name("llmscale")
APISERVICE = "v1beta1.external.metrics.k8s.io"
SERVICE = "llmscale-external-metrics"
DESIRED = 4


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def hpa_controller(kube_cluster: KubeCluster) -> Iterator[None]:
    """kube-controller-manager with only the HPA controller, syncing every second; stopped after."""
    bins = kube_binaries()
    assert bins is not None  # kube_cluster skips without them
    proc = start_process(
        "kube-controller-manager (hpa)",
        [
            str(bins[1]),
            f"--kubeconfig={kube_cluster.workdir / 'kubeconfig'}",
            "--bind-address=127.0.0.1",
            "--secure-port=0",
            "--port=0",
            "--leader-elect=false",
            "--controllers=horizontalpodautoscaling",
            "--horizontal-pod-autoscaler-sync-period=1s",
        ],
        kube_cluster.workdir / "kube-controller-manager-hpa.log",
    )
    try:
        yield
    finally:
        proc.stop()


def _register(admin: client.ApiClient, namespace: str, port: int, ca_pem: bytes) -> None:
    core = client.CoreV1Api(admin)
    core.create_namespaced_service(
        namespace,
        client.V1Service(
            metadata=client.V1ObjectMeta(name=SERVICE),
            spec=client.V1ServiceSpec(type="ExternalName", external_name="localhost"),
        ),
    )
    body = {
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": {"name": APISERVICE},
        "spec": {
            "group": "external.metrics.k8s.io",
            "version": "v1beta1",
            "service": {"namespace": namespace, "name": SERVICE, "port": port},
            "caBundle": base64.b64encode(ca_pem).decode(),
            "groupPriorityMinimum": 100,
            "versionPriority": 100,
        },
    }
    custom = client.CustomObjectsApi(admin)
    with contextlib.suppress(ApiException):  # a leftover of an interrupted run
        custom.delete_cluster_custom_object("apiregistration.k8s.io", "v1", "apiservices", APISERVICE)
    custom.create_cluster_custom_object("apiregistration.k8s.io", "v1", "apiservices", body)


def _hpa(namespace: str) -> dict:
    return {
        "apiVersion": "autoscaling/v2beta2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "vllm", "namespace": namespace},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm"},
            "minReplicas": 1,
            "maxReplicas": 8,
            "metrics": [
                {
                    "type": "External",
                    "external": {
                        "metric": {"name": "llmscale-desired-replicas"},
                        "target": {"type": "AverageValue", "averageValue": "1"},
                    },
                }
            ],
            "behavior": {
                "scaleUp": {
                    "stabilizationWindowSeconds": 0,
                    "policies": [{"type": "Pods", "value": 10, "periodSeconds": 15}],
                }
            },
        },
    }


def test_hpa_scales_a_deployment_from_llmscales_external_metric(
    kube_cluster: KubeCluster, kube_namespace: str, hpa_controller: None, tmp_path: Path
) -> None:
    admin = kube_cluster.admin_client()
    create_deployment(admin, kube_namespace, "vllm", replicas=1)
    serving_ca = make_ca(tmp_path / "pki", "llmscale-serving-ca")
    serving = serving_ca.issue(
        "serving", cn=SERVICE, sans=(f"DNS:{SERVICE}.{kube_namespace}.svc", "DNS:localhost", "IP:127.0.0.1")
    )
    port = _free_port()
    doc = {
        "target": {"namespace": kube_namespace, "name": "vllm", "selector": {"app": "vllm"}},
        "metrics": {
            "source": "scrape",
            "scrape": {
                "static_targets": [{"name": "nowhere", "url": f"http://127.0.0.1:{_free_port()}/metrics"}],
                "timeout_s": 0.5,
            },
        },
        "policy": {"name": "static", "params": {"replicas": DESIRED}},
        "guards": {"min_replicas": 1, "max_replicas": 8},
        "tick_s": 1,
        "mode": "apply",
        "actuator": {
            "kind": "hpa",
            "kubernetes": {"kubeconfig": str(kube_cluster.workdir / "kubeconfig")},
            "hpa": {
                "listen": f"127.0.0.1:{port}",
                "tls": {
                    "cert_file": str(serving.cert),
                    "key_file": str(serving.key),
                    "client_ca_file": kube_cluster.front_proxy_ca_file,
                },
                "allowed_names": [FRONT_PROXY_CN],
            },
        },
        "server": {"listen": "127.0.0.1:0"},
        "decision_log": {"path": str(tmp_path / "decisions.jsonl")},
    }
    config = tmp_path / "llmscale.yaml"
    config.write_text(yaml.safe_dump(doc))
    proc = subprocess.Popen(
        [str(LLMSCALE), "run", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    custom = client.CustomObjectsApi(admin)
    apps = client.AppsV1Api(admin)
    try:
        _register(admin, kube_namespace, port, serving_ca.cert.read_bytes())
        custom.create_namespaced_custom_object(
            "autoscaling", "v2beta2", kube_namespace, "horizontalpodautoscalers", _hpa(kube_namespace)
        )
        # Through the API server, as the HPA controller reads it: the aggregator proxies to llmscale.
        base = f"{kube_cluster.host}/apis/external.metrics.k8s.io/v1beta1/namespaces/{kube_namespace}"
        headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        verify = ssl.create_default_context(cafile=kube_cluster.ca_file)

        def metric() -> dict | None:
            if proc.poll() is not None:
                return {"exited": proc.returncode}
            r = httpx.get(f"{base}/llmscale-desired-replicas", headers=headers, verify=verify)
            return r.json() if r.status_code == 200 else None

        got = wait_for("the external metric through the aggregator", metric, timeout_s=90.0, every_s=0.3)
        assert "items" in got, proc.communicate()[1][-3000:] if proc.poll() is not None else got
        assert [i["value"] for i in got["items"]] == [str(DESIRED)], got
        signals = httpx.get(f"{base}/llmscale-signal", headers=headers, verify=verify)
        assert signals.status_code == 200 and signals.json()["kind"] == "ExternalMetricValueList", (
            signals.text
        )

        def spec() -> int:
            return int(apps.read_namespaced_deployment_scale("vllm", kube_namespace).spec.replicas)

        wait_for(f"the HPA to scale the Deployment to {DESIRED}", lambda: spec() == DESIRED, timeout_s=60.0)
    finally:
        with contextlib.suppress(ApiException):
            custom.delete_cluster_custom_object("apiregistration.k8s.io", "v1", "apiservices", APISERVICE)
        proc.send_signal(signal.SIGTERM)
        try:
            _, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    assert proc.returncode == 0, err[-3000:]
    assert "external.metrics.k8s.io served on 127.0.0.1" in err, err[-3000:]
