"""The standby pool's chart: ``slo``'s SLO attainment against GPU-hours over pool sizes.

Drawn when the document has a ``standby_curve`` (``llmscale backtest --standby-curve 0,4,8``):
one point per pool size joined in size order, each labelled with its size, so the page shows what
each extra sleeping replica buys in attainment and what it costs in GPU-hours.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from llmscale.report._common import number

if TYPE_CHECKING:
    import plotly.graph_objects as go

__all__ = ["CHART_STANDBY", "STANDBY_CAPTION", "STANDBY_TITLE", "fig_standby_curve"]

CHART_STANDBY = "chart-standby"
STANDBY_TITLE = "Standby pool: attainment vs. GPU-hours"
STANDBY_CAPTION = (
    "slo run once per standby pool size (sleeping replicas in vLLM level-1 sleep: they wake in "
    "seconds, hold their GPUs and are paid for while they sleep). Each point is one pool size, "
    "labelled with it: up means fewer SLO misses, right means more GPU-hours. A flash crowd that "
    "rises faster than a cold start is what the pool buys attainment on."
)
_COLOR = "#1a4f9c"


def fig_standby_curve(curve: Sequence[Mapping[str, Any]]) -> go.Figure:
    """One marker per pool size, joined in size order; a "no data" note for an empty curve."""
    import plotly.graph_objects as go

    points = []
    for row in curve:
        k, gpu_h, att = (
            row.get("standby_replicas"),
            number(row.get("gpu_hours")),
            number(row.get("slo_attainment")),
        )
        if isinstance(k, int) and gpu_h is not None and att is not None:
            points.append((k, gpu_h, att * 100.0))
    fig = go.Figure()
    if not points:
        fig.add_annotation(text="no standby pool size has results", showarrow=False, x=0.5, y=0.5)
        return fig
    points.sort()
    fig.add_trace(
        go.Scatter(
            x=[g for _, g, _ in points],
            y=[a for _, _, a in points],
            mode="lines+markers+text",
            name="slo by standby pool size",
            text=[f"pool {k}" for k, _, _ in points],
            textposition="top left",
            marker={"color": _COLOR, "size": 10},
            line={"color": _COLOR, "width": 1.5},
            hovertemplate="%{text}: %{x:.4g} GPU-h, %{y:.2f} % attainment<extra></extra>",
        )
    )
    fig.update_xaxes(title_text="GPU-hours (← cheaper)")
    fig.update_yaxes(title_text="SLO attainment (%) (↑ better)")
    fig.update_layout(height=460, showlegend=False, margin={"l": 60, "r": 30, "t": 30, "b": 60})
    return fig
