"""The DCGM exporter's GPU counters of one simulated replica, each as DCGM defines it.

Written once for everything that turns a replica's cumulative counters into
DCGM readings: the simulator's exporter (:mod:`llmscale.sim.exporter`, which
the emulator's ``/metrics`` pages also serve through) and the backtest's time
series (:mod:`llmscale.backtest.runner`).

What a replica knows over a sampling period of ``period_s`` seconds
(:mod:`llmscale.sim.replica` accumulates them; this module only reads them):

* ``active_s`` -- seconds an engine iteration was running: work in flight.
* ``busy_s`` -- FLOPs / the FLOP rate a serving step sustains
  (``PerfModel.kernel.step_flops_s``: peak x GEMM efficiency x serving scale
  / TP sync), i.e. the seconds the SMs need for the step's math.
* ``dram_bytes`` -- bytes moved to or from HBM (weights, KV, activations).

Each counter below quotes the definition it implements (DCGM's field
comments in ``dcgmlib/dcgm_fields.h``, dcgm-exporter's help strings in
``etc/default-counters.csv`` and ``etc/dcp-metrics-included.csv``, NVML's
``nvmlUtilization_t``) and argues its formula. Worked on Llama-3-8B on one
H100 with the coefficients committed at 8827116 (``PerfModel.step``, context
1,000 tokens a sequence), every reading taken over a period in which the
replica iterates back to back:

===========================  ===========  ============  =============
                             decode, b=1  decode, b=64  prefill 2,048
===========================  ===========  ============  =============
step duration                7.9 ms       17.1 ms       60.9 ms
``DCGM_FI_DEV_GPU_UTIL``     100 %        100 %         100 %
``DCGM_FI_PROF_SM_ACTIVE``   0.64         0.55          0.80
``..._PIPE_TENSOR_ACTIVE``   0.002        0.059         0.49
``DCGM_FI_PROF_DRAM_ACTIVE`` 0.57         0.49          0.13
===========================  ===========  ============  =============

GPU_UTIL says "work in flight", nothing more: it cannot tell a replica
decoding one sequence from one at its batch limit. The tensor pipe tracks the
useful math (prefill is compute; decode streams weights and KV and does
little math). SM_ACTIVE sits between: it counts the SMs waiting on HBM as
active, as DCGM does, so a decode step reads the time its weights take to
stream, whatever the batch, and falls as the batch grows (each sequence adds
host time, not HBM time).

Limits, from what the replica accumulates: the host time inside an iteration
(scheduling, sampling, launch stalls: ``StepCost.overhead_s``, 14 % of a
batch-1 decode step above, 31 % at batch 64) is not accumulated by the
replica, so ``GR_ENGINE_ACTIVE`` reads it as active; it is an upper bound.
``SM_ACTIVE`` takes the larger of the math time and the HBM time of the
period, a lower bound on their per-step maximum summed over steps (equal when
the steps of a period are alike, as in steady serving).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from llmscale.metrics.names import DCGM

__all__ = [
    "DCGM_HELP",
    "MAX_WARPS_PER_SM",
    "WARPS_PER_ACTIVE_SM",
    "GpuCounterSpec",
    "GpuCounters",
    "gpu_counters",
]

#: Resident-warp slots of one SM on every GPU in the catalogue (A100: compute capability 8.0;
#: H100/H200: 9.0): 2,048 threads = 64 warps (CUDA C++ Programming Guide, "Technical
#: Specifications per Compute Capability").
MAX_WARPS_PER_SM = 64
#: Warps resident on an SM while it is active in a serving step. The GEMMs that hold the SMs
#: run one CTA per SM (their tiles fill shared memory): on Hopper a 384-thread CTA, one
#: producer and two consumer warp groups = 12 warps (CUTLASS's warp-specialised kernels);
#: on Ampere a 256-thread CTA, one or two per SM = 8-16 warps. FlashAttention runs 4-12
#: warps per CTA. 12 of 64 slots = 0.19 occupancy while active.
WARPS_PER_ACTIVE_SM = 12

#: The help string dcgm-exporter publishes for each field it exports (``etc/default-counters.csv``
#: and ``etc/dcp-metrics-included.csv`` of NVIDIA/dcgm-exporter; SM_ACTIVE and SM_OCCUPANCY are
#: commented out there but shipped, and enabled by listing them).
DCGM_HELP: dict[str, str] = {
    DCGM.GPU_UTIL: "GPU utilization (in %).",
    DCGM.MEM_COPY_UTIL: "Memory utilization (in %).",
    DCGM.FB_FREE: "Framebuffer memory free (in MiB).",
    DCGM.FB_USED: "Framebuffer memory used (in MiB).",
    DCGM.GR_ENGINE_ACTIVE: "Ratio of time the graphics engine is active.",
    DCGM.SM_ACTIVE: "The ratio of cycles an SM has at least 1 warp assigned.",
    DCGM.SM_OCCUPANCY: "The ratio of number of warps resident on an SM.",
    DCGM.TENSOR_ACTIVE: "Ratio of cycles the tensor (HMMA) pipe is active.",
    DCGM.DRAM_ACTIVE: "Ratio of cycles the device memory interface is active sending or receiving data.",
}


@dataclass(frozen=True, slots=True)
class GpuCounterSpec:
    """The GPU constants the counters need, per GPU of a replica's tensor-parallel group."""

    #: dense BF16 tensor-core peak, FLOP/s (H100 SXM: 989e12)
    peak_flops_s: float
    #: the FLOP rate a serving step sustains, FLOP/s: ``busy_s`` = FLOPs / this (H100: 606e12)
    step_flops_s: float
    #: peak HBM bandwidth, bytes/s (H100 SXM: 3.35e12)
    hbm_bytes_s: float
    #: fraction of peak HBM bandwidth a weight-streaming kernel sustains (fitted; H100: 0.89)
    stream_bw_eff: float

    def __post_init__(self) -> None:
        for name in ("peak_flops_s", "step_flops_s", "hbm_bytes_s", "stream_bw_eff"):
            if not getattr(self, name) > 0.0:
                raise ValueError(f"GpuCounterSpec.{name} = {getattr(self, name)}, must be > 0")
        if self.step_flops_s > self.peak_flops_s:
            raise ValueError(
                f"GpuCounterSpec.step_flops_s = {self.step_flops_s:.4g} exceeds peak_flops_s = "
                f"{self.peak_flops_s:.4g}: a serving step cannot outrun the tensor cores"
            )

    @classmethod
    def from_perf(cls, perf: Any) -> GpuCounterSpec:
        """From a :class:`~llmscale.perf.step_time.PerfModel` (or anything with its attributes)."""
        gpu = perf.gpu
        # The bound every calibration profile is held to (llmscale.perf.bounds), checked here
        # too so that coefficients built by hand fail with the factor named, not a bare ValueError.
        from llmscale.perf.bounds import check_physical

        check_physical(perf.coeffs, {}, [gpu.family], f"{gpu.name} coefficients")
        return cls(
            # FP8 GEMMs (precision.py) run on the FP8 tensor cores: their peak is the ceiling
            peak_flops_s=float(getattr(perf, "peak_gemm_flops_s", gpu.peak_bf16_flops)),
            step_flops_s=float(perf.kernel.step_flops_s),
            hbm_bytes_s=float(gpu.hbm_bandwidth_bytes_s),
            stream_bw_eff=float(perf.coeffs.family(gpu.family).weight_bw_eff),
        )


class GpuCounters(NamedTuple):
    """One sampling period's DCGM readings, in the exporter's units (percent or 0-1 ratio)."""

    gpu_util_pct: float
    mem_copy_util_pct: float
    gr_engine_active: float
    sm_active: float
    sm_occupancy: float
    tensor_active: float
    dram_active: float


_IDLE = GpuCounters(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)


def _ratio(x: float) -> float:
    return 0.0 if x < 0.0 else (1.0 if x > 1.0 else x)


def gpu_counters(
    spec: GpuCounterSpec, period_s: float, active_s: float, busy_s: float, dram_bytes: float
) -> GpuCounters:
    """The DCGM readings of a period of ``period_s`` s in which the replica accumulated
    ``active_s``, ``busy_s`` and ``dram_bytes`` (per GPU; see the module docstring).

    An empty period (``period_s <= 0``) or an idle one reads 0 everywhere.
    Worked, a batch-1 Llama-3-8B decode step on an H100 (7.91 ms, 0.026 ms of
    math at 606 TFLOP/s, 15.2 GB): GPU_UTIL 100 %; tensor 0.026 x 606 / 989 /
    7.91 = 0.002; DRAM 15.2e9 / 3.35e12 / 7.91 ms = 0.57; SM active
    max(0.003, 0.57 / 0.89) = 0.64; occupancy 0.64 x 12 / 64 = 0.12.
    """
    if not period_s > 0.0:
        return _IDLE
    # DCGM_FI_DEV_GPU_UTIL, field 203 "GPU Utilization", is NVML's utilization.gpu:
    # "Percent of time over the past sample period during which one or more kernels
    # was executing on the GPU" (nvmlUtilization_t; the period is 1/6 s to 1 s by product).
    # The engine's host gaps between iterations are milliseconds, shorter than a sample
    # slot, so every slot with an iteration in flight reads busy: the share of the period
    # with work in flight, near 100 % on a replica with any request running.
    gr = _ratio(active_s / period_s)
    # DCGM_FI_PROF_GR_ENGINE_ACTIVE, field 1001: "Ratio of time the graphics engine is
    # active. The graphics engine is active if a graphics/compute context is bound and the
    # graphics pipe or compute pipe is busy." Counted by the hardware, it would leave out
    # the host time inside an iteration; the replica does not accumulate that time (see
    # the module docstring), so this reads the time with an iteration in flight, an upper
    # bound, equal to GPU_UTIL as a ratio.
    # DCGM_FI_PROF_DRAM_ACTIVE, field 1005: "The ratio of cycles the device memory
    # interface is active sending or receiving data." An active interface moves data at
    # its peak rate, so active cycles / elapsed = bytes / (peak bandwidth x period):
    # 0.5 is half of peak bandwidth.
    dram = _ratio(dram_bytes / (spec.hbm_bytes_s * period_s))
    # DCGM_FI_PROF_PIPE_TENSOR_ACTIVE, field 1004: "The ratio of cycles the any tensor
    # pipe is active (off the peak sustained elapsed cycles)". The pipe runs at peak while
    # active, so active time = FLOPs / peak; FLOPs = busy_s x the serving step's rate.
    tensor = _ratio(busy_s * spec.step_flops_s / (spec.peak_flops_s * period_s))
    # DCGM_FI_PROF_SM_ACTIVE, field 1002: "The ratio of cycles an SM has at least 1 warp
    # assigned (computed from the number of cycles and elapsed cycles)", averaged over
    # SMs. A warp waiting on a load is assigned, so the SMs are active while they do the
    # step's math at the sustained rate (busy_s: its tensor pipes idle for the operand
    # loads, epilogues and syncs in between, 1 - 606/989 = 39 % of it on an H100) and
    # while they wait for HBM to stream at the rate a streaming kernel reaches
    # (dram / stream_bw_eff). In a kernel the two overlap (roofline): the larger counts.
    # Host time runs no kernel and counts for neither; an SM is never active without the
    # engine active, hence the cap.
    sm = min(gr, max(busy_s / period_s, dram / spec.stream_bw_eff))
    tensor = min(tensor, sm)
    # DCGM_FI_PROF_SM_OCCUPANCY, field 1003: "The ratio of number of warps resident on an
    # SM (number of resident as a ratio of the theoretical maximum number of warps per
    # elapsed cycle)": resident warps while active / 64 slots, over the active share.
    occupancy = sm * (WARPS_PER_ACTIVE_SM / MAX_WARPS_PER_SM)
    # DCGM_FI_DEV_MEM_COPY_UTIL, field 204 "Memory Utilization", is NVML's
    # utilization.memory: "Percent of time over the past sample period during which
    # global (device) memory was being read or written" -- the memory interface's busy
    # time, which DRAM_ACTIVE measures cycle by cycle: the same reading, in percent.
    return GpuCounters(
        gpu_util_pct=100.0 * gr,
        mem_copy_util_pct=100.0 * dram,
        gr_engine_active=gr,
        sm_active=sm,
        sm_occupancy=occupancy,
        tensor_active=tensor,
        dram_active=dram,
    )
