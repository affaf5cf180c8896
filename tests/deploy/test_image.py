"""The container image, built from ./Containerfile by scripts/build_image.sh and run in the suite.

The build is the one a user runs (Debian's buildah and mmdebstrap, no Docker engine, no image
registry); a context already built is found by its hash and not built again, so the suite pays
for the build only when the sources, the Containerfile or the requirements change. The image is
then run the way Kubernetes would: its entry point as the non-root user, and ``llmscale run`` in
dry-run against an ``emulate`` fleet on this machine, with the config mounted read-only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from llmscale import __version__
from llmscale.emulate import EmulateConfig, EmulatorThread

REPO = Path(__file__).resolve().parents[2]
BUILDAH = ["buildah", "--storage-driver", "vfs"]
TOKEN = "image-test-admin-token-5678"

pytestmark = pytest.mark.slow


def _buildah(*args: str, timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*BUILDAH, *args], capture_output=True, text=True, timeout=timeout_s, check=False)


@pytest.fixture(scope="module")
def image() -> str:
    if os.geteuid() != 0:
        pytest.skip("building the image needs root (buildah's vfs storage and chroot isolation)")
    build = _build_image()
    assert build.returncode == 0, build.stderr[-4000:]
    name = build.stdout.strip().splitlines()[-1]
    # The second run is the one a user gets after the first (and the suite on an unchanged
    # tree): the context is found built, nothing is built again, and it must succeed too,
    # also when this build is the only one in the storage.
    again = _build_image()
    assert again.returncode == 0, again.stderr[-4000:]
    assert "already built from this context" in again.stderr
    assert again.stdout.strip().splitlines()[-1] == name
    return name


def _build_image() -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(REPO / "scripts" / "build_image.sh")],
        capture_output=True,
        text=True,
        timeout=2400,
        check=False,
        cwd=REPO,
        # the wheels are downloaded by the pip of the interpreter running the tests
        env={**os.environ, "PYTHON": sys.executable},
    )


@pytest.fixture(scope="module")
def container(image: str) -> Iterator[str]:
    # One working container for the module: vfs storage copies the whole image (~1 GB) per container.
    made = _buildah("from", "--quiet", "--pull=never", image)
    assert made.returncode == 0, made.stderr
    ctr = made.stdout.strip()
    try:
        yield ctr
    finally:
        _buildah("rm", ctr)


def _inspect(image: str) -> dict:
    out = _buildah("inspect", "--type", "image", image)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_the_image_runs_as_the_manifests_user_with_an_exec_entry_point(image: str) -> None:
    config = _inspect(image)["OCIv1"]["config"]
    assert config["User"] == "65532:65532"
    assert config["Entrypoint"] == ["/opt/llmscale/bin/llmscale"]
    manifest = yaml.safe_load((REPO / "deploy" / "controller" / "deployment.yaml").read_text())
    pod = manifest["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsUser"] == 65532
    # The build tags the image with the name the manifests pull, at this version.
    named = f"ghcr.io/llmscale/llmscale:{__version__}"
    assert pod["containers"][0]["image"] == named
    assert _inspect(named)["FromImageID"] == _inspect(image)["FromImageID"]


def test_help_runs_from_the_compiled_install(container: str) -> None:
    out = _buildah("run", "--isolation", "chroot", container, "--", "/opt/llmscale/bin/llmscale", "--help")
    assert out.returncode == 0, out.stderr
    for command in ("backtest", "run", "emulate", "calibrate"):
        assert command in out.stdout
    probe = _buildah(
        "run", "--isolation", "chroot", container, "--", "/opt/llmscale/bin/python", "-c",
        "import llmscale.sim.fleet as f, os; print(os.getuid(), f.__file__)",
    )  # fmt: skip
    assert probe.returncode == 0, probe.stderr
    uid, module = probe.stdout.split()
    assert uid == "65532" and module.endswith(".so"), probe.stdout


@pytest.fixture
def emulate() -> Iterator[EmulatorThread]:
    cfg = EmulateConfig(
        replicas=2, port=0, pending_s=0.0, loading_s=0.0, warmup_s=0.0, admin_api=True, admin_token=TOKEN
    )
    fleet = EmulatorThread(cfg)
    fleet.start()
    try:
        yield fleet
    finally:
        fleet.stop()


def test_run_in_dry_run_against_emulate_from_the_image(
    container: str, emulate: EmulatorThread, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    work.chmod(0o777)  # the container's user (65532) writes its decision log here
    doc = {
        "target": {"name": "emulated"},
        "metrics": {"source": "scrape", "scrape": {"emulate_url": emulate.base_url, "timeout_s": 2}},
        "policy": {"name": "static", "params": {"replicas": 3}},
        "guards": {"min_replicas": 1, "max_replicas": 4},
        "tick_s": 0.5,
        "mode": "dry-run",
        "actuator": {"kind": "emulate", "emulate": {"url": emulate.base_url}},
        "server": {"listen": "127.0.0.1:0"},
        "decision_log": {"path": "/work/decisions.jsonl"},
    }
    (work / "llmscale.yaml").write_text(yaml.safe_dump(doc))
    out = _buildah(
        "run", "--isolation", "chroot", "--network", "host",
        "--env", f"LLMSCALE_EMULATE_ADMIN_TOKEN={TOKEN}",
        "--volume", f"{work}:/work",
        container, "--",
        "/opt/llmscale/bin/llmscale", "run", "--config", "/work/llmscale.yaml", "--max-ticks", "2",
        timeout_s=180,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [json.loads(x) for x in (work / "decisions.jsonl").read_text().splitlines()]
    assert len(lines) == 2
    assert all(x["mode"] == "dry-run" and x["applied"] is False for x in lines)
    first = lines[0]
    assert first["desired"] == 3 and first["replicas"]["ready"] == 2 and first["unknown_replicas"] == 0
    # dry-run: the emulated fleet was read, never scaled
    spec = httpx.get(
        emulate.base_url + "/admin/replicas", timeout=5, headers={"Authorization": f"Bearer {TOKEN}"}
    ).json()["spec_replicas"]
    assert spec == 2
