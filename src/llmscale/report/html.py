"""Self-contained HTML report of a backtest (plotly charts + comparison table).

The report is one file with plotly.js inlined, so it opens offline, can be attached to a ticket or
archived next to the trace, and renders the same years later. Layout:

* header: workload summary and simulator config;
* comparison table (same columns as :func:`llmscale.report.table.comparison_table`);
* six charts, each a plotly figure in ``<div id=CHART_ID class="llmscale-chart">`` (ids in
  :data:`CHART_IDS`), built by :func:`build_figures`.

Trace counts per chart, relied on by the rendering tests (``P`` = policies with a ``series``,
oracle included when it has one):

* ``chart-load-replicas``: 7 per P (5 lifecycle states stacked, desired replicas, arrival rate);
* ``chart-queue``, ``chart-ttft``, ``chart-gpu-hours``: 1 per P;
* ``chart-util``: 4 per P (HBM bandwidth, SM active, GPU utilisation, KV-cache usage);
* ``chart-pareto``: 1 per policy with both GPU-hours and attainment, +1 for the oracle, +1 for the
  Pareto frontier (when at least one policy has a point).
* ``chart-standby`` (after the others, only when the document has a ``standby_curve``): 1, slo's
  attainment against GPU-hours over standby pool sizes (:mod:`llmscale.report.standby`).
"""

from __future__ import annotations

import html
import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from llmscale import __version__
from llmscale.report._common import (
    COLUMNS,
    MISSING,
    NODE_PENDING_COLUMN,
    Row,
    best_rows,
    cell_text,
    fmt_count,
    fmt_float,
    fmt_seconds,
    foresight_text,
    noise_ties,
    number,
    report_title,
    rows_of,
    section,
    seeds_text,
    slo_text,
)
from llmscale.report.context import context_summary
from llmscale.report.standby import CHART_STANDBY, STANDBY_CAPTION, STANDBY_TITLE, fig_standby_curve

if TYPE_CHECKING:
    import plotly.graph_objects as go

__all__ = [
    "CHART_IDS",
    "MAX_POINTS_PER_LINE",
    "build_figures",
    "decimate_indices",
    "render_report",
]

#: Hard cap on points per drawn line: beyond ~2000 points a line is denser than the pixels it covers.
MAX_POINTS_PER_LINE = 2000
#: Soft cap on values per chart. With dozens of policies the per-line resolution drops (never below
#: :data:`MIN_POINTS_PER_LINE`) so the report stays a few MB instead of growing with policies × length.
POINT_BUDGET_PER_CHART = 50_000
MIN_POINTS_PER_LINE = 400

CHART_LOAD = "chart-load-replicas"
CHART_QUEUE = "chart-queue"
CHART_TTFT = "chart-ttft"
CHART_UTIL = "chart-util"
CHART_GPU_HOURS = "chart-gpu-hours"
CHART_PARETO = "chart-pareto"
#: Stable ids of the chart divs, in page order.
CHART_IDS: tuple[str, ...] = (CHART_PARETO, CHART_LOAD, CHART_QUEUE, CHART_TTFT, CHART_UTIL, CHART_GPU_HOURS)

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
_DESIRED_COLOR = "#111111"
_ARRIVAL_COLOR = "#7d3c98"
# Metric colours of the utilization small multiples (each panel is one policy, named in its title).
_SM_COLOR = "#1a4f9c"
_BW_COLOR = "#e8590c"
_BW_FILL = "rgba(232, 89, 12, 0.28)"
_KV_COLOR = "#6b6b6b"
_GPU_COLOR = "#2b8a3e"
_SLO_COLOR = "#b22222"
_FONT = "system-ui, -apple-system, 'Segoe UI', 'DejaVu Sans', Roboto, sans-serif"

_CAPTIONS: dict[str, str] = {
    CHART_PARETO: (
        "Each point is one policy: SLO attainment against GPU-hours paid. Up and to the left is better; "
        "the dotted step line joins the policies no other policy beats on both axes."
    ),
    CHART_LOAD: (
        "One panel per policy: replicas stacked by lifecycle state (only 'ready' serves traffic; pending, "
        "loading, warm-up and draining are paid for but idle), the replica count the policy asked for "
        "(dashed step) and the arrival rate (purple, right axis). Look for how far 'ready' lags behind the "
        "load on a ramp, and for flapping of the desired line."
    ),
    CHART_QUEUE: (
        "Requests waiting for a batch slot. A queue that builds up means the fleet was under-provisioned "
        "at that moment; it shows up minutes later as a TTFT violation."
    ),
    CHART_TTFT: (
        "P99 time-to-first-token of the requests that finished prefill in each minute (log scale). Points "
        "in the shaded band above the dashed SLO line are minutes that violated the TTFT SLO; gaps are "
        "minutes where no request finished prefill."
    ),
    CHART_UTIL: (
        "One panel per policy, averaged over ready replicas, as dcgm-exporter reports them: GPU "
        "utilization (DCGM_FI_DEV_GPU_UTIL, green dashed), the share of time a kernel was running; SM "
        "activity (DCGM_FI_PROF_SM_ACTIVE, blue line); HBM bandwidth (DCGM_FI_PROF_DRAM_ACTIVE, orange "
        "area); KV-cache usage (grey dotted). GPU utilization sits near 100 % whenever requests are in "
        "flight, whether a replica serves one or hundreds, so a policy that targets it adds replicas "
        "under any steady load. SM activity and bandwidth show what the GPUs do: decode streams "
        "weights and KV from HBM and does little math."
    ),
    CHART_GPU_HOURS: (
        "GPU-hours accumulated over the trace (every replica that exists is paid for, ready or not). "
        "The slope is the fleet size."
    ),
    CHART_STANDBY: STANDBY_CAPTION,
}
#: Caption sentences that only make sense when the document has an oracle.
_ORACLE_CAPTIONS: dict[str, str] = {
    CHART_PARETO: "The oracle (star) knows the future, so its GPU-hours are a lower bound for this trace.",
    CHART_GPU_HOURS: "The gap to the oracle (dashed) is the price of not knowing the future.",
}
_TITLES: dict[str, str] = {
    CHART_PARETO: "Cost vs. quality (Pareto)",
    CHART_LOAD: "Load and replicas by lifecycle state",
    CHART_QUEUE: "Queue depth",
    CHART_TTFT: "Per-minute P99 TTFT vs. SLO",
    CHART_UTIL: "GPU utilization, SM activity and HBM bandwidth (DCGM)",
    CHART_GPU_HOURS: "Cumulative GPU-hours",
    CHART_STANDBY: STANDBY_TITLE,
}


# --------------------------------------------------------------------------------------------------
# Series extraction and downsampling
# --------------------------------------------------------------------------------------------------


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


def _extract(row: Row) -> _Series | None:
    """The row's time series, or ``None`` when it has none (summary-only results are legal)."""
    series = row.series
    if series is None:
        return None
    t = _floats(series.get("t_s"))
    keep = np.isfinite(t)
    minute_t = _floats(series.get("minute_t_s"))
    ttft = _floats(series.get("ttft_p99_s_per_minute"), minute_t.size)
    minute_keep = np.isfinite(minute_t)
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


# --------------------------------------------------------------------------------------------------
# Figures
# --------------------------------------------------------------------------------------------------


def _esc(text: str) -> str:
    """Escape text for plotly labels: plotly.js parses a subset of HTML (``<b>``, ``<a href>``) in
    trace names, titles and annotations, so a policy called ``<b>x`` must not turn bold (or a link)."""
    return html.escape(str(text), quote=False)


#: The look of every chart: plotly's "plotly_white" template. The page carries it once and the
#: browser applies it to each chart (:data:`_BOOT_JS`); set in Python, plotly.py would validate
#: and deep-copy the template into every figure (about 1 s of a report's ~3 s here).
_TEMPLATE = "plotly_white"


def _figure() -> go.Figure:
    """An empty figure with no template of its own (plotly.py would otherwise copy in its default)."""
    import plotly.graph_objects as go

    return go.Figure(layout={"template": {}})


def _template_json() -> str:
    """:data:`_TEMPLATE` as JSON, read from the file plotly ships it in."""
    from importlib.resources import files

    return (files("plotly") / "package_data" / "templates" / f"{_TEMPLATE}.json").read_text(encoding="utf-8")


def _style(fig: go.Figure, height: int, panel_titles: bool = False) -> None:
    """Common look: compact margins, legend on top (the white template is applied by the page).

    With ``panel_titles`` (small multiples) the legend is lifted above the first panel's title,
    which plotly places just above the panel, where the legend would otherwise sit.
    """
    top, bottom = (84, 50) if panel_titles else (56, 50)
    lift = 26 / max(height - top - bottom, 1) if panel_titles else 0.0
    fig.update_layout(
        height=height,
        autosize=True,
        margin={"l": 70, "r": 70, "t": top, "b": bottom},
        font={"family": _FONT, "size": 12},
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.0 + lift, "xanchor": "left", "x": 0.0},
        hoverlabel={"namelength": -1},
    )


def _empty(fig: go.Figure, message: str) -> go.Figure:
    """Turn ``fig`` into a placeholder that still renders (so every chart div has an svg)."""
    fig.add_annotation(
        text=_esc(message), x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False, font={"size": 16}
    )
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return fig


def _row_height_spacing(n: int, row_px: int, gap_px: int) -> tuple[int, float]:
    """Total height and plotly's fractional vertical spacing for ``n`` stacked panels."""
    height = n * row_px + (n - 1) * gap_px + 134  # + top/bottom margins of _style(panel_titles=True)
    return height, (gap_px / (height - 134)) if n > 1 else 0.0


def _line(row: Row, x: np.ndarray, y: np.ndarray, **kwargs: Any) -> go.Scatter:
    """A policy's line with its colour/dash, grouped so clicking the legend toggles it everywhere."""
    import plotly.graph_objects as go

    return go.Scatter(
        x=_f32(x),
        y=_compact(y),
        name=_esc(row.label),
        legendgroup=row.policy,
        mode=kwargs.pop("mode", "lines"),
        line={"color": row.color, "dash": row.dash, "width": 2.5 if row.is_oracle else 1.8},
        **kwargs,
    )


def _fig_load(data: list[tuple[Row, _Series]], tax: _TimeAxis) -> go.Figure:
    """Chart 1: stacked replicas by lifecycle state + desired (step) + arrival rate, one panel each."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    if not data:
        return _empty(_figure(), "no time series in this backtest")
    n = len(data)
    height, spacing = _row_height_spacing(n, 210, 48)
    fig = make_subplots(
        rows=n,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=spacing,
        subplot_titles=[f"<b>{_esc(row.label)}</b>" for row, _ in data],
        specs=[[{"secondary_y": True}] for _ in range(n)],
        figure=_figure(),
    )
    budget = _budget(n * 7)
    y_max, rps_max = 1.0, 1.0
    lifecycle = _lifecycle(data)
    for k, (_row, s) in enumerate(data, start=1):
        stack = {key: np.nan_to_num(s.get(key), nan=0.0) for key, _, _ in lifecycle}
        total = np.sum(list(stack.values()), axis=0) if stack else np.zeros_like(s.t)
        desired, arrival = s.get("desired_replicas"), s.get("arrival_rps")
        idx = decimate_indices([total, desired, arrival], budget)
        x = s.t[idx] / tax.divisor
        for key, label, color in lifecycle:
            fig.add_trace(
                go.Scatter(
                    x=_f32(x),
                    y=_compact(stack[key][idx]),
                    name=label,
                    legendgroup=key,
                    showlegend=k == 1,
                    stackgroup=f"replicas{k}",
                    mode="lines",
                    line={"width": 0.5, "color": color, "shape": "hv"},
                    fillcolor=color,
                    hovertemplate="%{y:.0f}",
                ),
                row=k,
                col=1,
                secondary_y=False,
            )
        fig.add_trace(
            go.Scatter(
                x=_f32(x),
                y=_compact(desired[idx]),
                name="desired replicas",
                legendgroup="desired",
                showlegend=k == 1,
                mode="lines",
                line={"color": _DESIRED_COLOR, "dash": "dash", "width": 1.5, "shape": "hv"},
                hovertemplate="%{y:.0f}",
            ),
            row=k,
            col=1,
            secondary_y=False,
        )
        fig.add_trace(
            go.Scatter(
                x=_f32(x),
                y=_compact(arrival[idx]),
                name="arrival rate (req/s)",
                legendgroup="arrival",
                showlegend=k == 1,
                mode="lines",
                line={"color": _ARRIVAL_COLOR, "width": 1.2},
                hovertemplate="%{y:.2f} req/s",
            ),
            row=k,
            col=1,
            secondary_y=True,
        )
        y_max = max(y_max, float(np.nanmax(np.concatenate([total, desired, [0.0]]))))
        rps_max = max(rps_max, float(np.nanmax(np.concatenate([arrival, [0.0]]))))
    # One scale for every panel, so panel heights compare directly across policies.
    fig.update_yaxes(range=[0, y_max * 1.08], title_text="replicas", secondary_y=False, rangemode="tozero")
    fig.update_yaxes(
        range=[0, rps_max * 1.08],
        title_text="req/s",
        secondary_y=True,
        showgrid=False,
        title_font={"color": _ARRIVAL_COLOR},
        tickfont={"color": _ARRIVAL_COLOR},
    )
    fig.update_xaxes(title_text=tax.title, row=n, col=1)
    fig.update_xaxes(showticklabels=True)
    for annotation, (row, _) in zip(fig.layout.annotations, data, strict=False):
        annotation.font = {"color": row.color, "size": 13}
    _style(fig, height, panel_titles=True)
    fig.update_layout(hovermode="x unified")
    return fig


def _fig_lines(
    data: list[tuple[Row, _Series]], tax: _TimeAxis, key: str, y_title: str, hover: str
) -> go.Figure:
    """One line per policy of series ``key`` against time (queue depth, cumulative GPU-hours)."""

    fig = _figure()
    if not data:
        return _empty(fig, "no time series in this backtest")
    budget = _budget(len(data))
    for row, s in data:
        y = s.get(key)
        idx = decimate_indices([y], budget)
        fig.add_trace(_line(row, s.t[idx] / tax.divisor, y[idx], hovertemplate=hover))
    fig.update_xaxes(title_text=tax.title)
    fig.update_yaxes(title_text=y_title, rangemode="tozero")
    _style(fig, 440)
    fig.update_layout(hovermode="x unified")
    return fig


def _fig_ttft(data: list[tuple[Row, _Series]], tax: _TimeAxis, slo_ttft_s: float | None) -> go.Figure:
    """Chart 3: per-minute P99 TTFT per policy on a log axis, with the SLO line and violation band."""

    fig = _figure()
    if not data:
        return _empty(fig, "no time series in this backtest")
    budget = _budget(len(data))
    y_all: list[float] = []
    for row, s in data:
        # A log axis cannot show 0 (or negative) latencies; they'd only appear from a broken trace.
        y = np.where(s.ttft_minute > 0, s.ttft_minute, np.nan)
        idx = decimate_indices([y], budget)
        fig.add_trace(
            _line(
                row,
                s.minute_t[idx] / tax.divisor,
                y[idx],
                mode="lines+markers",
                marker={"size": 4, "color": row.color, "symbol": row.symbol},
                hovertemplate="%{y:.3g} s",
            )
        )
        y_all.extend(y[np.isfinite(y)].tolist())
    slo = slo_ttft_s if slo_ttft_s is not None and slo_ttft_s > 0 else None
    refs = [*y_all, *([slo] if slo is not None else [])]
    if refs:
        lo, hi = float(np.log10(min(refs))) - 0.15, float(np.log10(max(refs))) + 0.25
        # Fixed range: the violation band below reaches past the data and would stretch autorange.
        # 1-2-5 ticks: plotly's default log ticks label every minor digit, which is unreadable.
        ticks = [
            m * 10.0**e
            for e in range(int(np.floor(lo)) - 1, int(np.ceil(hi)) + 1)
            for m in (1, 2, 5)
            if lo <= np.log10(m * 10.0**e) <= hi
        ]
        fig.update_yaxes(range=[lo, hi], tickvals=ticks, ticktext=[fmt_float(v, 1) for v in ticks])
    if slo is not None:
        # Shapes take data values on a log axis, annotations take log10 values (plotly.js convention);
        # add_hline's own annotation gets this wrong, so the label is placed by hand.
        fig.add_hrect(
            y0=slo, y1=max(refs) * 10.0, fillcolor=_SLO_COLOR, opacity=0.06, line_width=0, layer="below"
        )
        fig.add_hline(y=slo, line={"color": _SLO_COLOR, "dash": "dash", "width": 2})
        fig.add_annotation(
            x=0.0,
            xref="paper",
            xanchor="left",
            y=float(np.log10(slo)),
            yanchor="bottom",
            text=f"TTFT SLO {fmt_seconds(slo)} s",
            showarrow=False,
            font={"color": _SLO_COLOR},
        )
    fig.update_xaxes(title_text=tax.title)
    fig.update_yaxes(title_text="P99 TTFT per minute (s)", type="log")
    _style(fig, 460)
    fig.update_layout(hovermode="x unified")
    return fig


def _fig_util(data: list[tuple[Row, _Series]], tax: _TimeAxis) -> go.Figure:
    """Chart 4: GPU utilization, SM activity, HBM bandwidth and KV-cache usage, one panel per policy."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    if not data:
        return _empty(_figure(), "no time series in this backtest")
    n = len(data)
    height, spacing = _row_height_spacing(n, 170, 48)
    fig = make_subplots(
        rows=n,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=spacing,
        subplot_titles=[f"<b>{_esc(row.label)}</b>" for row, _ in data],
        figure=_figure(),
    )
    budget = _budget(n * 4)
    for k, (_row, s) in enumerate(data, start=1):
        gpu, sm, bw, kv = (s.get(key) * 100.0 for key in ("gpu_util", "sm_active", "bw_util", "kv_usage"))
        idx = decimate_indices([gpu, sm, bw, kv], budget)
        x = _f32(s.t[idx] / tax.divisor)
        # Bandwidth first, as a filled area, so the SM line is drawn on top of it.
        for y, name, group, extra in (
            (
                bw,
                "HBM bandwidth util. (%)",
                "bw",
                {"fill": "tozeroy", "fillcolor": _BW_FILL, "line": {"color": _BW_COLOR, "width": 1}},
            ),
            (sm, "SM active (%)", "sm", {"line": {"color": _SM_COLOR, "width": 2}}),
            (gpu, "GPU util. (%)", "gpu", {"line": {"color": _GPU_COLOR, "width": 1.5, "dash": "dash"}}),
            (kv, "KV-cache usage (%)", "kv", {"line": {"color": _KV_COLOR, "width": 1.2, "dash": "dot"}}),
        ):
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=_compact(y[idx]),
                    name=name,
                    legendgroup=group,
                    showlegend=k == 1,
                    mode="lines",
                    hovertemplate="%{y:.0f} %",
                    **extra,
                ),
                row=k,
                col=1,
            )
    fig.update_yaxes(range=[0, 105], ticksuffix=" %", dtick=25)
    fig.update_xaxes(title_text=tax.title, row=n, col=1)
    fig.update_xaxes(showticklabels=True)
    for annotation, (row, _) in zip(fig.layout.annotations, data, strict=False):
        annotation.font = {"color": row.color, "size": 13}
    _style(fig, height, panel_titles=True)
    fig.update_layout(hovermode="x unified")
    return fig


def _fig_pareto(rows: Sequence[Row]) -> go.Figure:
    """Chart 6: SLO attainment vs. GPU-hours, one labelled point per policy, oracle as a star."""
    import plotly.graph_objects as go

    fig = _figure()
    points: list[tuple[Row, float, float]] = []
    for row in rows:
        gpu_h, att = number(row.summary.get("gpu_hours")), number(row.summary.get("slo_attainment"))
        if gpu_h is not None and att is not None:
            points.append((row, gpu_h, att * 100.0))
    if not points:
        return _empty(fig, "no policy has both GPU-hours and SLO attainment")
    # With dozens of policies the point labels would pile up into an unreadable smear; then only the
    # oracle keeps its label and the policies are identified by legend and hover.
    label_policies = sum(not row.is_oracle for row, _, _ in points) <= 12
    for row, gpu_h, att in points:
        fig.add_trace(
            go.Scatter(
                x=[gpu_h],
                y=[att],
                name=_esc(row.label),
                legendgroup=row.policy,
                mode="markers+text" if label_policies or row.is_oracle else "markers",
                text=[_esc(row.label)],
                textposition="top center",
                textfont={"color": row.color},
                marker={
                    "color": row.color,
                    "symbol": row.symbol,
                    "size": 18 if row.is_oracle else 12,
                    "line": {"color": "white", "width": 1},
                },
                hovertemplate="%{x:.4g} GPU-h<br>%{y:.2f} % attainment",
            )
        )
    policies = sorted(((g, a) for row, g, a in points if not row.is_oracle), key=lambda p: (p[0], -p[1]))
    frontier: list[tuple[float, float]] = []
    for g, a in policies:
        if not frontier or a > frontier[-1][1]:
            frontier.append((g, a))
    if frontier:
        fig.add_trace(
            go.Scatter(
                x=[g for g, _ in frontier],
                y=[a for _, a in frontier],
                name="Pareto frontier",
                mode="lines",
                line={"color": "#999999", "dash": "dot", "width": 1.5, "shape": "hv"},
                hoverinfo="skip",
            )
        )
    xs = [g for _, g, _ in points]
    ys = [a for _, _, a in points]
    x_pad = max((max(xs) - min(xs)) * 0.12, max(xs) * 0.05, 1e-3)
    y_pad = max((max(ys) - min(ys)) * 0.15, 0.5)
    fig.update_xaxes(title_text="GPU-hours (← cheaper)", range=[max(min(xs) - x_pad, 0), max(xs) + x_pad])
    fig.update_yaxes(
        title_text="SLO attainment (%) (↑ better)", range=[min(ys) - y_pad, min(max(ys) + y_pad, 101)]
    )
    _style(fig, 500)
    fig.update_layout(hovermode="closest")
    return fig


def build_figures(doc: Mapping[str, Any]) -> dict[str, go.Figure]:
    """The report's plotly figures, keyed by chart id, in page order (see :data:`CHART_IDS`).

    Usable on its own, e.g. to show one chart in a notebook (the figures carry no template: the
    report page applies plotly's white one; ``fig.update_layout(template="plotly_white")`` gives
    the same look in a notebook). Every figure is valid even when the
    document lacks the data for it (it then shows a "no data" note), so a report always renders.
    """
    rows = rows_of(doc)
    data = [(row, s) for row in rows if (s := _extract(row)) is not None]
    tax = _time_axis([s for _, s in data])
    config = section(doc, "config")
    figures = {
        CHART_PARETO: _fig_pareto(rows),
        CHART_LOAD: _fig_load(data, tax),
        CHART_QUEUE: _fig_lines(data, tax, "queue_depth", "requests queued", "%{y:.0f}"),
        CHART_TTFT: _fig_ttft(data, tax, number(config.get("slo_ttft_s"))),
        CHART_UTIL: _fig_util(data, tax),
        CHART_GPU_HOURS: _fig_lines(data, tax, "gpu_hours_cum", "GPU-hours (cumulative)", "%{y:.4g} GPU-h"),
    }
    assert tuple(figures) == CHART_IDS
    curve = doc.get("standby_curve")
    if isinstance(curve, list) and curve:
        fig = fig_standby_curve(curve)
        _style(fig, 460)
        figures[CHART_STANDBY] = fig
    return figures


# --------------------------------------------------------------------------------------------------
# HTML
# --------------------------------------------------------------------------------------------------


def _fmt_duration(value: Any) -> str:
    """Seconds as ``2 h 05 min`` / ``12 min 30 s`` / ``45 s``."""
    x = number(value)
    if x is None:
        return MISSING
    total = round(x)
    h, rem = divmod(total, 3600)
    m, s = divmod(rem, 60)
    if h:
        return f"{h:,d} h {m:02d} min"
    return f"{m} min {s:02d} s" if m else f"{fmt_float(x)} s"


def _fmt_any(value: Any) -> str:
    """Generic formatting of a header value we know nothing about."""
    if value is None:
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,d}"
    if isinstance(value, float):
        return fmt_float(value, 4)
    if isinstance(value, str):
        return value
    text = json.dumps(value, default=str, ensure_ascii=False, separators=(", ", ": "))
    return text if len(text) <= 160 else text[:157] + "…"


_WORKLOAD_FIELDS: tuple[tuple[str, str, Any], ...] = (
    ("name", "workload", str),
    ("requests", "requests", fmt_count),
    ("duration_s", "duration", _fmt_duration),
    ("mean_rps", "mean rate", lambda v: f"{fmt_float(v)} req/s"),
    ("peak_1min_rps", "peak 1-min rate", lambda v: f"{fmt_float(v)} req/s"),
    ("context", "context", lambda v: context_summary(v) if isinstance(v, Mapping) else _fmt_any(v)),
)
_CONFIG_FIELDS: tuple[tuple[str, str, Any], ...] = (
    ("model", "model", str),
    ("gpu", "GPU", str),
    ("tp", "tensor parallel", _fmt_any),
    ("slo_ttft_s", "TTFT SLO", lambda v: f"{fmt_seconds(v)} s"),
    ("slo_tpot_s", "TPOT SLO", lambda v: f"{fmt_seconds(v)} s"),
    ("min_replicas", "min replicas", _fmt_any),
    ("max_replicas", "max replicas", _fmt_any),
    ("initial_replicas", "initial replicas", _fmt_any),
    ("tick_s", "control tick", lambda v: f"{fmt_float(v)} s" if number(v) is not None else _fmt_any(v)),
    ("seed", "seed", _fmt_any),
)


def _definition_list(mapping: Any, fields: Sequence[tuple[str, str, Any]]) -> str:
    """``<dl>`` of known fields (nicely formatted) followed by any other keys (generic)."""
    if not isinstance(mapping, Mapping) or not mapping:
        return '<p class="muted">not recorded</p>'
    items: list[tuple[str, str]] = []
    known = set()
    for key, label, fmt in fields:
        known.add(key)
        if key in mapping and mapping[key] is not None:
            items.append((label, fmt(mapping[key])))
    items.extend((str(key), _fmt_any(value)) for key, value in mapping.items() if key not in known)
    body = "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(v)}</dd>" for k, v in items)
    return f"<dl>{body}</dl>"


def _table_html(rows: Sequence[Row], doc: Mapping[str, Any]) -> str:
    """The comparison table as HTML (same columns and highlighting as the rich table), plus the
    node-pending replica-seconds when the backtest modelled a node pool."""
    columns = COLUMNS
    if any(NODE_PENDING_COLUMN.key in row.summary for row in rows):
        columns = (*COLUMNS, NODE_PENDING_COLUMN)
    head = "".join(
        f'<th scope="col" title="{html.escape(c.help)}">{html.escape(c.header).replace(chr(10), "<br>")}</th>'
        for c in columns
    )
    best = {c.key: best_rows(rows, c) for c in columns}
    ties = {c.key: noise_ties(doc, rows, c, best[c.key]) for c in columns}
    body: list[str] = []
    for i, row in enumerate(rows):
        cells = []
        for c in columns:
            cls = ' class="best"' if i in best[c.key] else ""
            text = cell_text(row, c) + (" ≈" if i in ties[c.key] else "")
            cells.append(f"<td{cls}>{html.escape(text)}</td>")
        name = html.escape(row.label)
        title = f' title="policy: {html.escape(row.policy)}"' if row.is_oracle else ""
        row_cls = ' class="oracle"' if row.is_oracle else ""
        body.append(
            f"<tr{row_cls}>"
            f'<th scope="row"{title}><span class="swatch" style="background:{row.color}"></span>{name}</th>'
            f"{''.join(cells)}</tr>"
        )
    if not body:
        body.append(f'<tr><td colspan="{len(columns) + 1}" class="muted">no results</td></tr>')
    return (
        '<table id="comparison-table" class="llmscale-table">'
        f'<thead><tr><th scope="col">Policy</th>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table>"
    )


_CSS = """
:root { color-scheme: light; }
* { box-sizing: border-box; }
body { margin: 0; font-family: __FONT__; color: #1d1d1f; background: #f4f5f7; line-height: 1.45; }
main { max-width: 1400px; margin: 0 auto; padding: 24px 28px 60px; }
header h1 { font-size: 1.55rem; margin: 0 0 4px; }
header .sub { color: #555; margin: 0 0 16px; }
.facts { display: flex; gap: 18px; flex-wrap: wrap; }
.card { background: #fff; border: 1px solid #e1e3e8; border-radius: 8px; padding: 14px 18px; }
.facts .card { flex: 1 1 420px; }
.facts h2 { font-size: 0.8rem; text-transform: uppercase; letter-spacing: .06em; color: #666;
  margin: 0 0 8px; }
dl { display: grid; grid-template-columns: max-content 1fr; gap: 3px 16px; margin: 0; font-size: .92rem; }
dt { color: #666; } dd { margin: 0; font-variant-numeric: tabular-nums; overflow-wrap: anywhere; }
nav { margin: 18px 0 0; font-size: .9rem; } nav a { margin-right: 14px; color: #1a4f9c; }
section { margin-top: 22px; }
section h2 { font-size: 1.15rem; margin: 0 0 4px; }
.caption { color: #444; margin: 0 0 10px; max-width: 110ch; font-size: .93rem; }
.llmscale-chart { width: 100%; min-height: 200px; }
.table-wrap { overflow-x: auto; }
table.llmscale-table { border-collapse: collapse; font-size: .9rem; font-variant-numeric: tabular-nums;
  width: 100%; }
.llmscale-table th, .llmscale-table td { padding: 5px 8px; border-bottom: 1px solid #eceef2;
  white-space: nowrap; }
.llmscale-table thead th { text-align: right; border-bottom: 2px solid #cfd3da; font-weight: 600;
  vertical-align: bottom; }
.llmscale-table thead th:first-child, .llmscale-table tbody th { text-align: left; }
.llmscale-table td { text-align: right; }
.llmscale-table td.best { color: #11703a; font-weight: 700; background: #e5f6eb; }
.llmscale-table tr.oracle { color: #666; font-style: italic; }
.llmscale-table tr.oracle th, .llmscale-table tr.oracle td { border-top: 2px solid #cfd3da; }
.swatch { display: inline-block; width: 11px; height: 11px; border-radius: 2px; margin-right: 7px;
  vertical-align: -1px; }
.muted { color: #777; }
.llmscale-error { color: #b22222; white-space: pre-wrap; }
footer { margin-top: 30px; color: #888; font-size: .8rem; }
""".replace("__FONT__", _FONT)

# Draw every chart; one failing chart must not blank the others, and the error text lands in its
# div (where the browser test looks). `data-llmscale-rendered` marks a finished plot.
_BOOT_JS = """
(function () {
  "use strict";
  var figures = JSON.parse(document.getElementById("llmscale-figures").textContent);
  var template = JSON.parse(document.getElementById("llmscale-template").textContent);
  var config = {responsive: true, displaylogo: false};
  function fail(el, err) {
    el.textContent = "";
    var pre = document.createElement("pre");
    pre.className = "llmscale-error";
    pre.textContent = "chart failed to render: " + err;
    el.appendChild(pre);
    el.setAttribute("data-llmscale-rendered", "error");
  }
  Object.keys(figures).forEach(function (id) {
    var el = document.getElementById(id);
    if (!el) { return; }
    try {
      var layout = figures[id].layout || {};
      layout.template = template;
      Plotly.newPlot(el, figures[id].data, layout, config).then(
        function () { el.setAttribute("data-llmscale-rendered", "ok"); },
        function (err) { fail(el, err); });
    } catch (err) { fail(el, err); }
  });
})();
"""


def _figures_json(figures: Mapping[str, go.Figure]) -> str:
    """All figures as one JSON object, safe to place inside a ``<script>`` element."""
    parts = [f"{json.dumps(chart_id)}:{fig.to_json(validate=False)}" for chart_id, fig in figures.items()]
    return _script_safe("{" + ",".join(parts) + "}")


def _script_safe(text: str) -> str:
    """JSON text made safe to place inside a ``<script>`` element."""
    # `<`, `>` and `&` can only occur inside JSON strings, where their \\u escapes mean the same
    # thing; escaping them means no text from the doc can close the <script> element.
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def _page(doc: Mapping[str, Any], figures: Mapping[str, go.Figure], plotly_js: str) -> str:
    """The complete HTML document."""
    rows = rows_of(doc)
    title = report_title(doc)
    n_policies = sum(not r.is_oracle for r in rows)
    has_oracle = any(r.is_oracle for r in rows)
    sub = " · ".join(
        bit
        for bit in (
            f"{n_policies} polic{'y' if n_policies == 1 else 'ies'} compared"
            + (", with the hindsight oracle as a lower bound" if has_oracle else ""),
            slo_text(doc),
        )
        if bit
    )
    toc = '<a href="#sec-table">Comparison</a>' + "".join(
        f'<a href="#sec-{cid}">{html.escape(_TITLES[cid])}</a>' for cid in figures
    )
    table_caption = (
        "One row per policy on the same trace. Green: best SLO attainment and lowest GPU-hours among "
        "the policies."
    )
    if has_oracle:
        table_caption += (
            " The oracle plans with perfect knowledge of the future: its GPU-hours are a lower bound, "
            "not a target a real policy can reach."
        )
    if foresight_text(doc):
        table_caption += f" The {foresight_text(doc)}."
    if seeds_text(doc):
        table_caption += f" {seeds_text(doc)}."
    sections = [
        '<section id="sec-table" class="card"><h2>Comparison</h2>'
        f'<p class="caption">{html.escape(table_caption)}</p>'
        f'<div class="table-wrap">{_table_html(rows, doc)}</div></section>'
    ]
    for cid in figures:
        caption = _CAPTIONS[cid] + (
            f" {_ORACLE_CAPTIONS[cid]}" if has_oracle and cid in _ORACLE_CAPTIONS else ""
        )
        sections.append(
            f'<section id="sec-{cid}" class="card"><h2>{html.escape(_TITLES[cid])}</h2>'
            f'<p class="caption">{html.escape(caption)}</p>'
            f'<div id="{cid}" class="llmscale-chart"></div></section>'
        )
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta name="generator" content="llmscale {html.escape(__version__)}">'
        f"<title>{html.escape(title)}</title>"
        f"<style>{_CSS}</style>"
        # plotly.js inlined: the report must open offline (no CDN).
        f"<script>{plotly_js}</script>"
        "</head><body><main>"
        f'<header><h1>{html.escape(title)}</h1><p class="sub">{html.escape(sub)}</p>'
        '<div class="facts">'
        f'<div class="card"><h2>Workload</h2>{_definition_list(doc.get("workload"), _WORKLOAD_FIELDS)}</div>'
        f'<div class="card"><h2>Config</h2>{_definition_list(doc.get("config"), _CONFIG_FIELDS)}</div>'
        f"</div><nav>{toc}</nav></header>"
        f"{''.join(sections)}"
        f"<footer>Generated by llmscale {html.escape(__version__)}.</footer>"
        "</main>"
        f'<script type="application/json" id="llmscale-figures">{_figures_json(figures)}</script>'
        f'<script type="application/json" id="llmscale-template">{_script_safe(_template_json())}</script>'
        f"<script>{_BOOT_JS}</script>"
        "</body></html>\n"
    )


def render_report(doc: Mapping[str, Any], path: str | Path) -> Path:
    """Write the self-contained HTML report of a backtest document to ``path``; return the path.

    ``doc`` is what ``llmscale backtest --json`` writes, with a ``series`` in each result (results
    without one still get a table row and a Pareto point). The parent directory is created if
    needed and the file is replaced atomically, so a crash never leaves a half-written report.
    Size: ~5 MB for a few policies over an hour, ~4.8 MB of it the inlined plotly.js; ~7.3 MB
    for 30 policies over a day at 10-s resolution (lines are downsampled, see :func:`decimate_indices`).
    """
    import plotly.offline

    target = Path(path)
    figures = build_figures(doc)
    return write_page(target, _page(doc, figures, plotly.offline.get_plotlyjs()))


def chart_section(cid: str, title: str, caption: str) -> str:
    """One chart's card: its heading, caption and the div the boot script draws figure ``cid`` in."""
    return (
        f'<section id="sec-{cid}" class="card"><h2>{html.escape(title)}</h2>'
        f'<p class="caption">{html.escape(caption)}</p>'
        f'<div id="{cid}" class="llmscale-chart"></div></section>'
    )


def chart_page(
    title: str, sub: str, header_html: str, body_html: str, figures: Mapping[str, Any], plotly_js: str
) -> str:
    """A self-contained page of the report's look (the analyze and tune pages): the report's CSS,
    plotly inlined, ``header_html`` under the title, the sections, then the figures and the
    script that draws them into their sections' divs."""
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta name="generator" content="llmscale {html.escape(__version__)}">'
        f"<title>{html.escape(title)}</title><style>{_CSS}</style>"
        f"<script>{plotly_js}</script></head><body><main>"
        f'<header><h1>{html.escape(title)}</h1><p class="sub">{html.escape(sub)}</p>{header_html}</header>'
        f"{body_html}"
        f"<footer>Generated by llmscale {html.escape(__version__)}.</footer></main>"
        f'<script type="application/json" id="llmscale-figures">{_figures_json(figures)}</script>'
        f'<script type="application/json" id="llmscale-template">{_script_safe(_template_json())}</script>'
        f"<script>{_BOOT_JS}</script></body></html>\n"
    )


def write_page(target: Path, page: str) -> Path:
    """Write ``page`` to ``target`` atomically (a crash never leaves half a page); return ``target``.

    Atomic means a new file renamed over the old one, which is right only for a regular file: a
    symlink is followed (the file it names is replaced, not the link), and a device, FIFO or
    other special file is written in place (``--report /dev/stdout``). Renaming over those
    replaced them (as root, ``--report /dev/full`` turned the device into an HTML file).
    """
    if target.is_symlink():
        target = target.resolve()
    if target.exists() and not target.is_file():
        with open(target, "w", encoding="utf-8") as out:
            out.write(page)
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(page)
        # mkstemp creates 0600; a report is meant to be shared like any other output file.
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
