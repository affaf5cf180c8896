"""Node checks read live: a real Prometheus scrapes node-exporter- and cAdvisor-shaped pages.

Two nodes' pages are served on 127.0.0.1 with counters that advance in wall time: node
``busy`` has its disk 90% busy and 30% of its CFS periods throttled, node ``calm`` 20% and
2%. Prometheus computes the rates; :func:`read_node_sample` reads them through its API.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from llmscale.tenancy.node_checks import check_node
from llmscale.tenancy.node_metrics import read_node_sample
from support.page_server import PageServer
from support.prometheus_server import PrometheusServer, TargetGroup

NODES = {
    # node: (MemAvailable bytes, disk busy s/s, throttled share of CFS periods)
    "busy": (48 * 2**30, 0.9, 0.3),
    "calm": (48 * 2**30, 0.2, 0.02),
}


def _page(now_s: float, mem: float, disk: float, throttled: float) -> str:
    periods = 10.0 * now_s  # CFS periods of 100 ms: 10 a second
    return (
        "# TYPE node_memory_MemAvailable_bytes gauge\n"
        f"node_memory_MemAvailable_bytes {mem:.0f}\n"
        "# TYPE node_disk_io_time_seconds_total counter\n"
        f'node_disk_io_time_seconds_total{{device="nvme0n1"}} {disk * now_s:.3f}\n'
        f'node_disk_io_time_seconds_total{{device="sda"}} {0.01 * now_s:.3f}\n'
        "# TYPE container_cpu_cfs_periods_total counter\n"
        f'container_cpu_cfs_periods_total{{container="vllm"}} {periods:.3f}\n'
        "# TYPE container_cpu_cfs_throttled_periods_total counter\n"
        f'container_cpu_cfs_throttled_periods_total{{container="vllm"}} {throttled * periods:.3f}\n'
    )


@pytest.fixture
def node_pages(page_server: PageServer) -> Iterator[PageServer]:
    """Rewrites every node's page every 50 ms from a monotonic clock, until the test ends."""
    stop = threading.Event()
    t0 = time.monotonic()

    def loop() -> None:
        while not stop.is_set():
            now = 1000.0 + time.monotonic() - t0
            for node, (mem, disk, thr) in NODES.items():
                page_server.set(f"/{node}/metrics", _page(now, mem, disk, thr))
            stop.wait(0.05)

    th = threading.Thread(target=loop, name="node-pages", daemon=True)
    th.start()
    try:
        yield page_server
    finally:
        stop.set()
        th.join(5.0)


def test_node_checks_from_prometheus(
    node_pages: PageServer, prometheus_server: Callable[..., PrometheusServer]
) -> None:
    prom = prometheus_server(
        scrape_interval_s=0.5,
        static_targets=[
            TargetGroup([f"127.0.0.1:{node_pages.port}"], {"node": n, "__metrics_path__": f"/{n}/metrics"})
            for n in NODES
        ],
    )
    # A rate over a window Prometheus has only partly filled reads low (0.9 read 0.53 three
    # seconds after start-up): wait until both targets have 5 s of samples: 11 in the last 6 s at 0.5 s.
    prom.wait_for(
        "count_over_time(up[6s])", lambda r: len(r) == 2 and all(float(x["value"][1]) >= 11 for x in r), 30.0
    )
    deadline = time.monotonic() + 30.0
    samples = {}
    while time.monotonic() < deadline:
        samples = {n: read_node_sample(prom.url, f'node="{n}"', window="5s") for n in NODES}
        if all(
            None not in (s.free_memory_bytes, s.cpu_throttled_ratio, s.disk_io_util) for s in samples.values()
        ):
            break
        time.sleep(0.25)
    else:
        pytest.fail(f"no complete readings within 30 s: {samples}\n{prom.log_tail()}")

    busy, calm = samples["busy"], samples["calm"]
    assert busy.free_memory_bytes == 48 * 2**30
    assert busy.disk_io_util == pytest.approx(0.9, abs=0.1)  # the busiest device, not the sum
    assert busy.cpu_throttled_ratio == pytest.approx(0.3, abs=0.05)
    assert calm.disk_io_util == pytest.approx(0.2, abs=0.1)
    assert calm.cpu_throttled_ratio == pytest.approx(0.02, abs=0.01)
    failed = check_node(busy)
    assert [f.split()[0] for f in failed] == ["cpu_throttled", "disk_io"]
    assert check_node(calm) == ()
    # A node no exporter reports on reads as no data, and no data holds.
    ghost = read_node_sample(prom.url, 'node="ghost"', window="5s")
    assert check_node(ghost) == ("free_memory: no data", "cpu_throttled: no data", "disk_io: no data")
