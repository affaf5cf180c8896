"""compute_signals over 500 replicas x 20 observations: well under the live controller's 1 s tick budget.

The target is < 100 ms on a current laptop core. CI machines differ, so the
budget is scaled by a reference measured in the same process: ``sum(range(10**6))``,
~20 ms on such a core, and compute_signals must stay under 5x it. Measured
(2 shared cores, reference 76 ms): ~80 ms at a 15 s tick, ~130 ms when all 20
observations fall in the 60 s windows (1 s tick), i.e. ~1.1x and ~1.7x the reference.
"""

from __future__ import annotations

import time

import pytest
from signals_fixtures import synthetic_fleet

from llmscale.signals import compute_signals


def _best_cpu_s(f, repeat=5):
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        f()
        best = min(best, time.process_time() - t0)
    return best


@pytest.mark.slow
@pytest.mark.parametrize("tick_s", [pytest.param(15.0, id="15s-tick"), pytest.param(1.0, id="1s-tick")])
def test_500_replicas_x_20_observations(tick_s):
    window = synthetic_fleet(replicas=500, observations=20, tick_s=tick_s)
    signals = compute_signals(window)
    assert signals.get("serving_replicas") == 500.0
    assert signals.get("ttft_p99_s") is not None
    ref = _best_cpu_s(lambda: sum(range(10**6)))
    # values are computed when read: read them all, the whole catalogue's cost
    took = _best_cpu_s(lambda: dict(compute_signals(window).values.items()))
    print(f"500x20 at a {tick_s:.0f} s tick: {took * 1e3:.1f} ms CPU; reference {ref * 1e3:.1f} ms")
    assert took < 5.0 * ref, f"{took * 1e3:.1f} ms > 5 x reference {ref * 1e3:.1f} ms"
