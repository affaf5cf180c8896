"""Where a command's workload comes from and how it is reshaped: a trace file or a preset, a window
of it, its rate scaled, part of it regrouped into bursts.

:class:`WorkloadSource` is what ``backtest``, ``tune`` and ``loadgen`` take on their command lines
(``--trace``/``--workload``, ``--start-s``, ``--duration-s``, ``--rate-scale``, ...);
:func:`read_workload` loads it and :func:`reshape_workload` applies the rate scale and the bursts.
The command line checks each value's range first and names its option in every message.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from llmscale.errors import ConfigError
from llmscale.workloads.lengths import LengthModel
from llmscale.workloads.limits import MAX_SPAN_S
from llmscale.workloads.loaders import load_trace
from llmscale.workloads.model import Workload
from llmscale.workloads.presets import make_preset
from llmscale.workloads.transform import entropy_bursts, rate_scale, window

__all__ = ["WorkloadSource", "read_workload", "reshape_workload"]


@dataclass(frozen=True, slots=True)
class WorkloadSource:
    """A trace (``trace``, in format ``fmt``) or a preset (``preset``; neither: ``default``), the
    window ``[start_s, start_s + duration_s)`` of it (None: from the start / to the end), and how
    it is reshaped: ``rate_scale`` x the arrival rate (``scale_mode`` users or burst) and
    ``burst_share`` of the requests regrouped into bursts (0: none).

    ``rate_shape`` and ``lengths`` apply to rate-only traces (ServeGen): how the rate runs within
    a window, and the prompt/output lengths drawn (None: the loader's default, recorded in
    ``meta["lengths"]``).
    """

    trace: Path | None = None
    fmt: str = "auto"
    preset: str | None = None
    start_s: float | None = None
    duration_s: float | None = None
    rate_shape: str = "smooth"
    lengths: LengthModel | None = None
    rate_scale: float = 1.0
    scale_mode: str = "users"
    burst_share: float = 0.0

    def __post_init__(self) -> None:
        if self.trace is not None and self.preset is not None:
            raise ConfigError("give either a trace or a workload preset, not both")


def read_workload(source: WorkloadSource, seed: int) -> Workload:
    """The trace or preset of ``source``, cut to its window (not yet reshaped).

    A preset is generated with ``seed``, as is a rate-only trace's arrivals. ConfigError from
    the loader as it is (a length model given for a trace with lengths says "servegen traces only").
    """
    if source.trace is not None:
        return load_trace(
            source.trace,
            source.fmt,
            seed=seed,
            start_s=source.start_s,
            duration_s=source.duration_s,
            max_span_s=MAX_SPAN_S,
            rate_shape=source.rate_shape,
            lengths=source.lengths,
        )
    w = make_preset(source.preset or "default", seed=seed)
    if source.start_s is not None or source.duration_s is not None:
        # to the end of the preset: one second past its last arrival
        end_s = source.duration_s if source.duration_s is not None else w.duration_s + 1.0
        w = window(w, source.start_s or 0.0, end_s)
    return w


def reshape_workload(w: Workload, source: WorkloadSource, seed: int) -> Workload:
    """``w`` with the rate scale of ``source`` (when not 1), then its bursts (when a share is given).

    A ConfigError comes from the rate scale (e.g. x0.0001 of 100 requests leaves none); the
    burst share is checked in [0, 1] by the caller.
    """
    if source.rate_scale != 1.0:
        w = rate_scale(w, source.rate_scale, seed=seed, mode=source.scale_mode)
    if source.burst_share > 0.0:
        w = entropy_bursts(w, seed, burst_share=source.burst_share)
    return w
