"""The readings of a simulated node, for seed 003 3.1's checks in a backtest.

What the replicas on a node do to its three readings:

* **Disk IO.** A replica in Loading streams its weights from the node's disk at
  the cold-start model's rate (:data:`llmscale.perf.cold_start.LOAD_BANDWIDTH_BYTES_S`,
  1.77 GB/s); ``node_disk_io_time_seconds_total`` then advances by the share of
  each second the disk is busy, which for one sequential stream is its share of
  the disk's bandwidth. With the default 6.9 GB/s drive (a PCIe 4.0 NVMe data
  center SSD's sequential read, e.g. Samsung PM9A3's data sheet) one loading
  replica reads 0.257, two 0.514, three 0.771: a fourth concurrent load is held
  at 70% (``tests/tenancy/test_node_checks.py``). Capped at 1.
* **Free memory.** Each replica holds host memory: vLLM's default ``swap_space``
  of 4 GiB of pinned CPU memory for preempted KV blocks plus the engine
  process itself (Python, tokenizer, the CUDA context's host side), 4 GiB by
  default, an estimate to set per deployment (``replica_host_memory_gib``).
* **CPU throttling.** CFS throttling depends on the containers' CPU limits and
  on neighbours the simulator does not run, so it comes only from the
  scenario's injected background (``background``), 0 otherwise.

``background`` adds readings from outside the fleet (other workloads, a noisy
neighbour) over a time window, so a test or a what-if can put a node under
pressure and watch admissions move to other nodes or be held.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from llmscale.errors import ConfigError
from llmscale.perf.cold_start import LOAD_BANDWIDTH_BYTES_S
from llmscale.tenancy.node_checks import NodeSample

__all__ = ["NodeBackground", "NodeSpec", "node_sample"]

_GIB = 1024**3


@dataclass(frozen=True)
class NodeSpec:
    """A node of the pool, as far as the checks read it."""

    memory_gib: float = 2048.0  # a DGX H100's 2 TB of system memory
    #: memory the OS and the node's daemons use, GiB
    base_used_gib: float = 64.0
    #: host memory one replica holds (swap_space 4 GiB + ~4 GiB of process), GiB
    replica_host_memory_gib: float = 8.0
    #: sequential read bandwidth of the disk that holds the model cache, bytes/s
    disk_read_bytes_s: float = 6.9e9

    def __post_init__(self) -> None:
        for name in ("memory_gib", "base_used_gib", "replica_host_memory_gib", "disk_read_bytes_s"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0):
                raise ConfigError(f"node.{name} = {v}, must be finite and >= 0")
        if self.disk_read_bytes_s <= 0 or self.memory_gib <= 0:
            raise ConfigError("node.memory_gib and node.disk_read_bytes_s must be > 0")


@dataclass(frozen=True)
class NodeBackground:
    """Load from outside the fleet on ``node`` during [from_s, to_s)."""

    node: int
    from_s: float
    to_s: float
    used_memory_gib: float = 0.0
    cpu_throttled_ratio: float = 0.0
    disk_io_util: float = 0.0

    def __post_init__(self) -> None:
        if not (0.0 <= self.from_s < self.to_s):
            raise ConfigError(
                f"background from_s = {self.from_s}, to_s = {self.to_s}: need 0 <= from_s < to_s"
            )
        for name in ("cpu_throttled_ratio", "disk_io_util"):
            v = getattr(self, name)
            if not (math.isfinite(v) and 0.0 <= v <= 1.0):
                raise ConfigError(f"background.{name} = {v}, must be in [0, 1]")
        if not (math.isfinite(self.used_memory_gib) and self.used_memory_gib >= 0):
            raise ConfigError(f"background.used_memory_gib = {self.used_memory_gib}, must be >= 0")


def node_sample(
    spec: NodeSpec,
    node: int,
    replicas: int,
    loading: int,
    now_s: float,
    background: Sequence[NodeBackground] = (),
) -> NodeSample:
    """Readings of ``node`` hosting ``replicas`` replicas (not yet gone), ``loading`` of them in Loading."""
    used_gib = spec.base_used_gib + replicas * spec.replica_host_memory_gib
    cpu = 0.0
    disk = loading * LOAD_BANDWIDTH_BYTES_S / spec.disk_read_bytes_s
    for b in background:
        if b.node == node and b.from_s <= now_s < b.to_s:
            used_gib += b.used_memory_gib
            cpu += b.cpu_throttled_ratio
            disk += b.disk_io_util
    free = max(0.0, spec.memory_gib - used_gib) * _GIB
    return NodeSample(free, min(1.0, cpu), min(1.0, disk))
