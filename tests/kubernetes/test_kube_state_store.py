"""Controller state that survives restarts: the controller's own ConfigMap on a real API server, or a file."""

from __future__ import annotations

import json
import os
import threading

import pytest
from kube_workloads import create_deployment, ready_replicas
from kubernetes import client

from llmscale.cluster.state_store import STATE_KEY, ConfigMapStateStore, FileStateStore
from llmscale.errors import ActuationError
from support.wait import wait_for

STATE = {"last_desired": 4, "last_scale_up_s": 1234.5, "cooldown": {"down_since_s": None}, "rule": "queue>8"}


def test_configmap_store_round_trips_through_the_api_server(kube_cluster, kube_namespace):
    admin = kube_cluster.admin_client()
    create_deployment(admin, kube_namespace, "vllm", replicas=1)
    wait_for(
        "the Deployment's pod", lambda: ready_replicas(admin, kube_namespace, "vllm") == 1, timeout_s=60.0
    )
    apps = client.AppsV1Api(admin)
    before = apps.read_namespaced_deployment("vllm", kube_namespace)

    store = ConfigMapStateStore(admin, kube_namespace, "llmscale-state-vllm", target=f"{kube_namespace}/vllm")
    assert store.load() is None  # no ConfigMap yet: no state, not an error
    store.save(STATE)  # creates it (the admin may; the shipped Role relies on deploy/ creating it)
    # A restarted controller builds a new store: the state comes back from the server.
    assert (
        ConfigMapStateStore(kube_cluster.admin_client(), kube_namespace, "llmscale-state-vllm").load()
        == STATE
    )
    cm = client.CoreV1Api(admin).read_namespaced_config_map("llmscale-state-vllm", kube_namespace)
    assert json.loads(cm.data[STATE_KEY]) == STATE
    store.save({"last_desired": 2})  # an update of the existing one
    assert store.load() == {"last_desired": 2}

    # The target is not touched at all: same generation, same metadata.
    after = apps.read_namespaced_deployment("vllm", kube_namespace)
    assert after.metadata.generation == before.metadata.generation
    assert after.metadata.annotations == before.metadata.annotations


def test_configmap_store_ignores_a_hand_edited_state(kube_cluster, kube_namespace):
    admin = kube_cluster.admin_client()
    body = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="st"), data={STATE_KEY: "{not json"})
    client.CoreV1Api(admin).create_namespaced_config_map(kube_namespace, body)
    assert ConfigMapStateStore(admin, kube_namespace, "st").load() is None
    empty = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="empty"))  # as deploy/ ships it
    client.CoreV1Api(admin).create_namespaced_config_map(kube_namespace, empty)
    assert ConfigMapStateStore(admin, kube_namespace, "empty").load() is None


def test_configmap_store_errors_name_the_configmap(kube_cluster, kube_namespace):
    store = ConfigMapStateStore(kube_cluster.admin_client(), "no-such-namespace", "llmscale-state-x")
    with pytest.raises(
        ActuationError, match="cannot create the controller state in ConfigMap no-such-namespace/"
    ):
        store.save({"x": 1})


def test_file_store_round_trip_and_missing_file(tmp_path):
    store = FileStateStore(tmp_path / "sub" / "state.json")
    assert store.load() is None
    assert not (tmp_path / "sub").exists()  # the constructor and load write nothing
    store.save(STATE)
    assert FileStateStore(tmp_path / "sub" / "state.json").load() == STATE
    assert os.listdir(tmp_path / "sub") == ["state.json"]  # no temp files left behind


@pytest.mark.parametrize(
    "text", [pytest.param("{trunc", id="torn"), pytest.param("[1, 2]", id="not-an-object")]
)
def test_file_store_unreadable_state_starts_fresh(tmp_path, text):
    path = tmp_path / "state.json"
    path.write_text(text)
    assert FileStateStore(path).load() is None


def test_file_store_failed_replace_keeps_the_old_state(tmp_path, monkeypatch):
    path = tmp_path / "state.json"
    store = FileStateStore(path)
    store.save({"v": 1})

    def broken_replace(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(ActuationError, match="No space left"):
        store.save({"v": 2})
    assert store.load() == {"v": 1}
    assert os.listdir(tmp_path) == ["state.json"]


def test_file_store_readers_never_see_a_torn_write(tmp_path):
    path = tmp_path / "state.json"
    store = FileStateStore(path)
    big = {f"k{i}": "x" * 200 for i in range(200)}  # ~45 KB: many write() calls per save
    store.save({"gen": 0, **big})
    stop = threading.Event()
    seen: list[object] = []

    def reader() -> None:
        while not stop.is_set():
            seen.append(FileStateStore(path).load())

    t = threading.Thread(target=reader)
    t.start()
    try:
        for gen in range(1, 60):
            store.save({"gen": gen, **big})
    finally:
        stop.set()
        t.join(10)
    assert seen and all(isinstance(s, dict) and s.keys() == {"gen", *big} for s in seen)


def test_file_store_refuses_non_json_values(tmp_path):
    with pytest.raises(ValueError):
        FileStateStore(tmp_path / "s.json").save({"x": float("nan")})
