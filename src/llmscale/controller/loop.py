"""What the core's two adapters share besides the core: observing a source, scaling a cluster.

The tick itself (window, signals, decide, guards, record, next tick time) is ``controller/core.py``,
which does no I/O; the backtest (``backtest/runner.py``) and the live controller
(``controller/live.py``) observe and actuate around it with these helpers.
"""

from __future__ import annotations

from llmscale.cluster.base import Cluster
from llmscale.controller.core import LOGGED_SIGNALS, WINDOW_LEN, ControllerState, fleet_state
from llmscale.guards import GuardConfig
from llmscale.metrics.source import MetricSource
from llmscale.signals.fleet import compute_signals
from llmscale.types import Observation, Signals

__all__ = [
    "LOGGED_SIGNALS",
    "WINDOW_LEN",
    "ControllerState",
    "fleet_state",
    "observe_signals",
    "scale_if_changed",
]


def observe_signals(
    now_s: float, source: MetricSource, window: tuple[Observation, ...]
) -> tuple[tuple[Observation, ...], Signals]:
    """Observe at ``now_s``, append to ``window`` (keeping :data:`WINDOW_LEN`), compute the signals."""
    obs = source.observe(now_s)
    window = (*window, obs)[-WINDOW_LEN:]
    return window, compute_signals(window)


def scale_if_changed(cluster: Cluster, desired: int, guards: GuardConfig, now_s: float) -> bool:
    """Scale ``cluster`` to ``desired`` when it differs from the spec; True when a scale was asked.

    Raises ActuationError (from the cluster) when the scale fails.
    """
    if desired == cluster.spec_replicas:
        return False
    cluster.scale_to(desired, now_s, drain_until_idle=guards.drain_aware)
    return True
