"""The comparison with statistics over seeds (``backtest --seeds N``): mean ± half-width, ≈ marks."""

from __future__ import annotations

from typing import Any

import pytest
from rich.console import Console
from test_report_table import _doc

from llmscale.backtest.results import PolicyResult
from llmscale.backtest.seeds import add_seed_statistics
from llmscale.report import comparison_view
from llmscale.report._common import rows_of
from llmscale.report.page import _table_html

SEEDS = [7, 8, 9]
# Per-seed (attainment, GPU-hours) per policy of _doc(), oracle last. "predictive" and
# "target-util" swap places from seed to seed on attainment: their difference holds 0.
PER_SEED = {
    "target-util": [(0.912, 150.25), (0.95, 150.30), (0.93, 150.20)],
    "[bold]queue-pid[/bold]": [(0.99996, 160.0), (0.9991, 161.0), (0.9995, 160.5)],
    "predictive": [(0.97, 131.5), (0.90, 131.9), (0.94, 131.2)],
    "oracle": [(1.0, 101.0), (1.0, 101.5), (1.0, 100.8)],
}


def _seed_doc() -> dict[str, Any]:
    doc = _doc()
    rows = [*doc["results"], doc["oracle"]]
    runs = []
    for k in range(len(SEEDS)):
        summaries = [
            PolicyResult(
                {**r, "slo_attainment": PER_SEED[r["policy"]][k][0], "gpu_hours": PER_SEED[r["policy"]][k][1]}
            )
            for r in rows
        ]
        runs.append((summaries[:-1], summaries[-1], []))
    return add_seed_statistics(doc, SEEDS, runs)


def _lines(width: int) -> list[str]:
    console = Console(record=True, width=width, color_system=None)
    console.print(comparison_view(_seed_doc()))
    return console.export_text().splitlines()


@pytest.mark.parametrize("width", [40, 80, 100, 200])
def test_mean_and_half_width_stay_whole_at_any_width(width: int) -> None:
    lines = _lines(width)
    assert all(len(line) <= width for line in lines), max(lines, key=len)
    text = "\n".join(lines)
    # queue-pid: attainment mean 0.99952 ± 4.303 * 0.000436 / sqrt(3) = 0.0011 -> 0.11 points
    assert "99.95% ± 0.11" in text
    # predictive GPU-hours: 131.53 ± 4.303 * 0.351 / sqrt(3) = 0.87
    assert "131.5 ± 0.87" in text


def test_within_noise_of_the_best_is_marked() -> None:
    doc = _seed_doc()
    noise = {(c["metric"], c["a"], c["b"]): c["within_noise"] for c in doc["seeds"]["comparisons"]}
    # queue-pid is best on attainment; predictive (0.937 ± 0.087) is within noise of it, target-util
    # (0.931 ± 0.047) is not: its per-seed differences 0.088, 0.049, 0.070 all favour queue-pid.
    assert noise["slo_attainment", "[bold]queue-pid[/bold]", "predictive"] is True
    assert noise["slo_attainment", "target-util", "[bold]queue-pid[/bold]"] is False
    text = "\n".join(_lines(200))
    predictive = next(line for line in text.splitlines() if "predictive" in line)
    target = next(line for line in text.splitlines() if "target-util" in line)
    assert "% ± 8.7 ≈" in predictive
    assert "≈" not in target
    assert "3 seeds (7-9)" in text
    html = _table_html(rows_of(doc), doc)
    assert "± 8.7 ≈</td>" in html
