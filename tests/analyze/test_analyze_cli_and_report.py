"""`llmscale analyze` / `diagnose` from the command line, and the report page in headless Chromium."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from _logs import backtest_line, write_log

from llmscale.analyze.report import CHART_IDS
from support.chromium import run_chromium

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _rich_log(path: Path, n: int = 400, seed: int = 3) -> Path:
    """A log with every quantity: a P99 hockey stick against load per replica (knee ~27 req/s),
    throughput saturating at 30 req/s per replica, two load patterns in the phase diagram, and
    scale-ups that lower the next P99 by 0.3 s."""
    rng = np.random.default_rng(seed)
    # the load swings slowly between 0 and 50 req/s per replica (two 50-minute cycles), so the
    # next tick's load is close to this one's
    per_replica = np.clip(
        25.0 + 25.0 * np.sin(2 * np.pi * np.arange(n) / 200.0) + rng.standard_normal(n), 0, 50
    )
    treated = rng.random(n) < 1.0 / (1.0 + np.exp(-(per_replica - 30.0) / 5.0))
    base = 0.3 + 0.6 * np.log1p(np.exp((per_replica - 30.0) / 3.0))
    p99 = base - 0.3 * np.r_[False, treated[:-1]] + 0.02 * rng.standard_normal(n)
    busy = per_replica > 25.0
    lines = []
    for i in range(n):
        lines.append(
            backtest_line(
                15.0 * (i + 1),
                spec=4,
                final=5 if treated[i] else 4,
                observed={
                    "request_rate_rps": 4 * float(per_replica[i]),
                    "generation_tps": 4 * 200 * float(30 - 3 * np.log1p(np.exp((30 - per_replica[i]) / 3))),
                    "ttft_p99_s": float(p99[i]),
                    "queue_waiting": float(max(0.0, per_replica[i] - 25.0) * 8),
                    "queue_per_replica": float(max(0.0, per_replica[i] - 25.0) * 2),
                    "running": 100.0,
                    "serving_replicas": 4.0,
                    "prompt_len_mean_tokens": 1000.0,
                    "queue_entropy": float((0.85 if busy[i] else 0.15) + 0.01 * rng.standard_normal()),
                    "bw_saturation_p95": float((0.9 if busy[i] else 0.25) + 0.01 * rng.standard_normal()),
                    "ghost_replicas": 1.0 if 100 <= i < 110 else 0.0,
                    "tenant_drift": 0.1,
                },
            )
        )
    return write_log(path, lines)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": SRC, "LLMSCALE_PURE_PYTHON": "1"}
    return subprocess.run(
        [sys.executable, "-m", "llmscale.cli", *args], capture_output=True, text=True, env=env, timeout=120
    )


def test_cli_imports_no_analysis_library_at_start():
    code = (
        "import sys, llmscale.cli; "
        "print(sorted(m for m in ('sklearn', 'statsmodels', 'plotly') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": SRC}
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_analyze_prints_every_finding_and_writes_the_page(tmp_path):
    log = _rich_log(tmp_path / "d.jsonl")
    report = tmp_path / "analyze.html"
    out = _cli("analyze", str(log), "--report", str(report), "--effect-horizon-s", "15")
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    m = re.search(r"P99 latency turns up at ([\d.]+) req/s per serving replica", text)
    assert m and 22.0 < float(m.group(1)) < 31.0, text
    assert "2 load pattern(s) found by DBSCAN" in text
    m = re.search(r"Scale up lowered the P99: ([-+\d.e]+) s \[([-+\d.e]+), ([-+\d.e]+)\]", text)
    assert m and float(m.group(2)) < -0.3 < float(m.group(3)), text
    assert "queue model: MAE" in text and "coupled model: MAE" in text
    page = report.read_text()
    assert "<script src=" not in page  # plotly.js inlined: the page opens offline
    for cid in CHART_IDS:
        assert f'id="{cid}" class="llmscale-chart"' in page


def test_diagnose_prints_the_ghost_episode(tmp_path):
    log = _rich_log(tmp_path / "d.jsonl")
    out = _cli("diagnose", str(log))
    assert out.returncode == 0, out.stderr
    rows = [line for line in out.stdout.splitlines() if "ghost replicas" in line]
    # ticks 100..109 at 15 s each: 1515 s to 1665 s
    assert len(rows) == 1 and "1515" in rows[0] and "1665" in rows[0], out.stdout
    assert "tenant drift" not in out.stdout.replace("not checked", "")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param([], "give a DECISIONS file or --prometheus", id="nothing"),
        pytest.param(
            ["--prometheus", "http://127.0.0.1:9"], "--prometheus needs --start and --end", id="no-range"
        ),
        pytest.param(
            ["x.jsonl", "--effect-horizon-s", "0"], "--effect-horizon-s = 0.0: must be", id="horizon"
        ),
    ],
)
def test_bad_options_exit_2_with_a_message(tmp_path, args, message):
    out = _cli("analyze", *args)
    assert out.returncode == 2 and message in out.stderr, out.stderr


@pytest.mark.browser
def test_every_chart_renders_in_chromium(tmp_path):
    from llmscale.analyze.analysis import AnalysisSettings, analyze_table
    from llmscale.analyze.log import read_decision_log
    from llmscale.analyze.report import render_analysis_report

    a = analyze_table(
        read_decision_log(_rich_log(tmp_path / "d.jsonl")), AnalysisSettings(effect_horizon_s=15.0)
    )
    page = render_analysis_report(a, tmp_path / "analyze.html")
    dom = run_chromium(["--dump-dom", page.as_uri()], tmp_path / "profile")
    assert dom.returncode == 0, dom.stderr.decode(errors="replace")[-2000:]
    html = dom.stdout.decode("utf-8", errors="replace")
    for cid in CHART_IDS:
        m = re.search(rf'<div id="{cid}" class="llmscale-chart[^"]*"[^>]*>', html)
        assert m, f"{cid}: no chart div"
        assert 'data-llmscale-rendered="ok"' in m.group(0), f"{cid}: not rendered: {m.group(0)}"
    assert html.count('class="main-svg"') >= 2 * len(CHART_IDS)
    assert 'class="llmscale-error"' not in html
