"""gc_tick.py: the window is frozen between ticks, and a steady tick makes no reference cycle.

Freezing is only sound when the objects a tick leaves behind are freed by refcounting: a tick
whose window formed a reference cycle (spans holding their window back, as they once did) would
keep every dropped window alive until the next full collection. So the first test runs the
controller's own observe and decide over scraped-shape samples with the collector off and counts
what a full collection finds: nothing, tick after tick.
"""

from __future__ import annotations

import gc
import weakref
from array import array
from collections.abc import Iterator
from typing import Any

import pytest

from llmscale.config import deployment_of, parse_config
from llmscale.controller.core import Controller, ControllerState, decide, observe
from llmscale.gc_tick import TickCollector
from llmscale.metrics.exposition import PackedHistogram
from llmscale.metrics.names import VllmMetric
from llmscale.metrics.scrape import fleet_view_of
from llmscale.types import Observation, Phase, ReplicaSample
from llmscale.wiring import policy_run


@pytest.fixture(autouse=True)
def _collector_back_as_found() -> Iterator[None]:
    was_enabled = gc.isenabled()
    yield
    gc.unfreeze()
    if was_enabled:
        gc.enable()


def _observation(k: int, replicas: int) -> Observation:
    """Replicas' samples as a scrape keeps them: gauges, counters and packed histograms that grow."""
    bounds = (0.1, 0.5, 1.0, 5.0, float("inf"))
    samples = []
    for r in range(replicas):
        n = 10.0 * k + r
        cum = array("d", (n, 2 * n, 3 * n, 3 * n + k, 3 * n + k))
        hists = {
            VllmMetric.TTFT: PackedHistogram(bounds, cum, 0.4 * cum[-1], cum[-1]),
            VllmMetric.E2E: PackedHistogram(bounds, array("d", cum), 2.0 * cum[-1], cum[-1]),
        }
        values = {
            VllmMetric.RUNNING: 4.0,
            VllmMetric.WAITING: float(r % 3),
            VllmMetric.KV_USAGE: 0.3,
            VllmMetric.PROMPT_TOKENS: 700.0 * cum[-1],
            VllmMetric.GENERATION_TOKENS: 150.0 * cum[-1],
        }
        samples.append(ReplicaSample(f"r{r}", Phase.READY, ok=True, values=values, histograms=hists))
    return Observation(time_s=15.0 * k, fleet=fleet_view_of(samples), replicas=tuple(samples))


def test_a_steady_state_tick_leaves_no_reference_cycle() -> None:
    raw: dict[str, Any] = {
        "target": {"name": "gc", "model": "llama-3-8b", "gpu": "h100-80gb"},
        "metrics": {"source": "scrape", "scrape": {"static_targets": [{"name": "a", "url": "http://a/"}]}},
        "policy": {"name": "slo"},
        "guards": {"min_replicas": 1, "max_replicas": 100},
        "mode": "dry-run",
        "actuator": {"kind": "emulate", "emulate": {"url": "http://127.0.0.1:9"}},
    }
    cfg = parse_config(raw, source="test_gc_tick")
    run = policy_run(cfg, cfg.policy)
    core = Controller(run.policy, run.guards, deployment_of(cfg))
    state = ControllerState(policy_state=run.policy.initial_state())
    gc.collect()
    gc.disable()
    found = []
    for k in range(23):  # past a full window (WINDOW_LEN = 20): observations are dropped too
        state, signals = observe(state, _observation(k, replicas=6))
        for name in signals.values:  # every signal computed, as a policy reading them all would
            signals.values[name]
        _, state = decide(core, state, signals, 15.0 * k)
        found.append(gc.collect())
    assert found[-4:] == [0] * 4, found  # 128 objects a tick here while spans held their window


def test_the_collector_freezes_after_a_tick_and_collects_everything_every_n_ticks() -> None:
    class Node:
        other: Any = None

    collector = TickCollector(full_every_ticks=3)
    collector.after_tick()
    assert gc.get_freeze_count() > 0
    # A reference cycle that becomes garbage after it was frozen: left for the full collection.
    a, b = Node(), Node()
    a.other, b.other = b, a
    gone = weakref.ref(a)
    collector.after_tick()  # frozen with the cycle still referenced
    del a, b
    gc.collect()
    assert gone() is not None  # frozen: the collector does not look at it
    collector.after_tick()  # the third tick: unfreeze and collect everything
    assert gone() is None and collector.full_collections == 1
    collector.close()
    assert gc.get_freeze_count() == 0


def test_a_collector_needs_a_positive_period() -> None:
    with pytest.raises(ValueError, match="full_every_ticks = 0, must be >= 1"):
        TickCollector(full_every_ticks=0)


def test_a_tick_raises_the_young_threshold_and_the_tick_end_restores_it() -> None:
    from llmscale.gc_tick import TICK_GEN0_THRESHOLD

    before = gc.get_threshold()
    collector = TickCollector()
    collector.before_tick()
    collector.before_tick()  # twice (a tick that was abandoned and retried): the first thresholds stay
    assert gc.get_threshold() == (TICK_GEN0_THRESHOLD, *before[1:])
    collector.after_tick()
    assert gc.get_threshold() == before
    collector.before_tick()
    collector.close()  # a loop that ends mid-tick gives Python's thresholds back too
    assert gc.get_threshold() == before


def test_a_tick_of_many_objects_runs_no_young_collection() -> None:
    """What the raised threshold buys: a tick keeping 100,000 new objects (a 5,000-replica tick
    keeps a few hundred thousand) triggers no collection; at Python's 700 it triggers many."""
    collections: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    def tick() -> list[dict[str, int]]:
        return [{"k": k} for k in range(100_000)]

    collector = TickCollector()
    gc.callbacks.append(count)
    try:
        kept_plain = tick()
        plain = len(collections)
        collections.clear()
        collector.before_tick()
        kept_raised = tick()
        raised = len(collections)
        collector.after_tick()
    finally:
        gc.callbacks.remove(count)
        collector.close()
    assert len(kept_plain) == len(kept_raised)
    assert plain > 100 and raised == 0, (plain, raised)
