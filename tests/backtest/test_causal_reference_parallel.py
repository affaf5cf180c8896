"""The causal reference's forked runs (``run_causal_reference(..., spare_workers=lambda: 2)``) change nothing.

The parallel search starts the constant fleets and the trim's candidates in forked processes
before the search asks for them; the record it writes must still be the serial search's: the same
runs in the same order, the same chosen schedule, attainment and GPU-hours, the same series. Both
are run on one oracle result (a window of the default preset's flash crowd, with the crowd and the
ramp down after it, so the search rounds, trims and runs its constant fleets), and their JSON
rows compared whole, but for the machine's wall time.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from llmscale.backtest.causal_reference import ReferenceSettings, run_causal_reference
from llmscale.backtest.oracle import OracleSettings, run_oracle
from llmscale.backtest.results import PolicyResult
from llmscale.backtest.runner import BacktestSettings
from llmscale.workloads import make_preset, window
from support.processes import children

# an oracle search and four reference searches on eight minutes: ~2.5 CPU-minutes in pure Python
pytestmark = pytest.mark.slow


def _row(result: PolicyResult) -> str:
    row: dict[str, Any] = result.as_json(with_series=True)
    row.pop("wall_s")
    return json.dumps(row, sort_keys=True)


@pytest.fixture(scope="module")
def case() -> tuple[Any, BacktestSettings, PolicyResult]:
    # Minutes 36-44 of the default preset: its x3 flash crowd arrives at minute 40.
    w = window(make_preset("default", seed=0), 2160.0, 480.0)
    settings = BacktestSettings(min_replicas=1, max_replicas=40, initial_replicas=6).with_cold_start()
    return w, settings, run_oracle(w, settings, OracleSettings())


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the parallel search forks")
def test_parallel_search_writes_the_serial_record(case: tuple[Any, BacktestSettings, PolicyResult]) -> None:
    w, settings, oracle = case
    serial = run_causal_reference(w, settings, oracle, ReferenceSettings())
    parallel = run_causal_reference(w, settings, oracle, ReferenceSettings(), spare_workers=lambda: 2)
    tried = [label for label, _, _ in serial.summary["reference_search"]["tried"]]
    # the paths the forks serve were taken: rounds, a trim, the constant fleets
    assert any(t.startswith("constant=") for t in tried), tried
    assert _row(parallel) == _row(serial)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the parallel search forks")
def test_guesses_it_did_not_need_leave_no_process(case: tuple[Any, BacktestSettings, PolicyResult]) -> None:
    # No round of headroom and none uniform: the late schedule misses, so the budget becomes what
    # it reached, and the constant fleets started under the first budget are not the runs the
    # search asks for (they run again here, and the forks are stopped).
    w, settings, oracle = case
    reference = ReferenceSettings(rounds=0, max_headroom=0.0)
    before = children()
    serial = run_causal_reference(w, settings, oracle, reference)
    parallel = run_causal_reference(w, settings, oracle, reference, spare_workers=lambda: 2)
    search = serial.summary["reference_search"]
    assert [t[0] for t in search["tried"][:2]] == ["levels#0", "h=0"]
    assert search["allowed_misses"] == search["tried"][0][1]  # the budget was what it reached
    assert _row(parallel) == _row(serial)
    # no process of its own left running or unreaped (other tests' servers, e.g. the session's
    # local Ray instance, may be children of this process too)
    assert children() <= before
