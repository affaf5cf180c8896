"""Tenancy on shared GPUs: MIG slices as GPUs, a pool shared by tenants, quota/pool/node admission.

Seed 003 4.2 (MIG slices mapped to tenant quotas) and 3.1 (the resource layer's
node checks). Importing this package reads no file and imports nothing heavy.
"""

from __future__ import annotations

from llmscale.tenancy.mig import MIG_GPUS, MigProfile, get_mig_gpu, slice_gpu_spec
from llmscale.tenancy.node_checks import NodeSample, NodeThresholds, check_node
from llmscale.tenancy.pool import Admission, MigPool, admit

__all__ = [
    "MIG_GPUS",
    "Admission",
    "MigPool",
    "MigProfile",
    "NodeSample",
    "NodeThresholds",
    "admit",
    "check_node",
    "get_mig_gpu",
    "slice_gpu_spec",
]
