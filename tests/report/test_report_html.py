"""Tests of the HTML backtest report (`llmscale.report` page, figures and decimation).

The browser tests open the report in Debian's Chromium (headless, offline) and check from the
rendered DOM that every chart was drawn by plotly.js, and that a screenshot is not blank. They need
/usr/bin/chromium (`bash scripts/install_chromium.sh`) and FAIL, with that hint, without it;
LLMSCALE_TEST_CHROMIUM points them at another binary.
"""

from __future__ import annotations

import json
import math
import re
import struct
import time
import zlib
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from llmscale.report import build_figures, render_report
from llmscale.report.decimation import MAX_POINTS_PER_LINE, decimate_indices
from llmscale.report.figures import CHART_IDS
from support.chromium import CHROMIUM, run_chromium
from support.chromium import chromium as _chromium

STEP_S = 10.0


# --------------------------------------------------------------------------------------------------
# Synthetic backtest document
# --------------------------------------------------------------------------------------------------


def _simulate(policy: str, arrival: np.ndarray, rng: np.random.Generator, tp: int) -> dict[str, Any]:
    """A crude fleet: replicas go pending -> loading -> warm-up -> ready, scale-downs drain.

    Not a simulator, just enough dynamics that the charts look like a real backtest (lagging ready
    capacity, queue bursts, TTFT spikes, GPU utilisation pinned near 100 %, SM activity below HBM bandwidth).
    """
    n = arrival.size
    per_replica_rps = 4.0
    stages = {"pending": 3, "loading": 6, "warmup": 2}  # ticks spent in each state
    # Cold start: the initial replicas are still loading, so early samples have no ready replica
    # (gpu_util & co. are None there, as the simulator reports them).
    ready, draining = 0, 0
    pipeline: list[list[Any]] = [["loading", 4], ["loading", 4]]  # [state, ticks_left]
    drain_left: list[int] = []
    queue = 0.0
    out: dict[str, list[Any]] = {
        k: []
        for k in (
            "t_s",
            "arrival_rps",
            "queue_depth",
            "running",
            "replicas_pending",
            "replicas_loading",
            "replicas_warmup",
            "replicas_ready",
            "replicas_draining",
            "desired_replicas",
            "gpu_util",
            "sm_active",
            "bw_util",
            "kv_usage",
            "gpu_hours_cum",
        )
    }
    gpu_h = 0.0
    events = 0
    for i in range(n):
        if policy == "target-util-70":
            seen = arrival[max(i - 6, 0)]  # reacts to a lagged, smoothed signal
            desired = math.ceil(seen / (per_replica_rps * 0.7))
        elif policy == "queue-pid":
            desired = math.ceil(arrival[i] / per_replica_rps + queue / 200.0)
        elif policy == "oracle":  # knows the whole future: provisions for the next window's peak
            desired = math.ceil(arrival[i : i + 12].max() / (per_replica_rps * 0.97) + queue / 120.0)
        else:  # predictive: forecasts 12 ticks ahead (~ the provisioning delay) with some error
            forecast = arrival[min(i + 12, n - 1)] * rng.normal(1.0, 0.05)
            desired = math.ceil(forecast / (per_replica_rps * 0.8) + queue / 240.0)
        desired = int(np.clip(desired, 1, 24))
        provisioned = ready + len(pipeline)
        if desired > provisioned:
            pipeline.extend(["pending", stages["pending"]] for _ in range(desired - provisioned))
            events += 1
        elif desired < provisioned and ready > 1 and i % 3 == 0:
            ready -= 1
            drain_left.append(3)
            events += 1
        for item in pipeline:
            item[1] -= 1
            if item[1] <= 0:
                if item[0] == "pending":
                    item[0], item[1] = "loading", stages["loading"]
                elif item[0] == "loading":
                    item[0], item[1] = "warmup", stages["warmup"]
                else:
                    item[0] = "ready"
        ready += sum(1 for item in pipeline if item[0] == "ready")
        pipeline = [item for item in pipeline if item[0] != "ready"]
        drain_left = [d - 1 for d in drain_left if d > 1]
        draining = len(drain_left)
        capacity = ready * per_replica_rps
        queue = max(queue + (arrival[i] - capacity) * STEP_S, 0.0)
        load = min(arrival[i] / capacity, 1.0) if capacity else 0.0
        counts = {s: sum(1 for item in pipeline if item[0] == s) for s in stages}
        total = ready + draining + sum(counts.values())
        gpu_h += total * tp * STEP_S / 3600.0
        out["t_s"].append(i * STEP_S)
        out["arrival_rps"].append(float(arrival[i]))
        out["queue_depth"].append(round(queue))
        out["running"].append(round(min(arrival[i], capacity) * 6))
        out["replicas_pending"].append(counts["pending"])
        out["replicas_loading"].append(counts["loading"])
        out["replicas_warmup"].append(counts["warmup"])
        out["replicas_ready"].append(ready)
        out["replicas_draining"].append(draining)
        out["desired_replicas"].append(desired)
        # GPU_UTIL reads busy with any load; SM activity stays low while HBM bandwidth saturates.
        out["gpu_util"].append(None if ready == 0 else min(0.9 + 0.5 * load, 1.0))
        out["sm_active"].append(None if ready == 0 else 0.12 + 0.33 * load + rng.normal(0, 0.01))
        out["bw_util"].append(None if ready == 0 else min(0.06 + 0.92 * load + rng.normal(0, 0.01), 1.0))
        out["kv_usage"].append(None if ready == 0 else min(0.2 + 0.6 * load + queue / 5000.0, 1.0))
        out["gpu_hours_cum"].append(gpu_h)
    # Per-minute P99 TTFT: base prefill latency plus queueing; some minutes have no data.
    queue_arr = np.asarray(out["queue_depth"], dtype=float)
    per_min = int(60 / STEP_S)
    minute_t, ttft = [], []
    for m in range(n // per_min):
        q = queue_arr[m * per_min : (m + 1) * per_min].max()
        minute_t.append(m * 60.0)
        ttft.append(None if m % 17 == 5 else float(0.35 + q / 40.0 + rng.uniform(0, 0.1)))
    out["minute_t_s"] = minute_t
    out["ttft_p99_s_per_minute"] = ttft
    ttft_vals = np.array([x for x in ttft if x is not None])
    attainment = float(np.mean(ttft_vals <= 2.0)) * 0.998
    reps = (
        np.array(out["replicas_ready"])
        + np.array(out["replicas_pending"])
        + np.array(out["replicas_loading"])
    )
    return {
        "policy": policy,
        "requests": int(arrival.sum() * STEP_S),
        "completed": int(arrival.sum() * STEP_S * 0.99),
        "rejected": 0,
        "timed_out": int(queue_arr.max() / 50),
        "killed_by_scale_down": 0 if policy != "queue-pid" else 3,
        "slo_attainment": attainment,
        "ttft_p50_s": float(np.median(ttft_vals)),
        "ttft_p95_s": float(np.quantile(ttft_vals, 0.95)),
        "ttft_p99_s": float(np.quantile(ttft_vals, 0.99)),
        "tpot_p50_s": 0.031,
        "tpot_p99_s": 0.074 if policy != "queue-pid" else None,
        "e2e_p50_s": 8.2,
        "e2e_p99_s": 21.7,
        "gpu_hours": gpu_h,
        "replicas_mean": float(reps.mean()),
        "replicas_max": int(reps.max()),
        "scale_events": events,
        "direction_changes": events // 3,
        "mean_gpu_util": float(np.nanmean(np.array(out["gpu_util"], dtype=float))),
        "makespan_s": n * STEP_S + 30.0,
        "wall_s": 1.7,
        "series": out,
    }


def make_doc(
    policies: tuple[str, ...] = ("target-util-70", "queue-pid", "slo-predictive"),
    points: int = 360,
    oracle: bool = True,
    seed: int = 7,
) -> dict[str, Any]:
    """A realistic backtest document: `points` samples every 10 s, a ramp and a burst."""
    rng = np.random.default_rng(seed)
    t = np.arange(points) * STEP_S
    hours = t / 3600.0
    arrival = 12 + 18 * np.clip(np.sin(np.pi * hours * 3600 / (points * STEP_S)), 0, None)
    arrival = arrival + 25 * np.exp(-(((t - 0.6 * points * STEP_S) / 120.0) ** 2))  # a burst
    arrival = np.maximum(arrival + rng.normal(0, 1.0, points), 0.5)
    tp = 2
    results = [_simulate(p, arrival, rng, tp) for p in policies]
    doc: dict[str, Any] = {
        "workload": {
            "name": "chat-diurnal-1h",
            "requests": int(arrival.sum() * STEP_S),
            "duration_s": points * STEP_S,
            "mean_rps": float(arrival.mean()),
            "peak_1min_rps": float(arrival.max()),
            "prompt_tokens_mean": 812.5,
        },
        "config": {
            "model": "llama-3.1-70b",
            "gpu": "H100-80G",
            "tp": tp,
            "slo_ttft_s": 2.0,
            "slo_tpot_s": 0.1,
            "seed": seed,
            "min_replicas": 1,
            "max_replicas": 24,
            "initial_replicas": 2,
            "tick_s": 10.0,
            "series_step_s": STEP_S,
        },
        "results": results,
    }
    if oracle:
        doc["oracle"] = _simulate("oracle", arrival, rng, tp)
    return doc


def _many_policies_doc(n_policies: int, points: int) -> dict[str, Any]:
    """`n_policies` cheap synthetic results over `points` samples (vectorised: long series are fast)."""
    rng = np.random.default_rng(3)
    t = np.arange(points) * STEP_S
    arrival = 20 + 10 * np.sin(t / 3000.0) + rng.normal(0, 1, points)
    results = []
    for i in range(n_policies):
        ready = np.maximum(np.round(arrival / (3.5 + 0.02 * i)), 1)
        queue = np.maximum(rng.normal(0, 20, points).cumsum() % 300, 0)
        util = np.clip(0.3 + 0.1 * np.sin(t / 700.0 + i), 0, 1)
        minute_t = np.arange(points // 6) * 60.0
        results.append(
            {
                "policy": f"policy-{i:02d}",
                "slo_attainment": 0.9 + 0.002 * i,
                "gpu_hours": 100.0 + i,
                "ttft_p99_s": 1.5,
                "series": {
                    "t_s": t.tolist(),
                    "arrival_rps": arrival.tolist(),
                    "queue_depth": queue.tolist(),
                    "running": (ready * 20).tolist(),
                    "replicas_pending": np.zeros(points).tolist(),
                    "replicas_loading": (ready * 0.1).round().tolist(),
                    "replicas_warmup": np.zeros(points).tolist(),
                    "replicas_ready": ready.tolist(),
                    "replicas_draining": np.zeros(points).tolist(),
                    "desired_replicas": ready.tolist(),
                    "gpu_util": np.ones(points).tolist(),
                    "sm_active": util.tolist(),
                    "bw_util": np.clip(util * 2.5, 0, 1).tolist(),
                    "kv_usage": util.tolist(),
                    "gpu_hours_cum": (ready.cumsum() * STEP_S / 3600.0).tolist(),
                    "minute_t_s": minute_t.tolist(),
                    "ttft_p99_s_per_minute": (1.0 + 0.5 * np.sin(minute_t / 900.0 + i) ** 2).tolist(),
                },
            }
        )
    return {
        "workload": {"name": "long", "requests": 1, "duration_s": float(points * STEP_S)},
        "config": {"slo_ttft_s": 2.0},
        "results": results,
    }


def expected_traces(n_series: int, n_points: int, oracle: bool) -> dict[str, int]:
    """Traces per chart, as documented in `llmscale.report.figures` (`n_series` rows with a series,
    `n_points` Pareto points of real policies)."""
    return {
        "chart-pareto": n_points + int(oracle) + int(n_points > 0),
        "chart-load-replicas": 7 * n_series,
        "chart-queue": n_series,
        "chart-ttft": n_series,
        "chart-util": 4 * n_series,
        "chart-gpu-hours": n_series,
    }


def _embedded_figures(page: str) -> dict[str, Any]:
    """The figures JSON the page hands to plotly.js."""
    m = re.search(r'<script type="application/json" id="llmscale-figures">(.*?)</script>', page, re.S)
    assert m, "figures JSON script not found"
    return json.loads(m.group(1))


# --------------------------------------------------------------------------------------------------
# Without a browser
# --------------------------------------------------------------------------------------------------


def test_report_is_self_contained(tmp_path: Path) -> None:
    out = render_report(make_doc(), tmp_path / "sub" / "report.html")
    assert out == tmp_path / "sub" / "report.html"
    page = out.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>")
    # plotly.js inlined (its banner), no external script/style/image of any kind.
    assert "plotly.js v" in page
    assert not re.search(r"<script[^>]*\ssrc\s*=", page, re.I), "a <script src=...> would need the network"
    assert not re.search(r"""<(?:link|img|iframe)[^>]*\s(?:src|href)\s*=\s*["']?(?:https?:)?//""", page, re.I)
    assert not re.search(r"""<script[^>]*src=["']https?://""", page, re.I)
    size = out.stat().st_size
    assert 3_000_000 < size < 7_000_000, size  # ~4.8 MB of plotly.js + a few hundred KB of data
    for chart_id in CHART_IDS:
        assert f'<div id="{chart_id}" class="llmscale-chart"></div>' in page
    # No temp file left behind by the atomic write.
    assert sorted(p.name for p in out.parent.iterdir()) == ["report.html"]


def test_figures_have_documented_trace_counts(tmp_path: Path) -> None:
    page = render_report(make_doc(), tmp_path / "r.html").read_text(encoding="utf-8")
    figures = _embedded_figures(page)
    assert list(figures) == list(CHART_IDS)
    counts = {cid: len(fig["data"]) for cid, fig in figures.items()}
    assert counts == expected_traces(n_series=4, n_points=3, oracle=True)


def test_policy_colours_are_consistent_across_charts() -> None:
    figs = build_figures(make_doc())
    colours: dict[str, set[str]] = {}
    for cid in ("chart-queue", "chart-ttft", "chart-gpu-hours"):
        for trace in figs[cid].data:
            colours.setdefault(trace.name, set()).add(trace.line.color)
    for trace in figs["chart-pareto"].data:
        if trace.name != "Pareto frontier":
            colours.setdefault(trace.name, set()).add(trace.marker.color)
    assert set(colours) == {"target-util-70", "queue-pid", "slo-predictive", "oracle (lower bound)"}
    assert all(len(c) == 1 for c in colours.values()), colours
    assert len({next(iter(c)) for c in colours.values()}) == 4  # and distinct between policies


def test_html_table_matches_rich_columns(tmp_path: Path) -> None:
    from llmscale.report._common import COLUMNS

    doc = make_doc()
    page = render_report(doc, tmp_path / "r.html").read_text(encoding="utf-8")
    table = re.search(r'<table id="comparison-table".*?</table>', page, re.S)
    assert table
    headers = [
        re.sub(r"<br>", " ", h) for h in re.findall(r'<th scope="col"[^>]*>(.*?)</th>', table.group(0))
    ]
    assert headers == ["Policy", *(c.header.replace("\n", " ") for c in COLUMNS)]
    rows = re.findall(r"<tr( class=\"oracle\")?><th scope=\"row\".*?</span>(.*?)</th>", table.group(0))
    assert [name for _, name in rows] == [
        "target-util-70",
        "queue-pid",
        "slo-predictive",
        "oracle (lower bound)",
    ]
    assert rows[-1][0], "the oracle row is last and marked"
    # Best attainment (target-util-70) and lowest GPU-hours (queue-pid) among the real policies.
    best = re.findall(r'<td class="best">(.*?)</td>', table.group(0))
    assert best == ["82.0%", "16.31"]
    assert "<td>—</td>" in table.group(0)  # queue-pid's TPOT p99 is None


def test_text_from_the_doc_is_escaped(tmp_path: Path) -> None:
    evil = "<script>alert('pwned')</script> & <b>bold</b>"
    doc = make_doc(policies=("target-util-70", "queue-pid"))
    doc["results"][0]["policy"] = evil
    doc["workload"]["name"] = "</title><img src=x onerror=alert(1)>"
    doc["config"]["note"] = "</script><script>alert(2)</script>"
    page = render_report(doc, tmp_path / "r.html").read_text(encoding="utf-8")
    assert "<script>alert" not in page
    assert "<img src=x" not in page
    assert "&lt;script&gt;alert(&#x27;pwned&#x27;)&lt;/script&gt; &amp; &lt;b&gt;bold&lt;/b&gt;" in page
    # In the chart JSON the name is HTML-escaped for plotly's pseudo-HTML labels, then JSON-escaped
    # so that nothing can close the <script> element.
    figures = _embedded_figures(page)
    names = {trace.get("name") for trace in figures["chart-queue"]["data"]}
    assert "&lt;script&gt;alert('pwned')&lt;/script&gt; &amp; &lt;b&gt;bold&lt;/b&gt;" in names


def test_single_policy_without_oracle(tmp_path: Path) -> None:
    doc = make_doc(policies=("queue-pid",), oracle=False)
    page = render_report(doc, tmp_path / "r.html").read_text(encoding="utf-8")
    counts = {cid: len(fig["data"]) for cid, fig in _embedded_figures(page).items()}
    assert counts == expected_traces(n_series=1, n_points=1, oracle=False)
    assert "oracle" not in page.split("<body>", 1)[1].split('<script type="application/json"')[0]


def test_results_without_series_and_empty_results(tmp_path: Path) -> None:
    doc = make_doc(policies=("a", "b"))
    del doc["results"][0]["series"]
    doc["results"][1]["series"] = None
    doc["oracle"]["series"] = {"t_s": []}
    figs = build_figures(doc)
    assert len(figs["chart-pareto"].data) == 2 + 1 + 1
    for cid in CHART_IDS[1:]:
        assert len(figs[cid].data) == 0
        assert "no time series" in figs[cid].layout.annotations[0].text
    render_report(doc, tmp_path / "a.html")

    empty = {"workload": {}, "config": {}, "results": []}
    page = render_report(empty, tmp_path / "b.html").read_text(encoding="utf-8")
    assert "no results" in page
    assert all(len(fig["data"]) == 0 for fig in _embedded_figures(page).values())


def test_series_with_none_values_become_gaps() -> None:
    doc = make_doc(policies=("queue-pid",), oracle=False)
    series = doc["results"][0]["series"]
    series["queue_depth"][100:110] = [None] * 10
    series["arrival_rps"] = series["arrival_rps"][:-5]  # ragged: padded with gaps, not an error
    figs = build_figures(doc)
    y = np.asarray(figs["chart-queue"].data[0].y, dtype=float)
    assert np.isnan(y[100:110]).all() and np.isfinite(y[:100]).all()
    util = figs["chart-util"].data[1]  # SM active: None during the cold start
    assert np.isnan(np.asarray(util.y, dtype=float)[0])


def test_dozens_of_policies_cycle_palette_and_stay_small(tmp_path: Path) -> None:
    from llmscale.report._common import policy_style

    styles = [policy_style(i) for i in range(40)]
    assert len(set(styles)) == 40, "colour x dash must stay unique for dozens of policies"
    doc = _many_policies_doc(n_policies=30, points=8640)  # a day at 10 s, 30 policies
    start = time.perf_counter()
    out = render_report(doc, tmp_path / "big.html")
    elapsed = time.perf_counter() - start
    figures = _embedded_figures(out.read_text(encoding="utf-8"))
    assert {cid: len(f["data"]) for cid, f in figures.items()} == expected_traces(30, 30, False)
    assert out.stat().st_size < 9_000_000, out.stat().st_size
    assert elapsed < 60, elapsed


def test_long_series_are_downsampled() -> None:
    doc = _many_policies_doc(n_policies=2, points=50_000)
    for cid, fig in build_figures(doc).items():
        for trace in fig.data:
            if trace.x is not None:
                assert len(trace.x) <= MAX_POINTS_PER_LINE, (cid, trace.name, len(trace.x))
                assert len(trace.x) == len(trace.y)


def test_decimate_indices_keeps_extremes_and_gaps() -> None:
    n = 100_000
    y = np.sin(np.arange(n) / 5000.0)
    y[12_345] = 50.0  # a one-sample spike
    y[70_000:70_003] = np.nan  # a short gap
    idx = decimate_indices([y], 2000)
    assert len(idx) <= 2000
    assert idx[0] == 0 and idx[-1] == n - 1
    assert np.all(np.diff(idx) > 0)
    assert 12_345 in idx
    assert np.isnan(y[idx]).any()
    assert np.nanmin(y[idx]) == pytest.approx(np.nanmin(y)) and np.nanmax(y[idx]) == 50.0
    short = np.arange(10.0)
    assert decimate_indices([short], 2000).tolist() == list(range(10))
    # Several keys share one index set, each keeping its own spike.
    z = np.zeros(n)
    z[99_000] = -7.0
    both = decimate_indices([y, z], 2000)
    assert len(both) <= 2000 and 12_345 in both and 99_000 in both


# --------------------------------------------------------------------------------------------------
# In a real browser (Debian's chromium, headless, offline)
# --------------------------------------------------------------------------------------------------

# Void HTML elements never get an end tag; everything else in the serialized DOM does.
_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class _ChartDom(HTMLParser):
    """Collects, per `.llmscale-chart` div of a dumped DOM, what plotly.js drew inside it."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.charts: dict[str, dict[str, Any]] = {}
        self._stack: list[tuple[str, str | None, str | None]] = []  # (tag, chart id, text key)

    def _chart(self) -> str | None:
        return next((c for _, c, _ in reversed(self._stack) if c), None)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        chart = self._chart()
        new_chart = None
        if "llmscale-chart" in classes and a.get("id"):
            new_chart = a["id"]
            self.charts[new_chart] = {
                "classes": classes,
                "rendered": a.get("data-llmscale-rendered"),
                "main_svgs": 0,
                "traces": 0,
                "errors": 0,
                "legend": [],
            }
        elif chart is not None:
            info = self.charts[chart]
            info["main_svgs"] += tag == "svg" and "main-svg" in classes
            info["traces"] += tag == "g" and "trace" in classes
            info["errors"] += "llmscale-error" in classes
        text_key = "legend" if chart is not None and "legendtext" in classes else None
        if tag not in _VOID:
            self._stack.append((tag, new_chart, text_key))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        # Counted like a start tag, but never pushed: nothing can be inside it.
        self.handle_starttag(tag, attrs)
        if tag not in _VOID and self._stack and self._stack[-1][0] == tag:
            self._stack.pop()

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self._stack) - 1, -1, -1):
            if self._stack[i][0] == tag:
                del self._stack[i:]
                return

    def handle_data(self, data: str) -> None:
        if self._stack and self._stack[-1][2] == "legend":
            chart = self._chart()
            if chart is not None:
                self.charts[chart]["legend"].append(data)


#: A policy that ran few replicas beside ones that ran many: its panel must use its own scale.
SMALL_POLICY = "small-fleet"
#: Samples the backtest writes after the trace's end (the fleet finishing what is in flight).
DRAIN_SAMPLES = 6


def _reader_doc() -> dict[str, Any]:
    """:func:`make_doc` plus what the reader fixes are checked on: a policy whose fleet is a quarter
    of the others', samples after the trace's end that read 0 (a backtest's drain), and a
    configuration with raw keys, a nested mapping and a long list."""
    doc = make_doc()
    small = json.loads(json.dumps(doc["results"][0]))
    small["policy"] = SMALL_POLICY
    # A quarter of the fleet misses its SLO often; the oracle meets it always: the Pareto chart's
    # y range then spans 45-100 %, where a label above the oracle's point ran out of the plot.
    small["slo_attainment"] = 0.45
    doc["oracle"]["slo_attainment"] = 1.0
    series = small["series"]
    for key in ("replicas_pending", "replicas_loading", "replicas_warmup", "replicas_ready",
                "replicas_draining", "desired_replicas"):  # fmt: skip
        series[key] = [
            None if v is None else max(v // 4, 1 if key == "replicas_ready" else 0) for v in series[key]
        ]
    doc["results"].append(small)
    for r in [*doc["results"], doc["oracle"]]:
        ser = r["series"]
        n = len(ser["t_s"])
        for key, values in ser.items():
            if key in ("minute_t_s", "ttft_p99_s_per_minute") or len(values) != n:
                continue
            tail = (
                [ser["t_s"][-1] + STEP_S * (k + 1) for k in range(DRAIN_SAMPLES)]
                if key == "t_s"
                else ([values[-1]] * DRAIN_SAMPLES if key == "gpu_hours_cum" else [0] * DRAIN_SAMPLES)
            )
            ser[key] = [*values, *tail]
    doc["config"].update(
        sim_max_num_seqs=256,
        sim_pending_s=30.0,
        policy_params={"queue-pid": {"kp": 0.5, "target_queue": 4.0, "windows_s": [30, 60, 120, 300, 600]}},
        sim_hbm_glitches=[
            {"start_s": 600.0 + 60 * k, "duration_s": 20.0, "bw_factor": 0.5} for k in range(8)
        ],
    )
    return doc


#: Runs in the page once every chart has drawn: writes, into <pre id="llmscale-measure">, each
#: chart's axes as plotly laid them out (range, title, overlay), its plot rectangle and the boxes
#: of its point labels in page pixels, and the last x of every trace.
_MEASURE_JS = """
(function () {
  function measure() {
    var charts = document.querySelectorAll(".llmscale-chart");
    for (var i = 0; i < charts.length; i++) {
      if (!charts[i].getAttribute("data-llmscale-rendered")) { setTimeout(measure, 50); return; }
    }
    var out = {};
    charts.forEach(function (gd) {
      var fl = gd._fullLayout, axes = {};
      Object.keys(fl).forEach(function (k) {
        if (/^[xy]axis[0-9]*$/.test(k)) {
          var a = fl[k];
          axes[k] = {range: [Number(a.range[0]), Number(a.range[1])], overlaying: a.overlaying || "",
                     title: (a.title && a.title.text) || "", domain: a.domain};
        }
      });
      var svg = gd.querySelector("svg.main-svg").getBoundingClientRect(), s = fl._size;
      var texts = [];
      gd.querySelectorAll("g.textpoint text").forEach(function (t) {
        var r = t.getBoundingClientRect();
        texts.push({text: t.textContent, left: r.left, top: r.top, right: r.right, bottom: r.bottom});
      });
      out[gd.id] = {
        axes: axes,
        plot: {left: svg.left + s.l, top: svg.top + s.t,
               right: svg.left + s.l + s.w, bottom: svg.top + s.t + s.h},
        texts: texts,
        traces: gd._fullData.map(function (tr) {
          var x = tr.x;
          return {name: tr.name, yaxis: tr.yaxis, last_x: x && x.length ? Number(x[x.length - 1]) : null};
        })
      };
    });
    var pre = document.createElement("pre");
    pre.id = "llmscale-measure";
    pre.textContent = JSON.stringify(out);
    document.body.appendChild(pre);
  }
  measure();
})();
"""


def _measured(rendered: dict[str, Any]) -> dict[str, Any]:
    m = re.search(r'<pre id="llmscale-measure">(.*?)</pre>', rendered["dom"], re.S)
    assert m, "the measuring script wrote nothing: did every chart render?"
    import html as html_mod

    return json.loads(html_mod.unescape(m.group(1)))


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The fixture report, its dumped DOM after plotly ran, and a screenshot of it.

    Without chromium this yields nothing and the tests themselves fail (a fixture error would be
    reported as ERROR, not as the FAILED-with-instructions the suite promises).
    """
    if not CHROMIUM.exists():
        return {}
    base = tmp_path_factory.mktemp("browser")
    doc = _reader_doc()
    report = render_report(doc, base / "report.html")
    # The DOM is dumped from a copy that also measures what plotly drew (_MEASURE_JS).
    measured = base / "report-measured.html"
    measured.write_text(
        report.read_text(encoding="utf-8").replace("</body>", f"<script>{_MEASURE_JS}</script></body>"),
        encoding="utf-8",
    )
    timings: dict[str, float] = {}
    start = time.perf_counter()
    dom = run_chromium(["--dump-dom", measured.as_uri()], base / "profile-dom")
    timings["dump_dom_s"] = time.perf_counter() - start
    assert dom.returncode == 0, dom.stderr.decode(errors="replace")[-3000:]
    shot = base / "report.png"
    start = time.perf_counter()
    res = run_chromium(
        ["--window-size=1400,4000", f"--screenshot={shot}", report.as_uri()], base / "profile-shot"
    )
    timings["screenshot_s"] = time.perf_counter() - start
    assert res.returncode == 0, res.stderr.decode(errors="replace")[-3000:]
    return {"doc": doc, "dom": dom.stdout.decode("utf-8", errors="replace"), "png": shot, "timings": timings}


@pytest.mark.browser
def test_every_chart_renders_in_chromium(rendered: dict[str, Any]) -> None:
    _chromium()
    parser = _ChartDom()
    parser.feed(rendered["dom"])
    charts = parser.charts
    assert list(charts) == list(CHART_IDS), f"chart divs in the DOM: {list(charts)}"
    expected = expected_traces(n_series=5, n_points=4, oracle=True)  # _reader_doc: 4 policies + oracle
    for chart_id, info in charts.items():
        assert info["errors"] == 0, f"{chart_id}: plotly raised (see .llmscale-error)"
        assert "js-plotly-plot" in info["classes"], f"{chart_id}: plotly never initialised the div"
        assert info["rendered"] == "ok", f"{chart_id}: Plotly.newPlot did not resolve"
        assert info["main_svgs"] >= 1, f"{chart_id}: no <svg class=main-svg> drawn"
        assert info["traces"] == expected[chart_id], f"{chart_id}: {info['traces']} traces drawn"
    # Legends carry the (escaped, then rendered) policy names.
    policies = [r["policy"] for r in rendered["doc"]["results"]]
    for chart_id in ("chart-queue", "chart-ttft", "chart-gpu-hours", "chart-pareto"):
        legend = charts[chart_id]["legend"]
        assert all(p in legend for p in policies), (chart_id, legend)
        assert "oracle (lower bound)" in legend


def _png_rows(path: Path) -> tuple[int, int, list[bytes]]:
    """Width, height and the filtered scanlines of an 8-bit RGB(A) PNG (zlib only, no Pillow)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, width, height, bpp = 8, bytearray(), 0, 0, 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and colour in (2, 6), (depth, colour)
            bpp = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
    raw = zlib.decompress(bytes(idat))
    stride = 1 + width * bpp
    assert len(raw) == height * stride, "truncated image data"
    # Drop each row's filter byte and first pixel: what's left is all zero exactly when the row is
    # a flat colour continuing the row above, whatever PNG filter the encoder picked.
    return width, height, [raw[i * stride + 1 + bpp : (i + 1) * stride] for i in range(height)]


@pytest.mark.browser
def test_screenshot_is_not_blank(rendered: dict[str, Any]) -> None:
    _chromium()
    png: Path = rendered["png"]
    assert png.exists() and png.stat().st_size > 100_000, "screenshot missing or suspiciously small"
    width, height, rows = _png_rows(png)
    assert (width, height) == (1400, 4000)
    detailed = sum(1 for row in rows if row.strip(b"\0"))
    # A blank page has ~0 % rows with detail; the rendered report has > 50 % (text, axes, lines).
    assert detailed / height > 0.3, f"only {detailed}/{height} rows have any detail: blank render?"
    # Charts fill the page top to bottom: every 500-px band of the screenshot has some detail.
    for top in range(0, height, 500):
        band = rows[top : top + 500]
        assert sum(1 for row in band if row.strip(b"\0")) > 0.1 * len(band), f"blank band at y={top}"


# --------------------------------------------------------------------------------------------------
# What a reader needs, measured in the rendered page
# --------------------------------------------------------------------------------------------------


def _peak_replicas(result: dict[str, Any], end_s: float) -> float:
    ser = result["series"]
    keep = [i for i, t in enumerate(ser["t_s"]) if t - STEP_S < end_s]
    stacked = [
        sum(ser[k][i] or 0 for k in ser if k.startswith("replicas_") and k != "replicas_sleeping")
        for i in keep
    ]
    desired = [ser["desired_replicas"][i] or 0 for i in keep]
    return float(max(1, *stacked, *desired))


@pytest.mark.browser
def test_each_replica_panel_is_on_its_own_policys_scale(rendered: dict[str, Any]) -> None:
    """Found from outside: every panel shared one 0-64 axis, so a four-replica policy was a sliver.
    Each panel's replica axis now tops out 8 % above that policy's own peak."""
    _chromium()
    doc = rendered["doc"]
    load = _measured(rendered)["chart-load-replicas"]
    primary = sorted(
        (k for k, a in load["axes"].items() if k.startswith("yaxis") and not a["overlaying"]),
        key=lambda k: int(k[5:] or 1),
    )
    results = [*doc["results"], doc["oracle"]]
    assert len(primary) == len(results)
    tops = []
    for axis, result in zip(primary, results, strict=True):
        lo, hi = load["axes"][axis]["range"]
        peak = _peak_replicas(result, doc["workload"]["duration_s"])
        assert lo == 0 and hi == pytest.approx(peak * 1.08, rel=1e-6), (result["policy"], hi, peak)
        tops.append(hi)
    small = tops[[r["policy"] for r in results].index(SMALL_POLICY)]
    assert small < 0.5 * max(tops), tops  # the small fleet fills its panel instead of a sliver


@pytest.mark.browser
def test_pareto_labels_sit_inside_the_plot_area(rendered: dict[str, Any]) -> None:
    _chromium()
    pareto = _measured(rendered)["chart-pareto"]
    plot = pareto["plot"]
    labels = {t["text"]: t for t in pareto["texts"]}
    assert "oracle (lower bound)" in labels, list(labels)
    for text, box in labels.items():
        inside = (
            box["left"] >= plot["left"] - 0.5
            and box["right"] <= plot["right"] + 0.5
            and box["top"] >= plot["top"] - 0.5
            and box["bottom"] <= plot["bottom"] + 0.5
        )
        assert inside, f"label {text!r} at {box} leaves the plot area {plot}"


@pytest.mark.browser
def test_dcgm_panels_have_a_y_title_and_series_end_with_the_trace(rendered: dict[str, Any]) -> None:
    """The backtest's drain after the last arrival (rate 0, nothing running) read as an outage in
    the last minute: no trace is drawn past the trace's end."""
    _chromium()
    measured = _measured(rendered)
    util = measured["chart-util"]
    titles = [a["title"] for k, a in util["axes"].items() if k.startswith("yaxis")]
    assert titles and all(t for t in titles), titles
    end_min = rendered["doc"]["workload"]["duration_s"] / 60.0
    for chart in ("chart-load-replicas", "chart-queue", "chart-util", "chart-gpu-hours", "chart-ttft"):
        ends = [t["last_x"] for t in measured[chart]["traces"] if t["last_x"] is not None]
        assert ends and max(ends) <= end_min + 1e-6, (chart, max(ends), end_min)


@pytest.mark.browser
def test_the_configuration_card_is_readable(rendered: dict[str, Any]) -> None:
    """Found from outside: raw keys (``sim_max_num_seqs``) and a JSON blob cut off at 160 characters."""
    import html as html_mod

    _chromium()
    card = re.search(r'<div class="card"><h2>Config</h2>(.*?)</dl></div>', rendered["dom"], re.S)
    assert card, "no Config card in the page"
    labels = [html_mod.unescape(x) for x in re.findall(r"<dt>(.*?)</dt>", card.group(1))]
    text = html_mod.unescape(re.sub(r"<[^>]+>", " ", card.group(1)))
    assert labels and not [label for label in labels if "_" in label], labels
    assert "…" not in text and "{" not in text, text
    for shown in ("max num seqs (simulator)", "pending (s, simulator)", "policy parameters", "target queue",
                  "30, 60, 120, 300, 600", "bw factor"):  # fmt: skip
        assert shown in labels or shown in text, (shown, labels)
    # every glitch of the long list is there (the old card cut the JSON at 160 characters)
    assert text.count("bw factor") == 8
