"""``llmscale run`` keeps ``slo``'s standby pool on a real ``emulate --enable-sleep-mode`` fleet.

The end-to-end half of ``tests/live/test_live_standby.py`` (the live loop against a fake cluster):
the typed ``Decision.standby`` of the policy, the core's record of it, and ``EmulateCluster``'s
``set_standby`` through emulate's admin API and vLLM's sleep endpoints, all in a real ``run``
process. A fleet of 3 with a pool of 2: every decision line carries ``standby: 2``, and two
replicas are started beside the serving ones and put to sleep once ready, so the fleet ends with
its serving replicas and two asleep (waking one takes the sleeping tier's seconds, not a cold start:
``tests/emulate/test_sleep_mode.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import yaml

from llmscale.emulate import EmulateConfig, EmulatorThread

TOKEN = "live-standby-admin-token-3456"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def sleepy():
    cfg = EmulateConfig(
        replicas=3,
        port=0,
        admin_api=True,
        admin_token=TOKEN,
        sleep_mode=True,
        pending_s=0.0,
        loading_s=0.0,
        warmup_s=0.0,
    )
    fleet = EmulatorThread(cfg)
    fleet.start()
    try:
        yield fleet
    finally:
        fleet.stop()


def test_run_keeps_slos_standby_pool_asleep_on_emulate(tmp_path: Path, sleepy: EmulatorThread) -> None:
    base = sleepy.base_url
    doc = {
        "target": {"name": "emulated", "model": "llama-3-8b", "gpu": "h100-80gb"},
        "metrics": {"source": "scrape", "scrape": {"emulate_url": base, "timeout_s": 2}},
        "policy": {"name": "slo", "params": {"standby_replicas": 2}},
        "guards": {"min_replicas": 1, "max_replicas": 4, "cooldown_down_s": 0, "drain_aware": False},
        "tick_s": 0.5,
        "mode": "apply",
        "actuator": {"kind": "emulate", "emulate": {"url": base}},
        "server": {"listen": "127.0.0.1:0"},
        "decision_log": {"path": str(tmp_path / "decisions.jsonl")},
        "state": {"store": "file", "path": str(tmp_path / "state.json")},
    }
    cfg = tmp_path / "llmscale.yaml"
    cfg.write_text(yaml.safe_dump(doc))
    env = {**os.environ, "LLMSCALE_EMULATE_ADMIN_TOKEN": TOKEN}
    proc = subprocess.run(
        [sys.executable, "-m", "llmscale.cli", "run", "--config", str(cfg), "--max-ticks", "6"],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(x) for x in (tmp_path / "decisions.jsonl").read_text().splitlines()]
    decided = [ln for ln in lines if ln.get("error") is None and ln["rule"] != "no-data"]
    assert decided and all(ln.get("standby") == 2 for ln in decided), json.dumps(decided, indent=1)[:3000]
    state = httpx.get(base + "/admin/replicas", headers=AUTH, timeout=5).json()
    phases = [r["phase"] for r in state["replicas"]]
    assert state["standby_replicas"] == 2 and phases.count("sleeping") == 2, state
    # the pool is beside the spec, not taken out of it
    assert phases.count("ready") == state["spec_replicas"] == decided[-1]["desired"], state
