"""One GPU type of a mixed fleet (:class:`~llmscale.sim.fleet.Fleet` ``pools``).

A fleet of one type has none: its replicas share the fleet's step-time model. With pools, each
replica belongs to one, prices its iterations and sizes its KV cache by that type's GPU, and the
router weighs it by ``weight_rps`` (least expected wait, ``Fleet._least_expected_wait``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from llmscale.errors import ConfigError

__all__ = ["GpuPool"]


@dataclass(frozen=True)
class GpuPool:
    """A GPU type in a mixed fleet."""

    #: the catalogue's GPU name (``h100-80gb``)
    gpu: str
    #: its step-time model (:func:`llmscale.perf.get_perf_model` for the deployment on this GPU)
    perf: Any
    #: GPUs one replica holds (the deployment's TP)
    gpus_per_replica: float
    #: the router's weight: requests/s one replica of this type sustains (the capacity model's
    #: answer for the workload's shape); only ratios between pools matter
    weight_rps: float

    def __post_init__(self) -> None:
        if not (self.weight_rps > 0.0 and math.isfinite(self.weight_rps)):
            raise ConfigError(f"{self.gpu}: weight_rps = {self.weight_rps}, must be finite and > 0")
        if not self.gpus_per_replica > 0.0:
            raise ConfigError(f"{self.gpu}: gpus_per_replica = {self.gpus_per_replica}, must be > 0")
