"""benchmarks/causal_bound.py --matrix: the jump times it uses are where the matrix's curves jump.

The bound orders replicas at the jump; a jump time off by a minute would give the causal side
a minute of warning (or take one away), so it is checked against the curves the cells are drawn
from, not against a copy of their numbers.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from llmscale.workloads import matrix

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "causal_bound.py"


def _bench() -> Any:
    spec = importlib.util.spec_from_file_location("causal_bound_bench", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["causal_bound_bench"] = module
    spec.loader.exec_module(module)
    return module


bench = _bench()


def _edges(shape: str, duration_s: float) -> tuple[list[float], list[float]]:
    """(times the rate steps up, times it steps down) of the matrix's curve."""
    t, r = matrix._curve(shape, 10.0, duration_s)
    same_t = np.diff(t) == 0.0
    up = [float(t[i]) for i in np.flatnonzero(same_t & (np.diff(r) > 0))]
    down = [float(t[i]) for i in np.flatnonzero(same_t & (np.diff(r) < 0))]
    return up, down


@pytest.mark.parametrize("mix_shape", bench.JUMP_CELLS, ids=lambda c: "/".join(c))
@pytest.mark.parametrize("duration_s", [1200.0, 900.0])
def test_the_benchmark_jumps_where_the_matrix_does(mix_shape, duration_s):
    _mix, shape = mix_shape
    up, down = _edges(shape, duration_s)
    jump_s, end_s = bench._jump_s(shape, duration_s)
    assert up == [jump_s]
    assert down == ([] if end_s is None else [end_s])
