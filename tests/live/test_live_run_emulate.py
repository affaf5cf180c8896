"""``llmscale run`` end to end on real components: emulate's replicas, scraped and scaled over HTTP.

emulate's admin API is on with a token; ``run`` reads it from $LLMSCALE_EMULATE_ADMIN_TOKEN (the
default) or from the config's token files.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
import yaml

from llmscale.emulate import EmulateConfig, EmulatorThread

TOKEN = "live-run-admin-token-1234"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def emulate():
    pytest.importorskip("llmscale.metrics.scrape", reason="metrics/scrape.py not built yet")
    cfg = EmulateConfig(
        replicas=1, port=0, pending_s=0.0, loading_s=0.0, warmup_s=0.0, admin_api=True, admin_token=TOKEN
    )
    fleet = EmulatorThread(cfg)
    fleet.start()
    try:
        yield fleet
    finally:
        fleet.stop()


def _config(tmp_path: Path, base_url: str, **over) -> Path:
    doc = {
        "target": {"name": "emulated"},
        "metrics": {"source": "scrape", "scrape": {"emulate_url": base_url, "timeout_s": 2}},
        "policy": {"name": "static", "params": {"replicas": 3}},
        "guards": {"min_replicas": 1, "max_replicas": 4, "drain_aware": False},
        "tick_s": 0.5,
        "mode": "apply",
        "actuator": {"kind": "emulate", "emulate": {"url": base_url}},
        "server": {"listen": "127.0.0.1:0"},
        "decision_log": {"path": str(tmp_path / "decisions.jsonl")},
        "state": {"store": "file", "path": str(tmp_path / "state.json")},
        **over,
    }
    p = tmp_path / "llmscale.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def _run(*args: str, token_in_env: bool = True) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "LLMSCALE_EMULATE_ADMIN_TOKEN"}
    if token_in_env:
        env["LLMSCALE_EMULATE_ADMIN_TOKEN"] = TOKEN
    return subprocess.Popen(
        [sys.executable, "-m", "llmscale.cli", "run", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def test_run_scales_the_emulated_fleet_and_logs_why(tmp_path, emulate):
    cfg = _config(tmp_path, emulate.base_url)
    proc = _run("--config", str(cfg), "--max-ticks", "2")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    spec = httpx.get(emulate.base_url + "/admin/replicas", timeout=5, headers=AUTH).json()["spec_replicas"]
    assert spec == 3
    lines = [json.loads(x) for x in (tmp_path / "decisions.jsonl").read_text().splitlines()]
    assert len(lines) == 2
    assert lines[0]["applied"] is True and lines[0]["desired"] == 3 and lines[0]["rule"] == "fixed"
    assert lines[0]["replicas"]["spec"] == 1 and lines[0]["unknown_replicas"] == 0
    assert json.loads((tmp_path / "state.json").read_text())["last_decision"]["final"] == 3


def test_dry_run_touches_nothing_and_sigterm_stops_cleanly(tmp_path, emulate):
    cfg = _config(tmp_path, emulate.base_url)
    proc = _run("--config", str(cfg), "--mode", "dry-run")
    log = tmp_path / "decisions.jsonl"
    try:
        deadline = time.monotonic() + 90
        while not (log.exists() and log.read_text().count("\n") >= 2):
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "no decision within 90 s"
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert "SIGTERM: stopping" in err
    first = json.loads(log.read_text().splitlines()[0])
    assert first["mode"] == "dry-run" and first["desired"] == 3 and first["applied"] is False
    assert (
        httpx.get(emulate.base_url + "/admin/replicas", timeout=5, headers=AUTH).json()["spec_replicas"] == 1
    )
    assert not (tmp_path / "state.json").exists()


def test_sigterm_ends_run_while_its_tick_hangs(tmp_path, emulate):
    """Issue 19: a tick blocked (here: a replica that accepts the scrape and never answers, under a
    120 s time-out) no longer holds SIGTERM until it ends: the loop polls its stop event while the
    tick runs in a worker thread, and the process exits in seconds."""
    silent = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    threading.Thread(target=lambda: accepted.append(silent.accept()[0]), daemon=True).start()
    url = f"http://127.0.0.1:{silent.getsockname()[1]}/metrics"
    cfg = _config(
        tmp_path,
        emulate.base_url,
        metrics={
            "source": "scrape",
            "scrape": {"static_targets": [{"name": "r0", "url": url}], "timeout_s": 120},
        },
    )
    proc = _run("--config", str(cfg), "--mode", "dry-run")
    try:
        deadline = time.monotonic() + 90
        while not accepted:  # the first tick is in its scrape
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "no scrape within 90 s"
            time.sleep(0.05)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        silent.close()
        for conn in accepted:
            conn.close()
    assert proc.returncode == 0, err
    assert "SIGTERM: stopping" in err
    assert took < 20.0, took  # was: until the 120 s scrape time-out


def test_the_token_can_come_from_files_named_in_the_config(tmp_path, emulate):
    token_file = tmp_path / "emulate-token"
    token_file.write_text(TOKEN + "\n")
    cfg = _config(
        tmp_path,
        emulate.base_url,
        metrics={
            "source": "scrape",
            "scrape": {
                "emulate_url": emulate.base_url,
                "emulate_token_file": str(token_file),
                "timeout_s": 2,
            },
        },
        actuator={"kind": "emulate", "emulate": {"url": emulate.base_url, "token_file": str(token_file)}},
    )
    proc = _run("--config", str(cfg), "--max-ticks", "1", token_in_env=False)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert (
        httpx.get(emulate.base_url + "/admin/replicas", timeout=5, headers=AUTH).json()["spec_replicas"] == 3
    )


def test_without_the_token_actuation_fails_and_says_why(tmp_path, emulate):
    cfg = _config(tmp_path, emulate.base_url)
    proc = _run("--config", str(cfg), "--max-ticks", "1", token_in_env=False)
    _, err = proc.communicate(timeout=120)
    assert "401" in err and "LLMSCALE_EMULATE_ADMIN_TOKEN" in err and "1 failed" in err, err
    assert (
        httpx.get(emulate.base_url + "/admin/replicas", timeout=5, headers=AUTH).json()["spec_replicas"] == 1
    )


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_once_exits_1_when_its_only_tick_failed(tmp_path):
    # A well-formed URL where nothing listens: the config is valid, the tick cannot see the fleet.
    nowhere = f"http://127.0.0.1:{_closed_port()}"
    cfg = _config(tmp_path, nowhere)
    proc = _run("--config", str(cfg), "--once")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    assert "llmscale: error: the last tick failed: ActuationError: emulate admin API" in err
    (line,) = [json.loads(x) for x in (tmp_path / "decisions.jsonl").read_text().splitlines()]
    assert line["error"].startswith("ActuationError: emulate admin API") and line["applied"] is False


def test_an_unwritable_decision_log_stops_the_controller_before_it_scales(tmp_path, emulate):
    cfg = _config(
        tmp_path, emulate.base_url, decision_log={"path": str(tmp_path / "no-such-dir" / "d.jsonl")}
    )
    proc = _run("--config", str(cfg), "--once")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, err
    # refused with the config's other files before the controller starts (config.check_run_files)
    assert "llmscale.yaml: decision_log.path " in err and "does not exist" in err and "Traceback" not in err
    # static asks for 3: nothing was scaled without a record of it
    assert (
        httpx.get(emulate.base_url + "/admin/replicas", timeout=5, headers=AUTH).json()["spec_replicas"] == 1
    )
    assert not (tmp_path / "state.json").exists()


def test_an_outage_of_the_fleet_is_recorded_and_every_replica_counts_unknown(tmp_path, monkeypatch):
    """The live path built from a config (wiring, PodScrapeSource, EmulateCluster) over a real
    emulated fleet of 2, which then goes away: each tick during the outage fails, writes its line
    with the error, and the unknown-replicas gauge says 2, not the 0 of the last good tick."""
    from llmscale.config import load_config
    from llmscale.wiring import build_runtime

    monkeypatch.setenv("LLMSCALE_EMULATE_ADMIN_TOKEN", TOKEN)  # what the in-process actuator reads
    fleet = EmulatorThread(
        EmulateConfig(
            replicas=2, port=0, pending_s=0.0, loading_s=0.0, warmup_s=0.0, admin_api=True, admin_token=TOKEN
        )
    )
    fleet.start()
    stopped = False
    cfg = load_config(_config(tmp_path, fleet.base_url, policy={"name": "static", "params": {"replicas": 2}}))
    runtime = build_runtime(cfg, config_name="llmscale.yaml")
    try:
        c = runtime.controller
        first = c.tick(1000.0)
        assert first is not None and first.error is None and first.unknown_replicas == 0
        assert c.metrics.registry.get_sample_value("llmscale_unknown_replicas") == 0.0
        fleet.stop()
        stopped = True
        assert c.tick(1002.0) is None
        assert c.metrics.registry.get_sample_value("llmscale_unknown_replicas") == 2.0
    finally:
        runtime.close()
        if not stopped:
            fleet.stop()
    lines = [json.loads(x) for x in (tmp_path / "decisions.jsonl").read_text().splitlines()]
    assert [ln["error"] is None for ln in lines] == [True, False]
    assert "emulate admin API" in lines[1]["error"] and lines[1]["unknown_replicas"] == 2
