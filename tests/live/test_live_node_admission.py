"""Seed 003 3.1's node checks hold a live scale-up: real Prometheus, real emulator, `llmscale run`.

Two node pages shaped like node-exporter and cAdvisor are served on 127.0.0.1 and scraped by a
real Prometheus; the emulated fleet (1 replica) runs `static` asking for 3. While the only node
has its disk 90% busy and 30% of its CPU periods throttled, the scale-up is held at 1 and the
record says the node layer held it and why; once the node is calm, the same run scales to 3.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from test_live_run_emulate import AUTH, _run, emulate  # noqa: F401  (fixture)
from test_live_run_emulate import _config as emulate_config

from llmscale.emulate import EmulatorThread
from llmscale.tenancy.node_checks import check_node
from llmscale.tenancy.node_metrics import read_node_sample
from support.page_server import PageServer, page_server  # noqa: F401  (fixture)
from support.prometheus_server import PrometheusServer, TargetGroup, prometheus_server  # noqa: F401

#: (MemAvailable bytes, disk busy s/s, throttled share of CFS periods)
BUSY = (48 * 2**30, 0.9, 0.3)
CALM = (48 * 2**30, 0.2, 0.02)


class NodePage:
    """One node's page, its counters advancing in wall time at the rates of ``state``."""

    def __init__(self, server: PageServer) -> None:
        self.state = BUSY
        self._server = server
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="node-page", daemon=True)

    def _loop(self) -> None:
        t_prev = time.monotonic()
        disk = periods = throttled = 0.0
        while not self._stop.is_set():
            now = time.monotonic()
            dt = now - t_prev
            t_prev = now
            mem, d, thr = self.state
            disk += d * dt
            periods += 10.0 * dt
            throttled += thr * 10.0 * dt
            self._server.set(
                "/node/metrics",
                f"node_memory_MemAvailable_bytes {mem:.0f}\n"
                f'node_disk_io_time_seconds_total{{device="nvme0n1"}} {disk:.4f}\n'
                f'container_cpu_cfs_periods_total{{container="vllm"}} {periods:.4f}\n'
                f'container_cpu_cfs_throttled_periods_total{{container="vllm"}} {throttled:.4f}\n',
            )
            self._stop.wait(0.05)

    def __enter__(self) -> NodePage:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5.0)


def _wait_reading(prom: PrometheusServer, want: Callable[[tuple[str, ...]], bool]) -> None:
    """Until the node's checks over the 5 s window fail as wanted (bounded): every reading, not one
    of them, since the throttling and disk rates cross their limits at different moments."""
    deadline = time.monotonic() + 40.0
    failed: tuple[str, ...] = ()
    while time.monotonic() < deadline:
        failed = check_node(read_node_sample(prom.url, 'node="n1"', window="5s"))
        if want(failed):
            return
        time.sleep(0.25)
    pytest.fail(f"the node's checks never read as wanted (last {failed})\n{prom.log_tail()}")


def _config(tmp_path: Path, base_url: str, prom_url: str) -> Path:
    node_checks = {"prometheus_url": prom_url, "nodes": ['node="n1"'], "window": "5s"}
    return emulate_config(tmp_path, base_url, state={"store": "none"}, admission={"node_checks": node_checks})


def _spec(fleet: EmulatorThread) -> int:
    return int(httpx.get(fleet.base_url + "/admin/replicas", timeout=5, headers=AUTH).json()["spec_replicas"])


def test_a_scale_up_no_node_can_take_is_held_and_says_why(
    tmp_path: Path,
    emulate: EmulatorThread,  # noqa: F811
    page_server: PageServer,  # noqa: F811
    prometheus_server: Callable[..., PrometheusServer],  # noqa: F811
) -> None:
    prom = prometheus_server(
        scrape_interval_s=0.5,
        static_targets=[
            TargetGroup(
                [f"127.0.0.1:{page_server.port}"], {"node": "n1", "__metrics_path__": "/node/metrics"}
            )
        ],
    )
    cfg = _config(tmp_path, emulate.base_url, prom.url)
    with NodePage(page_server) as node:
        _wait_reading(prom, lambda f: [x.split()[0] for x in f] == ["cpu_throttled", "disk_io"])
        proc = _run("--config", str(cfg), "--max-ticks", "2")
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert _spec(emulate) == 1
        held = [json.loads(x) for x in (tmp_path / "decisions.jsonl").read_text().splitlines()]
        assert held and all(r["desired_before_guards"] == 3 and r["desired"] == 1 for r in held)
        assert all(r["guard"] == "node-check" and r["admission"]["held_by"] == "node" for r in held)
        failed = held[-1]["admission"]["nodes"]['node="n1"']["failed"]
        assert [f.split()[0] for f in failed] == ["cpu_throttled", "disk_io"], failed

        node.state = CALM
        _wait_reading(prom, lambda f: f == ())
        proc = _run("--config", str(cfg), "--max-ticks", "1")
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    assert _spec(emulate) == 3
    last = json.loads((tmp_path / "decisions.jsonl").read_text().splitlines()[-1])
    assert last["desired"] == 3 and last["admission"]["held_by"] is None and last["applied"] is True
