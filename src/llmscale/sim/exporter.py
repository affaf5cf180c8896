"""The simulated fleet as a MetricSource: per-replica samples under real exporter names.

Gauges that real exporters average over a sample period (the DCGM utilisation
fields) are computed here from the replicas' cumulative counters, over the
time since this source last observed that replica.

``DCGM_FI_DEV_GPU_UTIL`` follows the reading of the design documents: the
share of time the SMs do useful math (so a memory-bandwidth-bound decode
batch reads low while HBM is saturated). The time-based reading NVML gives
("a kernel was executing") is exported as ``DCGM_FI_PROF_GR_ENGINE_ACTIVE``,
for policies that want it.
"""

from __future__ import annotations

from typing import Any

from llmscale.metrics.names import DCGM, SIM
from llmscale.metrics.names import VllmMetric as V
from llmscale.sim.fleet import Fleet
from llmscale.types import FleetView, Observation, Phase, ReplicaSample

__all__ = ["SimMetricSource"]

_MIB = 1024.0 * 1024.0


class SimMetricSource:
    """Observe a :class:`Fleet` at simulated time ``now_s``; never raises on missing data."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        perf: Any = fleet.perf
        self._peak_bw = float(perf.gpu.hbm_bandwidth_bytes_s)
        self._gpu_mem = float(perf.gpu.memory_bytes)
        # vLLM preallocates the whole KV pool at start-up, so framebuffer use is
        # weights + pool whatever the load (the "always ~90% used" reading operators see).
        self._fb_used = min(self._gpu_mem, self._gpu_mem * fleet.config.gpu_memory_utilization)
        self._last: dict[str, tuple[float, float, float, float]] = {}

    def observe(self, now_s: float) -> Observation:
        fleet = self.fleet
        fleet.sync_all(now_s)
        samples = []
        last = self._last
        seen = set()
        for r in fleet.replicas:
            seen.add(r.name)
            if r.phase == Phase.PENDING:
                # No container yet: nothing to scrape.
                samples.append(ReplicaSample(r.name, r.phase, ok=False))
                continue
            t0, busy0, active0, bytes0 = last.get(r.name, (r.created_s, 0.0, 0.0, 0.0))
            dt = now_s - t0
            if dt > 0.0:
                sm = (r.busy_s - busy0) / dt
                active = (r.active_s - active0) / dt
                bw = (r.dram_bytes - bytes0) / dt / self._peak_bw
            else:
                sm = active = bw = 0.0
            last[r.name] = (now_s, r.busy_s, r.active_s, r.dram_bytes)
            sm = min(sm, 1.0)
            active = min(active, 1.0)
            bw = min(bw, 1.0)
            mem_time = bw
            l2 = mem_time / (mem_time + sm) if (mem_time + sm) > 0 else 0.0
            kv = r.kv_usage()
            values = {
                V.RUNNING: float(r.num_running),
                V.WAITING: float(r.num_waiting),
                V.KV_USAGE: kv,
                V.KV_USAGE_OLD: kv,
                V.PREEMPTIONS: float(r.num_preemptions),
                V.PROMPT_TOKENS: float(r.prompt_tokens_total),
                V.GENERATION_TOKENS: float(r.gen_tokens_total),
                DCGM.GPU_UTIL: 100.0 * sm,
                DCGM.MEM_COPY_UTIL: 100.0 * bw,
                DCGM.SM_ACTIVE: sm,
                DCGM.GR_ENGINE_ACTIVE: active,
                DCGM.DRAM_ACTIVE: bw,
                DCGM.FB_USED: self._fb_used / _MIB,
                DCGM.FB_FREE: (self._gpu_mem - self._fb_used) / _MIB,
                SIM.L2_MISS: l2,
                SIM.KV_BLOCKS_TOTAL: float(r.total_blocks),
            }
            itl = r.hist_itl.snapshot()  # exported under both vLLM names
            hists = {
                V.TTFT: r.hist_ttft.snapshot(),
                V.E2E: r.hist_e2e.snapshot(),
                V.ITL: itl,
                V.ITL_OLD: itl,
                V.TPOT: r.hist_tpot.snapshot(),
                V.QUEUE_TIME: r.hist_queue.snapshot(),
            }
            samples.append(ReplicaSample(r.name, r.phase, ok=True, values=values, histograms=hists))
        for name in list(last):
            if name not in seen:
                del last[name]
        fleet_view = FleetView.from_replicas(fleet.spec_replicas, tuple(fleet.replicas_view()))
        return Observation(
            time_s=now_s, fleet=fleet_view, replicas=tuple(samples), gateway_queue=len(fleet.gateway)
        )
