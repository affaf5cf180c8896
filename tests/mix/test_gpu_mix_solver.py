"""The cheapest GPU mix: HiGHS' integer program against brute-force enumeration."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmscale.errors import ConfigError
from llmscale.mix.solver import GpuOption, brute_force_mix, cheapest_mix

# Llama-3-8B chat (1,000 / 250 tokens, SLO 2 s / 0.1 s) at the default prices: what one replica of
# each type holds by the tail model (replica_capacity: A100 6.88, H100 12.62, H200 14.0 req/s).
A100 = GpuOption("a100-80gb", 6.88, 1.30)
H100 = GpuOption("h100-80gb", 12.62, 3.00)
H200 = GpuOption("h200", 14.0, 4.00)


@pytest.mark.parametrize(
    ("options", "demand", "want", "price"),
    [
        # A100s carry the most per dollar (5.3 req/s per $ against 4.2 and 3.5): 40 req/s -> 6.
        pytest.param((A100, H100, H200), 40.0, {"a100-80gb": 6}, 7.80, id="a100s-alone"),
        # With at most 4 A100s (27.5 req/s) the rest is 1 H100 (12.6): 40.1 req/s for $8.20/h.
        pytest.param(
            (GpuOption("a100-80gb", 6.88, 1.30, 4), H100, H200),
            40.0,
            {"a100-80gb": 4, "h100-80gb": 1},
            8.20,
            id="a100-limit-then-h100",
        ),
        # No A100 at all: 3 H100 (37.9) fall short of 40; 4 H100 $12, or 2 H100 + 1 H200 (39.2) short,
        # 1 H100 + 2 H200 (40.6) $11.
        pytest.param(
            (GpuOption("a100-80gb", 6.88, 1.30, 0), H100, H200),
            40.0,
            {"h100-80gb": 1, "h200": 2},
            11.0,
            id="hopper-mix",
        ),
        pytest.param((A100, H100), 0.0, {}, 0.0, id="no-demand-no-replica"),
    ],
)
def test_cheapest_mix_table(options, demand, want, price) -> None:
    got = cheapest_mix(options, demand)
    assert got.feasible
    assert {g: n for g, n in got.counts if n} == want
    assert got.price_per_hour == pytest.approx(price)
    assert got.capacity_rps >= demand


def test_limits_that_cannot_carry_the_demand_give_every_allowed_replica() -> None:
    options = (GpuOption("a100-80gb", 6.88, 1.30, 2), GpuOption("h100-80gb", 12.62, 3.0, 1))
    got = cheapest_mix(options, 100.0)
    assert not got.feasible
    assert got.counts == (("a100-80gb", 2), ("h100-80gb", 1))


def test_min_replicas_is_kept_at_least_cost() -> None:
    got = cheapest_mix((A100, H100), 1.0, min_replicas=2)
    assert got.counts == (("a100-80gb", 2), ("h100-80gb", 0))


def test_an_option_is_checked_at_the_edge() -> None:
    with pytest.raises(ConfigError, match=r"h100-80gb: price_per_hour = 0"):
        GpuOption("h100-80gb", 12.0, 0.0)


_option = st.builds(
    GpuOption,
    gpu=st.sampled_from(["a", "b", "c", "d"]),
    capacity_rps=st.floats(0.5, 20.0),
    price_per_hour=st.floats(0.5, 10.0),
    max_replicas=st.one_of(st.none(), st.integers(0, 6)),
)


@settings(max_examples=150, deadline=None)
@given(
    options=st.lists(_option, min_size=1, max_size=3),
    demand=st.floats(0.0, 60.0),
    min_replicas=st.integers(0, 3),
)
def test_the_integer_program_matches_brute_force(options, demand, min_replicas) -> None:
    """On every small case HiGHS' optimum costs what enumerating every mix finds, and carries the demand."""
    got = cheapest_mix(options, demand, min_replicas=min_replicas)
    ref = brute_force_mix(options, demand, min_replicas=min_replicas)
    assert got.feasible == ref.feasible
    if ref.feasible:
        assert got.price_per_hour == pytest.approx(ref.price_per_hour, rel=1e-9, abs=1e-9)
        assert got.capacity_rps >= demand - 2e-6
        assert got.total >= min_replicas
        for o, (_, n) in zip(options, got.counts, strict=True):
            assert o.max_replicas is None or n <= o.max_replicas


def test_the_solver_prints_nothing_on_stdout() -> None:
    """HiGHS' banner would land in front of ``backtest --json``'s document."""
    code = (
        "from llmscale.mix.solver import GpuOption, cheapest_mix\n"
        "cheapest_mix([GpuOption('a', 1.0, 1.0)], 3.0)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout == ""
