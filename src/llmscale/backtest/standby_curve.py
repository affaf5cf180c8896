"""``slo``'s SLO attainment and GPU-hours over standby pool sizes: what a pool buys, and for what.

One :func:`~llmscale.backtest.runner.run_policy` of ``slo`` per pool size on the
same workload and settings (``llmscale backtest --standby-curve 0,4,8``); the
report draws the rows as a curve of attainment against GPU-hours.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from llmscale.backtest.runner import BacktestSettings, run_policy
from llmscale.errors import ConfigError
from llmscale.workloads.model import Workload

__all__ = ["standby_curve"]


def standby_curve(
    workload: Workload,
    settings: BacktestSettings,
    sizes: Sequence[int],
    *,
    on_progress: Callable[[str, float], None] | None = None,
) -> list[dict[str, Any]]:
    """One row per pool size k: ``standby_replicas``, ``slo_attainment``, ``gpu_hours``, ``starts``."""
    if not sizes or any(k < 0 for k in sizes):
        raise ConfigError(f"--standby-curve {list(sizes)}: pool sizes must be integers >= 0")
    rows = []
    for k in sizes:
        params = {n: dict(p) for n, p in settings.policy_params.items()}
        params.setdefault("slo", {})["standby_replicas"] = int(k)
        label = f"slo standby={k}"
        progress = None if on_progress is None else (lambda t, _l=label: on_progress(_l, t))
        result = run_policy(workload, "slo", replace(settings, policy_params=params), progress=progress)
        s = result.summary
        rows.append(
            {
                "standby_replicas": int(k),
                "slo_attainment": s["slo_attainment"],
                "gpu_hours": s["gpu_hours"],
                "starts": s["starts"],
            }
        )
    return rows
