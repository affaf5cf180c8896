"""Tenancy on shared GPUs: a pool shared by tenants, quota/pool/node admission.

The MIG slices themselves are GPUs of the catalogue (:mod:`llmscale.perf.mig`).

Seed 003 4.2 (MIG slices mapped to tenant quotas) and 3.1 (the resource layer's
node checks). Importing this package reads no file and imports nothing heavy.
"""

from __future__ import annotations

from llmscale.tenancy.node_checks import NodeSample, NodeThresholds, check_node
from llmscale.tenancy.pool import Admission, MigPool, admit

__all__ = [
    "Admission",
    "MigPool",
    "NodeSample",
    "NodeThresholds",
    "admit",
    "check_node",
]
