"""`llmscale tune --ray ADDRESS`: the same search, its trials run as tasks on a Ray cluster.

The test starts a local Ray instance bound to 127.0.0.1 (2 CPUs, no dashboard) in this process,
runs `llmscale tune --ray <its address>` as a separate process, as a user would against a
cluster, and checks that every trial ran on the Ray node. ``ray.shutdown()`` then ends the
processes the instance started, and only those.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from llmscale.policies.config_file import load_policy_config

ray = pytest.importorskip("ray", reason="needs ray (the test extra): pip install -e '.[test]'")

SRC = str(Path(__file__).resolve().parents[2] / "src")


#: Ray replaces a loopback address with the machine's own "remotely reachable" one, unless it is
#: told that this is no cluster (ray._private.ray_constants.ENABLE_RAY_CLUSTER, read from this
#: variable at import): then every part of the local instance stays on 127.0.0.1.
LOOPBACK_ONLY = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


@pytest.fixture
def ray_cluster(monkeypatch):
    from ray._private import ray_constants

    monkeypatch.setattr(ray_constants, "ENABLE_RAY_CLUSTER", False)
    for key, value in LOOPBACK_ONLY.items():
        monkeypatch.setenv(key, value)
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        object_store_memory=100 * 1024 * 1024,
        log_to_driver=False,
    )
    try:
        ctx = ray.get_runtime_context()
        yield {"address": ctx.gcs_address, "node_id": ctx.get_node_id()}
    finally:
        ray.shutdown()


def test_tune_runs_its_trials_on_ray(ray_cluster, tmp_path):
    out = tmp_path / "tuned.yaml"
    env = {**os.environ, "PYTHONPATH": SRC, "LLMSCALE_PURE_PYTHON": "1", **LOOPBACK_ONLY}
    assert ray_cluster["address"].startswith("127.0.0.1:"), ray_cluster
    args = [
        "tune", "--workload", "azure-like", "--duration-s", "600", "--rate-scale", "0.1",
        "--min-replicas", "1", "--max-replicas", "12", "--initial-replicas", "2",
        "--param", "target_utilization", "--trials", "3", "--out", str(out),
        "--ray", ray_cluster["address"],
    ]  # fmt: skip
    run = subprocess.run(
        [sys.executable, "-m", "llmscale.cli", *args], capture_output=True, text=True, env=env, timeout=600
    )
    assert run.returncode == 0, run.stderr[-4000:]
    assert "3 trials in study 'slo' (3 run now)" in run.stdout, run.stdout
    study = optuna.load_study(study_name="slo", storage=f"sqlite:///{tmp_path / 'tuned.optuna.db'}")
    ran_on = {t.user_attrs.get("ran_on") for t in study.trials}
    assert ran_on == {f"ray node {ray_cluster['node_id']}"}, ran_on
    assert list(load_policy_config(out)) == ["slo"]


def _closed_port() -> int:
    """A loopback port nothing listens on (bound for a moment, then released)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_tune_refuses_a_ray_address_nothing_listens_on(tmp_path):
    # Ray's client retries an unreachable GCS without end: before the probe, this run never returned.
    port = _closed_port()
    env = {**os.environ, "PYTHONPATH": SRC, "LLMSCALE_PURE_PYTHON": "1"}
    args = ["tune", "--workload", "azure-like", "--duration-s", "600", "--trials", "2",
            "--out", str(tmp_path / "t.yaml"), "--ray", f"127.0.0.1:{port}"]  # fmt: skip
    run = subprocess.run(
        [sys.executable, "-m", "llmscale.cli", *args], capture_output=True, text=True, env=env, timeout=120
    )
    assert run.returncode == 2, (run.returncode, run.stderr[-2000:])
    assert f"--ray 127.0.0.1:{port}: cannot reach a Ray cluster" in run.stderr, run.stderr[-2000:]
    assert not (tmp_path / "t.yaml").exists()


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("10.0.0.5:6379", ("10.0.0.5", 6379)),
        ("ray://head.example:10001", ("head.example", 10001)),
        ("[::1]:6379", ("::1", 6379)),
        ("head-without-port", None),
    ],
)
def test_ray_address_forms_probed(address, expected):
    from llmscale.tune.executors import _host_port

    assert _host_port(address) == expected
