"""Scale to and from zero on the real kube-apiserver: held demand at the activator drives 0 -> 1 -> 0.

The Deployment starts at 0; the fake kubelet keeps its pods Pending (no vLLM runs here), so emulate
plays the serving side: its front door at zero replicas is the activator holding the request, read
by ``run`` through ``metrics.scrape.activator_url``. The held request scales the Deployment to 1
through the scale subresource; once "the first replica is ready" (emulate scaled to 1 by the test)
it is served, nothing is held, and after the cooldown ``run`` scales the Deployment back to 0.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import yaml
from kube_workloads import create_deployment
from kubernetes import client

from llmscale.emulate import EmulateConfig, EmulatorThread
from support.wait import wait_for

LLMSCALE = Path(sys.executable).with_name("llmscale")


def _config(tmp_path: Path, kubeconfig: Path, namespace: str, activator: str) -> Path:
    doc = {
        "target": {"namespace": namespace, "name": "vllm", "selector": {"app": "vllm"}},
        "metrics": {"source": "scrape", "scrape": {"activator_url": activator, "timeout_s": 1}},
        "policy": {"name": "keda-queue", "params": {"polling_interval_s": 0.5, "cooldown_period_s": 2.0}},
        "guards": {"min_replicas": 0, "max_replicas": 2},
        "mode": "apply",
        "actuator": {"kind": "kubernetes", "kubernetes": {"kubeconfig": str(kubeconfig)}},
        "server": {"listen": "127.0.0.1:0"},
        "decision_log": {"path": str(tmp_path / "decisions.jsonl")},
        "state": {"store": "file", "path": str(tmp_path / "state.json")},
    }
    path = tmp_path / "llmscale.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


def test_a_held_request_scales_a_deployment_from_zero_and_idle_takes_it_back(
    kube_cluster, kube_namespace, tmp_path
):
    admin = kube_cluster.admin_client()
    create_deployment(admin, kube_namespace, "vllm", replicas=0, pending=600.0)
    apps = client.AppsV1Api(admin)

    def spec() -> int:
        return int(apps.read_namespaced_deployment_scale("vllm", kube_namespace).spec.replicas or 0)

    cfg = EmulateConfig(replicas=0, port=0, timeout_s=120.0, pending_s=0.0, loading_s=0.0, warmup_s=0.0)
    with EmulatorThread(cfg) as front:
        config = _config(
            tmp_path, kube_cluster.workdir / "kubeconfig", kube_namespace, front.base_url + "/metrics"
        )
        log = tmp_path / "decisions.jsonl"
        proc = subprocess.Popen(
            [str(LLMSCALE), "run", "--config", str(config)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        answers: list[int] = []

        def request() -> None:
            r = httpx.post(
                front.base_url + "/v1/completions", json={"prompt": "hi", "max_tokens": 2}, timeout=150
            )
            answers.append(r.status_code)

        client_thread = threading.Thread(target=request, daemon=True)
        try:
            wait_for("a first decision", lambda: proc.poll() is not None or len(_lines(log)) >= 1, 90.0)
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert spec() == 0 and _lines(log)[0]["rule"] == "idle-at-zero"
            client_thread.start()
            wait_for("the held request to scale the Deployment to 1", lambda: spec() == 1, 60.0)
            front.call(lambda server: server.emu.scale_to(1))  # the first replica is ready: served
            client_thread.join(60)
            assert answers == [200]
            wait_for("the idle Deployment back at 0", lambda: spec() == 0, 60.0)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                _, err = proc.communicate(timeout=60)
            finally:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
            client_thread.join(5)
    assert proc.returncode == 0, err[-3000:]
    rules = [ln["rule"] for ln in _lines(log) if ln.get("applied")]
    assert rules[:1] == ["activate-from-zero"] and "scale-to-zero" in rules, rules
