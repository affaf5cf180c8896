"""`llmscale tune --ray ADDRESS`: the same search, its trials run as tasks on a Ray cluster.

The test starts a local Ray instance (``support/ray_local.py``) in this process, runs `llmscale
tune --ray <its address>` as a separate process, as a user would against a cluster, and checks
that every trial ran on the Ray node.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from llmscale.policies.config_file import load_policy_config
from support.ray_local import LOOPBACK_ONLY

ray = pytest.importorskip("ray", reason="needs ray (the test extra): pip install -e '.[test]'")

SRC = str(Path(__file__).resolve().parents[2] / "src")


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
    from llmscale.backtest.ray_fanout import host_port

    assert host_port(address) == expected
