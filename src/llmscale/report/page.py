"""The backtest report as one self-contained HTML page: header cards, the comparison table, the charts.

The page is one file with plotly.js inlined, so it opens offline, can be attached to a ticket or
archived next to the trace, and renders the same years later. Layout: a header with the workload
summary and simulator config; the comparison table (same columns as
:func:`llmscale.report.table.comparison_table`); the charts of :mod:`llmscale.report.figures`, each
in ``<div id=CHART_ID class="llmscale-chart">``. The analyze and tune pages reuse
:func:`chart_page`, :func:`chart_section` and :func:`write_page`.
"""

from __future__ import annotations

import html
import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

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
    judged_text,
    noise_ties,
    number,
    report_title,
    rows_of,
    seeds_text,
    slo_text,
)
from llmscale.report.context import context_summary
from llmscale.report.figures import (
    _FONT,
    CHART_GPU_HOURS,
    CHART_LOAD,
    CHART_PARETO,
    CHART_QUEUE,
    CHART_TTFT,
    CHART_UTIL,
    _template_json,
    build_figures,
)
from llmscale.report.standby import CHART_STANDBY, STANDBY_CAPTION, STANDBY_TITLE

if TYPE_CHECKING:
    import plotly.graph_objects as go

__all__ = ["chart_page", "chart_section", "render_report", "write_page"]

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
    return json.dumps(value, default=str, ensure_ascii=False, separators=(", ", ": "))


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
    ("slo_ttft_per_1k_tokens_s", "TTFT SLO per 1k prompt tokens", lambda v: f"{fmt_seconds(v)} s"),
    ("policy_params", "policy parameters", None),
)
#: Units of the keys no field table names, by suffix (``sim_pending_s`` reads "pending (s)").
_UNITS = (("_s", "s"), ("_ms", "ms"), ("_rps", "req/s"), ("_mib", "MiB"), ("_gb", "GB"))


def _label(key: Any) -> str:
    """A readable label for a key no field table names: words, not an identifier.

    Worked: ``sim_max_num_seqs`` -> "max num seqs (simulator)", ``sim_pending_s`` -> "pending (s,
    simulator)", ``mean_rps`` -> "mean (req/s)".
    """
    text = str(key)
    notes = []
    for suffix, unit in _UNITS:
        if text.endswith(suffix) and len(text) > len(suffix):
            text = text[: -len(suffix)]
            notes.append(unit)
            break
    if text.startswith("sim_"):
        text = text[4:]
        notes.append("simulator")
    words = text.replace("_", " ").strip() or str(key)
    return f"{words} ({', '.join(notes)})" if notes else words


def _value_html(value: Any) -> str:
    """A value as HTML: a mapping as a nested list with labelled keys (a policy's parameters, the
    trace's source), a list of numbers or words on one line, anything else as text; never cut."""
    if isinstance(value, Mapping | list | tuple) and not value:
        return '<span class="muted">none</span>'
    if isinstance(value, Mapping):
        body = "".join(
            f"<dt>{html.escape(_label(k))}</dt><dd>{_value_html(v)}</dd>" for k, v in value.items()
        )
        return f'<dl class="nested">{body}</dl>'
    if isinstance(value, list | tuple) and all(not isinstance(v, Mapping | list | tuple) for v in value):
        return (
            html.escape(", ".join(_fmt_any(v) for v in value)) if value else '<span class="muted">none</span>'
        )
    if isinstance(value, list | tuple):
        return "".join(_value_html(v) for v in value)  # one nested list after another
    return html.escape(_fmt_any(value))


def _definition_list(mapping: Any, fields: Sequence[tuple[str, str, Any]]) -> str:
    """``<dl>`` of known fields (nicely formatted) followed by any other keys, labelled in words
    (:func:`_label`), nested mappings as nested lists (:func:`_value_html`); a ``None`` formatter
    means "render the value as it is structured"."""
    if not isinstance(mapping, Mapping) or not mapping:
        return '<p class="muted">not recorded</p>'
    items: list[tuple[str, str]] = []  # (label, HTML)
    known = set()
    for key, label, fmt in fields:
        known.add(key)
        if key in mapping and mapping[key] is not None:
            value = mapping[key]
            items.append((label, _value_html(value) if fmt is None else html.escape(fmt(value))))
    items.extend((_label(key), _value_html(value)) for key, value in mapping.items() if key not in known)
    body = "".join(f"<dt>{html.escape(k)}</dt><dd>{v}</dd>" for k, v in items)
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
dl.nested { font-size: .95em; padding-left: 8px; border-left: 2px solid #eceef2; margin: 1px 0 3px; }
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
    if judged_text(doc):
        table_caption += f" {judged_text(doc)}."
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
