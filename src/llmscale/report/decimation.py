"""The report's time series: a result's ``series`` as float arrays, and downsampling that keeps spikes.

Split from the page and the figures so each job reads on its own: :func:`decimate_indices` is what
keeps a day at 1 s resolution drawable (a few thousand points a line) without dropping the bursts a
report is read for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from llmscale.report._common import Row, number

__all__ = ["MAX_POINTS_PER_LINE", "MIN_POINTS_PER_LINE", "POINT_BUDGET_PER_CHART", "decimate_indices"]

#: Hard cap on points per drawn line: beyond ~2000 points a line is denser than the pixels it covers.
MAX_POINTS_PER_LINE = 2000
#: Soft cap on values per chart. With dozens of policies the per-line resolution drops (never below
#: :data:`MIN_POINTS_PER_LINE`) so the report stays a few MB instead of growing with policies × length.
POINT_BUDGET_PER_CHART = 50_000
MIN_POINTS_PER_LINE = 400

#: Replica lifecycle states, bottom of the stack first: what is serving sits on the floor, what is
#: paid for but not serving yet (pending → loading → warm-up) stacks above it, draining on top.
_LIFECYCLE: tuple[tuple[str, str, str], ...] = (
    ("replicas_ready", "ready", "#4c9be8"),
    ("replicas_warmup", "warm-up", "#f5b041"),
    ("replicas_loading", "loading", "#fad7a0"),
    ("replicas_pending", "pending", "#c8c8c8"),
    ("replicas_draining", "draining", "#ec7063"),
)
#: Replicas waiting for a node (a backtest with a node pool only): stacked above pending, the
#: wait that comes before it; left out of the chart and its legend when no result has the series.
_NODE_PENDING = ("replicas_node_pending", "node pending", "#7f8c8d")


@dataclass(frozen=True)
class _Series:
    """A result's ``series`` as float arrays (``None`` -> NaN), all cut to the valid ``t``."""

    t: np.ndarray
    cols: dict[str, np.ndarray]
    minute_t: np.ndarray
    ttft_minute: np.ndarray

    def get(self, key: str) -> np.ndarray:
        """Column ``key`` (all-NaN when the document lacks it)."""
        return self.cols.get(key, np.full(self.t.shape, np.nan))


_SERIES_KEYS = (
    "arrival_rps",
    "queue_depth",
    "running",
    "desired_replicas",
    "gpu_util",
    "sm_active",
    "bw_util",
    "kv_usage",
    "gpu_hours_cum",
    *(key for key, _, _ in _LIFECYCLE),
    _NODE_PENDING[0],
)


def _lifecycle(data: Sequence[tuple[Row, _Series]]) -> tuple[tuple[str, str, str], ...]:
    """The stacked states of the replicas chart: node pending only when some result has it."""
    if not any(_NODE_PENDING[0] in s.cols for _, s in data):
        return _LIFECYCLE
    *below, draining = _LIFECYCLE
    return (*below, _NODE_PENDING, draining)


def _floats(values: Any, n: int | None = None) -> np.ndarray:
    """A list of numbers/None as a float64 array with NaN for missing, padded/cut to ``n``."""
    if not isinstance(values, Sequence) or isinstance(values, str | bytes):
        values = []
    try:
        # Fast path (numpy maps None to NaN itself); a day at 1 s resolution is 86 400 values a key.
        out = np.array(values, dtype=np.float64)
        if out.ndim != 1:
            raise ValueError("not a flat list")
        out[~np.isfinite(out)] = np.nan
    except (TypeError, ValueError):
        # Strings, nested lists or other junk: coerce value by value, junk becomes a gap.
        out = np.array([np.nan if (x := number(v)) is None else x for v in values], dtype=np.float64)
    if n is not None and out.size != n:
        out = np.concatenate([out[:n], np.full(max(n - out.size, 0), np.nan)])
    return out


def _after_end(t: np.ndarray, end_s: float | None, *, centred: bool = False) -> np.ndarray:
    """Samples that start after the trace ended: the sample at ``t`` covers the step before it (the
    per-minute ones, ``centred``, the minute around it), so one whose step begins at or past
    ``end_s`` holds no request of the trace.

    A backtest runs on after the last arrival (requests in flight finish); those samples read
    arrival rate 0, nothing running, utilisation falling, which a reader takes for an outage in the
    last minute. Worked: 10 s samples, a 900 s trace: t = 900 stays (890-900 s), t = 910 goes; the
    minute centred at 930 s (900-960 s) goes too.
    """
    if end_s is None or t.size < 2:
        return np.zeros(t.shape, dtype=bool)
    steps = np.diff(t[np.isfinite(t)])
    step = float(np.median(steps)) if steps.size else 0.0
    return (t - (step / 2.0 if centred else step)) >= end_s


def _extract(row: Row, end_s: float | None = None) -> _Series | None:
    """The row's time series up to the trace's end ``end_s`` (s; None: all of it), or ``None`` when it
    has none (summary-only results are legal)."""
    series = row.series
    if series is None:
        return None
    t = _floats(series.get("t_s"))
    keep = np.isfinite(t) & ~_after_end(t, end_s)
    minute_t = _floats(series.get("minute_t_s"))
    ttft = _floats(series.get("ttft_p99_s_per_minute"), minute_t.size)
    minute_keep = np.isfinite(minute_t) & ~_after_end(minute_t, end_s, centred=True)
    if not keep.any() and not minute_keep.any():
        return None
    cols = {key: _floats(series.get(key), t.size)[keep] for key in _SERIES_KEYS if key in series}
    return _Series(t=t[keep], cols=cols, minute_t=minute_t[minute_keep], ttft_minute=ttft[minute_keep])


def _bucket_picks(keys: Sequence[np.ndarray], n: int, target: int) -> np.ndarray:
    """Sorted indices of each bucket's min, max and first NaN for every key (about ``target`` buckets)."""
    size = -(-n // target)  # ceil: samples per bucket
    buckets = -(-n // size)
    pad = buckets * size - n
    base = np.arange(buckets) * size
    real = (np.arange(buckets * size) < n).reshape(buckets, size)
    picks = [np.array([0, n - 1])]
    for key in keys:
        grid = np.concatenate([np.asarray(key, dtype=np.float64), np.full(pad, np.nan)])
        grid = grid.reshape(buckets, size)
        nan = np.isnan(grid)
        picks.append(base + np.argmin(np.where(nan, np.inf, grid), axis=1))
        picks.append(base + np.argmax(np.where(nan, -np.inf, grid), axis=1))
        gap = nan & real
        picks.append((base + np.argmax(gap, axis=1))[gap.any(axis=1)])
    idx = np.unique(np.concatenate(picks))
    return idx[idx < n]


def decimate_indices(keys: Sequence[np.ndarray], max_points: int = MAX_POINTS_PER_LINE) -> np.ndarray:
    """Indices of at most ``max_points`` samples that keep the shape of every series in ``keys``.

    Plain striding would drop the very spikes a report is read for (a queue burst, a TTFT blip), so
    the samples are cut into buckets and each bucket keeps, for every key, its minimum, its maximum
    and its first missing (NaN) sample — the last so that gaps in the data stay gaps. First and last
    samples are always kept. All keys share the returned indices, so traces drawn against one x
    (stacked areas, unified hover) stay aligned.
    """
    n = len(keys[0]) if keys else 0
    if n <= max_points:
        return np.arange(n)
    if max_points < 2 + 3 * len(keys):
        # Too few points for even one bucket: evenly spaced samples (never hit with the real budgets).
        return np.unique(np.linspace(0, n - 1, max(max_points, 2)).round().astype(int))
    # Start optimistic (2 picks per key and bucket; minima, maxima of several keys often coincide)
    # and shrink the bucket count until the result fits: this uses most of the budget, where a
    # worst-case bucket count (3 picks per key) would leave a third of it unused.
    target = max(max_points // (2 * len(keys)), 1)
    while True:
        idx = _bucket_picks(keys, n, target)
        if len(idx) <= max_points or target == 1:
            return idx
        target = max(min(target - 1, int(target * max_points / len(idx))), 1)


def _budget(n_lines: int) -> int:
    """Points allowed per line in a chart drawing ``n_lines`` lines."""
    return int(np.clip(POINT_BUDGET_PER_CHART // max(n_lines, 1), MIN_POINTS_PER_LINE, MAX_POINTS_PER_LINE))


def _f32(values: np.ndarray) -> np.ndarray:
    """Float32 copy: plotly ships numpy arrays base64-encoded, and float32 halves the bytes of float64
    with precision far beyond what a chart can show."""
    return np.asarray(values, dtype=np.float32)


def _compact(values: np.ndarray) -> np.ndarray:
    """Smallest exact encoding of a y series: int16 for gap-free counts (replicas, queue depth),
    float32 otherwise. Halves the size of the count-heavy charts again."""
    a = np.asarray(values, dtype=np.float64)
    if a.size and np.isfinite(a).all() and (a == np.round(a)).all() and np.abs(a).max() < 2**15:
        return a.astype(np.int16)
    return a.astype(np.float32)


@dataclass(frozen=True)
class _TimeAxis:
    divisor: float
    title: str


def _time_axis(series: Sequence[_Series]) -> _TimeAxis:
    """Minutes for short traces, hours for day-long ones, days beyond: seconds are unreadable."""
    ends = [float(np.max(a)) for s in series for a in (s.t, s.minute_t) if a.size]
    end = max(ends, default=0.0)
    if end <= 2 * 3600:
        return _TimeAxis(60.0, "time (min)")
    if end <= 72 * 3600:
        return _TimeAxis(3600.0, "time (h)")
    return _TimeAxis(86400.0, "time (days)")
