"""The cheapest mix of GPU types that carries a demand: an integer program solved by HiGHS.

Variables: ``n_i`` replicas of type ``i`` (integers, ``0 <= n_i <= max_i``). Constraint: the
sustainable rates add up to the demand, ``sum_i n_i x capacity_i >= demand_rps`` (the demand
already carries its headroom), and at least ``min_replicas`` replicas in all. Objective: the
price per hour, ``sum_i n_i x price_i``. One knapsack row (and the count row): a few
branch-and-bound nodes for three or four types.

Worked (``tests/mix/test_gpu_mix_solver.py``): Llama-3-8B chat (1,000 / 250 tokens, SLO 2 s /
0.1 s), 40 req/s to carry. By the tail capacity model an A100 replica holds 6.88 req/s at $1.30/h
(5.3 req/s per dollar-hour), an H100 12.62 at $3.00 (4.2), an H200 14.0 at $4.00 (3.5). Single
types: 6 A100s (41.3 req/s) $7.80/h, 4 H100s $12.00, 3 H200s $12.00. With at most 4 A100s
(27.5 req/s) the optimum is 4 A100 + 1 H100 = 40.1 req/s for $8.20/h, where H100s alone cost
$12.00 and 4 A100 + 1 H200 $9.20. The brute-force enumeration (:func:`brute_force_mix`) is the
reference on every small case (a Hypothesis property).
"""

from __future__ import annotations

import functools
import itertools
import math
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from llmscale.errors import ConfigError

__all__ = ["DEMAND_TOLERANCE_RPS", "GpuOption", "MixChoice", "brute_force_mix", "cheapest_mix", "solve_milp"]

#: a mix carries a demand when its capacity is within this of it (req/s): a millionth of a request
#: per second is no load, and HiGHS' own feasibility tolerance (set to 1e-9 below) sits inside it
DEMAND_TOLERANCE_RPS = 1e-6


@dataclass(frozen=True, slots=True)
class GpuOption:
    """One GPU type a replica may run on, as the solver sees it."""

    gpu: str
    #: requests/s one replica of this type sustains within the SLO (the capacity model's answer)
    capacity_rps: float
    #: price of one replica per hour (price per GPU-hour x GPUs per replica)
    price_per_hour: float
    #: most replicas of this type (None: no limit)
    max_replicas: int | None = None

    def __post_init__(self) -> None:
        if not (self.capacity_rps >= 0.0 and math.isfinite(self.capacity_rps)):
            raise ConfigError(f"{self.gpu}: capacity_rps = {self.capacity_rps}, must be finite and >= 0")
        if not (self.price_per_hour > 0.0 and math.isfinite(self.price_per_hour)):
            raise ConfigError(f"{self.gpu}: price_per_hour = {self.price_per_hour}, must be finite and > 0")
        if self.max_replicas is not None and self.max_replicas < 0:
            raise ConfigError(f"{self.gpu}: max_replicas = {self.max_replicas}, must be >= 0")


@dataclass(frozen=True, slots=True)
class MixChoice:
    """Replicas per GPU type (in the options' order), what they cost and carry."""

    counts: tuple[tuple[str, int], ...]
    price_per_hour: float
    capacity_rps: float
    #: False when even every allowed replica falls short of the demand (``counts`` is then that)
    feasible: bool

    @property
    def total(self) -> int:
        return sum(n for _, n in self.counts)


def _choice(options: Sequence[GpuOption], counts: Sequence[int], feasible: bool) -> MixChoice:
    return MixChoice(
        tuple((o.gpu, int(n)) for o, n in zip(options, counts, strict=True)),
        sum(o.price_per_hour * n for o, n in zip(options, counts, strict=True)),
        sum(o.capacity_rps * n for o, n in zip(options, counts, strict=True)),
        feasible,
    )


def _upper(option: GpuOption, demand_rps: float, min_replicas: int) -> int:
    """A finite bound on useful replicas of one type: its limit, or what carries it all alone."""
    alone = min_replicas
    if option.capacity_rps > 0.0:
        alone = max(alone, math.ceil(demand_rps / option.capacity_rps - 1e-12))
    return alone if option.max_replicas is None else min(option.max_replicas, alone)


@functools.cache
def _silence_banner() -> None:
    """Build one HiGHS instance with the process's standard output closed, once.

    HiGHS writes its banner ("Running HiGHS 1.16.0 ...") to file descriptor 1 when the first
    instance of a process is built, whatever its options: ``backtest --json`` would print it in
    front of the JSON. Later instances print nothing (``tests/mix/test_solver.py`` pins it).
    """
    import highspy

    sys.stdout.flush()
    saved = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        highspy.Highs()  # type: ignore[no-untyped-call]
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)


def solve_milp(
    costs: Sequence[float],
    upper: Sequence[float],
    rows: Sequence[tuple[Sequence[tuple[int, float]], float, float]],
    *,
    integer: Sequence[bool] | None = None,
) -> list[float] | None:
    """Minimise ``costs . x`` over ``0 <= x <= upper`` with rows ``lo <= sum(a_j x_j) <= hi``.

    ``rows`` are (sparse coefficients as (column, value) pairs, lo, hi); ``math.inf`` is no
    bound. Integer columns by ``integer`` (default all). Returns x, or None when HiGHS finds no
    optimum (infeasible). The relative MIP gap is 0: an answer the brute force can check exactly.
    """
    import highspy
    import numpy as np

    _silence_banner()
    inf = highspy.kHighsInf
    n = len(costs)
    h = highspy.Highs()  # type: ignore[no-untyped-call]
    h.setOptionValue("output_flag", False)
    h.setOptionValue("mip_rel_gap", 0.0)
    h.setOptionValue("threads", 1)
    h.setOptionValue("primal_feasibility_tolerance", 1e-9)
    h.setOptionValue("mip_feasibility_tolerance", 1e-9)
    lp = highspy.HighsLp()
    lp.num_col_ = n
    lp.num_row_ = len(rows)
    lp.col_cost_ = np.asarray(costs, dtype=float)
    lp.col_lower_ = np.zeros(n)
    lp.col_upper_ = np.array([inf if math.isinf(u) else float(u) for u in upper])
    lp.row_lower_ = np.array([-inf if math.isinf(lo) else lo for _, lo, _ in rows])
    lp.row_upper_ = np.array([inf if math.isinf(hi) else hi for _, _, hi in rows])
    # Column-wise sparse matrix from the rows.
    cols: list[list[tuple[int, float]]] = [[] for _ in range(n)]
    for r, (coeffs, _, _) in enumerate(rows):
        for j, v in coeffs:
            cols[j].append((r, v))
    start, index, value = [0], [], []
    for entries in cols:
        for r, v in entries:
            index.append(r)
            value.append(v)
        start.append(len(index))
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = np.array(start, dtype=np.int32)
    lp.a_matrix_.index_ = np.array(index, dtype=np.int32)
    lp.a_matrix_.value_ = np.array(value, dtype=float)
    flags = [True] * n if integer is None else list(integer)
    lp.integrality_ = [
        highspy.HighsVarType.kInteger if f else highspy.HighsVarType.kContinuous for f in flags
    ]
    h.passModel(lp)
    h.run()
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        return None
    return [float(x) for x in h.getSolution().col_value]


def cheapest_mix(options: Sequence[GpuOption], demand_rps: float, *, min_replicas: int = 0) -> MixChoice:
    """The cheapest replicas per type carrying ``demand_rps`` (req/s, headroom included).

    Pre: ``demand_rps >= 0``. When the limits cannot carry it, every allowed replica of every type
    with ``feasible=False`` (the most the fleet can do; a limit-free type always can).
    """
    if not options:
        raise ConfigError("cheapest_mix: no GPU type to choose from")
    demand = max(0.0, demand_rps)
    ub = [_upper(o, demand, min_replicas) for o in options]
    reach = sum(o.capacity_rps * u for o, u in zip(options, ub, strict=True))
    if reach < demand - DEMAND_TOLERANCE_RPS or sum(ub) < min_replicas:
        return _choice(options, ub, False)
    rows: list[tuple[list[tuple[int, float]], float, float]] = [
        ([(j, o.capacity_rps) for j, o in enumerate(options)], demand - DEMAND_TOLERANCE_RPS, math.inf)
    ]
    if min_replicas > 0:
        rows.append(([(j, 1.0) for j in range(len(options))], float(min_replicas), math.inf))
    x = solve_milp([o.price_per_hour for o in options], [float(u) for u in ub], rows)
    if x is None:  # pragma: no cover - the reach check above rules it out
        return _choice(options, ub, False)
    counts = [round(v) for v in x]
    # HiGHS' answer holds within its feasibility tolerance; the rounded one is checked.
    if (
        sum(o.capacity_rps * n for o, n in zip(options, counts, strict=True))
        < demand - 2 * DEMAND_TOLERANCE_RPS
    ):
        return _choice(options, ub, False)  # pragma: no cover
    return _choice(options, counts, True)


def brute_force_mix(options: Sequence[GpuOption], demand_rps: float, *, min_replicas: int = 0) -> MixChoice:
    """:func:`cheapest_mix` by enumerating every count up to each type's bound (small cases only)."""
    demand = max(0.0, demand_rps)
    ub = [_upper(o, demand, min_replicas) for o in options]
    best: MixChoice | None = None
    for counts in itertools.product(*(range(u + 1) for u in ub)):
        if sum(counts) < min_replicas:
            continue
        c = _choice(options, counts, True)
        if c.capacity_rps >= demand - DEMAND_TOLERANCE_RPS and (
            best is None or c.price_per_hour < best.price_per_hour - 1e-12
        ):
            best = c
    return best if best is not None else _choice(options, ub, False)
