"""The page of a tuning study: every trial, where the best one sits, and what each parameter did.

One self-contained HTML file, written like the backtest report and the analyze page (plotly
inlined, the same template, styles and boot script of :mod:`llmscale.report.page`), with three
charts and a table:

* **GPU-hours against SLO attainment**, one dot per trial, the target as a dashed line: the
  trials right of it are the feasible ones, and the best is the lowest of those;
* **the search over time**: each trial's GPU-hours by trial number and the best feasible so far;
* **each parameter against GPU-hours** (small multiples), the default as a dashed line;
* **the trials table**, best first, with every parameter and any error.
"""

from __future__ import annotations

import html
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llmscale.report._common import PALETTE
from llmscale.report.figures import _empty, _esc, _figure, _style
from llmscale.report.page import chart_page, chart_section, write_page
from llmscale.tune.study import TrialRecord, TuneResult

if TYPE_CHECKING:
    import plotly.graph_objects as go

__all__ = ["CHART_IDS", "build_tune_figures", "render_tune_report"]

#: chart id -> title, in page order
CHART_IDS: dict[str, str] = {
    "tune-frontier": "GPU-hours against SLO attainment",
    "tune-history": "The search, trial by trial",
    "tune-params": "Each parameter against GPU-hours",
}

_FEASIBLE = PALETTE[0]
_INFEASIBLE = "#b8bcc6"
_BEST = PALETTE[2]
_BASELINE = PALETTE[1]


def _done(result: TuneResult) -> list[TrialRecord]:
    return [t for t in result.trials if t.state == "complete" and t.gpu_hours is not None]


def _hover(t: TrialRecord) -> str:
    params = "<br>".join(f"{_esc(k)} = {_esc(_fmt(v))}" for k, v in t.params.items())
    return f"trial {t.number}<br>{t.gpu_hours:.4f} GPU-h at {100 * (t.attainment or 0):.3f}%<br>{params}"


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _fig_frontier(result: TuneResult) -> go.Figure:
    import plotly.graph_objects as go

    done = _done(result)
    if not done:
        return _empty(_figure(), "no trial finished")
    fig = _figure()
    for feasible, color, name in ((True, _FEASIBLE, "meets the target"), (False, _INFEASIBLE, "misses it")):
        group = [t for t in done if t.feasible == feasible]
        if group:
            fig.add_trace(
                go.Scatter(
                    x=[100 * (t.attainment or 0.0) for t in group],
                    y=[t.gpu_hours for t in group],
                    mode="markers",
                    name=name,
                    marker={"color": color, "size": 8},
                    hovertext=[_hover(t) for t in group],
                    hoverinfo="text",
                )
            )
    for t, color, name, symbol in (
        (result.baseline, _BASELINE, "defaults", "star"),
        (result.best, _BEST, "best", "diamond"),
    ):
        if t is not None:
            fig.add_trace(
                go.Scatter(
                    x=[100 * (t.attainment or 0.0)],
                    y=[t.gpu_hours],
                    mode="markers",
                    name=f"{name} (trial {t.number})",
                    marker={
                        "color": color,
                        "size": 15,
                        "symbol": symbol,
                        "line": {"width": 1, "color": "#222"},
                    },
                    hovertext=[_hover(t)],
                    hoverinfo="text",
                )
            )
    fig.add_vline(
        x=100 * result.spec.target_attainment,
        line={"color": "#d62728", "dash": "dash"},
        annotation={
            "text": _esc(f"target {result.spec.target_attainment:.2%}"),
            "font": {"color": "#d62728"},
        },
        annotation_position="top left",
    )
    _style(fig, 440)
    fig.update_xaxes(title_text="SLO attainment over all tuning traces (%)")
    fig.update_yaxes(title_text="GPU-hours (sum over the traces)")
    return fig


def _fig_history(result: TuneResult) -> go.Figure:
    import plotly.graph_objects as go

    done = sorted(_done(result), key=lambda t: t.number)
    if not done:
        return _empty(_figure(), "no trial finished")
    fig = _figure()
    fig.add_trace(
        go.Scatter(
            x=[t.number for t in done],
            y=[t.gpu_hours for t in done],
            mode="markers",
            name="trial",
            marker={"color": [_FEASIBLE if t.feasible else _INFEASIBLE for t in done], "size": 7},
            hovertext=[_hover(t) for t in done],
            hoverinfo="text",
        )
    )
    xs: list[int] = []
    ys: list[float] = []
    best = math.inf
    for t in done:
        if t.feasible and t.gpu_hours is not None:
            best = min(best, t.gpu_hours)
        if math.isfinite(best):
            xs.append(t.number)
            ys.append(best)
    if xs:
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=ys,
                mode="lines",
                name="best meeting the target",
                line={"color": _BEST, "shape": "hv", "width": 2.5},
            )
        )
    _style(fig, 380)
    fig.update_xaxes(title_text="trial")
    fig.update_yaxes(title_text="GPU-hours")
    return fig


def _fig_params(result: TuneResult) -> go.Figure:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    done = _done(result)
    space = list(result.space)
    if not done or not space:
        return _empty(_figure(), "no trial finished")
    cols = 3
    rows = math.ceil(len(space) / cols)
    fig = make_subplots(
        rows=rows,
        cols=cols,
        subplot_titles=[_esc(f"{p.name} ({p.unit})" if p.unit else p.name) for p in space],
        vertical_spacing=min(0.3 / max(rows - 1, 1), 0.12),
        horizontal_spacing=0.07,
        figure=_figure(),
    )
    for i, p in enumerate(space):
        r, c = divmod(i, cols)
        for feasible, color, name in (
            (True, _FEASIBLE, "meets the target"),
            (False, _INFEASIBLE, "misses it"),
        ):
            group = [t for t in done if t.feasible == feasible and p.name in t.params]
            fig.add_trace(
                go.Scatter(
                    x=[str(t.params[p.name]) if p.choices else t.params[p.name] for t in group],
                    y=[t.gpu_hours for t in group],
                    mode="markers",
                    name=name,
                    legendgroup=name,
                    showlegend=i == 0,
                    marker={"color": color, "size": 6},
                    hovertext=[_hover(t) for t in group],
                    hoverinfo="text",
                ),
                row=r + 1,
                col=c + 1,
            )
        if not p.choices and p.default is not None:
            fig.add_vline(x=p.default, line={"color": _BASELINE, "dash": "dash"}, row=r + 1, col=c + 1)
        if p.log:
            fig.update_xaxes(type="log", row=r + 1, col=c + 1)
    _style(fig, 60 + 260 * rows, panel_titles=True)
    fig.update_yaxes(title_text="GPU-h", col=1)
    return fig


def build_tune_figures(result: TuneResult) -> dict[str, go.Figure]:
    return {
        "tune-frontier": _fig_frontier(result),
        "tune-history": _fig_history(result),
        "tune-params": _fig_params(result),
    }


def _ordered(result: TuneResult) -> list[TrialRecord]:
    """Best first: feasible by GPU-hours, then the rest by attainment, failed trials last."""

    def key(t: TrialRecord) -> tuple[int, float, int]:
        if t.state != "complete" or t.gpu_hours is None:
            return (2, 0.0, t.number)
        if t.feasible:
            return (0, t.gpu_hours, t.number)
        return (1, -(t.attainment or 0.0), t.number)

    return sorted(result.trials, key=key)


def _table_html(result: TuneResult) -> str:
    names = [p.name for p in result.space]
    best = result.best
    head = "".join(
        f'<th scope="col">{html.escape(h)}</th>'
        for h in ("GPU-hours", "SLO attainment", "meets target", *names, "note")
    )
    body = []
    for t in _ordered(result):
        notes = []
        if t.baseline:
            notes.append("defaults")
        if best is not None and t.number == best.number:
            notes.append("best")
        if t.error:
            notes.append(t.error)
        cls = ' class="best"' if best is not None and t.number == best.number else ""
        cells = [
            "—" if t.gpu_hours is None else f"{t.gpu_hours:.4f}",
            "—" if t.attainment is None else f"{100 * t.attainment:.3f}%",
            "yes" if t.feasible else "no",
            *(_fmt(t.params[n]) if n in t.params else "—" for n in names),
        ]
        body.append(
            f'<tr><th scope="row">{t.number}</th>'
            + "".join(f"<td{cls}>{html.escape(c)}</td>" for c in cells)
            + f'<td class="note">{html.escape("; ".join(notes))}</td></tr>'
        )
    if not body:
        body.append(f'<tr><td colspan="{len(names) + 5}">no trials</td></tr>')
    return (
        '<table id="trials-table" class="llmscale-table">'
        f'<thead><tr><th scope="col">Trial</th>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'
    )


def _space_html(result: TuneResult) -> str:
    rows = "".join(
        f"<dt>{html.escape(p.name)}</dt>"
        f"<dd>{html.escape(p.describe())} · default {html.escape(_fmt(p.default))}"
        + (f" · {html.escape(p.help)}" if p.help else "")
        + "</dd>"
        for p in result.space
    )
    return f"<dl>{rows}</dl>"


def _summary(result: TuneResult) -> str:
    best, base = result.best, result.baseline
    bits = []
    if base is not None:
        bits.append(f"defaults: {base.gpu_hours:.4f} GPU-hours at {base.attainment:.3%} attainment")
    if best is not None:
        bits.append(f"best: trial {best.number}, {best.gpu_hours:.4f} GPU-hours at {best.attainment:.3%}")
        if base is not None and base.gpu_hours and best.gpu_hours is not None and best.number != base.number:
            change = best.gpu_hours / base.gpu_hours - 1.0
            if base.feasible:
                bits.append(f"{-100 * change:.1f}% fewer GPU-hours than the defaults")
            else:
                more = "more" if change > 0 else "fewer"
                bits.append(
                    f"the defaults miss the target; the best holds it with {100 * abs(change):.1f}% {more} "
                    "GPU-hours than they take"
                )
    else:
        bits.append(f"no trial reached the target of {result.spec.target_attainment:.2%}")
    return "; ".join(bits) + "."


_CAPTIONS: dict[str, str] = {
    "tune-frontier": "One dot per trial. Right of the dashed line the trial met the target; the best is the "
    "fewest GPU-hours among those. Hover a dot for its parameters.",
    "tune-history": "Each trial's GPU-hours in the order the sampler asked for them (grey: missed the "
    "target), and the best meeting the target so far. The first trial is the policy's defaults.",
    "tune-params": "Each searched parameter against the trial's GPU-hours; the dashed line is the default. "
    "A parameter whose dots lie flat did not matter on these traces.",
}


def _page(result: TuneResult, figures: dict[str, Any], plotly_js: str) -> str:
    spec = result.spec
    title = f"llmscale tune: {spec.policy}"
    sub = (
        f"{len(result.trials)} trials, fewest GPU-hours at >= {spec.target_attainment:.2%} SLO attainment "
        f"on {', '.join(result.cases)}"
    )
    facts = (
        '<div class="facts">'
        f'<div class="card"><h2>Result</h2><p>{html.escape(_summary(result))}</p>'
        f'<p class="caption">study {html.escape(spec.study_name)} in {html.escape(spec.storage)}</p></div>'
        f'<div class="card"><h2>Search space</h2>{_space_html(result)}</div>'
        "</div>"
    )
    toc = "".join(f'<a href="#sec-{cid}">{html.escape(CHART_IDS[cid])}</a>' for cid in figures)
    toc += '<a href="#sec-trials">Trials</a>'
    sections = [chart_section(cid, CHART_IDS[cid], _CAPTIONS[cid]) for cid in figures]
    sections.append(
        '<section id="sec-trials" class="card"><h2>Trials</h2>'
        '<p class="caption">Best first: the trials that met the target by GPU-hours, then the rest by '
        "attainment, then the failed ones with their errors.</p>"
        f'<div class="table-wrap">{_table_html(result)}</div></section>'
    )
    return chart_page(title, sub, f"{facts}<nav>{toc}</nav>", "".join(sections), figures, plotly_js)


def render_tune_report(result: TuneResult, path: str | Path) -> Path:
    """Write the page to ``path`` atomically; return the path."""
    import plotly.offline

    return write_page(Path(path), _page(result, build_tune_figures(result), plotly.offline.get_plotlyjs()))
