"""What the model-drift comparison reads of a window (``signals/drift.py``): means, batch, context, queue."""

from __future__ import annotations

import math

import pytest
from signals_fixtures import obs, sample, synthetic_fleet

from llmscale.metrics.names import VLLM, VLLM_OLD
from llmscale.signals.drift import drift_window
from llmscale.signals.window import FleetWindow
from llmscale.types import Histogram, Phase

BOUNDS = (0.01, 0.1, 1.0, math.inf)


def _h(count: float, total_s: float) -> Histogram:
    # the buckets do not matter to a mean: everything in the first one
    return Histogram(BOUNDS, (count, count, count, count), total_s, count)


def _replica(
    name: str,
    *,
    running: float = 8.0,
    waiting: float = 0.0,
    itl: tuple[float, float] = (0.0, 0.0),
    ttft: tuple[float, float] = (0.0, 0.0),
    finished: float = 0.0,
    prompt: float = 0.0,
    gen: float = 0.0,
    itl_name: str = VLLM.itl,
    phase: Phase = Phase.READY,
):
    values = {
        VLLM.running: running,
        VLLM.waiting: waiting,
        VLLM.prompt_tokens: prompt,
        VLLM.generation_tokens: gen,
    }
    hists = {itl_name: _h(*itl), VLLM.ttft: _h(*ttft), VLLM.e2e: _h(finished, 10.0 * finished)}
    return sample(name, values, hists, phase=phase)


def _steady(t0: float = 0.0, n: int = 4, step_s: float = 15.0, **kw):
    """One replica over ``n`` observations: 100 tokens at 12 ms, 2 prefills of 500 tokens at 40 ms,
    2 finished requests of 500 + 50 tokens per step."""
    out = []
    for k in range(n):
        out.append(
            obs(
                t0 + step_s * k,
                _replica(
                    "a",
                    itl=(100.0 * k, 1.2 * k),
                    ttft=(2.0 * k, 0.08 * k),
                    finished=2.0 * k,
                    prompt=1000.0 * k,
                    gen=100.0 * k,
                    **kw,
                ),
            )
        )
    return out


def test_means_shape_and_rates_of_a_steady_replica():
    w = drift_window(FleetWindow.build(_steady()))
    assert w.span_s == 45.0 and w.replicas == 1
    assert (w.itl_count, w.itl_mean_s) == (300.0, pytest.approx(0.012))
    assert (w.ttft_count, w.ttft_mean_s) == (6.0, pytest.approx(0.04))
    assert w.batch == 8.0
    assert w.prompt_mean_tokens == pytest.approx(500.0)  # 3,000 prompt tokens over 6 prefills
    assert w.context_mean_tokens == pytest.approx(525.0)  # (3,000 + 300 / 2) / 6 finished
    assert w.prefill_rps_per_replica == pytest.approx(6.0 / 45.0)
    assert w.queue_free and w.waiting_max == 0.0


def test_the_batch_is_the_one_tokens_saw():
    # replica a runs 10 all along, b idles: a token was generated in a batch of 10, not of 5
    window = [
        obs(15.0 * k, _replica("a", running=10.0, itl=(10.0 * k, 0.1 * k)), _replica("b", running=0.0))
        for k in range(3)
    ]
    assert drift_window(FleetWindow.build(window)).batch == pytest.approx(10.0)
    # one replica at 4 then 12: sum b^2 / sum b = (16 + 144) / 16 = 10
    window = [obs(0.0, _replica("a", running=4.0)), obs(15.0, _replica("a", running=12.0))]
    assert drift_window(FleetWindow.build(window)).batch == pytest.approx(10.0)


def test_an_idle_fleet_has_batch_zero_and_no_means():
    window = [obs(15.0 * k, _replica("a", running=0.0)) for k in range(3)]
    w = drift_window(FleetWindow.build(window))
    assert w.batch == 0.0
    assert w.itl_mean_s is None and w.ttft_mean_s is None and w.context_mean_tokens is None


@pytest.mark.parametrize(
    ("waiting", "gateway", "expected"),
    [
        pytest.param([0, 0, 0], None, 0.0, id="nothing-queued"),
        pytest.param([0, 3, 0], None, 3.0, id="a-request-waited-once"),
        pytest.param([0, 0, 0], 2, 2.0, id="the-gateway-queue-counts"),
    ],
)
def test_waiting_over_the_window(waiting, gateway, expected):
    window = [
        obs(15.0 * k, _replica("a", waiting=float(q), itl=(100.0 * k, 1.0 * k)), gateway=gateway)
        for k, q in enumerate(waiting)
    ]
    w = drift_window(FleetWindow.build(window))
    assert w.waiting_max == expected
    assert w.queue_free is (expected == 0.0)


def test_a_failed_scrape_leaves_the_queue_unknown():
    window = [obs(0.0, _replica("a")), obs(15.0, sample("a", ok=False)), obs(30.0, _replica("a"))]
    w = drift_window(FleetWindow.build(window))
    assert w.waiting_max is None and not w.queue_free


def test_only_the_window_counts():
    # 20 observations 15 s apart: the 60 s window holds the last 5 (4 steps)
    w = drift_window(FleetWindow.build(_steady(n=20)))
    assert w.span_s == 60.0 and w.itl_count == 400.0


def test_a_restart_counts_the_newer_values_as_the_increase():
    # tokens 100, 200, then the process restarts (counters from 0): 30, 130. PromQL's increase:
    # 100 + 30 + 100 = 230 gaps, and their seconds likewise
    cums = [(100.0, 1.0), (200.0, 2.0), (30.0, 0.6), (130.0, 1.6)]
    gens = [1000.0, 2000.0, 300.0, 1300.0]
    window = [
        obs(15.0 * k, _replica("a", itl=c, gen=g, finished=k + 1.0, prompt=10.0 * g))
        for k, (c, g) in enumerate(zip(cums, gens, strict=True))
    ]
    w = drift_window(FleetWindow.build(window))
    assert w.itl_count == 230.0
    assert w.itl_mean_s == pytest.approx((1.0 + 0.6 + 1.0) / 230.0)


def test_older_vllm_names_and_a_replica_seen_once():
    # a replica on the old ITL name contributes; one that appeared at the last scrape has no increase
    window = [
        obs(15.0 * k, _replica("old", itl=(50.0 * k, 0.75 * k), itl_name=VLLM_OLD.itl)) for k in range(3)
    ]
    window[-1] = obs(30.0, *window[-1].replicas, _replica("new", itl=(999.0, 99.0)))
    w = drift_window(FleetWindow.build(window))
    assert w.itl_count == 100.0 and w.itl_mean_s == pytest.approx(0.015)


def test_waiting_is_the_fleet_queue_the_other_signals_read():
    # the same extrapolation over unknown replicas as ObsTotals.queue(), computed in the one pass
    window = synthetic_fleet(replicas=12, observations=20, tick_s=15.0, seed=5)
    window[-2] = obs(window[-2].time_s, *window[-2].replicas[:-1], sample("lost", ok=False), gateway=3)
    fw = FleetWindow.build(window)
    queues = [t.queue() for t in fw.totals[-5:]]
    assert None not in queues and max(queues) > 0
    assert drift_window(fw).waiting_max == pytest.approx(max(queues))
