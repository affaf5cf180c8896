"""Links between GPUs that carry a prompt's KV cache from a prefill to a decode replica.

Used by the disaggregated simulator (:mod:`llmscale.sim.disagg`) and by the
policies that budget a prefill pool's share of the TTFT SLO
(:mod:`llmscale.policies.disagg`): ``transfer_s = prompt_tokens x
kv_bytes_per_token_per_gpu / bandwidth + latency``. Worked number
(tests/sim/test_disagg.py): Llama-3-8B keeps 131,072 bytes of KV per token; a
2,048-token prompt (268 MB) takes 0.60 ms over NVLink4, 5.4 ms over one NDR
InfiniBand port and 21.5 ms over 100 GbE, plus each link's fixed latency.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

import numpy as np

from llmscale.errors import ConfigError

__all__ = ["INTERCONNECTS", "POOLS", "Interconnect", "get_interconnect", "kv_transfer_s"]

#: the two pools, in the order every per-pool listing uses
POOLS: Final = ("prefill", "decode")


@dataclass(frozen=True)
class Interconnect:
    """One GPU's link to the GPU that receives its KV shard.

    ``bandwidth_bytes_s`` is one direction's rate per GPU (a transfer is one-way);
    ``latency_s`` is the fixed cost of one transfer (link latency plus the RDMA
    read's setup), paid once per request.
    """

    name: str
    bandwidth_bytes_s: float
    latency_s: float
    source: str

    def __post_init__(self) -> None:
        if not 0.0 < self.bandwidth_bytes_s < math.inf:
            raise ConfigError(
                f"interconnect {self.name}: bandwidth_bytes_s = {self.bandwidth_bytes_s}, must be > 0"
            )
        if not 0.0 <= self.latency_s < math.inf:
            raise ConfigError(f"interconnect {self.name}: latency_s = {self.latency_s}, must be >= 0")


#: Public link rates. The latencies are per-transfer costs assumed from the links' published
#: port-to-port latencies (under 1 us for NVLink and NDR InfiniBand, a few us for RoCE) plus
#: tens of microseconds of transfer-library setup per request; they matter only for short prompts
#: (at 2,048 tokens the bandwidth term is 12x to 400x larger).
INTERCONNECTS: Final = MappingProxyType(
    {
        # NVIDIA H100 SXM datasheet: "NVLink: 900GB/s" per GPU (fourth-generation NVLink, 18 links,
        # both directions together), so 450 GB/s each way. Prefill and decode on one NVLink domain.
        "nvlink": Interconnect("nvlink", 450e9, 20e-6, "NVIDIA H100 datasheet, NVLink4 900 GB/s per GPU"),
        # NVIDIA ConnectX-7 / Quantum-2 NDR: 400 Gb/s per port = 50 GB/s; a DGX H100 has one
        # 400G port per GPU (8 x ConnectX-7), so each GPU sends its shard over its own port.
        "infiniband": Interconnect(
            "infiniband", 50e9, 50e-6, "NVIDIA NDR InfiniBand 400 Gb/s per port, one port per GPU (DGX H100)"
        ),
        # IEEE 802.3 100 Gb/s Ethernet (RoCE v2): 12.5 GB/s per port.
        "ethernet": Interconnect("ethernet", 12.5e9, 100e-6, "IEEE 802.3 100 GbE, 12.5 GB/s per port"),
    }
)


def get_interconnect(name: str) -> Interconnect:
    """The interconnect called ``name`` (one of :data:`INTERCONNECTS`); ConfigError otherwise."""
    try:
        return INTERCONNECTS[name]
    except KeyError:
        raise ConfigError(f"interconnect = {name!r}, must be one of {', '.join(INTERCONNECTS)}") from None


def kv_transfer_s(
    prompt_tokens: float | np.ndarray, kv_bytes_per_token_per_gpu: float, link: Interconnect
) -> Any:
    """Seconds to move a prompt's KV from a prefill to a decode replica (pre: tokens >= 0).

    Each GPU of the TP group holds ``kv_bytes_per_token_per_gpu`` bytes per token
    (``llmscale.perf.PerfModel.kv_bytes_per_token``) and sends them over its own
    link, so the group finishes when one GPU's shard has crossed. E.g. Llama-3-8B at TP 1,
    2,048 tokens over InfiniBand: 2,048 x 131,072 B / 50e9 B/s + 50 us = 5.42 ms.
    """
    tokens = np.asarray(prompt_tokens, dtype=np.float64)
    return tokens * kv_bytes_per_token_per_gpu / link.bandwidth_bytes_s + link.latency_s
