"""Default cold-start timeline of a new vLLM replica, from published start-up figures.

Published facts (see the shared-data README): vLLM starts Llama-2-7B on one
A100 in about 45 s wall-clock, of which framework bootstrap ~10 s, weight
loading ~7.6 s, torch.compile ~8.3 s and CUDA-graph capture ~1.4 s; Llama-2-13B
takes about 59 s. The listed phases add up to 27.3 s: the other ~17.7 s are
the memory-profiling forward pass, KV-cache allocation and API-server start,
which we book under warm-up. In a cluster, scheduling and pulling the image
come first.

Model (per replica; TP ranks load their shards in parallel):

* ``pending_s``  = pod scheduling + image pull, default 60 s (~10 GB vLLM
  image at ~200 MB/s plus a few seconds of scheduling); a parameter, since it
  depends on the cluster and on image caching.
* ``loading_s``  = 10 s bootstrap + weights per GPU / 1.774 GB/s, the load
  rate that reads Llama-2-7B's 13.48 GB in the published 7.6 s.
* ``warmup_s``   = 19.97 s + 0.551 s per GB of weights per GPU: the two
  constants solve the two published totals (45 s and 59 s) given the loading
  model: 7B: 45 - (10 + 7.6) = 27.4 s; 13B (26.03 GB): 59 - (10 + 14.68) =
  34.3 s; slope (34.3 - 27.4) / (26.03 - 13.48) = 0.551 s/GB. Larger shards
  mean a longer profiling pass and larger graphs to capture: warm-up grows
  mildly with size.

Worked numbers: Llama-2-7B, 1 x A100: 60 + 17.6 + 27.4 = 105 s (45 s without
``pending``); Llama-2-70B, 4 x A100 (34.5 GB per GPU): 60 + 29.4 + 39.0 = 128 s;
Llama-3-8B, 1 x H100 (16.1 GB): 60 + 19.1 + 28.8 = 108 s.
"""

from __future__ import annotations

from typing import NamedTuple

from llmscale.errors import ConfigError
from llmscale.perf.catalogue import get_gpu, get_model, validate_tp

__all__ = [
    "BOOTSTRAP_S",
    "DEFAULT_PENDING_S",
    "LOAD_BANDWIDTH_BYTES_S",
    "WARMUP_BASE_S",
    "WARMUP_S_PER_GB",
    "ColdStart",
    "cold_start",
]

#: Pod scheduling + image pull of a ~10 GB vLLM image, s.
DEFAULT_PENDING_S = 60.0
#: Python imports, engine and worker start-up, s (published ~10 s).
BOOTSTRAP_S = 10.0
#: Weight-load rate per GPU: Llama-2-7B's 13,476,831,232 bytes in 7.6 s.
LOAD_BANDWIDTH_BYTES_S = 13_476_831_232 / 7.6
#: Warm-up (compile + CUDA graphs + profiling + KV allocation) independent of size, s.
WARMUP_BASE_S = 19.97
#: Warm-up growth per GB (1e9 bytes) of weights per GPU, s.
WARMUP_S_PER_GB = 0.551


class ColdStart(NamedTuple):
    """Phases of a replica start, seconds."""

    #: Waiting for a node and pulling the container image.
    pending_s: float
    #: Framework bootstrap + reading the weights into GPU memory.
    loading_s: float
    #: torch.compile, CUDA-graph capture, memory profiling, KV-cache allocation.
    warmup_s: float

    @property
    def total_s(self) -> float:
        """Time from scale-up decision to serving, s."""
        return self.pending_s + self.loading_s + self.warmup_s


def cold_start(model: str, gpu: str, tp: int, *, pending_s: float = DEFAULT_PENDING_S) -> ColdStart:
    """Default cold-start phases of ``model`` on ``tp`` x ``gpu`` (see the module docstring)."""
    m = get_model(model)
    get_gpu(gpu)  # validates the name; the load path is storage-bound, not GPU-bound
    validate_tp(m, tp)
    if pending_s < 0:
        raise ConfigError(f"pending_s = {pending_s}, must be >= 0")
    per_gpu_bytes = m.weights_bytes / tp
    loading_s = BOOTSTRAP_S + per_gpu_bytes / LOAD_BANDWIDTH_BYTES_S
    warmup_s = WARMUP_BASE_S + WARMUP_S_PER_GB * per_gpu_bytes / 1e9
    return ColdStart(float(pending_s), loading_s, warmup_s)
