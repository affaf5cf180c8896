"""Queue, concurrency and KV signals at the newest observation; KV growth per step (seed 000 3.1)."""

from __future__ import annotations

import pytest
from signals_fixtures import obs, sample

from llmscale.metrics.names import TGI, VLLM, VLLM_OLD
from llmscale.signals.kv import kv_growth_pct, kv_signals
from llmscale.signals.queues import queue_signals
from llmscale.signals.window import FleetWindow
from llmscale.types import Phase


def _r(name, waiting=0.0, running=0.0, kv=None, **kw):
    values = {VLLM.waiting: waiting, VLLM.running: running}
    if kv is not None:
        values[VLLM.kv_usage] = kv
    return sample(name, values, **kw)


@pytest.mark.parametrize(
    ("replicas", "gateway", "expected"),
    [
        pytest.param(
            [_r("a", 4, 10), _r("b", 6, 20), _r("c", 8, 30), sample("d", ok=False)],
            6,
            {
                "queue_waiting": 24,
                "queue_waiting_max": 8,
                "queue_per_replica": 8,
                "running": 60,
                "running_per_replica": 20,
                "gateway_queue": 6,
                "serving_replicas": 3,
                "unknown_replicas": 1,
            },
            id="one-unknown-left-out",
        ),
        pytest.param(
            [
                _r("a", 2, 5),
                _r("p", 50, 50, phase=Phase.DRAINING),
                sample("q", phase=Phase.PENDING, ok=False),
            ],
            None,
            {
                "queue_waiting": 2,
                "queue_waiting_max": 2,
                "queue_per_replica": 2,
                "running": 5,
                "gateway_queue": None,
                "serving_replicas": 1,
                "unknown_replicas": 0,
            },
            id="only-ready-replicas-serve",
        ),
        pytest.param(
            [sample("w", phase=Phase.WARMUP, values={VLLM.waiting: 0.0})],
            12,
            {
                "queue_waiting": 12,
                "running": 0,
                "queue_per_replica": None,
                "queue_waiting_max": None,
                "running_per_replica": None,
                "serving_replicas": 0,
            },
            id="no-serving-replica-gateway-only",
        ),
        pytest.param(
            [sample("a", ok=False), sample("b", ok=False)],
            3,
            {
                "queue_waiting": None,
                "running": None,
                "queue_per_replica": None,
                "serving_replicas": 0,
                "unknown_replicas": 2,
            },
            id="all-scrapes-failed-is-unknown-not-zero",
        ),
        pytest.param(
            [sample("t", {TGI.waiting: 3.0, TGI.running: 7.0})],
            0,
            {"queue_waiting": 3, "running": 7},
            id="tgi-names",
        ),
    ],
)
def test_queue_signals(replicas, gateway, expected):
    values = queue_signals(FleetWindow.build([obs(0.0, *replicas, gateway=gateway)]))
    for name, want in expected.items():
        got = values[name].value
        assert got == (None if want is None else pytest.approx(want)), name
        if want is None:
            assert values[name].note or name == "gateway_queue"


@pytest.mark.parametrize(
    ("prev", "curr", "steps", "expected"),
    [
        pytest.param(0.40, 0.52, 4, 7.5, id="worked-7.5"),
        pytest.param(0.50, 0.25, 1, -50.0, id="shrinking"),
        pytest.param(0.3, 0.6, 0, 100.0, id="steps-at-least-1"),
        pytest.param(0.0, 0.0, 3, 0.0, id="empty-stays-empty"),
        pytest.param(0.0, 0.2, 3, None, id="from-empty-undefined"),
    ],
)
def test_kv_growth_pct(prev, curr, steps, expected):
    got = kv_growth_pct(prev, curr, steps)
    assert got == (None if expected is None else pytest.approx(expected))


def test_kv_signals_over_the_window():
    # mean 0.40 at t=0 (window edge of 60 s), 0.52 at t=60: 4 steps -> 7.5 %/step
    kv_then = (0.3, 0.5)
    kv_now = (0.44, 0.60)
    window = [obs(0.0, _r("a", kv=kv_then[0]), _r("b", kv=kv_then[1]))]
    window += [obs(t, _r("a", kv=0.1), _r("b", kv=0.1)) for t in (15.0, 30.0, 45.0)]
    window.append(obs(60.0, _r("a", kv=kv_now[0]), _r("b", kv=kv_now[1]), sample("c", ok=False)))
    values = kv_signals(FleetWindow.build(window))
    assert values["kv_usage_mean"].value == pytest.approx(0.52)
    assert values["kv_usage_max"].value == pytest.approx(0.60)
    assert values["kv_growth_pct_per_step"].value == pytest.approx(7.5)


def test_kv_old_vllm_name_and_missing():
    old = sample("a", {VLLM_OLD.kv_usage: 0.7})
    values = kv_signals(FleetWindow.build([obs(0.0, old)]))
    assert values["kv_usage_mean"].value == pytest.approx(0.7)
    assert values["kv_growth_pct_per_step"].value is None  # one observation
    values = kv_signals(FleetWindow.build([obs(0.0, sample("t", {TGI.waiting: 1.0}))]))
    assert values["kv_usage_mean"].value is None
    assert values["kv_usage_max"].note
