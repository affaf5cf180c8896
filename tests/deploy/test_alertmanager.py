"""deploy/alertmanager: amtool accepts the config, routes go where they should, and a real
Alertmanager inhibits as seed 003 4.4 says (HighErrorRate of a gray release mutes the
infrastructure alerts of the same experiment and namespace)."""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from _deploy import DEPLOY, alert_names, require

CONFIG = DEPLOY / "alertmanager" / "alertmanager.yml"


def test_amtool_check_config() -> None:
    amtool = require("amtool")
    out = subprocess.run([amtool, "check-config", str(CONFIG)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


def test_no_receiver_is_named_null() -> None:
    """Alertmanager rejects a receiver called `null`."""
    cfg = yaml.safe_load(CONFIG.read_text())
    assert "null" not in {r["name"] for r in cfg["receivers"]}


@pytest.mark.parametrize(
    ("labels", "receiver"),
    [
        pytest.param(
            ["alertname=LLMQueueBacklog", "severity=warning", "component=llm-fleet"],
            "llm-fleet-oncall",
            id="fleet-warning",
        ),
        pytest.param(
            ["alertname=LLMTTFTP99OverSLO", "severity=critical", "component=llm-fleet"],
            "llm-fleet-page",
            id="fleet-critical",
        ),
        pytest.param(
            ["alertname=LlmscaleActuationErrors", "severity=warning", "component=llmscale"],
            "llmscale-owners",
            id="controller-warning",
        ),
        pytest.param(
            ["alertname=LlmscaleControllerDown", "severity=critical", "component=llmscale"],
            "llmscale-owners-page",
            id="controller-critical",
        ),
    ],
)
def test_routes(labels: list[str], receiver: str) -> None:
    amtool = require("amtool")
    out = subprocess.run(
        [amtool, "config", "routes", "test", f"--config.file={CONFIG}", *labels],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip() == receiver


def test_inhibit_rule_source_is_one_of_our_alerts() -> None:
    cfg = yaml.safe_load(CONFIG.read_text())
    seed = cfg["inhibit_rules"][0]
    assert 'alertname="HighErrorRate"' in seed["source_matchers"]
    assert 'experiment_phase="gray"' in seed["source_matchers"]
    assert seed["equal"] == ["experiment_id", "namespace"]
    assert "HighErrorRate" in alert_names()


# ---- a real Alertmanager --------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> object:
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read() or b"null")


@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[str]:
    binary = require("prometheus-alertmanager")
    port = _free_port()
    log = (tmp_path / "alertmanager.log").open("w")
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={CONFIG}",
            f"--storage.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",  # no gossip: one instance, no port to collide
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                pytest.fail(
                    f"alertmanager exited {proc.returncode}: {(tmp_path / 'alertmanager.log').read_text()}"
                )
            try:
                urllib.request.urlopen(f"{base}/-/ready", timeout=1).close()
                break
            except (urllib.error.URLError, ConnectionError):
                if time.monotonic() > deadline:
                    pytest.fail("alertmanager not ready in 30 s")
                time.sleep(0.1)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _alert(labels: dict[str, str]) -> dict:
    now = datetime.now(UTC)
    return {
        "labels": labels,
        "annotations": {"summary": "posted by tests/deploy"},
        "startsAt": now.isoformat(),
        "endsAt": (now + timedelta(hours=1)).isoformat(),
    }


def test_gray_error_rate_inhibits_infrastructure_alerts(alertmanager: str) -> None:
    exp = {"namespace": "llm", "experiment_id": "exp-7"}
    alerts = [
        _alert(
            {
                "alertname": "HighErrorRate",
                "experiment_phase": "gray",
                "severity": "critical",
                "component": "llm-fleet",
                **exp,
            }
        ),
        _alert({"alertname": "CPUOveruse", "severity": "warning", **exp}),
        _alert({"alertname": "PodCrashLooping", "severity": "warning", "pod": "vllm-gray-0", **exp}),
        # another experiment in the same namespace is not muted by exp-7's errors
        _alert(
            {"alertname": "CPUOveruse", "severity": "warning", "namespace": "llm", "experiment_id": "exp-8"}
        ),
        # errors of a stable release mute nothing: the rule is about the gray phase
        _alert(
            {
                "alertname": "HighErrorRate",
                "experiment_phase": "stable",
                "severity": "critical",
                "component": "llm-fleet",
                "namespace": "llm",
                "experiment_id": "exp-9",
            }
        ),
        _alert(
            {"alertname": "CPUOveruse", "severity": "warning", "namespace": "llm", "experiment_id": "exp-9"}
        ),
    ]
    req = urllib.request.Request(
        f"{alertmanager}/api/v2/alerts",
        data=json.dumps(alerts).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=5) as r:
        assert r.status == 200

    def key(a: dict) -> tuple[str, str]:
        return (a["labels"]["alertname"], a["labels"].get("experiment_id", ""))

    # The inhibitor sees new source alerts asynchronously; poll until the state settles.
    deadline = time.monotonic() + 20
    while True:
        got = {key(a): a for a in _get(f"{alertmanager}/api/v2/alerts")}  # type: ignore[union-attr]
        settled = len(got) == len(alerts) and got[("CPUOveruse", "exp-7")]["status"]["state"] == "suppressed"
        if settled or time.monotonic() > deadline:
            break
        time.sleep(0.2)

    source = got[("HighErrorRate", "exp-7")]
    assert source["status"]["state"] == "active"
    assert source["status"]["inhibitedBy"] == []
    for name in ("CPUOveruse", "PodCrashLooping"):
        status = got[(name, "exp-7")]["status"]
        assert status["state"] == "suppressed", (name, status)
        assert status["inhibitedBy"] == [source["fingerprint"]], (name, status)
    for exp_id in ("exp-8", "exp-9"):
        other = got[("CPUOveruse", exp_id)]["status"]
        assert other["state"] == "active" and other["inhibitedBy"] == [], (exp_id, other)
