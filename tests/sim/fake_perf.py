"""A tiny affine step-time model for unit tests of the simulator room alone.

Not the product's model (that is llmscale.perf, fitted to measurements): it
keeps sim tests independent of calibration changes and easy to reason about.
Decode step: 10 ms + 0.1 ms per sequence + 1 us per context token; prefill
adds 0.1 ms per token.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple


class StepCost(NamedTuple):
    duration_s: float
    sm_busy_s: float
    dram_bytes: float
    overhead_s: float


class DecodeAffine(NamedTuple):
    base_s: float
    per_ctx_s: float
    busy_base_s: float
    busy_per_ctx_s: float
    bytes_base: float
    bytes_per_ctx: float


@dataclass(frozen=True)
class FakeModel:
    max_context_tokens: int = 8192


@dataclass(frozen=True)
class FakeGpu:
    hbm_bandwidth_bytes_s: float = 3.35e12
    memory_bytes: int = 80 * 2**30
    peak_bf16_flops: float = 989e12
    family: str = "fake"
    name: str = "fake-gpu"


@dataclass(frozen=True)
class FakeKernel:
    """What the GPU counters read of ``PerfModel.kernel``: the FLOP rate behind ``sm_busy_s``."""

    step_flops_s: float = 500e12


@dataclass(frozen=True)
class FakeFamily:
    """Efficiencies within the data sheet (``llmscale.perf.bounds`` checks them for the counters)."""

    weight_bw_eff: float = 0.8
    act_bw_eff: float = 0.8
    gemm_flops_eff: float = 0.7
    serving_flops_scale: float = 1.0


class FakeCoeffs:
    attn_prefill_flops_eff: float = 0.5
    attn_kv_bw_eff: float = 0.8

    def family(self, name: str) -> FakeFamily:
        return FakeFamily()


class FakePerf:
    def __init__(
        self,
        blocks: int = 10_000,
        base_s: float = 0.010,
        per_seq_s: float = 1e-4,
        per_ctx_s: float = 1e-6,
        per_prefill_tok_s: float = 1e-4,
    ) -> None:
        self.blocks = blocks
        self.base_s = base_s
        self.per_seq_s = per_seq_s
        self.per_ctx_s = per_ctx_s
        self.per_prefill_tok_s = per_prefill_tok_s
        self.model = FakeModel()
        self.gpu = FakeGpu()
        self.kernel = FakeKernel()
        self.coeffs = FakeCoeffs()

    def kv_capacity_blocks(
        self, gpu_memory_utilization: float = 0.9, block_size: int = 16, **engine: int
    ) -> int:
        return self.blocks

    def decode_affine(self, b: int) -> DecodeAffine:
        base = self.base_s + self.per_seq_s * b
        return DecodeAffine(base, self.per_ctx_s, 0.2 * base, 0.0, 1.6e10, 1.3e5)

    def step(self, prefill_tokens: int, pairs: float, n_prefill: int, n_dec: int, ctx: int) -> StepCost:
        aff = self.decode_affine(n_dec)
        d = aff.base_s + aff.per_ctx_s * ctx + self.per_prefill_tok_s * prefill_tokens
        return StepCost(
            d,
            aff.busy_base_s + 0.9 * self.per_prefill_tok_s * prefill_tokens,
            aff.bytes_base + aff.bytes_per_ctx * ctx,
            0.001,
        )
