"""benchmarks/controller_tick.py runs end to end on a tiny fleet and prints every field.

A smoke run (10 replicas in one emulator process, a 3-observation window), not
a timing check: the numbers depend on the machine; only their presence is asserted.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "controller_tick.py"


@pytest.mark.slow
def test_controller_tick_benchmark_runs_on_a_small_fleet():
    args = "--replicas 10 --emulators 1 --ticks 3 --window 3 --warmup-s 1 --baseline-pages 3"
    args += " --max-seconds 200"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *args.split()], capture_output=True, text=True, timeout=300
    )
    out = proc.stdout
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "unknown replicas per tick: max 0" in out, out
    for field in ("scrape+parse", "signals", "decide+guards", "tick"):
        assert re.search(rf"^  {re.escape(field)} +[0-9.]+ s / +[0-9.]+ s$", out, re.MULTILINE), field
    assert re.search(r"machine reference: sum\(range\(10\*\*7\)\) took [0-9.]+ s", out)
    assert re.search(r"peak RSS of the measuring process: \d+ MB", out)
    assert re.search(r"prometheus_client's parser alone [0-9.]+ ms/page", out)
    assert re.search(r"target: tick < 1 s: (PASS|MISS) .*peak memory < 1000 MB: (PASS|MISS)", out)


@pytest.mark.slow
def test_controller_tick_benchmark_serves_many_replica_paths():
    """The 5,000-replica shape, small: 200 replica paths on two listeners over 10 simulated replicas.

    Every path must be scraped, parsed and kept (no replica unknown), the baseline over the first
    50 replicas must run in the same process, and the decision must see all 200 replicas.
    """
    args = "--replicas 200 --sim-replicas 10 --emulators 2 --ticks 3 --window 3 --warmup-s 1"
    # 20 copies of each simulated replica at lags 0, 2, ... 38 ticks: 39 snapshots before the first
    # scrape, one a wall second (--run-s), so the warm-up is ~40 s longer than --warmup-s
    args += " --baseline-pages 3 --baseline-replicas 50 --compare-fetch 1 --max-seconds 400"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *args.split()], capture_output=True, text=True, timeout=480
    )
    out = proc.stdout
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "serving 200 replica paths [100, 100]" in out, out
    assert "200 replica targets" in out, out
    assert "unknown replicas per tick: max 0" in out, out
    assert re.search(r"baseline: the same tick over the first 50 replicas, .* 4x the replicas", out), out
    assert re.search(r"pages read through a learnt layout in the timed ticks: 600, line by line: 0", out), out
    assert re.search(r"lean client [0-9.]+ s CPU", out), out  # every page fetched twice more, all known
    assert re.search(r"arrival dispersion the last tick read: ", out), out
    assert re.search(r"of which the measuring process's cyclic garbage collector: median [0-9.]+ s", out), out
    assert re.search(r"target: tick < 1 s: (PASS|MISS) .*peak memory < 1000 MB: (PASS|MISS)", out)
