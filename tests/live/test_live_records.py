"""Every tick leaves a record, and a tick acts only after its record and its state are written.

Found from outside: an unwritable ``decision_log.path`` made every tick "failed" while the
controller still scaled (4 -> 1, no record, exit 0); failed ticks left no line at all; the
unknown-replicas gauge kept the last good tick's value through an outage.
"""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from live_fakes import (
    LOADED,
    FakeCluster,
    FakeSource,
    FollowingSource,
    ReasonError,
    controller,
    sample_value,
    static_run,
)

from llmscale.controller.decision_log import DecisionLog
from llmscale.errors import ActuationError, ConfigError
from llmscale.types import Mode


class Journal:
    """One list the log, the store and the cluster append to, so a test can read their order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []


class JournalStream(io.StringIO):
    def __init__(self, journal: Journal, *, fail: bool = False) -> None:
        super().__init__()
        self.journal = journal
        self.fail = fail

    def write(self, text: str) -> int:
        if self.fail:
            raise OSError(28, "No space left on device")
        self.journal.events.append(("log", json.loads(text)))
        return super().write(text)


class JournalStore:
    def __init__(self, journal: Journal, *, fail_after: int | None = None) -> None:
        self.journal = journal
        self.doc: dict[str, Any] | None = None
        self.fail_after = fail_after  # saves that succeed before the store breaks

    def load(self) -> dict[str, Any] | None:
        return self.doc

    def save(self, doc: dict[str, Any]) -> None:
        if self.fail_after is not None:
            if self.fail_after == 0:
                raise ActuationError("state store: connection refused")
            self.fail_after -= 1
        self.doc = json.loads(json.dumps(doc))
        self.journal.events.append(("state", self.doc))


class JournalCluster(FakeCluster):
    def __init__(self, n: int, journal: Journal, **kw: Any) -> None:
        super().__init__(n, **kw)
        self.journal = journal

    def scale_to(self, n: int, now_s: float, *, drain_until_idle: bool = False) -> None:
        self.journal.events.append(("scale", n))
        super().scale_to(n, now_s, drain_until_idle=drain_until_idle)


def _setup(spec: int = 4, proposal: int = 1, *, log_fails: bool = False, store_fails_after: int | None = None,
           scale_fails: bool = False):  # fmt: skip
    journal = Journal()
    fail = ReasonError("apiserver said 503", "server_error") if scale_fails else None
    cluster = JournalCluster(spec, journal, fail=fail)
    stream = JournalStream(journal, fail=log_fails)
    store = JournalStore(journal, fail_after=store_fails_after)
    c = controller(
        FollowingSource(cluster),
        cluster,
        primary=static_run(proposal),
        log=DecisionLog("x.jsonl", stream=stream),
        store=store,
    )
    c.start()
    journal.events.clear()  # the start-up write-back of the state is not what these tests read
    return c, cluster, journal, stream


def test_a_scaling_tick_writes_its_record_then_its_state_then_scales():
    c, cluster, journal, _ = _setup(4, 1)
    entry = c.tick(1000.0)
    assert entry is not None and entry.record.applied and cluster.spec_replicas == 1
    kinds = [k for k, _ in journal.events]
    assert kinds == ["state", "log", "scale"], kinds
    state = journal.events[0][1]
    # The saved state is the one the scale leads to: its clock, its decision.
    assert state["guard_state"]["last_change_s"] == 1000.0 and state["last_decision"]["final"] == 1
    line = journal.events[1][1]
    assert line["applied"] is True and line["desired"] == 1 and line["error"] is None


def test_a_tick_whose_record_cannot_be_written_does_not_scale():
    c, cluster, journal, stream = _setup(4, 1)
    stream.fail = True
    assert c.tick(1000.0) is None
    assert cluster.calls == [] and cluster.spec_replicas == 4
    assert c.last_failure is not None and "No space left" in c.last_failure
    # The state saved ahead of the scale was put back: no cooldown for a scale that never was.
    kinds = [k for k, _ in journal.events]
    assert kinds == ["state", "state"], kinds
    assert journal.events[-1][1]["last_decision"] is None
    assert sample_value(c.metrics, "llmscale_tick_errors_total") == 1
    # The log works again: the next tick records and scales.
    stream.fail = False
    entry = c.tick(1015.0)
    assert entry is not None and entry.record.applied and cluster.calls == [(1, 1015.0)]


def test_a_tick_whose_state_cannot_be_saved_does_not_scale_and_says_why():
    c, cluster, journal, _ = _setup(4, 1, store_fails_after=1)  # the start-up write passes
    assert c.tick(1000.0) is None
    assert cluster.calls == []
    ((kind, line),) = journal.events
    assert kind == "log" and line["error"].startswith("ActuationError: state store: connection refused")
    assert line["applied"] is False and line["desired"] is None


def test_a_failed_scale_is_a_second_line_of_the_same_tick_and_the_saved_state_is_put_back():
    c, _, journal, _ = _setup(4, 6, scale_fails=True)
    entry = c.tick(1000.0)
    assert entry is not None and not entry.record.applied
    assert entry.actuation_error == {"reason": "server_error", "message": "apiserver said 503"}
    kinds = [k for k, _ in journal.events]
    assert kinds == ["state", "log", "scale", "state", "log"], kinds
    first, second = journal.events[1][1], journal.events[4][1]
    assert first["trace_id"] == second["trace_id"]
    assert first["applied"] is True and second["applied"] is False
    assert second["actuation_error"]["reason"] == "server_error"
    assert (
        journal.events[3][1]["last_decision"] is None
        and journal.events[3][1]["guard_state"]["last_up_s"] is None
    )
    assert c.last_failure is not None and "server_error" in c.last_failure


def test_a_failed_tick_writes_a_record_with_its_error_and_every_replica_unknown():
    class Down(FakeCluster):
        down = False

        def replicas_view(self):
            if self.down:
                raise ActuationError("emulate admin API GET http://127.0.0.1:1/admin/replicas: refused")
            return super().replicas_view()

    out = io.StringIO()
    cluster = Down(3)
    c = controller(FakeSource({f"r{i}": LOADED for i in range(3)}), cluster, log=DecisionLog("-", stream=out),
                   primary=static_run(3))  # fmt: skip
    assert c.tick(0.0) is not None
    assert sample_value(c.metrics, "llmscale_unknown_replicas") == 0
    cluster.down = True
    assert c.tick(15.0) is None
    lines = [json.loads(x) for x in out.getvalue().splitlines()]
    assert len(lines) == 2
    failed = lines[1]
    assert failed["error"].startswith("ActuationError: emulate admin API GET")
    assert failed["desired"] is None and failed["applied"] is False and failed["time_s"] == 15.0
    assert failed["trace_id"] and failed["trace_id"] != lines[0]["trace_id"]
    # The gauge says what the controller knows during the outage: 3 replicas, none seen.
    assert failed["unknown_replicas"] == 3
    assert sample_value(c.metrics, "llmscale_unknown_replicas") == 3
    assert lines[0]["error"] is None


@pytest.mark.parametrize("where", ["missing-dir/d.jsonl", "."], ids=["parent-missing", "a-directory"])
def test_start_refuses_an_unwritable_decision_log(tmp_path, where):
    # (A read-only directory would do too, but not for root, which these tests may run as.)
    c = controller(FakeSource({"r0": LOADED}), FakeCluster(1), log=DecisionLog(tmp_path / where))
    c.config_name = "llmscale.yaml"
    with pytest.raises(ConfigError, match=r"^llmscale.yaml: decision_log.path: cannot append to "):
        c.start()


def test_start_refuses_a_state_store_it_cannot_write_when_it_acts():
    journal = Journal()
    store = JournalStore(journal, fail_after=0)
    c = controller(FakeSource({"r0": LOADED}), FakeCluster(1), store=store)
    with pytest.raises(
        ConfigError, match="state: cannot save the controller state: state store: connection refused"
    ):
        c.start()
    # A dry run never writes the state, so it does not need to.
    controller(FakeSource({"r0": LOADED}), FakeCluster(1), store=store, mode=Mode.DRY_RUN).start()
