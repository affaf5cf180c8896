"""``llmscale analyze --report``: one self-contained HTML page of the analyses.

Built like the backtest's report (``report/page.py``, whose page pieces it reuses): plotly.js
inlined, figures as JSON drawn by the same boot script, which marks each chart div with
``data-llmscale-rendered`` once plotly has drawn it (the browser test waits for it).
"""

from __future__ import annotations

import html
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from llmscale.analyze.analysis import Analysis, per_replica
from llmscale.analyze.knee import Knee
from llmscale.report._common import PALETTE, fmt_float
from llmscale.report.figures import _empty, _esc, _figure, _style
from llmscale.report.page import chart_page, chart_section, write_page

if TYPE_CHECKING:
    import plotly.graph_objects as go

__all__ = ["CHART_IDS", "build_analysis_figures", "render_analysis_report", "summary_text"]

#: chart id -> title, in page order
CHART_IDS: dict[str, str] = {
    "knee": "Knee of P99 latency and throughput against load",
    "phase": "Entropy-bandwidth phase diagram",
    "effect": "Effect of scale actions on P99 latency",
    "predictors": "Latency predictors' errors",
}

_NOISE = "#b8bcc6"


def _list(a: np.ndarray) -> list[float | None]:
    return [float(v) if math.isfinite(v) else None for v in np.asarray(a, float)]


def _fig_knee(a: Analysis) -> go.Figure:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    t = a.table
    load, p99, thr = t.quantity("load_rps"), t.quantity("p99_s"), t.quantity("throughput")
    if load is None or p99 is None:
        return _empty(_figure(), a.notes.get("knee", "no load or P99 in the log"))
    serving = t.serving()
    x = per_replica(load, serving)
    fig = make_subplots(specs=[[{"secondary_y": True}]], figure=_figure())
    fig.add_trace(
        go.Scatter(
            x=_list(x),
            y=_list(p99),
            mode="markers",
            name="P99 per tick",
            marker={"color": PALETTE[0], "size": 5, "opacity": 0.35},
        ),
        secondary_y=False,
    )

    def add(knee: Knee | None, color: str, label: str, secondary: bool, where: str) -> None:
        if knee is None:
            return
        fig.add_trace(
            go.Scatter(
                x=_list(knee.x),
                y=_list(knee.y_smooth),
                mode="lines+markers",
                name=f"{label}, binned median",
                line={"color": color, "width": 2.5},
                marker={"size": 5},
            ),
            secondary_y=secondary,
        )
        fig.add_vline(
            x=knee.load,
            line={"color": color, "dash": "dash"},
            annotation={
                "text": _esc(f"{label} knee {knee.load:.3g} req/s/replica"),
                "font": {"color": color},
            },
            annotation_position=where,
        )

    add(a.latency_knee, PALETTE[3], "P99", False, "top left")
    if thr is not None and a.throughput_knee is not None:
        fig.add_trace(
            go.Scatter(
                x=_list(x),
                y=_list(per_replica(thr, serving)),
                mode="markers",
                name="throughput per tick",
                marker={"color": PALETTE[2], "size": 5, "opacity": 0.3},
            ),
            secondary_y=True,
        )
        add(a.throughput_knee, PALETTE[2], "throughput", True, "bottom right")
    _style(fig, 460)
    fig.update_xaxes(title_text="load per serving replica (req/s)")
    fig.update_yaxes(title_text=f"{t.resolved.get('p99_s', 'P99')} (s)", secondary_y=False)
    fig.update_yaxes(title_text=f"{t.resolved.get('throughput', 'throughput')} per replica", secondary_y=True)
    return fig


def _fig_phase(a: Analysis) -> go.Figure:
    import plotly.graph_objects as go

    ph = a.phase
    fig = _figure()
    if ph is None or ph.entropy.size == 0:
        return _empty(fig, a.notes.get("phase", "no tick with both queue entropy and bandwidth"))
    noise = ph.labels == -1
    if noise.any():
        fig.add_trace(
            go.Scatter(
                x=_list(ph.entropy[noise]),
                y=_list(ph.bandwidth[noise]),
                mode="markers",
                name="noise (transitions)",
                marker={"color": _NOISE, "size": 6},
            )
        )
    for i, c in enumerate(ph.clusters):
        sel = ph.labels == c.label
        color = PALETTE[i % len(PALETTE)]
        fig.add_trace(
            go.Scatter(
                x=_list(ph.entropy[sel]),
                y=_list(ph.bandwidth[sel]),
                mode="markers",
                name=_esc(f"pattern {c.label}: {c.share_of_time:.0%} of time, {c.zone}"),
                marker={"color": color, "size": 7, "opacity": 0.75},
            )
        )
        fig.add_trace(
            go.Scatter(
                x=[c.entropy],
                y=[c.bandwidth],
                mode="markers",
                showlegend=False,
                hovertext=_esc(f"centre of pattern {c.label}"),
                marker={"color": color, "size": 16, "symbol": "x", "line": {"width": 1}},
            )
        )
    # seed 004 chapter 1's decision thresholds
    for x0, x1, y0, y1, text in ((0.72, 1.0, 0.85, 1.0, "scale up"), (0.0, 0.25, 0.0, 0.4, "scale down")):
        fig.add_shape(type="rect", x0=x0, x1=x1, y0=y0, y1=y1, line={"dash": "dot", "color": "#888"})
        fig.add_annotation(
            x=(x0 + x1) / 2, y=y1, text=text, showarrow=False, yshift=8, font={"color": "#666"}
        )
    _style(fig, 520)
    fig.update_xaxes(title_text="queue entropy (normalised)", range=[-0.03, 1.03])
    fig.update_yaxes(title_text="bandwidth saturation P95", range=[-0.03, 1.03])
    return fig


def _fig_effect(a: Analysis) -> go.Figure:
    import plotly.graph_objects as go

    fig = _figure()
    if not a.effects:
        why = "; ".join(v for k, v in a.notes.items() if k.startswith("effect")) or "no scale action"
        return _empty(fig, why)
    names = [_esc(f"{e.action} (n={e.num_treated} vs {e.num_control})") for e in a.effects]
    fig.add_trace(
        go.Scatter(
            x=[e.ate_s for e in a.effects],
            y=names,
            mode="markers",
            name="adjusted effect, 95% CI",
            marker={"color": PALETTE[0], "size": 12},
            error_x={
                "type": "data",
                "symmetric": False,
                "array": [e.ci_high_s - e.ate_s for e in a.effects],
                "arrayminus": [e.ate_s - e.ci_low_s for e in a.effects],
            },
        )
    )
    fig.add_trace(
        go.Scatter(
            x=[e.naive_diff_s for e in a.effects],
            y=names,
            mode="markers",
            name="naive difference (confounded)",
            marker={"color": PALETTE[1], "size": 10, "symbol": "diamond-open"},
        )
    )
    fig.add_vline(x=0.0, line={"color": "#444"})
    _style(fig, 160 + 70 * len(a.effects))
    fig.update_xaxes(title_text=f"change of P99 {a.settings.effect_horizon_s:.0f} s later (s)")
    return fig


def _fig_predictors(a: Analysis) -> go.Figure:
    import plotly.graph_objects as go

    fig = _figure()
    scored = [p for p in a.predictors if p.errors]
    if not scored:
        return _empty(fig, a.notes.get("predictors", "no predictor could be scored on this log"))
    names = [_esc(p.name) for p in scored]
    for key, label, color in (
        ("mae_s", "MAE", PALETTE[0]),
        ("p99_abs_error_s", "99th-percentile error", PALETTE[1]),
    ):
        vals = [1000.0 * p.errors[key] for p in scored if p.errors]
        fig.add_trace(
            go.Bar(
                x=names,
                y=vals,
                name=label,
                marker={"color": color},
                text=[fmt_float(v) for v in vals],
                textposition="outside",
            )
        )
    _style(fig, 440)
    fig.update_layout(barmode="group")
    fig.update_yaxes(title_text="error (ms, log scale)", type="log")
    return fig


def build_analysis_figures(a: Analysis) -> dict[str, go.Figure]:
    return {
        "knee": _fig_knee(a),
        "phase": _fig_phase(a),
        "effect": _fig_effect(a),
        "predictors": _fig_predictors(a),
    }


def summary_text(a: Analysis, cid: str) -> str:
    """One paragraph of findings, in words, per section."""
    t = a.table
    if cid == "knee":
        bits = []
        if a.latency_knee is not None:
            k = a.latency_knee
            bits.append(
                f"P99 latency turns up at {k.load:.3g} req/s per serving replica "
                f"(P99 {k.value:.3g} s there): "
                "the fleet's cliff. Seed 003 2.3's rule: the first load bin whose smoothed second "
                "derivative exceeds 0.8 of its peak."
            )
        if a.throughput_knee is not None:
            bits.append(f"Throughput stops following load at {a.throughput_knee.load:.3g} req/s per replica.")
        bits += [a.notes[k] + "." for k in ("knee", "throughput") if k in a.notes]
        return " ".join(bits)
    if cid == "phase":
        if a.phase is None:
            return a.notes.get("phase", "")
        ph = a.phase
        return (
            f"{len(ph.clusters)} load pattern(s) found by DBSCAN "
            f"(eps {ph.eps:g} in the seed's weighted distance, "
            f"a core needs {ph.min_weight_s:.0f} s of ticks around it); bandwidth counts twice entropy "
            f"(seed 004 2.5). {int((ph.labels == -1).sum())} of {ph.labels.size} ticks are transitions."
        )
    if cid == "effect":
        bits = []
        for e in a.effects:
            verdict = {True: "lowered the P99", False: "raised the P99", None: "made no clear difference"}[
                e.helped
            ]
            bits.append(
                f"{e.action.capitalize()} {verdict}: {e.ate_s:+.3g} s "
                f"[{e.ci_low_s:+.3g}, {e.ci_high_s:+.3g}] "
                f"{e.horizon_s:.0f} s later, adjusted for {', '.join(e.covariates)} "
                f"(naive difference {e.naive_diff_s:+.3g} s)."
            )
        bits += [v + "." for k, v in a.notes.items() if k.startswith("effect")]
        return " ".join(bits)
    rows = []
    for p in a.predictors:
        if p.errors:
            rows.append(
                f"{p.name}: MAE {1000 * p.errors['mae_s']:.3g} ms, "
                f"99th pct {1000 * p.errors['p99_abs_error_s']:.3g} ms, "
                f"bias {1000 * p.errors['bias_s']:+.3g} ms over {p.errors['n']:.0f} ticks"
            )
        else:
            rows.append(f"{p.name}: {p.missing}")
    what = t.resolved.get("p99_s", "P99")
    return (
        f"Each predicts {what} {a.settings.predict_horizon_s:.0f} s ahead, "
        "scored as seed 000 3.2 does (MAE and "
        f"99th-percentile error). " + "; ".join(rows) + "."
    )


def _page(a: Analysis, figures: dict[str, Any], plotly_js: str) -> str:
    t = a.table
    title = f"llmscale analyze: {t.policy or 'controller'}"
    span = float(t.time_s[-1] - t.time_s[0]) if len(t) else 0.0
    sub = f"{len(t)} ticks over {span / 60:.1f} min from {t.source}"
    toc = "".join(f'<a href="#sec-{cid}">{html.escape(CHART_IDS[cid])}</a>' for cid in figures)
    sections = [chart_section(cid, CHART_IDS[cid], summary_text(a, cid)) for cid in figures]
    return chart_page(title, sub, f"<nav>{toc}</nav>", "".join(sections), figures, plotly_js)


def render_analysis_report(a: Analysis, path: str | Path) -> Path:
    """Write the page to ``path`` atomically (a crash never leaves half a page); return the path."""
    import plotly.offline

    return write_page(Path(path), _page(a, build_analysis_figures(a), plotly.offline.get_plotlyjs()))
