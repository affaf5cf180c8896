"""GPU signals from DCGM fields: utilisation, composite, effective VRAM, bandwidth tail; queue entropy.

Which DCGM field each reads, and why (the fields' definitions are quoted where
the simulator produces them, :mod:`llmscale.sim.gpu_counters`):

* ``gpu_util_mean``: ``DCGM_FI_DEV_GPU_UTIL``, NVML's "percent of time ... one
  or more kernels was executing": the share of time a replica had work in
  flight. ~100 % on a replica with any request running, whatever its batch;
  0 on an idle one. What HPA setups on dcgm-exporter read, and what the
  design documents' time-based rules mean (seed 002's "the GPU is always
  working, so utilisation looks normal").
* ``sm_active_mean``: ``DCGM_FI_PROF_SM_ACTIVE``, the ratio of cycles an SM
  holds a warp (waiting on HBM counts): what the SMs are doing (simulated
  Llama-3-8B on an H100: 0.64 decoding a batch of 1 down to 0.49 at 256,
  0.74-0.80 on a prefill-bound replica).
* ``gpu_composite_util`` (seed 000 chapter 1): ``max(SM_ACTIVE x 100,
  MEM_COPY_UTIL)`` per replica, then the mean. The seed names
  ``DCGM_FI_DEV_GPU_UTIL`` but describes it as "the share of active cycles of
  the SM compute units in the driver's sampling window", which is
  ``DCGM_FI_PROF_SM_ACTIVE``'s definition; on GPU_UTIL the composite would read
  ~100 % on any replica with a request in flight and the seed's 35 % threshold
  would scale every loaded fleet to its maximum. Seed 000's picture -- compute
  9 %, memory 92 % -> composite 92 % -- is the reading on SM activity. A
  replica reporting one of the two uses it (dcgm-exporter's default counters
  carry no ``DCGM_FI_PROF_*`` field: without them the composite is
  MEM_COPY_UTIL alone, never GPU_UTIL).
* ``effective_vram`` (seed 000 3.3): ``0.4 used/total + 0.3 bw/bw_max + 0.3 l2_miss/0.8``
  per replica, then the mean. ``used/total`` = FB_USED / (FB_USED + FB_FREE);
  ``bw/bw_max`` = DCGM_FI_PROF_DRAM_ACTIVE (already a 0-1 ratio of peak) or,
  without profiling fields, MEM_COPY_UTIL / 100; ``l2_miss`` =
  ``llmscale_sim:gpu_l2_miss_ratio``. No standard exporter publishes an L2
  miss rate (DCGM has no such field), so on a live fleet the signal is
  invalid rather than computed from two thirds of its formula. ``l2_miss/0.8``
  is capped at 1: the seed calls 0.8 "severe", and the cap keeps the weights
  summing to a 0..1 ratio.
* ``bw_saturation_p95`` (seed 004): the 95th percentile of each serving
  replica's bandwidth ratio over the last 60 s, then the mean over replicas.
  The seed samples every 100 ms (600 samples a minute). A source that has
  those samples hands them over in ``ReplicaSample.sub_tick`` (the
  simulator, :mod:`llmscale.sim.sub_tick`), and the P95 is of them. Without
  them the window holds one sample per observation (5 at a 15 s tick), so
  the P95 interpolates between the two largest (numpy's default "linear"
  rule) and is closer to a max; the signal's note says which it used. A
  replica whose page carries ``llmscale:dram_active_p95_60s`` (the emulator's,
  or Prometheus' ``quantile_over_time`` over a 100 ms scrape) gives that P95.
* ``queue_entropy`` (seed 004): see :func:`normalized_entropy`; over the
  per-second queue lengths of ``Observation.queue_per_s`` when the source
  has them (30 in 30 s, the seed's: the simulator's sub-tick samples, or
  Prometheus with ``queue_per_s`` over a 1 s scrape), else one per observation.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from llmscale.metrics.names import DCGM, DERIVED, SIM
from llmscale.signals.window import FleetWindow, start_index
from llmscale.types import Phase, SignalValue, SubTickSeries

__all__ = [
    "BW_WINDOW_S",
    "ENTROPY_EPSILON",
    "ENTROPY_WINDOW_S",
    "L2_MISS_SEVERE",
    "bandwidth_ratio",
    "bw_saturation_p95",
    "composite_util",
    "effective_vram",
    "fb_used_ratio",
    "gpu_gauge_signals",
    "gpu_signals",
    "in_window",
    "normalized_entropy",
    "percentile_linear",
    "queue_entropy",
    "queue_value_entropy_bits",
    "seed_composite_util",
    "sm_active_pct",
]

#: seed 004: bandwidth saturation is the P95 over a 60 s sliding window
BW_WINDOW_S = 60.0
#: seed 004: queue entropy over the past 30 s
ENTROPY_WINDOW_S = 30.0
#: seed 004 writes ``log2(p_i + eps)`` without a value for eps; 1e-8 is the documents' only
#: explicit epsilon (seed 003 2.5's normaliser). It only matters as p_i -> 0, where p*log(p) -> 0 anyway.
ENTROPY_EPSILON = 1e-8
#: seed 000 3.3: an L2 miss rate above 0.8 is a severe memory-access bottleneck
L2_MISS_SEVERE = 0.8


def composite_util(compute_pct: float | None, mem_copy_util_pct: float | None) -> float | None:
    """``max(compute, mem_copy_util)`` in percent; either alone if one is missing."""
    if compute_pct is None:
        return mem_copy_util_pct
    if mem_copy_util_pct is None:
        return compute_pct
    return max(compute_pct, mem_copy_util_pct)


def sm_active_pct(values: Mapping[str, float]) -> float | None:
    """``DCGM_FI_PROF_SM_ACTIVE`` (a 0-1 ratio) in percent, None when the replica does not export it."""
    v = values.get(DCGM.SM_ACTIVE)
    return None if v is None else 100.0 * v


def seed_composite_util(values: Mapping[str, float]) -> float | None:
    """Seed 000 chapter 1's ``max(gpu_util, mem_copy_util)``, its compute term read as SM activity.

    Worked: SM_ACTIVE 0.09, MEM_COPY_UTIL 92 % -> 92 %; the same replica's
    GPU_UTIL (100 %, a request in flight) is not read (module docstring).
    """
    return composite_util(sm_active_pct(values), values.get(DCGM.MEM_COPY_UTIL))


def fb_used_ratio(values: Mapping[str, float]) -> float | None:
    """Framebuffer used / (used + free); 14820 MiB used of 24576 (seed 000's example) -> 0.603."""
    used = values.get(DCGM.FB_USED)
    free = values.get(DCGM.FB_FREE)
    if used is None or free is None or used + free <= 0.0:
        return None
    return used / (used + free)


def bandwidth_ratio(values: Mapping[str, float]) -> float | None:
    """Memory-bandwidth use as a 0-1 ratio of peak: DRAM_ACTIVE, else MEM_COPY_UTIL / 100."""
    v = values.get(DCGM.DRAM_ACTIVE)
    if v is None:
        pct = values.get(DCGM.MEM_COPY_UTIL)
        if pct is None:
            return None
        v = pct / 100.0
    return min(max(v, 0.0), 1.0)


def effective_vram(used_ratio: float, bw_ratio: float, l2_miss_ratio: float) -> float:
    """Seed 000 3.3: ``0.4 used/total + 0.3 bw/bw_max + 0.3 min(l2_miss/0.8, 1)``.

    Worked: 90 % of VRAM used, bandwidth at 60 % of peak, L2 miss 0.4:
    0.4 x 0.9 + 0.3 x 0.6 + 0.3 x 0.5 = 0.36 + 0.18 + 0.15 = 0.69.
    """
    return 0.4 * used_ratio + 0.3 * bw_ratio + 0.3 * min(max(l2_miss_ratio, 0.0) / L2_MISS_SEVERE, 1.0)


def percentile_linear(xs: Sequence[float], q: float) -> float:
    """The ``q``-quantile of samples by linear interpolation between closest ranks (numpy's default).

    Position ``q x (n - 1)`` in the sorted samples: (0.2, 0.4, 0.5, 0.7, 0.9) at
    q = 0.95 is position 3.8, so 0.7 + 0.8 x (0.9 - 0.7) = 0.86. Pre: xs non-empty.
    """
    s = sorted(xs)
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def normalized_entropy(queue: Sequence[float], eps: float = ENTROPY_EPSILON) -> float | None:
    """Seed 004's queue entropy: ``p_i = q_i / sum(q)``, ``-sum p_i log2(p_i + eps) / log2(n)``, in [0, 1].

    The "distribution" is the seed's: each sample's share of the window's total
    queue, one bin per sample, so the entropy measures how evenly the queue is
    spread over time. Worked: a steady queue (5, 5, 5) -> 1.0; one burst
    (0, 0, 9) -> 0.0; (1, 2, 3) -> p = (1/6, 1/3, 1/2), H = 1.459 bits,
    / log2(3) = 1.585 -> 0.921. Note the reading this gives: a *steady* queue
    scores 1 ("maximum uncertainty" in the seed's words) and a lone burst 0,
    so a high value means "queueing everywhere in the window", not randomness.
    A queue empty throughout returns 0 (nothing queued, nothing uncertain);
    fewer than 2 samples return None (log2(1) = 0: nothing to normalise by).
    """
    n = len(queue)
    if n < 2:
        return None
    total = math.fsum(queue)
    if not total > 0.0:
        return 0.0
    h = 0.0
    for q in queue:
        if q > 0.0:
            p = q / total
            h -= p * math.log2(p + eps)
    return min(max(h / math.log2(n), 0.0), 1.0)


def queue_value_entropy_bits(queue: Sequence[float]) -> float | None:
    """Seed 004 2.2's queue entropy: ``H(Q) = -sum p_i log2 p_i`` over the *values* the queue took, bits.

    Where chapter 1's :func:`normalized_entropy` weighs each sample's share of the
    total queue, section 2.2 counts how often each queue length occurs in the
    window ("the more uniform the distribution of queue lengths, the higher the
    entropy, the more volatile the load") and reads the bits against its table:
    [0, 0.5) steady, [0.5, 1.8) moderate swings, [1.8, 2.5] high randomness,
    bursts or scheduling imbalance. Worked: a steady queue (5, 5, 5, 5) -> 0 bits;
    (0, 0, 3, 9) -> p = (1/2, 1/4, 1/4), 1.5 bits; four distinct values -> 2 bits.
    Lengths are whole requests (rounded). None for an empty series.
    """
    if not queue:
        return None
    counts: dict[int, int] = {}
    for q in queue:
        k = round(q)
        counts[k] = counts.get(k, 0) + 1
    n = len(queue)
    return -math.fsum(c / n * math.log2(c / n) for c in counts.values())


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def gpu_signals(fw: FleetWindow) -> dict[str, SignalValue]:
    """gpu_util_mean, sm_active_mean, mem_copy_util_mean, gpu_composite_util, effective_vram,
    vram_used_ratio, bw_saturation_p95 and queue_entropy."""
    values = gpu_gauge_signals(fw)
    values["bw_saturation_p95"] = bw_saturation_p95(fw)
    values["queue_entropy"] = queue_entropy(fw)
    return values


def gpu_gauge_signals(fw: FleetWindow) -> dict[str, SignalValue]:
    """The newest observation's means over serving replicas: gpu_util_mean, sm_active_mean,
    mem_copy_util_mean, gpu_composite_util, vram_used_ratio and effective_vram."""
    util: list[float] = []
    sm: list[float] = []
    copy: list[float] = []
    composite: list[float] = []
    used: list[float] = []
    eff: list[float] = []
    for s in fw.known:
        vals = s.values
        u = vals.get(DCGM.GPU_UTIL)
        a = vals.get(DCGM.SM_ACTIVE)
        c = vals.get(DCGM.MEM_COPY_UTIL)
        if u is not None:
            util.append(u)
        if a is not None:
            sm.append(a)
        if c is not None:
            copy.append(c)
        m = seed_composite_util(vals)
        if m is not None:
            composite.append(m)
        fb = fb_used_ratio(vals)
        if fb is None:
            continue
        used.append(fb)
        bw = bandwidth_ratio(vals)
        l2 = vals.get(SIM.L2_MISS)
        if bw is not None and l2 is not None:
            eff.append(effective_vram(fb, bw, l2))

    def mean_or_none(xs: list[float], what: str) -> SignalValue:
        if not xs:
            return SignalValue(None, f"no serving replica reports {what}")
        return SignalValue(_mean(xs), f"{len(xs)} replica(s)")

    values = {
        "gpu_util_mean": mean_or_none(util, DCGM.GPU_UTIL),
        "sm_active_mean": mean_or_none(sm, DCGM.SM_ACTIVE),
        "mem_copy_util_mean": mean_or_none(copy, DCGM.MEM_COPY_UTIL),
        "gpu_composite_util": mean_or_none(composite, f"{DCGM.SM_ACTIVE} or {DCGM.MEM_COPY_UTIL}"),
        "vram_used_ratio": mean_or_none(used, "FB_USED and FB_FREE"),
    }
    if eff:
        values["effective_vram"] = SignalValue(_mean(eff), f"{len(eff)} replica(s)")
    elif used:
        values["effective_vram"] = SignalValue(None, f"no {SIM.L2_MISS} (no real exporter has L2 misses)")
    else:
        values["effective_vram"] = SignalValue(None, "no serving replica reports framebuffer use")
    return values


def in_window(series: SubTickSeries, cut_s: float) -> tuple[float, ...]:
    """The values of ``series`` whose period ends after ``cut_s``.

    Worked: 0.1 s samples ending at 59.8, 59.9, 60.0 and a cut at 59.85 -> the last two.
    """
    n = len(series.values)
    keep = math.ceil((series.end_s - cut_s) / series.period_s - 1e-6)
    if keep >= n:
        return series.values
    return series.values[n - keep :] if keep > 0 else ()


def bw_saturation_p95(fw: FleetWindow, window_s: float = BW_WINDOW_S) -> SignalValue:
    """Seed 004: mean over serving replicas of each one's P95 bandwidth ratio over ``window_s``.

    A replica's P95 is of its 100 ms samples while serving when the source
    has them (600 in 60 s), else of one sample per observation.
    """
    start = start_index(fw, window_s)
    spans = fw.spans(start)
    cut_s = fw.now_s - window_s
    ready = Phase.READY
    dram, copy = DCGM.DRAM_ACTIVE, DCGM.MEM_COPY_UTIL
    p95_name = DERIVED.DRAM_ACTIVE_P95_60S
    p95s: list[float] = []
    samples = 0
    fine_replicas = 0
    gauges = 0
    for s_now in fw.known:
        span = spans.get(s_now.replica)
        if span is None:
            continue
        xs: list[float] = []
        fine: list[float] = []
        for s in span.samples:
            if s.phase == ready:
                series = s.sub_tick.get(dram)
                if series is not None:
                    fine.extend(in_window(series, cut_s))
                vals = s.values
                v = vals.get(dram)
                if v is None:
                    pct = vals.get(copy)
                    if pct is None:
                        continue
                    v = pct / 100.0
                xs.append(v)
        if fine:
            xs = fine
            fine_replicas += 1
        elif s_now.phase == ready and (windowed := s_now.values.get(p95_name)) is not None:
            # the exporter's (or Prometheus') own P95 of the 100 ms samples: taken as it is
            p95s.append(min(max(windowed, 0.0), 1.0))
            gauges += 1
            continue
        if xs:
            samples += len(xs)
            # clamping is monotone, so clamping the percentile equals the percentile of clamped samples
            p95s.append(min(max(percentile_linear(xs, 0.95), 0.0), 1.0))
    if not p95s:
        return SignalValue(None, "no serving replica reports memory bandwidth")
    if gauges == len(p95s):
        return SignalValue(_mean(p95s), f"{gauges} replica(s), each its exporter's {p95_name}")
    per = samples / (len(p95s) - gauges)
    how = "100 ms samples" if fine_replicas == len(p95s) - gauges else "sample(s)"
    also = f" ({gauges} by their {p95_name})" if gauges else ""
    return SignalValue(
        _mean(p95s), f"{len(p95s)} replica(s){also}, {per:.1f} {how} each in {window_s:.0f} s (seed: 600)"
    )


def queue_entropy(fw: FleetWindow, window_s: float = ENTROPY_WINDOW_S) -> SignalValue:
    """Seed 004: normalised entropy of the fleet's waiting queue over ``window_s``.

    Over the per-second queue lengths the source sampled (``queue_per_s``:
    30 in 30 s, the seed's q[t]) when the newest observation carries them;
    else one sample per observation (3 at a 15 s tick), each the waiting
    requests on serving replicas (extrapolated over unknown ones) plus the
    gateway queue.
    """
    start = start_index(fw, window_s)
    obs = fw.observations
    if obs[-1].queue_per_s is not None:
        cut_s = fw.now_s - window_s
        per_s: list[float] = []
        for o in obs[start:]:
            if o.queue_per_s is not None:
                per_s.extend(in_window(o.queue_per_s, cut_s))
        h = normalized_entropy(per_s)
        if h is not None:
            return SignalValue(h, f"{len(per_s)} one-second sample(s) in {window_s:.0f} s (seed: 30)")
    series = [q for t in fw.totals[start:] if (q := t.queue()) is not None]
    h = normalized_entropy(series)
    if h is None:
        return SignalValue(None, f"needs 2 queue samples in {window_s:.0f} s, has {len(series)}")
    return SignalValue(h, f"{len(series)} sample(s) in {window_s:.0f} s (seed: 30 one-second samples)")
