"""The policy benchmark's workload matrix: request mixes x load shapes, each a small seeded workload.

A default scaling policy must hold its SLO on traffic it was never tuned on; this matrix is the
set of situations it is checked on here (``benchmarks/policies.py --matrix``), each cell short
enough (20 simulated minutes, a fleet of a few replicas) that the whole matrix runs in minutes.

Request mixes (prompt / output tokens):

* ``chat`` — the Azure LLM conversation trace's (prompt, output) pairs, bootstrapped
  (mean 1,155 / 211);
* ``code`` — code completion: lognormal prompts of mean 2,000 (p99 8,000) and short answers of
  mean 30 (p99 150), the shape whose TPOT tail chunked prefill sets;
* ``reasoning`` — mean 600 (p99 3,000) prompts, long answers of mean 2,000 (p99 8,000);
* ``long-context`` — the Mooncake synthetic trace's pairs (mean prompt ~15k tokens), on its own
  Poisson arrivals scaled to the deployment;
* ``long-output`` — mean 300 (p99 1,500) prompts and answers of mean 1,500 (p99 4,000): requests
  in flight for minutes, the shape where a decode batch's context is length-biased.

Load shapes over ``duration_s`` (rates relative to the cell's peak):

* ``ramp`` — a smooth diurnal half-period from 40% to 100%;
* ``step`` — 50%, then 100% from a third of the window on (a step change, no warning);
* ``flash`` — 50% with a x2 flash crowd for 3 minutes from the middle of the window;
* ``trace`` — the trace's own arrivals (long-context only);
* ``burst`` — the Azure conversation trace's own arrivals scaled to the peak in ``burst`` mode
  (each request copied next to itself, so every busy second of the trace is ~N times busier;
  docs/scaling-traces.md), chat only: the bursty cell.

The peak rate is chosen per deployment by the caller (``peak_rps``), from the capacity one
replica has on the mix, so every deployment sees a fleet of the same size.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from llmscale.errors import ConfigError
from llmscale.workloads.lengths import LengthModel, LengthSampler, LognormalLengths
from llmscale.workloads.model import Workload
from llmscale.workloads.synthetic import Curve, diurnal_curve, with_spike, workload_from_rate_curve

__all__ = ["CELLS", "MIXES", "SHAPES", "MatrixCell", "cell_workload", "mix_lengths"]

MIXES = ("chat", "code", "reasoning", "long-context", "long-output")
SHAPES = ("ramp", "step", "flash", "trace", "burst")


@dataclass(frozen=True)
class MatrixCell:
    mix: str
    shape: str

    @property
    def name(self) -> str:
        return f"{self.mix}/{self.shape}"


#: the cells: every mix on a ramp, the load shapes on chat and code, long context on its trace
CELLS: tuple[MatrixCell, ...] = (
    MatrixCell("chat", "ramp"),
    MatrixCell("chat", "flash"),
    MatrixCell("chat", "step"),
    MatrixCell("code", "ramp"),
    MatrixCell("code", "step"),
    MatrixCell("reasoning", "ramp"),
    MatrixCell("long-context", "trace"),
    MatrixCell("chat", "burst"),
    MatrixCell("long-output", "ramp"),
)


def _trace_pairs(data_dir: Path, mix: str) -> Workload:
    from llmscale.workloads.loaders import load_trace

    if mix == "chat":
        return load_trace(data_dir / "azure_llm_2023_conv.csv", "azure")
    return load_trace(data_dir / "mooncake_synthetic_trace.jsonl", "mooncake")


def mix_lengths(mix: str, data_dir: Path) -> LengthModel:
    """The (prompt, output) length model of a request mix (``data_dir``: the shared traces)."""
    if mix in ("chat", "long-context"):
        w = _trace_pairs(data_dir, mix)
        return LengthSampler(w.input_tokens, w.output_tokens, source=f"{mix}: {w.name}")
    if mix == "code":
        return LognormalLengths.from_mean_p99(2000.0, 8000.0, 30.0, 150.0)
    if mix == "reasoning":
        return LognormalLengths.from_mean_p99(600.0, 3000.0, 2000.0, 8000.0)
    if mix == "long-output":
        return LognormalLengths.from_mean_p99(300.0, 1500.0, 1500.0, 4000.0)
    raise ConfigError(f"unknown request mix {mix!r}; one of {', '.join(MIXES)}")


def _curve(shape: str, peak_rps: float, duration_s: float) -> Curve:
    if shape == "ramp":
        # Half a period of a sinusoid from 40% up to the peak.
        return diurnal_curve(0.4 * peak_rps, peak_rps, 2.0 * duration_s, duration_s)
    if shape == "step":
        t0 = duration_s / 3.0
        return (
            np.array([0.0, t0, t0, duration_s]),
            np.array([0.5 * peak_rps, 0.5 * peak_rps, peak_rps, peak_rps]),
        )
    if shape == "flash":
        base = (np.array([0.0, duration_s]), np.array([0.5 * peak_rps, 0.5 * peak_rps]))
        return with_spike(base, duration_s / 2.0, 180.0, 2.0)
    raise ConfigError(f"unknown load shape {shape!r}; one of ramp, step, flash")


def cell_workload(
    cell: MatrixCell, peak_rps: float, data_dir: Path, *, duration_s: float = 1200.0, seed: int = 0
) -> Workload:
    """The cell's workload at ``peak_rps`` (the ``trace`` shape: the trace's mean rate scaled to it)."""
    if cell.shape in ("trace", "burst"):
        from llmscale.workloads.transform import rate_scale, window

        w = _trace_pairs(data_dir, cell.mix)
        w = window(w, 0.0, min(duration_s, w.duration_s))
        mean_rps = w.num_requests / max(w.duration_s, 1.0)
        return rate_scale(w, peak_rps / mean_rps, seed=seed, mode="burst")
    return workload_from_rate_curve(
        *_curve(cell.shape, peak_rps, duration_s),
        seed=seed,
        lengths=mix_lengths(cell.mix, data_dir),
        name=f"matrix:{cell.name}",
        stream=cell.name,
    )
