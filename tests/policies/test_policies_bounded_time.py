"""Issue 19: every registered policy decides in bounded time on absurd but finite signals.

A replica reporting a queue of 1e9 sent ``slo`` into a computation of minutes (a fleet of ~2e7
searched, 2e7 Poisson terms a call). Pages past their plausible ranges are now refused
(``metrics/vetting.py``), but a fleet's sums of plausible values can still be large, and a
policy's loops must not depend on how large: here each policy (with its guards) decides three
ticks on signals drawn from 0, 1e6, 1e9, 1e12, 1e15 and 1e300, each tick under a 10 s alarm
(a few milliseconds is the usual; the capacity model's first build ~1 s on a loaded VM).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmscale.deployment import Deployment
from llmscale.errors import ConfigError
from llmscale.guards import GuardConfig, GuardState, apply_guards
from llmscale.policies.base import create_policy, policy_names
from llmscale.signals.catalog import SIGNALS
from llmscale.types import FleetView, Signals, SignalValue

_DEEP = int(os.environ.get("LLMSCALE_FUZZ_EXAMPLES", "0"))
FUZZ = settings(
    max_examples=_DEEP or 6,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    derandomize=not _DEEP,
    database=None,
)
HUGE = st.sampled_from([0.0, 1e6, 1e9, 1e12, 1e15, 1e300])


@contextmanager
def alarm(seconds: float) -> Iterator[None]:
    def ring(signum: int, frame: object) -> None:
        raise TimeoutError(f"a tick ran past {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@st.composite
def absurd_signals(draw: st.DrawFn) -> Signals:
    ready = draw(st.integers(1, 4))
    values = {name: SignalValue(draw(st.one_of(st.none(), HUGE))) for name in SIGNALS}
    return Signals(time_s=0.0, fleet=FleetView(spec_replicas=ready, ready=ready), values=values)


@pytest.mark.parametrize("name", policy_names())
@FUZZ
@given(ticks=st.lists(absurd_signals(), min_size=3, max_size=3))
def test_a_policy_decides_absurd_signals_in_bounded_time(name: str, ticks: list[Signals]) -> None:
    try:
        policy = create_policy(name, Deployment(min_replicas=1, max_replicas=20), {})
    except ConfigError:
        pytest.skip(f"{name} needs parameters to be built")
    guards = GuardConfig(1, 20).merged(getattr(policy, "guard_overrides", {}) or {})
    state, gstate = policy.initial_state(), GuardState()
    for i, sig in enumerate(ticks):
        now = (i + 1) * policy.tick_s
        with alarm(10.0):
            decision, state = policy.decide(sig, state, now)
            outcome, gstate = apply_guards(decision, sig, guards, gstate, now)
        assert 1 <= outcome.desired <= 20, (name, outcome)
