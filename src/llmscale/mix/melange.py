"""AIBrix's GPU optimizer as a peer: its integer program (Melange), ported and solved with HiGHS.

AIBrix's GPU optimizer (``aibrix==0.8.0`` on PyPI, ``aibrix/gpu_optimizer/optimizer/solver/melange``,
after Griggs et al.'s Melange) chooses GPUs per type from a profile and a workload histogram:

* the workload is a histogram over (prompt-length bucket, output-length bucket): the share of
  requests in each cell, times the total request rate, is that cell's rate;
* each GPU type has a price per hour and a profile: the most requests/s of each cell one GPU
  serves within the SLO (0: it cannot);
* each cell's rate is cut into ``slice_factor`` equal slices, and every slice goes whole to one
  type (a binary variable per slice and type);
* per type, the load of its slices, each slice's rate over that type's throughput for the cell
  (a share of one GPU), may not exceed its GPU count (an integer variable);
* the objective is the price of the GPUs.

llmscale's own program (:func:`llmscale.mix.solver.cheapest_mix`) is this with one cell (the
window's mean shape) and slices of any size: its optimum never costs more than this one's on a
one-cell histogram (``tests/peers/test_aibrix_gpu_optimizer.py``), and it adds what AIBrix's lacks,
limits per type and a least replica count. This module writes the formulation down anew from
that description (no code of AIBrix's), so that the peer test can put AIBrix's released solver
(PuLP and CBC) and this port (HiGHS) on the same inputs: both must find the same cost.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from llmscale.errors import ConfigError
from llmscale.mix.solver import solve_milp

__all__ = ["UNSERVABLE_LOAD", "melange_mix"]

#: the share of a GPU AIBrix charges a slice a type cannot serve at all (profile throughput 0): so
#: large that no optimum assigns it there (a million GPUs per req/s)
UNSERVABLE_LOAD = 1e6


def melange_mix(
    histogram: Sequence[Sequence[float]],
    total_rate_rps: float,
    gpus: Mapping[str, tuple[float, Sequence[Sequence[float]]]],
    slice_factor: int = 4,
) -> dict[str, float] | None:
    """GPUs per type (and ``"cost"``) by the Melange program, or None when HiGHS finds no optimum.

    ``histogram[i][j]``: the share of requests in cell (i, j); ``gpus[name] = (price per hour,
    throughput table of the histogram's shape, req/s per GPU)``. E.g. two cells of 5 req/s each,
    an A100 ($1.30) serving 2 and 1 req/s of them, an H100 ($3.00) 5 and 3: 2 A100 + 2 H100,
    $8.60 (AIBrix 0.8.0 answers the same).
    """
    if slice_factor < 1:
        raise ConfigError(f"slice_factor = {slice_factor}, must be >= 1")
    names = list(gpus)
    shape = [len(row) for row in histogram]
    for name in names:
        table = gpus[name][1]
        if [len(row) for row in table] != shape:
            raise ConfigError(
                f"{name}: throughput table of shape {[len(r) for r in table]}, histogram {shape}"
            )
    # The slices: (rate, cell) repeated slice_factor times per cell.
    slices: list[tuple[float, int, int]] = []
    for i, row in enumerate(histogram):
        for j, share in enumerate(row):
            slices += [(share * total_rate_rps / slice_factor, i, j)] * slice_factor
    n_types, n_slices = len(names), len(slices)
    # Columns: the type counts y_g first, then x_{s,g} slice-by-slice.
    costs = [gpus[g][0] for g in names] + [0.0] * (n_slices * n_types)
    upper = [math.inf] * n_types + [1.0] * (n_slices * n_types)
    rows: list[tuple[list[tuple[int, float]], float, float]] = []
    for s in range(n_slices):  # every slice goes to exactly one type
        rows.append(([(n_types + s * n_types + g, 1.0) for g in range(n_types)], 1.0, 1.0))
    for g, name in enumerate(names):  # the slices' loads fit the type's GPUs
        table = gpus[name][1]
        coeffs: list[tuple[int, float]] = []
        for s, (rate, i, j) in enumerate(slices):
            tput = table[i][j]
            load = 1.0 / tput if tput > 0 else UNSERVABLE_LOAD
            coeffs.append((n_types + s * n_types + g, load * rate))
        coeffs.append((g, -1.0))
        rows.append((coeffs, -math.inf, 0.0))
    x = solve_milp(costs, upper, rows)
    if x is None:
        return None
    out: dict[str, float] = {g: round(x[k]) for k, g in enumerate(names)}
    out["cost"] = sum(out[g] * gpus[g][0] for g in names)
    return out
