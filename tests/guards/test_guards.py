"""The guard pipeline: table-driven from the design documents' numbers, plus Hypothesis invariants."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmscale.errors import ConfigError
from llmscale.guards import GuardConfig, GuardState, apply_guards, eviction_window_s
from llmscale.types import Decision, FleetView, NoData, Signals, SignalValue

# Everything off but bounds, so each test switches on only the guard it is about.
OFF = GuardConfig(
    min_replicas=1,
    max_replicas=20,
    hold_on_missing_data=False,
    pending_aware=False,
    headroom_max_usage=None,
    drain_aware=False,
)


def sig(spec=4, ready=None, starting=0, unknown=0, **values) -> Signals:
    fleet = FleetView(spec_replicas=spec, ready=spec - starting if ready is None else ready, pending=starting)
    return Signals(
        time_s=0.0,
        fleet=fleet,
        values={k: SignalValue(v) for k, v in values.items()},
        unknown_replicas=unknown,
    )


def guard(desired, signals, cfg=OFF, state=None, now=0.0, rule="r", relative=False, no_data=None):
    decision = Decision(desired, rule, relative=relative, no_data=no_data)
    return apply_guards(decision, signals, cfg, state or GuardState(), now)


@pytest.mark.parametrize(
    ("desired", "kv", "expected", "guard_name"),
    [
        # seed 002 5.4: 4 replicas at 0.7 -> 3 would run at 0.7 x 4/3 = 0.933 >= 0.80: blocked.
        pytest.param(3, 0.70, 4, "headroom", id="seed-002-0.7-x-4/3-blocks"),
        # at 0.55: 0.55 x 4/3 = 0.733 < 0.80: allowed.
        pytest.param(3, 0.55, 3, None, id="0.55-x-4/3-allowed"),
        # shrinking 4 -> 2 at 0.5: 0.5 x 2 = 1.0 blocked, but 3 (0.667) is fine: shrink only to 3.
        pytest.param(2, 0.50, 3, "headroom", id="partial-shrink-to-3"),
    ],
)
def test_headroom_after_shrink(desired, kv, expected, guard_name):
    out, _ = guard(desired, sig(kv_usage_mean=kv), replace(OFF, headroom_max_usage=0.80))
    assert out.desired == expected
    assert out.guard == guard_name


def test_hold_on_missing_data_never_shrinks_on_an_unscraped_replica():
    cfg = replace(OFF, hold_on_missing_data=True)
    out, _ = guard(1, sig(spec=4, unknown=1), cfg)
    assert (out.desired, out.guard) == (4, "hold-on-missing-data")
    out, _ = guard(1, sig(spec=4), cfg, rule="no-data", no_data=NoData(("queue_waiting",)))
    assert (out.desired, out.guard) == (4, "hold-on-missing-data")
    # scaling up on missing data is allowed (it can only add capacity)
    out, _ = guard(6, sig(spec=4, unknown=1), cfg)
    assert out.desired == 6


@pytest.mark.parametrize(
    ("rule", "no_data", "expected"),
    [
        pytest.param("no-data", NoData(), 4, id="typed-no-data-holds"),
        # KEDA's ignoreNullValues proposes on a null read as 0: typed, so held whatever its rule says
        pytest.param("no-data-null-as-zero", NoData(("queue_waiting",)), 4, id="keda-null-as-zero-holds"),
        # the rule's spelling decides nothing: "no data" is the type, not a string prefix
        pytest.param("no-data-lookalike", None, 1, id="a-rule-name-alone-does-not-hold"),
    ],
)
def test_the_guard_holds_on_the_no_data_type_not_on_a_rule_name(rule, no_data, expected):
    out, _ = guard(1, sig(spec=4), replace(OFF, hold_on_missing_data=True), rule=rule, no_data=no_data)
    assert out.desired == expected


def test_cooldowns_seed_002_120s_up_600s_down():
    cfg = replace(OFF, cooldown_up_s=120.0, cooldown_down_s=600.0)
    out, st1 = guard(5, sig(spec=4), cfg, now=0.0)
    assert out.desired == 5
    out, st2 = guard(6, sig(spec=5), cfg, state=st1, now=60.0)
    assert (out.desired, out.guard) == (5, "cooldown")
    out, st3 = guard(6, sig(spec=5), cfg, state=st2, now=121.0)
    assert out.desired == 6
    out, _ = guard(5, sig(spec=6), cfg, state=st3, now=121.0 + 599.0)
    assert out.desired == 6
    out, _ = guard(5, sig(spec=6), cfg, state=st3, now=121.0 + 600.0)
    assert out.desired == 5


def test_confirmation_needs_n_consecutive_ticks():
    cfg = replace(OFF, confirm_up_ticks=3)
    state = GuardState()
    for now in (0.0, 15.0):
        out, state = guard(6, sig(spec=4), cfg, state=state, now=now)
        assert out.desired == 4
    out, state = guard(6, sig(spec=4), cfg, state=state, now=30.0)
    assert out.desired == 6


def test_stabilization_highest_recommendation_in_the_down_window_wins():
    cfg = replace(OFF, stabilization_down_s=300.0)
    _, state = guard(8, sig(spec=8), cfg, now=0.0)
    out, state = guard(5, sig(spec=8), cfg, state=state, now=100.0)
    assert (out.desired, out.guard) == (8, "stabilization")
    out, state = guard(5, sig(spec=8), cfg, state=state, now=301.0)
    assert out.desired == 5


@pytest.mark.parametrize(
    ("hold_starting", "proposal", "expected"),
    [
        # 37 asked for a crowd, 23 ready, 14 starting; the crowd is over and 15 are proposed.
        # Held: every one of the 37 for the window. Not held: the 23 serving stay, the starts go.
        pytest.param(True, 15, 37, id="held-starts-and-all"),
        pytest.param(False, 15, 23, id="starts-cancelled-serving-held"),
        # A proposal above the serving replicas keeps itself plus one start of slack (rounding).
        pytest.param(False, 29, 30, id="proposal-plus-one-start-kept"),
        # A dip of one replica on a ramp keeps the start it would ask for again a tick later.
        pytest.param(False, 36, 37, id="dip-of-one-keeps-the-start"),
    ],
)
def test_hold_starting_off_lets_the_shrink_guards_cancel_starts_only(hold_starting, proposal, expected):
    cfg = replace(
        OFF,
        max_replicas=64,
        stabilization_down_s=180.0,
        drain_aware=True,
        headroom_max_usage=0.80,
        hold_starting=hold_starting,
    )
    fleet = sig(spec=37, ready=23, starting=14, kv_usage_mean=0.7, ttft_p95_s=0.2)
    _, state = guard(37, fleet, cfg, now=0.0)
    out, _ = guard(proposal, fleet, cfg, state=state, now=15.0)
    assert out.desired == expected


def test_pending_aware_no_runaway_while_loading():
    cfg = replace(OFF, pending_aware=True)
    # 2 ready + 2 starting; a step policy asks for one more: covered by those on the way.
    out, _ = guard(5, sig(spec=4, ready=2, starting=2), cfg, relative=True)
    assert (out.desired, out.guard) == (4, "pending-aware")


def test_pending_aware_counts_replicas_waiting_for_a_node():
    """A pod the scheduler cannot place (Phase.NODE_PENDING) is on the way like a loading one: 3 ready
    + 1 waiting for its GPU node, a step policy asks for one more, and the one waiting covers it."""
    cfg = replace(OFF, pending_aware=True)
    fleet = FleetView(spec_replicas=4, ready=3, node_pending=1)
    assert (fleet.starting, fleet.active, fleet.pending) == (1, 4, 0)
    signals = Signals(time_s=0.0, fleet=fleet, values={})
    out, _ = apply_guards(Decision(5, "r", relative=True), signals, cfg, GuardState(), 0.0)
    assert (out.desired, out.guard) == (4, "pending-aware")


@pytest.mark.parametrize(
    ("spec", "starting", "desired", "relative", "expected"),
    [
        # The spec counts the replica pending: a target of 3 with 1 of 1 pending is 2 more, not 1.
        # (max(current, desired - starting) gave 2, and 2 again with 2 of 2 pending: stuck until ready.)
        pytest.param(1, 1, 3, False, 3, id="absolute-3-with-1-of-1-pending"),
        pytest.param(2, 2, 3, False, 3, id="absolute-3-with-2-of-2-pending"),
        # An absolute total at or below the spec needs nothing: the ones on the way are in the spec.
        pytest.param(4, 2, 4, False, 4, id="absolute-equal-to-spec"),
        # A step of 3 over spec 3 with 1 starting: that one covers 1 of the 3 -> 3 + 2 = 5.
        pytest.param(3, 1, 6, True, 5, id="relative-step-3-one-starting-covers-1"),
        # A step of 1 with 2 starting is covered entirely.
        pytest.param(4, 2, 5, True, 4, id="relative-step-1-two-starting-cover-it"),
        # Nothing starting: a relative step passes unchanged.
        pytest.param(4, 0, 6, True, 6, id="relative-nothing-starting"),
    ],
)
def test_pending_aware_counts_the_starting_replicas_once(spec, starting, desired, relative, expected):
    cfg = replace(OFF, pending_aware=True)
    out, _ = guard(desired, sig(spec=spec, starting=starting), cfg, relative=relative)
    assert out.desired == expected
    assert out.guard == (None if expected == desired else "pending-aware")


@given(
    spec=st.integers(0, 30),
    starting=st.integers(0, 30),
    desired=st.integers(0, 40),
    relative=st.booleans(),
)
def test_pending_aware_covers_relative_steps_only(spec, starting, desired, relative):
    starting = min(starting, spec)
    cfg = replace(OFF, pending_aware=True, min_replicas=0, max_replicas=40)
    out, _ = guard(desired, sig(spec=spec, starting=starting), cfg, relative=relative)
    if not relative or desired <= spec:
        assert out.desired == desired
    else:
        # A relative step is covered by the replicas starting, never below the spec.
        assert out.desired == max(spec, desired - starting)


def test_rate_limits():
    cfg = replace(OFF, max_up_ratio=2.0, max_down_step=1)
    assert guard(20, sig(spec=4), cfg)[0].desired == 8
    assert guard(1, sig(spec=4), cfg)[0].desired == 3


def test_drain_waits_for_the_eviction_window():
    cfg = replace(OFF, drain_aware=True)
    out, state = guard(3, sig(spec=4, ttft_p95_s=0.05), cfg, now=0.0)
    assert (out.desired, out.guard) == (4, "drain")
    window = eviction_window_s(0.0, 50.0)  # max(30, 15 + 0.8 x 50) = 55 s
    assert window == pytest.approx(55.0)
    out, state = guard(3, sig(spec=4, ttft_p95_s=0.05), cfg, state=state, now=54.0)
    assert out.desired == 4
    out, state = guard(3, sig(spec=4, ttft_p95_s=0.05), cfg, state=state, now=55.0)
    assert out.desired == 3


def test_gpu_budget_admission():
    cfg = replace(OFF, gpu_budget=10, gpus_per_replica=2)
    assert guard(9, sig(spec=4), cfg)[0].desired == 5


def test_bad_configs_are_named():
    with pytest.raises(ConfigError, match="max_replicas = 3, must be >= min_replicas"):
        GuardConfig(min_replicas=5, max_replicas=3)
    with pytest.raises(ConfigError, match="unknown guard setting"):
        GuardConfig().merged({"coldown_up_s": 1})


@given(
    desired=st.integers(0, 200),
    spec=st.integers(0, 60),
    lo=st.integers(0, 10),
    span=st.integers(0, 50),
    kv=st.one_of(st.none(), st.floats(0.0, 1.0)),
    unknown=st.integers(0, 3),
    cooldown=st.floats(0, 600),
    now=st.floats(0, 10_000),
    up_ratio=st.one_of(st.none(), st.floats(1.0, 4.0)),
)
def test_bounds_and_no_shrink_on_missing_data(desired, spec, lo, span, kv, unknown, cooldown, now, up_ratio):
    cfg = GuardConfig(
        min_replicas=lo, max_replicas=lo + span, cooldown_down_s=cooldown, max_up_ratio=up_ratio
    )
    values = {} if kv is None else {"kv_usage_mean": kv}
    out, _ = guard(desired, sig(spec=spec, unknown=unknown, **values), cfg, now=now)
    assert cfg.min_replicas <= out.desired <= cfg.max_replicas
    if unknown and spec >= cfg.min_replicas and spec <= cfg.max_replicas:
        assert out.desired >= spec
    if up_ratio is not None and spec >= 1 and out.desired > spec and spec >= cfg.min_replicas:
        assert out.desired <= max(spec + 1, math.floor(spec * up_ratio))


@given(
    st.lists(st.floats(0.0, 2000.0, allow_nan=False), max_size=40),
    st.floats(0.0, 2600.0, allow_nan=False),
    st.sampled_from([0.0, 30.0, 300.0, 900.0]),
)
def test_history_keeps_exactly_the_proposals_within_the_longest_window(times, now, stab_s):
    """The guards drop expired proposals from the front of the (time-ordered) history; what
    survives is exactly what a filter over every entry keeps, plus this tick's proposal."""
    history = tuple((t, i) for i, t in enumerate(sorted(t for t in times if t <= now)))
    cfg = replace(OFF, stabilization_up_s=stab_s, stabilization_down_s=stab_s)
    keep_s = max(stab_s, 600.0)  # the eviction window's history is the floor
    _, state = guard(5, sig(spec=4), cfg, GuardState(history=history), now=now)
    assert state.history == (*(h for h in history if now - h[0] < keep_s), (now, 5))
