"""Workload transformations: rate scaling, time windows and seed 004's high-entropy bursts.

Each returns a new :class:`Workload` and append a record to
``meta['transforms']`` (a list of dicts), so a report can say exactly what
was run: e.g. ``[{"op": "window", ...}, {"op": "rate_scale", "k": 20, ...}]``.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from llmscale.errors import ConfigError
from llmscale.workloads.arrivals import check_seed
from llmscale.workloads.limits import BYTES_PER_SCALED_REQUEST, MAX_REQUESTS
from llmscale.workloads.model import Workload

__all__ = ["BURST_WINDOW_S", "SCALE_MODES", "USERS_SHIFT_S", "entropy_bursts", "rate_scale", "window"]

#: how ``rate_scale`` adds requests when ``k > 1``: ``users`` (independently time-shifted copies
#: of the whole trace: k times the users) or ``burst`` (each request copied next to itself: the
#: same users, each burst k times larger)
SCALE_MODES = ("users", "burst")

#: ``users`` mode: each copy of the trace is shifted by one offset uniform in +- this (s). A
#: minute decorrelates bursts of seconds (the issue's code trace: bursts after idle minutes) and
#: keeps shapes of ten minutes and more (a daily ramp, a ServeGen window) where they were.
USERS_SHIFT_S = 60.0

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

# Local spacing is measured over this many neighbours on each side: 2*5 = 10
# gaps averages out single short/long gaps without blurring minute-scale
# rate changes (10 gaps at Azure's 5.5 req/s span ~1.8 s).
_SPACING_NEIGHBOURS = 5


def _with_transform(w: Workload, record: dict[str, object], **updates: object) -> dict[str, object]:
    meta = dict(w.meta)
    existing = meta.get("transforms")
    transforms = list(existing) if isinstance(existing, list) else []
    transforms.append(record)
    meta["transforms"] = transforms
    meta.update(updates)
    return meta


def local_spacing_s(arrival_s: FloatArray, neighbours: int = _SPACING_NEIGHBOURS) -> FloatArray:
    """Mean inter-arrival gap around each request: ``(t[i+m] - t[i-m]) / (2m)``, clipped at the ends."""
    n = arrival_s.size
    if n < 2:
        return np.zeros(n)
    idx = np.arange(n)
    hi = np.minimum(idx + neighbours, n - 1)
    lo = np.maximum(idx - neighbours, 0)
    spacing_s: FloatArray = (arrival_s[hi] - arrival_s[lo]) / (hi - lo)
    return spacing_s


def _gib(n_bytes: float) -> str:
    return f"{n_bytes / 2**30:,.1f} GiB" if n_bytes >= 2**30 else f"{n_bytes / 2**20:,.0f} MiB"


def _reflect(t: FloatArray, end_s: float) -> FloatArray:
    # Mirror at 0 and at the last arrival so jitter never moves requests outside
    # the original span; jitter is at most one local gap, so one mirror suffices
    # except in degenerate traces, hence the final clip.
    t = np.abs(t)
    t = np.where(t > end_s, 2.0 * end_s - t, t)
    return np.clip(t, 0.0, end_s)


def rate_scale(
    w: Workload,
    k: float,
    seed: int = 0,
    *,
    jitter_scale: float = 1.0,
    max_requests: int = MAX_REQUESTS,
    mode: str = "burst",
    shift_s: float = USERS_SHIFT_S,
) -> Workload:
    """Multiply the arrival rate by ``k``, keeping duration and shape over time.

    The result has exactly ``round(k * n)`` requests (n = ``w.num_requests``)
    over the same span ``[0, w.duration_s]``. Deterministic for a given seed.

    ``k < 1`` (thinning): a uniformly random subset of ``round(k*n)`` requests
    is kept, with their own lengths. The first and last request are always kept
    so the span, and the alignment of the time axis with the original, do not
    move. ``k * n < 0.5`` is a ConfigError (nothing would be left).

    ``k > 1``, ``mode="users"`` (k times the users): the original requests are
    all kept; ``floor(k) - 1`` whole copies of the trace, plus a copy of a random
    ``round(frac(k) * n)`` of its requests, each copy shifted as one by its own
    offset uniform in ``+-shift_s`` (mirrored back into the span at the edges),
    each request keeping its own lengths. Copies are independent at time scales
    below ``shift_s``: a burst of the trace is not repeated in lock-step, so
    the peak second grows less than k-fold (see docs/scaling-traces.md).

    ``k > 1``, ``mode="burst"`` (superposition): the original requests are all kept unchanged;
    ``floor(k) - 1`` extra copies of every request, plus one more copy of a
    random ``round(frac(k) * n)`` of them, are added. Each added request
    arrives at its source request's time plus a jitter uniform in
    ``+-jitter_scale * g``, where ``g`` is the local mean inter-arrival gap
    (over 10 neighbouring gaps), mirrored back into the span at the edges;
    its lengths are a bootstrap draw (a random request's (input, output) pair).

    What that preserves, with worked numbers: at timescales longer than the
    jitter (~0.18 s for Azure's 5.5 req/s), the count in any interval is about
    k times the original count, so relative rate fluctuations survive: Azure's
    1-min peak/mean of 8.45/5.53 = 1.53 gives 168.9/110.6 = 1.53 at k=20.
    That includes the Poisson noise of the original: a minute of Azure (~330
    requests) wobbles by sqrt(330)/330 = 5.5%, and the k copies keep that 5.5%
    where 20 independent streams would wobble by sqrt(6600)/6600 = 1.2%. This
    is the conservative choice for an autoscaler (bursts are not averaged
    away). Below the jitter scale, copies interleave, so gaps shrink by ~k.

    Args:
        w: Workload to scale.
        k: Rate multiplier, > 0.
        seed: Seed for the random subset, jitter and bootstrap.
        jitter_scale: Jitter half-width in units of the local gap (>= 0).
        max_requests: Refuse (ConfigError, with the memory it would take) to
            make more requests than this, before allocating anything: on a
            20-request trace ``k = 1e9`` asked numpy for 149 GiB.
    """
    if not (math.isfinite(k) and k > 0):
        raise ConfigError(f"rate scale k = {k}, must be a finite number > 0")
    if not (math.isfinite(jitter_scale) and jitter_scale >= 0):
        raise ConfigError(f"jitter_scale = {jitter_scale}, must be a finite number >= 0")
    if mode not in SCALE_MODES:
        raise ConfigError(f"scale mode = {mode!r}, must be one of {', '.join(SCALE_MODES)}")
    if not (math.isfinite(shift_s) and shift_s >= 0):
        raise ConfigError(f"shift_s = {shift_s}, must be a finite number >= 0")
    rng = np.random.default_rng(check_seed(seed))
    n = w.num_requests
    if k * n > max_requests:
        need_bytes = k * n * BYTES_PER_SCALED_REQUEST
        raise ConfigError(
            f"rate scale k = {k:g} would make {k * n:,.0f} requests from {n:,} "
            f"(~{_gib(need_bytes)} of memory while scaling, {BYTES_PER_SCALED_REQUEST} bytes a request); "
            f"the limit is {max_requests:,} requests (~{_gib(max_requests * BYTES_PER_SCALED_REQUEST)}): "
            "use a smaller k or a shorter window"
        )
    target = round(k * n)
    previous = w.meta.get("rate_scale", 1.0)
    cumulative = (float(previous) if isinstance(previous, int | float) else 1.0) * k
    record: dict[str, object] = {
        "op": "rate_scale",
        "k": k,
        "seed": seed,
        "requests_before": n,
        "requests_after": target,
    }
    if target < 1:
        raise ConfigError(f"rate scale k = {k} leaves no requests of {n} (k * n = {k * n:.3g} < 0.5)")
    t = w.arrival_s
    if target <= n:
        if target == n:
            keep = np.arange(n)
        elif target == 1:
            keep = np.array([0])
        else:
            interior = rng.choice(np.arange(1, n - 1), size=target - 2, replace=False)
            keep = np.sort(np.concatenate(([0, n - 1], interior)))
        meta = _with_transform(w, record, rate_scale=cumulative)
        return Workload(w.name, t[keep], w.input_tokens[keep], w.output_tokens[keep], meta)
    whole = math.floor(k)
    extra_fraction = target - whole * n  # round(frac(k) * n), exactly, up to float rounding of k*n
    sources = [np.tile(np.arange(n), whole - 1)]
    if extra_fraction > 0:
        sources.append(np.sort(rng.choice(n, size=extra_fraction, replace=False)))
    src = np.concatenate(sources)
    if mode == "users":
        # One offset per copy (the fractional copy is the last): copy c of request i arrives at
        # t[i] + offset[c]. Lengths are the source request's own (the same kind of user).
        copy_of = np.concatenate(
            [np.full(n, c) for c in range(whole - 1)] + [np.full(extra_fraction, whole - 1)]
        )
        offsets_s = rng.uniform(-shift_s, shift_s, size=whole)
        added_t = _reflect(t[src] + offsets_s[copy_of], float(t[-1]))
        all_t = np.concatenate((t, added_t))
        order = np.argsort(all_t, kind="stable")
        inp = np.concatenate((w.input_tokens, w.input_tokens[src]))[order]
        out = np.concatenate((w.output_tokens, w.output_tokens[src]))[order]
        record["mode"] = "users"
        record["shift_s"] = shift_s
        meta = _with_transform(w, record, rate_scale=cumulative)
        return Workload(w.name, all_t[order], inp, out, meta)
    half_width_s = jitter_scale * local_spacing_s(t)[src]
    added_t = _reflect(t[src] + rng.uniform(-1.0, 1.0, size=src.size) * half_width_s, float(t[-1]))
    boot = rng.integers(0, n, size=src.size)
    all_t = np.concatenate((t, added_t))
    order = np.argsort(all_t, kind="stable")
    inp = np.concatenate((w.input_tokens, w.input_tokens[boot]))[order]
    out = np.concatenate((w.output_tokens, w.output_tokens[boot]))[order]
    meta = _with_transform(w, record, rate_scale=cumulative)
    return Workload(w.name, all_t[order], inp, out, meta)


def window(w: Workload, start_s: float, duration_s: float) -> Workload:
    """Requests arriving in ``[start_s, start_s + duration_s)``, re-based to start at 0.

    Times are on ``w``'s axis (its first request is at 0). The kept requests
    are shifted so the first of them arrives at 0.0 (the Workload invariant);
    ``meta['window']`` records ``start_s``, ``duration_s`` and
    ``first_arrival_offset_s`` (gap between the window start and its first
    request, e.g. 0.12 s for a 5.5 req/s trace), so the original position is
    recoverable: ``original_t = t + start_s + first_arrival_offset_s``.
    ``duration_s`` may be ``math.inf`` (to the end). An empty window is a
    ConfigError.
    """
    if not (math.isfinite(start_s) and start_s >= 0):
        raise ConfigError(f"window start_s = {start_s}, must be a finite number >= 0")
    if not duration_s > 0:
        raise ConfigError(f"window duration_s = {duration_s}, must be > 0")
    end_s = start_s + duration_s
    lo = int(np.searchsorted(w.arrival_s, start_s, side="left"))
    hi = int(np.searchsorted(w.arrival_s, end_s, side="left")) if math.isfinite(end_s) else w.num_requests
    if hi <= lo:
        raise ConfigError(
            f"window [{start_s:g}, {end_s:g}) s of {w.name!r} contains no requests "
            f"(the trace spans 0 to {w.duration_s:g} s)"
        )
    first_s = float(w.arrival_s[lo])
    info: dict[str, object] = {
        "start_s": start_s,
        "duration_s": duration_s if math.isfinite(duration_s) else None,
        "first_arrival_offset_s": first_s - start_s,
    }
    meta = _with_transform(w, {"op": "window", **info, "requests": hi - lo}, window=info)
    return Workload(
        w.name,
        w.arrival_s[lo:hi] - first_s,
        w.input_tokens[lo:hi],
        w.output_tokens[lo:hi],
        meta,
    )


#: seed 004 4.4: each burst arrives within a 50 ms window
BURST_WINDOW_S = 0.05


def entropy_bursts(
    w: Workload,
    seed: int = 0,
    *,
    burst_share: float = 0.75,
    bursts_per_s: float = 1.0,
    burst_window_s: float = BURST_WINDOW_S,
) -> Workload:
    """Seed 004 4.4's "high-entropy burst" load: a Poisson-uniform mixture of the same requests.

    Section 4.4 injects "high-entropy burst traffic following a Poisson-uniform
    mixture (lambda = 120/s, burst window 50 ms)". Here the workload keeps its own
    rate (``--rate-scale`` sets it) and every request with its lengths; what
    changes is when a share of them arrive:

    * ``burst_share`` of the requests (a seeded random choice; never the first,
      which keeps the time axis) are pulled into bursts;
    * burst starts are a Poisson process of ``bursts_per_s`` over the trace's
      span, and each chosen request joins the burst that starts nearest to its
      own arrival (so the minute-scale shape stays);
    * within its burst it arrives uniformly in ``[start, start + burst_window_s)``.

    The rest keep their arrival times (the "Poisson" of the mixture, for a Poisson
    trace). At the default preset's ~50 req/s, a burst holds ~38 requests, and the
    average request moves by about 1 / (2 x bursts_per_s) = 0.5 s.

    What is "high entropy" about it, measured on a simulated fleet of 6 Llama-3-8B /
    H100 replicas (minutes 10-15 of the default preset, the queue read once a second,
    ``tests/workloads/test_entropy_bursts.py``): seed 004 section 2.2's entropy of
    the queue-length values (:func:`llmscale.signals.gpu.queue_value_entropy_bits`)
    rises from 1.46 bits (its "moderate swings" band, [0.5, 1.8)) to 2.24 bits (its
    "high randomness, bursts or scheduling imbalance" band, [1.8, 2.5]). Chapter 1's
    normalised entropy, which llmscale's ``queue_entropy`` signal computes, *falls*
    (0.76 -> 0.54): it measures how evenly the queue is spread over the window, and
    bursts make the queue uneven.

    Deterministic for a given seed; ``meta['transforms']`` records the parameters.
    """
    if not (math.isfinite(burst_share) and 0.0 < burst_share <= 1.0):
        raise ConfigError(f"burst share = {burst_share}, must be a finite number in (0, 1]")
    if not (math.isfinite(bursts_per_s) and bursts_per_s > 0.0):
        raise ConfigError(f"bursts per second = {bursts_per_s}, must be a finite number > 0")
    if not (math.isfinite(burst_window_s) and burst_window_s > 0.0):
        raise ConfigError(f"burst window = {burst_window_s} s, must be a finite number > 0")
    rng = np.random.default_rng(check_seed(seed))
    n = w.num_requests
    span_s = float(w.arrival_s[-1])
    members = min(n - 1, round(burst_share * n))
    record: dict[str, object] = {
        "op": "entropy_bursts",
        "seed": seed,
        "burst_share": burst_share,
        "bursts_per_s": bursts_per_s,
        "burst_window_s": burst_window_s,
        "requests": n,
        "requests_in_bursts": members,
    }
    if members < 1 or span_s <= 0.0:
        return Workload(w.name, w.arrival_s, w.input_tokens, w.output_tokens, _with_transform(w, record))
    # Poisson burst starts over the span: enough exponential gaps to pass its end, drawn at once.
    expected = span_s * bursts_per_s
    count = int(expected + 6.0 * math.sqrt(expected) + 10.0)
    starts = np.cumsum(rng.exponential(1.0 / bursts_per_s, size=count))
    while starts[-1] < span_s:  # 6 sigma short: practically never
        more = starts[-1] + np.cumsum(rng.exponential(1.0 / bursts_per_s, size=count))
        starts = np.concatenate((starts, more))
    starts = np.concatenate(([0.0], starts[starts < span_s]))
    chosen = np.sort(rng.choice(np.arange(1, n), size=members, replace=False))
    t = np.array(w.arrival_s, dtype=np.float64)
    own = t[chosen]
    # The nearest burst start: the one at or before, or the next one if it is closer.
    right = np.minimum(np.searchsorted(starts, own, side="left"), starts.size - 1)
    left = np.maximum(right - 1, 0)
    nearest = np.where(np.abs(starts[left] - own) <= np.abs(starts[right] - own), left, right)
    t[chosen] = np.minimum(starts[nearest] + rng.uniform(0.0, burst_window_s, size=members), span_s)
    order = np.argsort(t, kind="stable")
    record["bursts"] = int(starts.size)
    return Workload(
        w.name, t[order], w.input_tokens[order], w.output_tokens[order], _with_transform(w, record)
    )
