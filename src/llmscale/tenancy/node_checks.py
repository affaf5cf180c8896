"""Seed 003 3.1's resource-layer admission: may this node take one more replica?

The seed's ``canScaleUp(node)``::

    node.FreeMemoryMB > 2048 && node.CPUThrottledRatio < 0.1 && node.DiskIOUtil < 0.7

Each comparison is strict, as written: a node with exactly 2,048 MiB free, or
CPU throttling of exactly 10%, or disk IO at exactly 70% fails
(``tests/tenancy/test_node_checks.py`` pins the boundaries). A reading that is
missing (the exporter is down, the series is absent) fails too: missing data
holds a scale-up as it holds a scale-down everywhere else in llmscale, never
reads as an idle node.

Live, the three readings come from Prometheus (:mod:`llmscale.tenancy.node_metrics`,
node-exporter and cAdvisor); in a backtest from the simulated node
(:mod:`llmscale.tenancy.node_model`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from llmscale.errors import ConfigError

__all__ = ["MIN_FREE_MEMORY_BYTES", "NodeSample", "NodeThresholds", "check_node"]

#: the seed's 2048 "MB" read as MiB, the unit a Go program's memory figures use: 2,147,483,648 B
MIN_FREE_MEMORY_BYTES: Final = 2048 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class NodeSample:
    """One node's readings; None = not observed."""

    #: node-exporter ``node_memory_MemAvailable_bytes``
    free_memory_bytes: float | None
    #: cAdvisor throttled / total CFS periods of the node's containers over the window, 0-1
    cpu_throttled_ratio: float | None
    #: node-exporter busy share of the busiest disk, ``rate(node_disk_io_time_seconds_total)``, 0-1
    disk_io_util: float | None

    def as_json(self) -> dict[str, float | None]:
        return {
            "free_memory_bytes": self.free_memory_bytes,
            "cpu_throttled_ratio": None
            if self.cpu_throttled_ratio is None
            else round(self.cpu_throttled_ratio, 6),
            "disk_io_util": None if self.disk_io_util is None else round(self.disk_io_util, 6),
        }


@dataclass(frozen=True, slots=True)
class NodeThresholds:
    """The seed's limits (defaults); a node passes when free memory is above and the ratios below."""

    min_free_memory_bytes: float = MIN_FREE_MEMORY_BYTES
    max_cpu_throttled_ratio: float = 0.1
    max_disk_io_util: float = 0.7

    def __post_init__(self) -> None:
        if not (math.isfinite(self.min_free_memory_bytes) and self.min_free_memory_bytes >= 0):
            raise ConfigError(
                f"min_free_memory_bytes = {self.min_free_memory_bytes}, must be finite and >= 0"
            )
        for name in ("max_cpu_throttled_ratio", "max_disk_io_util"):
            v = getattr(self, name)
            if not (math.isfinite(v) and 0.0 < v <= 1.0):
                raise ConfigError(f"{name} = {v}, must be in (0, 1]")


def check_node(sample: NodeSample, limits: NodeThresholds | None = None) -> tuple[str, ...]:
    """The checks ``sample`` fails, each as ``"<reading> <value> <why>"``; () when the node may scale up."""
    lim = limits or NodeThresholds()
    failed: list[str] = []
    mem = sample.free_memory_bytes
    if mem is None or math.isnan(mem):
        failed.append("free_memory: no data")
    elif not mem > lim.min_free_memory_bytes:
        failed.append(f"free_memory {mem / 2**20:,.0f} MiB <= {lim.min_free_memory_bytes / 2**20:,.0f} MiB")
    cpu = sample.cpu_throttled_ratio
    if cpu is None or math.isnan(cpu):
        failed.append("cpu_throttled: no data")
    elif not cpu < lim.max_cpu_throttled_ratio:
        failed.append(f"cpu_throttled {cpu:.1%} >= {lim.max_cpu_throttled_ratio:.0%}")
    disk = sample.disk_io_util
    if disk is None or math.isnan(disk):
        failed.append("disk_io: no data")
    elif not disk < lim.max_disk_io_util:
        failed.append(f"disk_io {disk:.1%} >= {lim.max_disk_io_util:.0%}")
    return tuple(failed)
