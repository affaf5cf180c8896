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

Start tiers (:func:`start_tiers`): what a start costs depends on what is already
there. Each tier is the same three phases with the parts it skips removed:

* ``cold``: a new node, the image pulled, weights read from network storage.
  ``pending`` = node provisioning (``NODE_PROVISION_S``, 120 s) + scheduling and
  the image pull (``DEFAULT_PENDING_S``); ``loading`` = bootstrap + weights at
  ``NETWORK_LOAD_BYTES_S``; warm-up as above. Llama-3-8B on one H100: 180 +
  (10 + 34.4) + 28.8 = 253 s. The backtest's default start (:func:`cold_start`)
  is this tier on a node the cluster already has and weights at the published
  vLLM load rate (108 s): a fleet whose nodes outlive its replicas.
* ``warm_node``: the node kept its image and a copy of the weights on local
  NVMe (a replica ran there before). ``pending`` = ``WARM_NODE_PENDING_S`` (5 s:
  scheduling and container start, no pull); weights at the published vLLM load
  rate; the engine still bootstraps and warms up: 5 + 19.1 + 28.8 = 53 s.
* ``sleeping``: a vLLM replica in level-1 sleep mode (weights offloaded to host
  memory, KV cache freed, the process, its CUDA graphs and compiled kernels
  kept) woken up: weights copied back at ``HOST_TO_GPU_BYTES_S`` plus
  ``WAKE_BASE_S`` to re-allocate the KV cache and re-warm: 16.1 GB / 25 GB/s +
  1 s = 1.6 s. Its GPU stays allocated (and charged) while it sleeps.
"""

from __future__ import annotations

from typing import NamedTuple

from llmscale.errors import ConfigError
from llmscale.perf.catalogue import get_gpu, get_model, validate_tp

__all__ = [
    "BOOTSTRAP_S",
    "DEFAULT_PENDING_S",
    "HOST_TO_GPU_BYTES_S",
    "LOAD_BANDWIDTH_BYTES_S",
    "NETWORK_LOAD_BYTES_S",
    "NODE_PROVISION_S",
    "START_TIERS",
    "WAKE_BASE_S",
    "WARMUP_BASE_S",
    "WARMUP_S_PER_GB",
    "WARM_NODE_PENDING_S",
    "ColdStart",
    "StartTiers",
    "cold_start",
    "start_tiers",
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

#: The tiers a replica start can take, slowest first (the names the fleet records per start).
START_TIERS = ("cold", "warm_node", "sleeping")
#: A new GPU node from the cloud until it joins the cluster with its drivers, s. Reported
#: figures: "a pod requiring a new node (via Karpenter): ~5 minutes" including the pod's own
#: start (Hacker News item 44053826); Karpenter's GPU guidance (kubedojo, "GPU and AI/ML
#: workload scaling with Karpenter") counts minutes of instance launch and bootstrap before the
#: image pull. 120 s for the node alone, the pull and the engine on top.
NODE_PROVISION_S = 120.0
#: Weights read from network storage, bytes/s: seed 002 5.2 reports a 140 GB Llama-3-70B taking
#: over 5 minutes from NAS (140e9 / 300 s = 0.47 GB/s) against 30-60 s from local NVMe.
NETWORK_LOAD_BYTES_S = 140e9 / 300.0
#: A kept node: the pod is scheduled and its cached image started, no pull, s.
WARM_NODE_PENDING_S = 5.0
#: Copying offloaded weights back from pinned host memory, bytes/s: ~25 GB/s, what a PCIe Gen4
#: x16 link moves in practice (32 GB/s raw); Gen5 on H100 hosts doubles it, so this errs slow.
HOST_TO_GPU_BYTES_S = 25e9
#: Re-allocating the KV cache and a one-token re-warm after a wake-up, s. vLLM's sleep-mode
#: posts report level-1 wake-ups of 0.1-0.4 s for small models and up to ~6 s for the largest
#: (blog.vllm.ai 2025-10-03 and 2025-10-26, "18-200x faster than a full reload"); 1 s plus the copy
#: keeps an 8B model (1.6 s) inside that range.
WAKE_BASE_S = 1.0


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


class StartTiers(NamedTuple):
    """The three ways a replica can start (see the module docstring), each as phases."""

    cold: ColdStart
    warm_node: ColdStart
    sleeping: ColdStart


def start_tiers(model: str, gpu: str, tp: int) -> StartTiers:
    """Published-default durations of each start tier of ``model`` on ``tp`` x ``gpu``.

    Llama-3-8B on one H100: cold 253 s (new node, pull, weights from network storage),
    warm node 53 s, sleeping 1.6 s (``tests/perf/test_start_tiers.py`` pins them).
    """
    base = cold_start(model, gpu, tp)
    per_gpu_bytes = get_model(model).weights_bytes / tp
    cold = ColdStart(
        NODE_PROVISION_S + DEFAULT_PENDING_S,
        BOOTSTRAP_S + per_gpu_bytes / NETWORK_LOAD_BYTES_S,
        base.warmup_s,
    )
    warm_node = ColdStart(WARM_NODE_PENDING_S, base.loading_s, base.warmup_s)
    # Level-1 sleep keeps the process, its compiled kernels and CUDA graphs: only the copy back
    # and the KV re-allocation remain, booked as loading.
    sleeping = ColdStart(0.0, WAKE_BASE_S + per_gpu_bytes / HOST_TO_GPU_BYTES_S, 0.0)
    return StartTiers(cold, warm_node, sleeping)
