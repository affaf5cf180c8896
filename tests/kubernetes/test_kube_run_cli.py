"""`llmscale run` as a user runs it, against the real kube-apiserver: scale, and refuse an owned target.

The metrics source points at a closed port, so every replica is unknown: the
`static` policy's scale-up still goes through (missing data holds only
scale-downs), which isolates what is tested here, the actuation path from the
command line through the scale subresource.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import yaml
from kube_workloads import create_deployment, ready_replicas
from kubernetes import client

from support.wait import wait_for

LLMSCALE = Path(sys.executable).with_name("llmscale")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _config(tmp_path: Path, kubeconfig: Path, namespace: str, name: str, replicas: int) -> Path:
    doc = {
        "target": {"namespace": namespace, "name": name, "selector": {"app": name}},
        "metrics": {
            "source": "scrape",
            "scrape": {
                "static_targets": [{"name": "nowhere", "url": f"http://127.0.0.1:{_closed_port()}/metrics"}],
                "timeout_s": 0.5,
            },
        },
        "policy": {"name": "static", "params": {"replicas": replicas}},
        "guards": {"min_replicas": 1, "max_replicas": 5},
        "tick_s": 1,
        "mode": "apply",
        "actuator": {"kind": "kubernetes", "kubernetes": {"kubeconfig": str(kubeconfig)}},
        "server": {"listen": "127.0.0.1:0"},
        "decision_log": {"path": str(tmp_path / "decisions.jsonl")},
        "state": {"store": "file", "path": str(tmp_path / "state.json")},
    }
    path = tmp_path / "llmscale.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _run(config: Path, *args: str, timeout_s: float = 120.0) -> subprocess.CompletedProcess[str]:
    proc = subprocess.Popen(
        [str(LLMSCALE), "run", "--config", str(config), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _start(config: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(LLMSCALE), "run", "--config", str(config), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "COLUMNS": "200"},
    )


def _stop(proc: subprocess.Popen[str], timeout_s: float = 60.0) -> tuple[str, str]:
    """SIGTERM (the controller stops after its tick), then the output; SIGKILL if it hangs."""
    try:
        proc.send_signal(signal.SIGTERM)
        return proc.communicate(timeout=timeout_s)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_run_scales_a_deployment_through_the_scale_subresource(kube_cluster, kube_namespace, tmp_path):
    """A target of 3 reaches 3 while the pods are still pending, not once they are ready.

    The pods stay Pending for 10 minutes (the fake kubelet's ``pending`` timing), so the spec must
    reach 3 with every replica on the way: the pending-aware guard used to count them twice
    (3 - 1 pending = 2, then 3 - 2 = 2), and this test passed only where pods got ready within the
    two ticks it ran. It now waits for the scale it asserts, with a bound, however fast the machine.
    """
    admin = kube_cluster.admin_client()
    create_deployment(admin, kube_namespace, "vllm", replicas=1, pending=600.0)
    config = _config(tmp_path, kube_cluster.workdir / "kubeconfig", kube_namespace, "vllm", replicas=3)
    apps = client.AppsV1Api(admin)
    proc = _start(config)
    try:
        wait_for(
            "the scale to reach 3",
            lambda: (
                apps.read_namespaced_deployment_scale("vllm", kube_namespace).spec.replicas == 3
                or proc.poll() is not None
            ),
            timeout_s=90.0,
        )
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert ready_replicas(admin, kube_namespace, "vllm") == 0, "reached 3 only once pods were ready"
    finally:
        _, err = _stop(proc)
    assert proc.returncode == 0, err[-3000:]
    lines = [yaml.safe_load(line) for line in (tmp_path / "decisions.jsonl").read_text().splitlines()]
    applied = [rec for rec in lines if rec.get("applied")]
    assert applied and applied[0]["desired"] == 3, applied
    assert applied[0]["guard"] is None, applied[0]
    # Said at start: this v1.20 server ignores pod-deletion-cost, so llmscale picks the pods itself.
    assert f"Deployment {kube_namespace}/vllm: scale-downs: the API server is v1.20" in err, err[-3000:]


def test_run_refuses_a_target_an_hpa_owns(kube_cluster, kube_namespace, tmp_path):
    admin = kube_cluster.admin_client()
    create_deployment(admin, kube_namespace, "vllm", replicas=1)
    hpa = client.V1HorizontalPodAutoscaler(
        metadata=client.V1ObjectMeta(name="vllm-gpu-util"),
        spec=client.V1HorizontalPodAutoscalerSpec(
            scale_target_ref=client.V1CrossVersionObjectReference(
                api_version="apps/v1", kind="Deployment", name="vllm"
            ),
            min_replicas=1,
            max_replicas=4,
        ),
    )
    client.AutoscalingV1Api(admin).create_namespaced_horizontal_pod_autoscaler(kube_namespace, hpa)
    config = _config(tmp_path, kube_cluster.workdir / "kubeconfig", kube_namespace, "vllm", replicas=3)
    done = _run(config, "--max-ticks", "2")
    assert done.returncode == 2, (done.stdout[-2000:], done.stderr[-2000:])
    assert f"HorizontalPodAutoscaler {kube_namespace}/vllm-gpu-util" in done.stderr
    assert "Traceback" not in done.stderr
    scale = client.AppsV1Api(admin).read_namespaced_deployment_scale("vllm", kube_namespace)
    assert scale.spec.replicas == 1, "a refused run must not have scaled anything"
