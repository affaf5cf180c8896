"""The terminal table of a replay: latency percentiles in milliseconds and the outcome counts."""

from __future__ import annotations

from typing import Any

from llmscale.loadgen.runner import LoadgenResult

__all__ = ["result_table"]

_ROWS = (("TTFT", "ttft_s"), ("TPOT", "tpot_s"), ("E2E", "e2e_s"))


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{1000.0 * v:,.1f}"


def result_table(result: LoadgenResult) -> Any:
    """A rich Table (rich is imported here, not at package import)."""
    from rich.table import Table

    api = "chat" if result.chat else "completions"
    table = Table(
        title=f"loadgen: {result.target} ({result.model}, {api})",
        caption=(
            f"planned {result.planned}, sent {len(result.records)}: ok {result.ok}, "
            f"errors {result.errors}, timeouts {result.timeouts}; wall {result.wall_s:.1f} s"
        ),
    )
    table.add_column("latency (ms)")
    for col in ("p50", "p95", "p99", "mean", "n"):
        table.add_column(col, justify="right")
    for label, metric in _ROWS:
        p = result.percentiles(metric)
        n = p["n"]
        table.add_row(label, _ms(p["p50"]), _ms(p["p95"]), _ms(p["p99"]), _ms(p["mean"]), str(int(n or 0)))
    return table
