"""Reports of a backtest: a terminal comparison table and a self-contained HTML page of charts.

Importing this package is cheap: plotly and rich are imported only when a report is built.
"""

from __future__ import annotations

from llmscale.report.figures import build_figures
from llmscale.report.page import render_report
from llmscale.report.table import comparison_table, comparison_view

__all__ = ["build_figures", "comparison_table", "comparison_view", "render_report"]
