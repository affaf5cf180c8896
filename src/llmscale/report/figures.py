"""The backtest report's plotly figures, one per chart id (:func:`build_figures`).

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
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from llmscale.report._common import Row, fmt_float, fmt_seconds, number, rows_of, section
from llmscale.report.decimation import (
    _budget,
    _compact,
    _extract,
    _f32,
    _lifecycle,
    _Series,
    _time_axis,
    _TimeAxis,
    decimate_indices,
)
from llmscale.report.standby import CHART_STANDBY, fig_standby_curve

if TYPE_CHECKING:
    import plotly.graph_objects as go

__all__ = ["CHART_IDS", "build_figures"]

CHART_LOAD = "chart-load-replicas"
CHART_QUEUE = "chart-queue"
CHART_TTFT = "chart-ttft"
CHART_UTIL = "chart-util"
CHART_GPU_HOURS = "chart-gpu-hours"
CHART_PARETO = "chart-pareto"
#: Stable ids of the chart divs, in page order.
CHART_IDS: tuple[str, ...] = (CHART_PARETO, CHART_LOAD, CHART_QUEUE, CHART_TTFT, CHART_UTIL, CHART_GPU_HOURS)
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


def _policy_panels(
    data: list[tuple[Row, _Series]], row_px: int, secondary_y: bool = False
) -> tuple[go.Figure, int]:
    """Small multiples: one panel per policy, stacked on a shared time axis, each titled with the
    policy's label; (figure, its height in px). Panels are ``row_px`` tall, 48 px apart."""
    from plotly.subplots import make_subplots

    n, gap_px = len(data), 48
    height = n * row_px + (n - 1) * gap_px + 134  # + top/bottom margins of _style(panel_titles=True)
    specs = {"specs": [[{"secondary_y": True}] for _ in range(n)]} if secondary_y else {}
    fig = make_subplots(
        rows=n,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=(gap_px / (height - 134)) if n > 1 else 0.0,
        subplot_titles=[f"<b>{_esc(row.label)}</b>" for row, _ in data],
        **specs,
        figure=_figure(),
    )
    return fig, height


def _finish_policy_panels(
    fig: go.Figure, data: list[tuple[Row, _Series]], tax: _TimeAxis, height: int
) -> go.Figure:
    """The time axis titled under the last panel, ticks on every panel, each title in its policy's colour."""
    fig.update_xaxes(title_text=tax.title, row=len(data), col=1)
    fig.update_xaxes(showticklabels=True)
    for annotation, (row, _) in zip(fig.layout.annotations, data, strict=False):
        annotation.font = {"color": row.color, "size": 13}
    _style(fig, height, panel_titles=True)
    fig.update_layout(hovermode="x unified")
    return fig


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

    if not data:
        return _empty(_figure(), "no time series in this backtest")
    n = len(data)
    fig, height = _policy_panels(data, 210, secondary_y=True)
    budget = _budget(n * 7)
    rps_max = 1.0
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
        # Each panel on its own policy's scale: one shared 0-64 axis (a policy that ran 64) left a
        # policy of four replicas a sliver two pixels high. Worked: peak 4 -> axis 0 to 4.32.
        y_max = max(1.0, float(np.nanmax(np.concatenate([total, desired, [0.0]]))))
        fig.update_yaxes(range=[0, y_max * 1.08], row=k, col=1, secondary_y=False)
        rps_max = max(rps_max, float(np.nanmax(np.concatenate([arrival, [0.0]]))))
    fig.update_yaxes(title_text="replicas", secondary_y=False, rangemode="tozero")
    # The arrival rate is the same trace in every panel: one scale for it.
    fig.update_yaxes(
        range=[0, rps_max * 1.08],
        title_text="req/s",
        secondary_y=True,
        showgrid=False,
        title_font={"color": _ARRIVAL_COLOR},
        tickfont={"color": _ARRIVAL_COLOR},
    )
    return _finish_policy_panels(fig, data, tax, height)


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

    if not data:
        return _empty(_figure(), "no time series in this backtest")
    n = len(data)
    fig, height = _policy_panels(data, 170)
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
    fig.update_yaxes(range=[0, 105], ticksuffix=" %", dtick=25, title_text="% busy / used")
    return _finish_policy_panels(fig, data, tax, height)


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
    # Labels sit below their point and lean inwards (a point in the left half of the x range is
    # labelled to its right): a centred label above the cheapest point (the oracle, at the left edge
    # and near 100 %) ran out of the plot area and was clipped.
    x_mid = (min(g for _, g, _ in points) + max(g for _, g, _ in points)) / 2.0
    for row, gpu_h, att in points:
        fig.add_trace(
            go.Scatter(
                x=[gpu_h],
                y=[att],
                name=_esc(row.label),
                legendgroup=row.policy,
                mode="markers+text" if label_policies or row.is_oracle else "markers",
                text=[_esc(row.label)],
                textposition="bottom right" if gpu_h <= x_mid else "bottom left",
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
    # Below the lowest point a label needs about a fifth of a 400 px plot for its line of text
    # when every point sits within a few tenths of a percent: 25 % of the span, at least 0.5.
    y_pad = max((max(ys) - min(ys)) * 0.25, 0.5)
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
    end_s = number(section(doc, "workload").get("duration_s"))
    data = [(row, s) for row in rows if (s := _extract(row, end_s)) is not None]
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
