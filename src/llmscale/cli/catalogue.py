"""``llmscale policies`` and ``llmscale workloads``: what a backtest can run, and on what."""

from __future__ import annotations

__all__ = ["policies", "workloads"]


def policies() -> None:
    """List every policy with a one-line description, its parameters and the signals it reads."""
    from rich.console import Console
    from rich.table import Table

    from llmscale.policies.base import POLICIES, policy_names

    table = Table(title="llmscale policies")
    table.add_column("name")
    table.add_column("what it does")
    table.add_column("parameters (defaults, ranges)")
    table.add_column("catalogue signals read")
    for name in policy_names():
        info = POLICIES[name]
        # Ranges without inner spaces, so a wrapped cell never splits "(0, inf)" over two lines.
        params = ", ".join(
            f"{k}={p.default}"
            + (f" {p.interval.replace(', ', ',').replace(' | ', '|')}" if p.interval else "")
            for k, p in info.params.items()
        )
        table.add_row(name, info.summary, params, ", ".join(info.signals_read(info.defaults)) or "-")
    Console().print(table)


def workloads() -> None:
    """List the built-in workload presets."""
    from rich.console import Console
    from rich.table import Table

    from llmscale.workloads import PRESETS

    table = Table(title="workload presets (--workload NAME)")
    table.add_column("name")
    table.add_column("description")
    for name, preset in PRESETS.items():
        table.add_row(name, getattr(preset, "description", ""))
    Console().print(table)
