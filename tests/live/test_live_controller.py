"""LiveController ticks with explicit now_s over in-process fakes of the source and the cluster."""

from __future__ import annotations

import io
import json
import threading
from dataclasses import replace

import pytest
from live_fakes import (
    LOADED,
    PLAIN,
    FakeCluster,
    FakeSource,
    FollowingSource,
    ReasonError,
    controller,
    loaded_source,
    sample_value,
    static_run,
)

from llmscale.controller.decision_log import DecisionLog
from llmscale.controller.live import ClusterAlignedSource, actuation_reason
from llmscale.errors import ActuationError, ConfigError
from llmscale.types import Mode


def test_dry_run_never_scales():
    cluster = FakeCluster(2)
    c = controller(loaded_source(2), cluster, mode=Mode.DRY_RUN, primary=static_run(5))
    for t in (0.0, 15.0, 30.0):
        entry = c.tick(t)
        assert entry is not None
        assert entry.record.final == 5 and not entry.record.applied
    assert cluster.calls == []
    assert cluster.spec_replicas == 2


def test_apply_scales_when_the_guarded_decision_differs():
    cluster = FakeCluster(2)
    c = controller(loaded_source(2), cluster, primary=static_run(5))
    first = c.tick(0.0)
    assert first is not None and first.record.applied
    assert cluster.calls == [(5, 0.0)]
    second = c.tick(15.0)  # spec is 5 now: nothing to do
    assert second is not None and not second.record.applied
    assert cluster.calls == [(5, 0.0)]
    assert sample_value(c.metrics, "llmscale_scale_actions_total", {"direction": "up"}) == 1.0
    desired = {"target": "llm/llama", "policy": "static"}
    assert sample_value(c.metrics, "llmscale_desired_replicas", desired) == 5


def test_apply_respects_the_guards_cooldown():
    cluster = FakeCluster(2)
    guards = replace(PLAIN, cooldown_down_s=300.0)
    c = controller(FollowingSource(cluster), cluster, primary=static_run(5, guards))
    c.tick(0.0)
    c.primary = static_run(3, guards)  # the proposal drops 60 s after the scale-up
    entry = c.tick(60.0)
    assert entry is not None and entry.record.guard == "cooldown" and entry.record.final == 5
    assert cluster.calls == [(5, 0.0)]


def test_shadow_logs_both_and_only_the_primary_acts():
    cluster = FakeCluster(2)
    out = io.StringIO()
    c = controller(
        loaded_source(2),
        cluster,
        mode=Mode.SHADOW,
        primary=static_run(3),
        shadow=static_run(7),
        log=DecisionLog("-", stream=out),
    )
    c.tick(0.0)
    assert cluster.calls == [(3, 0.0)]
    line = json.loads(out.getvalue().splitlines()[0])
    assert line["mode"] == "shadow"
    assert line["desired"] == 3 and line["applied"] is True
    assert line["shadow"]["desired"] == 7 and line["shadow"]["policy"] == "static"
    assert line["shadow"]["policy_version"].startswith("static:")
    assert sample_value(c.metrics, "llmscale_shadow_desired_replicas", {"policy": "static"}) == 7


def test_shadow_with_a_dry_run_primary_touches_nothing():
    cluster = FakeCluster(2)
    c = controller(
        loaded_source(2),
        cluster,
        mode=Mode.SHADOW,
        primary=static_run(3),
        shadow=static_run(7),
        primary_acts=False,
    )
    entry = c.tick(0.0)
    assert entry is not None and entry.shadow is not None and entry.shadow.final == 7
    assert cluster.calls == []


def test_shadow_decides_on_the_same_signals_with_its_own_guard_state():
    cluster = FakeCluster(4)
    # The primary holds 4; the shadow wants 6 but must confirm over 2 ticks (its own guards).
    shadow = static_run(6, replace(PLAIN, confirm_up_ticks=2))
    c = controller(loaded_source(4), cluster, mode=Mode.SHADOW, primary=static_run(4), shadow=shadow)
    first = c.tick(0.0)
    second = c.tick(15.0)
    assert first is not None and first.shadow is not None and first.shadow.guard == "confirm"
    assert second is not None and second.shadow is not None and second.shadow.final == 6
    assert first.shadow.fleet == first.record.fleet
    assert cluster.calls == []


@pytest.mark.parametrize("hold_on_missing_data", [True, False], ids=["guard-holds", "guard-off-outage-holds"])
def test_total_metrics_outage_never_scales_down_and_is_visible(hold_on_missing_data):
    cluster = FakeCluster(4)
    guards = replace(PLAIN, hold_on_missing_data=hold_on_missing_data)
    source = FakeSource({f"r{i}": None for i in range(4)})  # every scrape failed
    c = controller(source, cluster, primary=static_run(1, guards))
    for t in (0.0, 15.0, 30.0):
        entry = c.tick(t)
        assert entry is not None
        assert entry.record.final == 4 and not entry.record.applied
        assert entry.unknown_replicas == 4 and entry.metrics_outage
        assert entry.as_json()["metrics_outage"] is True
    assert cluster.calls == []
    assert sample_value(c.metrics, "llmscale_unknown_replicas") == 4
    assert sample_value(c.metrics, "llmscale_scrape_errors_total", {"source": "scrape"}) == 12


def test_a_source_that_returns_nothing_reads_as_unknown_replicas():
    cluster = FakeCluster(3)
    c = controller(FakeSource({}), cluster, primary=static_run(1))
    entry = c.tick(0.0)
    assert entry is not None and entry.unknown_replicas == 3 and entry.record.final == 3
    assert cluster.calls == []


def test_one_unknown_replica_holds_scale_down_but_not_scale_up():
    cluster = FakeCluster(3)
    source = FakeSource({"r0": LOADED, "r1": LOADED, "r2": None})
    down = controller(source, cluster, primary=static_run(1))
    entry = down.tick(0.0)
    assert entry is not None and entry.record.guard == "hold-on-missing-data" and cluster.calls == []
    up = controller(source, cluster, primary=static_run(5))
    entry = up.tick(0.0)
    assert entry is not None and entry.record.applied and cluster.calls == [(5, 0.0)]


def test_an_actuation_error_is_counted_and_the_loop_survives():
    cluster = FakeCluster(2, fail=ReasonError("apiserver said 503", "server_error"))
    guards = replace(PLAIN, cooldown_up_s=600.0)
    c = controller(loaded_source(2), cluster, primary=static_run(5, guards))
    entry = c.tick(0.0)
    assert entry is not None and not entry.record.applied
    assert entry.actuation_error == {"reason": "server_error", "message": "apiserver said 503"}
    assert sample_value(c.metrics, "llmscale_actuation_errors_total", {"reason": "server_error"}) == 1
    # The failed scale-up started no cooldown: the next tick retries at once and succeeds.
    cluster.fail = None
    retry = c.tick(15.0)
    assert retry is not None and retry.record.applied and retry.record.guard is None
    assert cluster.calls == [(5, 0.0), (5, 15.0)]


def test_a_failing_tick_is_counted_and_the_next_one_runs():
    class Flaky(FakeSource):
        def observe(self, now_s):
            if self.calls == 0:
                self.calls += 1
                raise RuntimeError("a bug in a source")
            return super().observe(now_s)

    cluster = FakeCluster(2)
    c = controller(Flaky({"r0": LOADED, "r1": LOADED}), cluster, primary=static_run(3))
    assert c.tick(0.0) is None
    assert c.failed_ticks == 1 and sample_value(c.metrics, "llmscale_tick_errors_total") == 1
    entry = c.tick(15.0)
    assert entry is not None and entry.record.applied


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        pytest.param(ReasonError("x", "conflict"), "conflict", id="reason-attribute"),
        pytest.param(type("E", (ActuationError,), {"status": 409})("x"), "conflict", id="status-409"),
        pytest.param(type("E", (ActuationError,), {"status": 502})("x"), "server_error", id="status-5xx"),
        pytest.param(type("E", (ActuationError,), {"status": 403})("x"), "forbidden", id="status-403"),
        pytest.param(ActuationError("x"), "other", id="plain"),
    ],
)
def test_actuation_reason(error, reason):
    assert actuation_reason(error) == reason


def test_ownership_is_checked_before_the_first_actuation():
    class Owned(FakeCluster):
        def check_ownership(self) -> None:
            raise ConfigError("Deployment llm/llama is already scaled by HorizontalPodAutoscaler llama")

    cluster = Owned(2)
    with pytest.raises(ConfigError, match="HorizontalPodAutoscaler"):
        controller(loaded_source(2), cluster, primary=static_run(5)).start()
    assert cluster.calls == []
    # dry-run never acts, so it never asks
    controller(loaded_source(2), cluster, mode=Mode.DRY_RUN, primary=static_run(5)).start()


def test_cluster_view_is_the_authority_on_replicas():
    cluster = FakeCluster(3)
    # The source returns a stale series of a deleted pod and misses r2.
    source = FakeSource({"r0": LOADED, "r1": LOADED, "old-pod": LOADED})
    aligned = ClusterAlignedSource(source, cluster)
    obs = aligned.observe(0.0)
    assert [s.replica for s in obs.replicas] == ["r0", "r1", "r2"]
    assert [s.ok for s in obs.replicas] == [True, True, False]
    assert obs.fleet.spec_replicas == 3 and obs.fleet.ready == 3
    assert aligned.last_missing == 1


def test_run_stops_on_the_event_and_at_max_ticks():
    cluster = FakeCluster(2)
    c = controller(loaded_source(2), cluster, primary=static_run(2), tick_s=0.01)
    assert c.run(threading.Event(), max_ticks=3) == 3
    stop = threading.Event()
    stop.set()
    assert c.run(stop) == 0


def test_keda_scaler_gets_its_first_decision_even_when_it_equals_the_spec():
    # KEDA reads nothing until the controller publishes; a first decision equal to the
    # starting spec (2 -> 2) must still be published, or KEDA sees UNAVAILABLE.
    from llmscale.cluster.keda.server import KedaScaler

    scaler = KedaScaler("llama", "llm", initial_replicas=2)
    assert not scaler.has_decision
    c = controller(loaded_source(2), scaler, primary=static_run(2))
    entry = c.tick(0.0)
    assert entry is not None and not entry.record.applied  # no change of replicas...
    assert scaler.has_decision and scaler.spec_replicas == 2  # ...but the decision is served
    c.tick(15.0)
    assert scaler.spec_replicas == 2
