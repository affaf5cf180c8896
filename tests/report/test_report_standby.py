"""The standby pool's chart: slo's attainment against GPU-hours over pool sizes, in the report.

Rendered in Debian's headless chromium like the other charts (test_report_html.py's helpers).
The curve is the README's, measured on the default preset.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_report_html import CHART_IDS, _ChartDom, _embedded_figures, make_doc

from llmscale.report import render_report
from llmscale.report.standby import CHART_STANDBY
from support.chromium import chromium as _chromium
from support.chromium import run_chromium as _run_chromium

CURVE = [
    {"standby_replicas": 0, "slo_attainment": 0.89244, "gpu_hours": 7.393},
    {"standby_replicas": 8, "slo_attainment": 0.898785, "gpu_hours": 15.708},
    {"standby_replicas": 12, "slo_attainment": 0.988883, "gpu_hours": 19.35},
    {"standby_replicas": 4, "slo_attainment": 0.893012, "gpu_hours": 11.522},
]


def test_the_curve_is_drawn_in_pool_size_order(tmp_path: Path) -> None:
    page = render_report({**make_doc(), "standby_curve": CURVE}, tmp_path / "r.html").read_text()
    figures = _embedded_figures(page)
    assert list(figures) == [*CHART_IDS, CHART_STANDBY]
    (trace,) = figures[CHART_STANDBY]["data"]
    assert trace["text"] == ["pool 0", "pool 4", "pool 8", "pool 12"]
    assert trace["y"] == pytest.approx([89.244, 89.3012, 89.8785, 98.8883])
    assert f'<a href="#sec-{CHART_STANDBY}">' in page


def test_no_curve_no_chart(tmp_path: Path) -> None:
    page = render_report(make_doc(), tmp_path / "r.html").read_text()
    assert CHART_STANDBY not in _embedded_figures(page) and CHART_STANDBY not in page


@pytest.mark.browser
def test_the_chart_renders_in_chromium(tmp_path: Path) -> None:
    _chromium()
    report = render_report({**make_doc(), "standby_curve": CURVE}, tmp_path / "report.html")
    dom = _run_chromium(["--dump-dom", report.as_uri()], tmp_path / "profile")
    assert dom.returncode == 0, dom.stderr.decode(errors="replace")[-3000:]
    parser = _ChartDom()
    parser.feed(dom.stdout.decode("utf-8", errors="replace"))
    info = parser.charts[CHART_STANDBY]
    assert info["errors"] == 0 and info["rendered"] == "ok"
    assert info["main_svgs"] >= 1 and info["traces"] == 1
