"""The simulated fleet as a MetricSource: per-replica samples under real exporter names.

Gauges that real exporters average over a sample period (the DCGM utilisation
fields) are computed here from the replicas' cumulative counters, over the
time since this source last observed that replica, by
:func:`llmscale.sim.gpu_counters.gpu_counters`: each field means what DCGM
defines it to mean (``DCGM_FI_DEV_GPU_UTIL`` the share of time with a kernel
executing, so ~100 % on a replica with any request in flight; the profiling
fields ``DCGM_FI_PROF_*`` what the SMs, tensor pipes and HBM did). The
emulator's ``/metrics`` pages are this source over a one-replica fleet.

With ``sub_tick=True`` it also samples the documents' signals at their own
resolution (:mod:`llmscale.sim.sub_tick`): each replica's
``DCGM_FI_PROF_DRAM_ACTIVE`` and generated tokens (the increase of
``vllm:generation_tokens_total``) per 100 ms of simulated time, in
``ReplicaSample.sub_tick``, and the fleet's queue every second (the driver
calls :meth:`SimMetricSource.sample_queue` on each whole second), in
``Observation.queue_per_s``. Off by default: the backtest turns it on for a
policy that reads those signals, or when it writes a decision log.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from librt.vecs import vec
from mypy_extensions import i64

from llmscale.metrics.names import DCGM, SIM
from llmscale.metrics.names import VllmMetric as V
from llmscale.sim.fleet import Fleet
from llmscale.sim.gpu_counters import GpuCounterSpec, gpu_counters
from llmscale.sim.histogram import BucketHistogram
from llmscale.sim.replica import JUMP, Replica
from llmscale.sim.sub_tick import BW_SAMPLE_PERIOD_S, QUEUE_SAMPLE_PERIOD_S, StepBuckets
from llmscale.types import FleetView, HistogramView, Observation, Phase, ReplicaSample, SubTickSeries

__all__ = ["SimMetricSource"]

_MIB = 1024.0 * 1024.0


@runtime_checkable
class CountsOutcomes(Protocol):
    """A fleet that counts its resolved requests by outcome (:class:`~llmscale.types.Status`
    code -> count); the emulator's one-replica view does not."""

    @property
    def counts(self) -> vec[i64]: ...


class _Scraped:
    """What the source remembers of one replica between observations.

    The counters at the last observation (the DCGM gauges are rates since
    then), and each latency histogram's last exposition with the count and
    sum it was taken at: a histogram whose count and sum have not moved has
    observed nothing (every observation adds a weight >= 1), so its previous
    snapshot is still exact and is served again instead of re-accumulating
    ~30 buckets. At a 2 s tick (Knative) an idle or lightly loaded replica's
    TTFT, E2E and queue-time histograms rarely move between two scrapes.
    """

    __slots__ = ("active", "busy", "bytes", "hists", "replica", "t")

    def __init__(self, replica: Replica, t: float, busy: float, active: float, dram: float) -> None:
        self.replica = replica
        self.t = t
        self.busy = busy
        self.active = active
        self.bytes = dram
        #: per histogram (ttft, e2e, itl, tpot, queue, generation and prompt tokens): (count, sum,
        #: its snapshot)
        self.hists: list[tuple[float, float, HistogramView] | None] = [None] * 7


def _snapshot(memo: _Scraped, k: int, h: BucketHistogram) -> HistogramView:
    """``h.snapshot()``, reusing the previous one while ``h`` has observed nothing since."""
    last = memo.hists[k]
    count, total = h.count, h.sum
    if last is not None and last[0] == count and last[1] == total:
        return last[2]
    snap = h.snapshot()
    memo.hists[k] = (count, total, snap)
    return snap


class SimMetricSource:
    """Observe a :class:`Fleet` at simulated time ``now_s``; never raises on missing data."""

    def __init__(self, fleet: Fleet, *, sub_tick: bool = False) -> None:
        self.fleet = fleet
        perf: Any = fleet.perf
        self._spec = GpuCounterSpec.from_perf(perf)
        self.sub_tick = sub_tick
        #: bytes that keep the HBM interface busy for a whole 100 ms sample (H100: 335 MB)
        self._bucket_bytes = self._spec.hbm_bytes_s * BW_SAMPLE_PERIOD_S
        #: the queue samples taken since the last observation, and the time of the newest
        self._queue: list[float] = []
        self._queue_end_s = 0.0
        if sub_tick:
            for r in fleet.replicas:
                r.step_log = StepBuckets(r.created_s)
        self._gpu_mem = float(perf.gpu.memory_bytes)
        # DCGM_FI_DEV_FB_USED (field 252, "Used Frame Buffer in MB") and DCGM_FI_DEV_FB_FREE
        # (251, "Free Frame Buffer in MB"); dcgm-exporter: "Framebuffer memory used / free
        # (in MiB)". vLLM preallocates the whole KV pool at start-up, so framebuffer use is
        # weights + pool whatever the load (the "always ~90% used" reading operators see).
        self._fb_used = min(self._gpu_mem, self._gpu_mem * fleet.config.gpu_memory_utilization)
        self._fb_used_mib = self._fb_used / _MIB
        self._fb_free_mib = (self._gpu_mem - self._fb_used) / _MIB
        self._last: dict[str, _Scraped] = {}

    def observe(self, now_s: float) -> Observation:
        fleet = self.fleet
        fleet.sync_all(now_s)
        samples = []
        last = self._last
        seen = set()
        counts = [0] * len(Phase)
        pending = Phase.PENDING
        node_pending = Phase.NODE_PENDING
        sub_tick = self.sub_tick
        for r in fleet.replicas:
            phase = r.phase
            counts[phase] += 1
            seen.add(r.name)
            if sub_tick and r.step_log is None:
                # First seen now: its buckets start now (a replica is first seen Pending, before
                # its first iteration, unless the tick is longer than its cold start).
                r.step_log = StepBuckets(now_s)
            if phase in (pending, node_pending):
                # No container yet (nor, waiting for a node, a node): nothing to scrape.
                samples.append(ReplicaSample(r.name, phase, ok=False))
                continue
            busy, active_s, dram = r.busy_s, r.active_s, r.dram_bytes
            memo = last.get(r.name)
            if memo is None or memo.replica is not r:
                memo = last[r.name] = _Scraped(r, r.created_s, 0.0, 0.0, 0.0)
            dt = now_s - memo.t
            g = gpu_counters(self._spec, dt, active_s - memo.active, busy - memo.busy, dram - memo.bytes)
            # The simulator's L2-miss proxy: the share of the GPU's time bound by HBM traffic,
            # HBM time / (HBM time + math time), both as shares of the period.
            math_share = min((busy - memo.busy) / dt, 1.0) if dt > 0.0 else 0.0
            mem_share = g.dram_active
            l2 = mem_share / (mem_share + math_share) if (mem_share + math_share) > 0.0 else 0.0
            memo.t, memo.busy, memo.active, memo.bytes = now_s, busy, active_s, dram
            kv = r.kv_usage()
            values = {
                _RUNNING: float(r.num_running),
                _WAITING: float(r.num_waiting),
                _KV_USAGE: kv,
                _KV_USAGE_OLD: kv,
                _PREEMPTIONS: float(r.num_preemptions),
                _PROMPT_TOKENS: float(r.prompt_tokens_total),
                _GENERATION_TOKENS: float(r.gen_tokens_total),
                _GPU_UTIL: g.gpu_util_pct,
                _MEM_COPY_UTIL: g.mem_copy_util_pct,
                _GR_ENGINE_ACTIVE: g.gr_engine_active,
                _SM_ACTIVE: g.sm_active,
                _SM_OCCUPANCY: g.sm_occupancy,
                _TENSOR_ACTIVE: g.tensor_active,
                _DRAM_ACTIVE: g.dram_active,
                _FB_USED: self._fb_used_mib,
                _FB_FREE: self._fb_free_mib,
                _L2_MISS: l2,
                _KV_BLOCKS: float(r.total_blocks),
            }
            itl = _snapshot(memo, 2, r.hist_itl)
            hists = {
                _TTFT: _snapshot(memo, 0, r.hist_ttft),
                _E2E: _snapshot(memo, 1, r.hist_e2e),
                _ITL: itl,
                _ITL_OLD: itl,  # one histogram exported under both names: one snapshot
                _TPOT: _snapshot(memo, 3, r.hist_tpot),
                _QUEUE_TIME: _snapshot(memo, 4, r.hist_queue),
            }
            gen = r.hist_gen_tokens
            if gen is not None:
                hists[_GEN_TOKENS] = _snapshot(memo, 5, gen)
            prompts = r.hist_prompt_tokens
            if prompts is not None:
                hists[_PROMPT_LENGTHS] = _snapshot(memo, 6, prompts)
            fine = self._sub_tick_samples(r, now_s) if sub_tick else {}
            samples.append(
                ReplicaSample(r.name, phase, ok=True, values=values, histograms=hists, sub_tick=fine)
            )
        for name in list(last):
            if name not in seen:
                del last[name]
        # The lifecycle counts from the same pass (what FleetView.from_replicas counts).
        fleet_view = FleetView(
            spec_replicas=fleet.spec_replicas,
            pending=counts[Phase.PENDING],
            loading=counts[Phase.LOADING],
            warmup=counts[Phase.WARMUP],
            ready=counts[Phase.READY],
            draining=counts[Phase.DRAINING],
            node_pending=counts[Phase.NODE_PENDING],
        )
        # Every arrival is resolved (counts, by outcome) or still unresolved: their sum is the
        # arrivals so far, read without touching the fleet's hot path. A one-replica view (the
        # emulator's per-replica pages) has no such count: the offered load is the gateway's.
        outcomes = fleet.counts if isinstance(fleet, CountsOutcomes) else None
        queue_per_s = None
        if self._queue:
            queue_per_s = SubTickSeries(QUEUE_SAMPLE_PERIOD_S, self._queue_end_s, tuple(self._queue))
            self._queue = []
        return Observation(
            time_s=now_s,
            fleet=fleet_view,
            replicas=tuple(samples),
            gateway_queue=len(fleet.gateway),
            arrivals_total=None if outcomes is None else int(sum(outcomes)) + fleet.unresolved,
            queue_per_s=queue_per_s,
        )

    def _sub_tick_samples(self, r: Replica, now_s: float) -> dict[str, SubTickSeries]:
        """The replica's 100 ms DRAM_ACTIVE samples and generated tokens that are final by ``now_s``
        (pre: synced to now).

        Final: a decode jump still running hands over its next steps from the
        start of the step in progress (``plan_t0``), so buckets before it are
        complete; otherwise every later span starts at ``now_s`` or after.
        Worked: 201 MB in a bucket of an H100 (3.35 TB/s x 0.1 s = 335 MB) reads 0.6.
        """
        log: StepBuckets = r.step_log
        horizon = r.plan_t0 if r.kind == JUMP else now_s
        end_s, buckets, tokens = log.take(horizon)
        if not buckets:
            return {}
        cap = self._bucket_bytes
        values = tuple(b / cap if b < cap else 1.0 for b in buckets)
        return {
            _DRAM_ACTIVE: SubTickSeries(BW_SAMPLE_PERIOD_S, end_s, values),
            _GENERATION_TOKENS: SubTickSeries(BW_SAMPLE_PERIOD_S, end_s, tuple(tokens)),
        }

    def sample_queue(self, now_s: float) -> None:
        """Seed 004's q[t]: requests waiting on serving replicas plus the gateway queue at ``now_s``.

        The driver calls it once a second of simulated time, after running the
        fleet to ``now_s``; the next :meth:`observe` hands the samples over. A
        replica's waiting list is exact at any instant between its iterations
        (admissions happen at iteration boundaries) except for heads whose
        client gave up during a decode jump, dropped at its next sync: a
        60 s time-out inside a jump of a few seconds, rare and at most one tick late.
        """
        fleet = self.fleet
        ready = Phase.READY
        q = len(fleet.gateway)
        for r in fleet.replicas:
            if r.phase == ready:
                q += r.num_waiting
        self._queue.append(float(q))
        self._queue_end_s = now_s


# The exporter names, bound once (module constants, not class attribute lookups per replica per tick).
_RUNNING, _WAITING, _KV_USAGE, _KV_USAGE_OLD = V.RUNNING, V.WAITING, V.KV_USAGE, V.KV_USAGE_OLD
_PREEMPTIONS, _PROMPT_TOKENS, _GENERATION_TOKENS = V.PREEMPTIONS, V.PROMPT_TOKENS, V.GENERATION_TOKENS
_GPU_UTIL, _MEM_COPY_UTIL, _SM_ACTIVE = DCGM.GPU_UTIL, DCGM.MEM_COPY_UTIL, DCGM.SM_ACTIVE
_SM_OCCUPANCY, _TENSOR_ACTIVE = DCGM.SM_OCCUPANCY, DCGM.TENSOR_ACTIVE
_GR_ENGINE_ACTIVE, _DRAM_ACTIVE, _FB_USED, _FB_FREE = (
    DCGM.GR_ENGINE_ACTIVE,
    DCGM.DRAM_ACTIVE,
    DCGM.FB_USED,
    DCGM.FB_FREE,
)
_L2_MISS, _KV_BLOCKS = SIM.L2_MISS, SIM.KV_BLOCKS
_TTFT, _E2E, _ITL, _ITL_OLD, _TPOT, _QUEUE_TIME = V.TTFT, V.E2E, V.ITL, V.ITL_OLD, V.TPOT, V.QUEUE_TIME
_GEN_TOKENS, _PROMPT_LENGTHS = V.REQUEST_GENERATION_TOKENS, V.REQUEST_PROMPT_TOKENS
