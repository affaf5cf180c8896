"""A window advanced tick by tick (``FleetWindow.build(window, previous)``) reads as one indexed afresh.

The controller carries the replicas' series and per-observation totals from
one tick to the next; these tests drive random fleets through many ticks —
replicas appearing, draining, failing scrapes, restarting (counters drop),
changing places in the observation — and compare every signal, the history
and the spans with a window indexed from scratch.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from signals_fixtures import hist, obs, sample, synthetic_fleet, vllm_values

from llmscale.metrics.names import VLLM
from llmscale.signals import compute_signals, rates
from llmscale.signals.fleet import window_signals
from llmscale.signals.window import FleetWindow, start_index
from llmscale.types import Phase

#: what happens to one replica at one tick
EVENTS = (
    *("steady", "steady", "steady", "busy", "fail", "absent", "restart", "drain"),
    *("old-names", "no-gen", "twice"),
)


def _replica(name, counter, event, k):
    if event == "fail":
        return sample(name, ok=False)
    c = counter
    values = vllm_values(
        running=float((3 * c + k) % 17),
        waiting=float((c + 2 * k) % 5),
        kv=((c * 7 + k) % 10) / 10.0,
        preemptions=float(c // 3),
        prompt_tokens=500.0 * c,
        gen_tokens=100.0 * c,
        gpu_util=float((11 * c) % 100),
        mem_copy=float((13 * c + k) % 100),
    )
    hists = {
        VLLM.ttft: hist((c, 2 * c, 3 * c, 3 * c + k % 2)),
        VLLM.e2e: hist((0, c, 2 * c, 2 * c)),
        VLLM.itl: hist((5 * c, 9 * c, 10 * c, 10 * c)),
        VLLM.queue_time: hist((c, c, c, c)),
    }
    if event == "old-names":
        # names no table knows: no counter witnesses a restart, the histograms' counts do
        values = {k.replace("vllm:", "vllm_old:"): v for k, v in values.items()}
    if event == "no-gen":
        # no generation-token counter: the prompt-token counter witnesses restarts
        del values[VLLM.generation_tokens]
    phase = Phase.DRAINING if event == "drain" else Phase.READY
    return sample(name, values, hists, phase=phase)


def _observations(plan, tick_s):
    """``plan[k][r]``: replica r's event at tick k. Counters grow with busy ticks, drop on restart."""
    counters = [0] * len(plan[0])
    out = []
    for k, events in enumerate(plan):
        samples = []
        for r, event in enumerate(events):
            if event == "absent":
                continue
            if event == "restart":
                counters[r] = 1
            else:
                counters[r] += 3 if event == "busy" else 1
            samples.append(_replica(f"r{r}", counters[r], event, k))
            if event == "twice":  # a scrape listing the replica twice (a misbehaving source)
                samples.append(samples[-1])
        if k % 4 == 3:
            samples.reverse()  # replicas change places in the observation
        out.append(obs(tick_s * k, *samples, gateway=k % 3))
    return out


def _assert_same(fw_inc: FleetWindow, window) -> None:
    fresh = FleetWindow.build(window)
    assert fw_inc.observations == fresh.observations
    assert dict(fw_inc.history) == dict(fresh.history)
    assert list(fw_inc.history) == list(fresh.history)  # order of first appearance
    for seconds in (5.0, 30.0, 60.0):
        start = start_index(fresh, seconds)
        inc, ref = fw_inc.spans(start), fresh.spans(start)
        assert list(inc) == list(ref)
        for name, span in ref.items():
            assert inc[name].entries == span.entries, name
            assert inc[name].restarted == span.restarted, name
    got = dict(window_signals(fw_inc).values.items())
    want = dict(compute_signals(window).values.items())
    assert got == want


def _drive(observations, window_len, read):
    """Ticks through ``observations``; returns how many windows were advanced from the previous one."""
    previous = None
    window: tuple = ()
    advanced = 0
    for k, o in enumerate(observations):
        window = (*window, o)[-window_len:]
        fw = FleetWindow.build(window, previous)
        if read[k % len(read)]:
            advanced += fw._previous is not None
            _assert_same(fw, window)
        previous = fw
    return advanced


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(1, 4).flatmap(
        lambda r: st.lists(st.lists(st.sampled_from(EVENTS), min_size=r, max_size=r), min_size=1, max_size=14)
    ),
    st.integers(1, 8),
    st.sampled_from([2.0, 15.0]),
    st.lists(st.booleans(), min_size=1, max_size=5),
)
def test_advanced_window_equals_fresh(plan, window_len, tick_s, read):
    _drive(_observations(plan, tick_s), window_len, read)


@pytest.mark.parametrize("tick_s", [pytest.param(2.0, id="2s-tick"), pytest.param(15.0, id="15s-tick")])
def test_synthetic_fleet_through_40_ticks(tick_s):
    advanced = _drive(synthetic_fleet(replicas=8, observations=40, tick_s=tick_s), 20, [True, False, True])
    assert advanced >= 10


def test_a_window_not_following_the_previous_is_indexed_afresh():
    observations = synthetic_fleet(replicas=3, observations=6, tick_s=15.0)
    previous = FleetWindow.build(observations[:3])
    assert previous.series  # indexed
    # not previous + one observation: previous is ignored
    fw = FleetWindow.build(observations[2:6], previous)
    _assert_same(fw, observations[2:6])


def test_a_window_keeps_its_values_after_later_ticks():
    # Signals are computed when read: values read after later windows were built must be unchanged.
    observations = synthetic_fleet(replicas=4, observations=8, tick_s=15.0)
    fw = FleetWindow.build(observations[:5])
    early = window_signals(fw)
    fw.series  # noqa: B018 - index it, so the next window advances from it
    later = FleetWindow.build(observations[1:6], fw)
    later.series  # noqa: B018
    FleetWindow.build(observations[2:7], later).series  # noqa: B018
    assert dict(early.values.items()) == dict(compute_signals(observations[:5]).values.items())


def _carried(observations):
    """The window over ``observations`` built as the continuation of the one without the newest."""
    previous = FleetWindow.build(observations[:-1]) if len(observations) > 1 else None
    return FleetWindow.build(observations, previous)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(1, 4).flatmap(
        lambda r: st.lists(st.lists(st.sampled_from(EVENTS), min_size=r, max_size=r), min_size=2, max_size=12)
    ),
    st.sampled_from([2.0, 15.0]),
)
def test_step_rates_by_steps_equal_by_replica(plan, tick_s):
    # The per-step path adds steps where the general one adds replicas: equal to the last bit.
    fw = _carried(_observations(plan, tick_s))
    by_steps = rates._step_rates_by_steps(fw)
    assert by_steps is None or by_steps == rates._step_rates_by_replica(fw)


def test_step_rates_by_steps_is_taken_for_a_carried_vllm_window_only():
    observations = synthetic_fleet(replicas=5, observations=10, tick_s=2.0)
    fw = _carried(observations)
    assert rates._step_rates_by_steps(fw) == rates._step_rates_by_replica(fw)
    # indexed afresh: nothing to reuse, the general path is cheaper
    assert rates._step_rates_by_steps(FleetWindow.build(observations)) is None
    fractional = [
        obs(2.0 * k, sample("a", vllm_values(gen_tokens=10.5 * k), {VLLM.e2e: hist((0, k, k, k))}))
        for k in range(4)
    ]
    assert rates._step_rates_by_steps(_carried(fractional)) is None
