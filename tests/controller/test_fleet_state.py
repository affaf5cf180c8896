from __future__ import annotations

import pytest

from llmscale.controller.core import fleet_state
from llmscale.types import FleetView, Signals, SignalValue


def sig(fleet: FleetView, **values: float) -> Signals:
    return Signals(time_s=0.0, fleet=fleet, values={k: SignalValue(v) for k, v in values.items()})


@pytest.mark.parametrize(
    ("fleet", "values", "expected"),
    [
        pytest.param(FleetView(4, ready=4), {"ttft_p99_s": 2.5}, "degraded", id="ttft-over-slo"),
        pytest.param(FleetView(4, ready=4), {"itl_p99_s": 0.2}, "degraded", id="itl-over-slo"),
        pytest.param(FleetView(3, ready=3, draining=1), {}, "graceful-shrink", id="draining"),
        pytest.param(FleetView(5, ready=3, loading=2), {}, "warmup", id="starting"),
        pytest.param(FleetView(3, ready=3), {"queue_waiting": 4.0}, "saturated", id="queue"),
        pytest.param(FleetView(3, ready=3), {"kv_usage_mean": 0.85}, "saturated", id="kv-over-0.8"),
        pytest.param(FleetView(3, ready=3), {"running": 0.0, "queue_waiting": 0.0}, "idle", id="idle"),
        pytest.param(FleetView(3, ready=3), {"running": 12.0, "queue_waiting": 0.0}, "steady", id="steady"),
    ],
)
def test_fleet_state(fleet, values, expected):
    assert fleet_state(sig(fleet, **values), 2.0, 0.1) == expected


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        # 2 s + 0.5 s per 1,000 tokens at a 1,155-token mean prompt: 2.58 s.
        pytest.param(
            {"ttft_p99_s": 2.5, "prompt_len_mean_tokens": 1155.0, "running": 9.0}, "steady", id="within"
        ),
        pytest.param({"ttft_p99_s": 2.6, "prompt_len_mean_tokens": 1155.0}, "degraded", id="over"),
        # No prompt length observed: the base target.
        pytest.param({"ttft_p99_s": 2.5}, "degraded", id="no-prompt-length"),
    ],
)
def test_a_length_aware_ttft_slo_is_judged_at_the_mean_prompt(values, expected):
    assert fleet_state(sig(FleetView(4, ready=4), **values), 2.0, 0.1, 0.5) == expected
