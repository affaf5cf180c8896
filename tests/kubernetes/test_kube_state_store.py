"""Controller state that survives restarts: an annotation on the real target, or a local file."""

from __future__ import annotations

import json
import os
import threading

import pytest
from kube_workloads import create_deployment, ready_replicas, wait_for
from kubernetes import client

from llmscale.cluster.kubernetes import KubeScaleTarget
from llmscale.cluster.state_store import STATE_ANNOTATION, AnnotationStateStore, FileStateStore
from llmscale.errors import ActuationError

STATE = {"last_desired": 4, "last_scale_up_s": 1234.5, "cooldown": {"down_since_s": None}, "rule": "queue>8"}


def test_annotation_store_round_trips_through_the_api_server(kube_cluster, kube_namespace):
    admin = kube_cluster.admin_client()
    create_deployment(admin, kube_namespace, "vllm", replicas=1)
    wait_for("the Deployment's pod", lambda: ready_replicas(admin, kube_namespace, "vllm") == 1)
    target = KubeScaleTarget(kube_namespace, "Deployment", "vllm", "app=vllm")
    apps = client.AppsV1Api(admin)
    before = apps.read_namespaced_deployment("vllm", kube_namespace)

    store = AnnotationStateStore(admin, target)
    assert store.load() is None
    store.save(STATE)
    # A restarted controller builds a new store: the state comes back from the server.
    assert AnnotationStateStore(kube_cluster.admin_client(), target).load() == STATE

    after = apps.read_namespaced_deployment("vllm", kube_namespace)
    assert json.loads(after.metadata.annotations[STATE_ANNOTATION]) == STATE
    # Metadata only: the pod template is unchanged, so no rollout (no second ReplicaSet).
    # (The generation does move: a Deployment copies its annotations to its ReplicaSet.)
    assert after.spec.template == before.spec.template
    replica_sets = client.AppsV1Api(admin).list_namespaced_replica_set(kube_namespace).items
    assert len(replica_sets) == 1

    store.save({"last_desired": 2})
    assert store.load() == {"last_desired": 2}


def test_annotation_store_ignores_a_hand_edited_annotation(kube_cluster, kube_namespace):
    admin = kube_cluster.admin_client()
    create_deployment(admin, kube_namespace, "vllm")
    client.AppsV1Api(admin).patch_namespaced_deployment(
        "vllm",
        kube_namespace,
        {"metadata": {"annotations": {STATE_ANNOTATION: "{not json"}}},
        _content_type="application/merge-patch+json",
    )
    assert (
        AnnotationStateStore(admin, KubeScaleTarget(kube_namespace, "Deployment", "vllm", "app=vllm")).load()
        is None
    )


def test_annotation_store_on_missing_target_raises(kube_cluster, kube_namespace):
    store = AnnotationStateStore(
        kube_cluster.admin_client(), KubeScaleTarget(kube_namespace, "Deployment", "gone", "app=gone")
    )
    with pytest.raises(ActuationError, match="cannot get state annotation"):
        store.load()
    with pytest.raises(ActuationError, match="cannot patch state annotation"):
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
