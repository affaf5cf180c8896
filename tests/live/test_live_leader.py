"""Leader election as the live loop sees it: a scripted elector over the in-process fakes.

The real Lease protocol against a real kube-apiserver is in tests/kubernetes/test_kube_leader.py;
here each tick's leadership is set by hand, so the standby, takeover and fencing paths are exact.
"""

from __future__ import annotations

import io
import json
from dataclasses import replace
from typing import Any

import pytest
from live_fakes import PLAIN, FakeCluster, FollowingSource, controller, static_run

from llmscale.cluster.state_store import FileStateStore
from llmscale.config import parse_config
from llmscale.controller.decision_log import DecisionLog
from llmscale.errors import ConfigError


class ScriptedElector:
    """Leads while ``leading`` is true; ``lapse_after`` calls to is_leader() it stops (fencing)."""

    def __init__(self, leading: bool, *, lapse_after: int | None = None) -> None:
        self.leading = leading
        self.lapse_after = lapse_after
        self.asked = 0
        self.started = False

    def start(self) -> None:
        self.started = True

    def is_leader(self) -> bool:
        self.asked += 1
        if self.lapse_after is not None and self.asked > self.lapse_after:
            self.leading = False
        return self.leading

    @property
    def term(self) -> int | None:
        return 7 if self.leading else None

    @property
    def identity(self) -> str:
        return "pod-a_1234"


def _with_elector(cluster: FakeCluster, elector: ScriptedElector, **kwargs: Any) -> Any:
    c = controller(FollowingSource(cluster), cluster, **kwargs)
    c.elector = elector
    c._was_leading = False
    return c


def test_a_standby_decides_and_logs_but_never_scales_or_saves(tmp_path):
    cluster = FakeCluster(2)
    out = io.StringIO()
    store = FileStateStore(tmp_path / "state.json")
    c = _with_elector(
        cluster, ScriptedElector(False), primary=static_run(5), log=DecisionLog("-", stream=out), store=store
    )
    c.start()
    for t in (0.0, 15.0):
        entry = c.tick(t)
        assert entry is not None and entry.record.final == 5 and not entry.record.applied
    assert cluster.calls == []
    assert not (tmp_path / "state.json").exists(), "a standby wrote the state"
    assert c.metrics.registry.get_sample_value("llmscale_leader") == 0.0
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(r["leader"], r["lease_term"], r["identity"]) for r in lines] == [(False, None, "pod-a_1234")] * 2


def test_taking_over_loads_the_cooldown_the_previous_leader_saved(tmp_path):
    guards = replace(PLAIN, cooldown_up_s=300.0)
    path = tmp_path / "state.json"
    cluster = FakeCluster(2)
    elector = ScriptedElector(False)
    c = _with_elector(cluster, elector, primary=static_run(5, guards), store=FileStateStore(path))
    c.start()  # a standby from before anything was saved: it knows no cooldown
    # The leader (another process, the same store) scales up at t=0 and saves its cooldown.
    leader = controller(
        FollowingSource(cluster), cluster, primary=static_run(5, guards), store=FileStateStore(path)
    )
    leader.tick(0.0)
    assert cluster.calls == [(5, 0.0)]
    cluster._spec = 3  # shrunk by someone since
    standby = c.tick(10.0)
    assert standby is not None and standby.record.final == 5 and not standby.record.applied
    elector.leading = True
    entry = c.tick(30.0)
    assert entry is not None and entry.record.guard == "cooldown" and entry.record.final == 3
    assert c.metrics.registry.get_sample_value("llmscale_leader") == 1.0
    assert cluster.calls == [(5, 0.0)]  # the old leader's only
    entry = c.tick(300.0)
    assert entry is not None and entry.record.applied and cluster.calls == [(5, 0.0), (5, 300.0)]


def test_a_lease_lost_during_the_tick_fences_the_scale():
    cluster = FakeCluster(2)
    # Leads at the tick's start, lapses before the scale: nothing is written to the cluster.
    c = _with_elector(cluster, ScriptedElector(True, lapse_after=1), primary=static_run(5))
    entry = c.tick(0.0)
    assert entry is not None and not entry.record.applied
    assert cluster.calls == []


@pytest.mark.parametrize(
    ("settings", "actuator", "message"),
    [
        pytest.param(
            {"renew_deadline_s": 15},
            "kubernetes",
            "renew_deadline_s: 15, must be < lease_duration_s (15)",
            id="renew-not-below-lease",
        ),
        pytest.param(
            {"retry_period_s": 10},
            "kubernetes",
            "retry_period_s: 10, must be < renew_deadline_s (10)",
            id="retry-not-below-renew",
        ),
        pytest.param({}, "emulate", "leader_election: needs actuator.kind kubernetes", id="not-kubernetes"),
        pytest.param(
            {"lease_duration_s": 0}, "kubernetes", "leader_election.lease_duration_s", id="zero-lease"
        ),
    ],
)
def test_leader_election_settings_are_checked_at_load(settings, actuator, message):
    doc: dict[str, Any] = {
        "target": {"name": "vllm", "selector": {"app": "vllm"}},
        "metrics": {
            "source": "scrape",
            "scrape": {"static_targets": [{"name": "a", "url": "http://127.0.0.1:1/metrics"}]},
        },
        "policy": {"name": "static", "params": {"replicas": 2}},
        "actuator": {"kind": actuator, "emulate": {"url": "http://127.0.0.1:1"}},
        "leader_election": {"enabled": True, **settings},
    }
    with pytest.raises(ConfigError, match=r"llmscale\.yaml: ") as info:
        parse_config(doc, source="llmscale.yaml")
    assert message in str(info.value)


def test_leader_election_defaults_are_client_gos():
    doc = {
        "target": {"name": "vllm", "selector": {"app": "vllm"}},
        "policy": {"name": "static"},
        "metrics": {"source": "scrape"},
        "leader_election": {"enabled": True},
    }
    le = parse_config(doc).leader_election
    assert (le.lease_duration_s, le.renew_deadline_s, le.retry_period_s) == (15.0, 10.0, 2.0)
