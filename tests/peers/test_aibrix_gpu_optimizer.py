"""AIBrix's GPU optimizer (its released package, ``aibrix==0.8.0``) beside llmscale's port of its
integer program (:mod:`llmscale.mix.melange`) and llmscale's own (:mod:`llmscale.mix.solver`).

AIBrix's ``MelangeSolver`` is imported from the wheel and solved with PuLP's CBC, as AIBrix runs
it; the port with HiGHS. On the same histograms, throughput tables and prices both must find the
same cost. On a one-cell histogram llmscale's program (slices of any size) must never cost more.

``scripts/bootstrap.sh --test`` installs the wheel without its dependencies (``pip install
--no-deps aibrix==0.8.0 pulp==2.8.0``: the optimizer's solver needs only PuLP and numpy; the
package's declared dependencies pin httpx, kubernetes and prometheus-client below llmscale's);
without it these tests fail, never skip.
"""

from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmscale.mix.melange import melange_mix
from llmscale.mix.solver import GpuOption, cheapest_mix

pytestmark = pytest.mark.peers


def _aibrix(histogram, rate, gpus, slice_factor):
    try:
        from aibrix.gpu_optimizer.optimizer.solver.melange.solver import MelangeSolver
    except ImportError as e:  # pragma: no cover - the test command installs it
        pytest.fail(
            f"AIBrix's optimizer is not installed ({e}): pip install --no-deps aibrix==0.8.0 pulp==2.8.0"
        )
    info = {g: {"cost": price, "tputs": copy.deepcopy(table)} for g, (price, table) in gpus.items()}
    return MelangeSolver(copy.deepcopy(histogram), rate, info, slice_factor).run()


def test_aibrixs_own_example_size() -> None:
    # Two cells of 5 req/s; A100 ($1.30) serves 2 / 1 req/s of them, H100 ($3.00) 5 / 3.
    gpus = {"a100-80gb": (1.30, [[2.0, 1.0]]), "h100-80gb": (3.00, [[5.0, 3.0]])}
    theirs = _aibrix([[0.5, 0.5]], 10.0, gpus, 4)
    ours = melange_mix([[0.5, 0.5]], 10.0, gpus, 4)
    assert theirs == {"a100-80gb": 2, "h100-80gb": 2, "cost": pytest.approx(8.6)}
    assert ours is not None and ours["cost"] == pytest.approx(theirs["cost"])


_tput = st.one_of(st.just(0.0), st.floats(0.5, 10.0))


@st.composite
def _case(draw):
    rows, cols = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    shares = draw(st.lists(st.floats(0.05, 1.0), min_size=rows * cols, max_size=rows * cols))
    total = sum(shares)
    histogram = [[shares[i * cols + j] / total for j in range(cols)] for i in range(rows)]
    n = draw(st.integers(1, 3))
    gpus = {}
    for k in range(n):
        table = [
            [draw(st.floats(0.5, 10.0)) if k == 0 else draw(_tput) for _ in range(cols)] for _ in range(rows)
        ]
        gpus[f"gpu{k}"] = (round(draw(st.floats(0.5, 5.0)), 2), table)
    return histogram, draw(st.floats(0.5, 30.0)), gpus, draw(st.integers(1, 4))


@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(case=_case())
def test_the_port_costs_what_aibrix_costs(case) -> None:
    histogram, rate, gpus, slice_factor = case
    theirs = _aibrix(histogram, rate, gpus, slice_factor)
    ours = melange_mix(histogram, rate, gpus, slice_factor)
    assert theirs is not None and ours is not None
    assert ours["cost"] == pytest.approx(theirs["cost"], rel=1e-9, abs=1e-9)


@settings(max_examples=20, deadline=None, derandomize=True)
@given(
    caps=st.lists(st.floats(0.5, 15.0), min_size=2, max_size=3),
    prices=st.lists(st.floats(0.5, 5.0), min_size=3, max_size=3),
    rate=st.floats(0.5, 60.0),
    slice_factor=st.integers(1, 4),
)
def test_llmscales_program_never_costs_more_on_one_cell(caps, prices, rate, slice_factor) -> None:
    """The same inputs, one cell: llmscale splits the demand freely, AIBrix in whole slices."""
    gpus = {f"gpu{k}": (round(prices[k], 2), [[c]]) for k, c in enumerate(caps)}
    theirs = _aibrix([[1.0]], rate, gpus, slice_factor)
    ours = cheapest_mix([GpuOption(g, t[0][0], p) for g, (p, t) in gpus.items()], rate)
    assert theirs is not None and ours.feasible
    assert ours.price_per_hour <= theirs["cost"] + 1e-9
    # AIBrix's GPUs carry the demand by llmscale's count too.
    assert sum(theirs[g] * gpus[g][1][0][0] for g in gpus) >= rate - 1e-6


def test_the_default_chat_case_side_by_side() -> None:
    # Llama-3-8B chat, 40 req/s (32 at utilization 0.8), the default prices and the tail model's
    # capacities: AIBrix, its port and llmscale all choose 6 A100s, $7.80/h.
    gpus = {"a100-80gb": (1.30, [[6.88]]), "h100-80gb": (3.00, [[12.62]]), "h200": (4.00, [[14.0]])}
    theirs = _aibrix([[1.0]], 40.0, gpus, 4)
    ours = cheapest_mix([GpuOption(g, t[0][0], p) for g, (p, t) in gpus.items()], 40.0)
    assert theirs == {"a100-80gb": 6, "h100-80gb": 0, "h200": 0, "cost": pytest.approx(7.8)}
    assert ours.price_per_hour == pytest.approx(7.8)
