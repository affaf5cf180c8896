"""Saved controller state: JSON round trip, and a restart takes no extra action within the cooldown."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from live_fakes import PLAIN, FakeCluster, FollowingSource, controller, static_run

from llmscale.controller.persist import StateFormatError, state_from_dict, state_to_dict
from llmscale.guards import GuardState

times = st.floats(min_value=0.0, max_value=4e9, allow_nan=False)
clock_times = st.one_of(st.just(-math.inf), times)
decisions = st.one_of(
    st.none(),
    st.fixed_dictionaries(
        {
            "time_s": times,
            "policy": st.text(max_size=12),
            "proposed": st.integers(0, 1000),
            "final": st.integers(0, 1000),
            "rule": st.text(max_size=12),
            "guard": st.one_of(st.none(), st.text(max_size=12)),
            "applied": st.booleans(),
        }
    ),
)
guard_states = st.builds(
    GuardState,
    last_up_s=clock_times,
    last_change_s=clock_times,
    up_streak=st.integers(0, 100),
    down_streak=st.integers(0, 100),
    # oldest first, as the guards append it
    history=st.lists(st.tuples(times, st.integers(0, 1000)), max_size=8).map(
        lambda h: tuple(sorted(h, key=lambda x: x[0]))
    ),
    down_since_s=st.one_of(st.none(), times),
)


@given(guard_states, decisions)
def test_round_trip_through_json(state, last):
    doc = state_to_dict(state, last, target="llm/llama")
    text = json.dumps(doc, allow_nan=False)  # strict JSON: no Infinity
    back = state_from_dict(json.loads(text))
    assert back.guard_state == state
    assert back.last_decision == last
    assert back.target == "llm/llama"


@pytest.mark.parametrize(
    ("doc", "match"),
    [
        pytest.param({"version": 99}, "version", id="future-version"),
        pytest.param({"version": 1}, "guard_state", id="no-guard-state"),
        pytest.param({"version": 1, "guard_state": {"last_up_s": "soon"}}, "last_up_s", id="bad-time"),
        pytest.param({"version": 1, "guard_state": {"history": [[1.0]]}}, "guard_state", id="bad-history"),
    ],
)
def test_bad_documents_are_refused_by_name(doc, match):
    with pytest.raises(StateFormatError, match=match):
        state_from_dict(doc)


class JsonStore:
    """A StateStore that keeps the document as JSON text, as a file or annotation would."""

    def __init__(self) -> None:
        self.text: str | None = None
        self.saved: list[dict[str, Any]] = []

    def load(self) -> dict[str, Any] | None:
        return None if self.text is None else json.loads(self.text)

    def save(self, doc: dict[str, Any]) -> None:
        self.text = json.dumps(doc, allow_nan=False)
        self.saved.append(json.loads(self.text))


GUARDS = replace(PLAIN, cooldown_down_s=300.0)


def _restart_scenario(store: Any) -> FakeCluster:
    """A controller grows 2 -> 6 at t=1000 and dies; a new one wants 3 at t=1060 (in the cooldown)."""
    cluster = FakeCluster(2)
    first = controller(FollowingSource(cluster), cluster, primary=static_run(6, GUARDS), store=store)
    entry = first.tick(1000.0)
    assert entry is not None and entry.record.applied
    second = controller(FollowingSource(cluster), cluster, primary=static_run(3, GUARDS), store=store)
    second.start()
    entry = second.tick(1060.0)
    assert entry is not None
    return cluster


def test_restart_takes_no_extra_action_within_the_cooldown():
    store = JsonStore()
    cluster = _restart_scenario(store)
    assert cluster.calls == [(6, 1000.0)]
    # Each start writes the state it loaded back (a check that the store is writable); only the
    # scale to 6 ever saved a decision.
    decisions = [d["last_decision"] for d in store.saved if d["last_decision"] is not None]
    assert decisions and all(d["final"] == 6 for d in decisions)
    assert json.loads(store.text or "")["last_decision"]["final"] == 6


def test_a_fresh_start_without_state_would_act():
    cluster = _restart_scenario(None)
    assert cluster.calls == [(6, 1000.0), (3, 1060.0)]


def test_restart_with_the_file_state_store(tmp_path):
    state_store = pytest.importorskip(
        "llmscale.cluster.state_store", reason="cluster/state_store.py (Kubernetes room) not built yet"
    )
    store = state_store.FileStateStore(tmp_path / "state.json")
    cluster = _restart_scenario(store)
    assert cluster.calls == [(6, 1000.0)]
    assert json.loads((tmp_path / "state.json").read_text())["target"] == "llm/llama"


def test_an_unreadable_saved_state_is_ignored_not_fatal():
    store = JsonStore()
    store.text = json.dumps({"version": 0})
    cluster = FakeCluster(2)
    c = controller(FollowingSource(cluster), cluster, primary=static_run(3), store=store)
    c.start()
    assert c.state.guard_state == GuardState()
