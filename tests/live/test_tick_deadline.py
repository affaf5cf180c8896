"""Issue 19: a tick that hangs is abandoned, cannot act late, shows on /healthz, and stop ends run.

A page that sent the `slo` policy into a minutes-long computation left the controller with no
decision, SIGTERM ignored and /healthz 200. Here the tick blocks in its source (an observe that
waits until the test releases it), which stands for anything a tick can hang on. Time is a
ManualClock for both the controller's clock and the timer the deadline is measured with, so the
test decides when the deadline passes; it waits only for conditions, each with a bound.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from pathlib import Path

from live_fakes import FakeCluster, FollowingSource, static_run

from llmscale.clock import ManualClock
from llmscale.controller.decision_log import DecisionLog
from llmscale.controller.live import LiveController
from llmscale.controller.server import ControllerMetrics, ControllerServer
from llmscale.types import Mode, Observation
from support.wait import wait_for

TICK_S = 15.0


class BlockingSource:
    """Observes like FollowingSource once ``release`` is set; until then the tick hangs."""

    def __init__(self, cluster: FakeCluster) -> None:
        self.inner = FollowingSource(cluster)
        self.entered = threading.Event()
        self.release = threading.Event()

    def observe(self, now_s: float) -> Observation:
        self.entered.set()
        self.release.wait(60.0)
        return self.inner.observe(now_s)


def _controller(
    tmp_path: Path, source: object, cluster: FakeCluster, tick_s: float = TICK_S
) -> tuple[LiveController, ManualClock]:
    timer = ManualClock(0.0)
    c = LiveController(
        source=source,  # type: ignore[arg-type]
        cluster=cluster,
        primary=static_run(4),
        mode=Mode.APPLY,
        target="llm/llama",
        metrics=ControllerMetrics("llm/llama", "scrape"),
        tick_s=tick_s,
        clock=ManualClock(1000.0),
        decision_log=DecisionLog(tmp_path / "decisions.jsonl"),
        timer=timer,
    )
    c.tick_deadline_s = 5.0
    return c, timer


def _lines(tmp_path: Path) -> list[dict[str, object]]:
    path = tmp_path / "decisions.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def test_a_tick_past_its_deadline_is_abandoned_recorded_and_cannot_scale_late(tmp_path: Path) -> None:
    cluster = FakeCluster(2)
    source = BlockingSource(cluster)
    c, timer = _controller(tmp_path, source, cluster)
    stop = threading.Event()
    ran: list[int] = []
    loop = threading.Thread(target=lambda: ran.append(c.run(stop, max_ticks=1)))
    loop.start()
    assert source.entered.wait(10.0)
    timer.advance_to(4.0)  # within the deadline: the loop waits
    assert not _joined(loop, 0.3)
    timer.advance_to(5.5)  # past it: abandoned, recorded, the loop goes on (here: max_ticks 1)
    assert _joined(loop, 10.0) and ran == [1]
    assert c.failed_ticks == 1 and "deadline" in (c.last_failure or "")
    [line] = _lines(tmp_path)
    assert "abandoned" in str(line["error"])
    # The abandoned tick wakes up later and decides 4: its scale is refused and recorded.
    source.release.set()
    worker = c.cluster.abandoned  # type: ignore[attr-defined]
    worker.join(10.0)
    assert not worker.is_alive()
    assert cluster.calls == [] and cluster.spec_replicas == 2
    late = [ln for ln in _lines(tmp_path) if ln.get("actuation_error")]
    assert late and "abandoned" in str(late[0]["actuation_error"])


def test_no_tick_starts_while_an_abandoned_one_runs_and_each_interval_is_recorded(tmp_path: Path) -> None:
    cluster = FakeCluster(2)
    source = BlockingSource(cluster)
    # run() sleeps until the next tick in real seconds: a short interval keeps those sleeps short.
    c, timer = _controller(tmp_path, source, cluster, tick_s=0.2)
    stop = threading.Event()
    loop = threading.Thread(target=lambda: c.run(stop, max_ticks=3))
    loop.start()
    assert source.entered.wait(10.0)
    timer.advance_to(6.0)
    wait_for("the first tick abandoned", lambda: c.failed_ticks == 1, every_s=0.01)
    for k in (2, 3):  # the next intervals come due (the controller's clock) while it still hangs
        c.clock.advance_to(1000.0 + (k - 1) * 0.2)  # type: ignore[attr-defined]
        wait_for(f"interval {k} recorded as failed", lambda k=k: c.failed_ticks == k, every_s=0.01)
    assert _joined(loop, 10.0)
    assert [("is still running" in str(ln["error"])) for ln in _lines(tmp_path)] == [False, True, True]
    source.release.set()


def test_stop_ends_run_while_the_tick_hangs(tmp_path: Path) -> None:
    cluster = FakeCluster(2)
    source = BlockingSource(cluster)
    c, _ = _controller(tmp_path, source, cluster)
    stop = threading.Event()
    loop = threading.Thread(target=lambda: c.run(stop))
    loop.start()
    assert source.entered.wait(10.0)
    stop.set()  # what SIGTERM's handler does
    assert _joined(loop, 1.0)  # polled every 0.1 s
    source.release.set()


def _joined(t: threading.Thread, timeout_s: float) -> bool:
    t.join(timeout_s)
    return not t.is_alive()


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def test_healthz_turns_unhealthy_when_no_tick_decides_for_ten_intervals(tmp_path: Path) -> None:
    cluster = FakeCluster(2)
    source = BlockingSource(cluster)
    c, _ = _controller(tmp_path, source, cluster)
    stop = threading.Event()
    with ControllerServer("127.0.0.1", 0, c.metrics, c.ready, c.healthy) as server:
        host, port = server.address
        url = f"http://{host}:{port}/healthz"
        assert _get(url) == 200  # starting: healthy
        loop = threading.Thread(target=lambda: c.run(stop))
        loop.start()
        assert source.entered.wait(10.0)
        c.clock.advance_to(1000.0 + 9 * TICK_S)  # type: ignore[attr-defined]
        assert _get(url) == 200  # 9 intervals without a decision: still within the limit
        c.clock.advance_to(1000.0 + 10 * TICK_S + 1)  # type: ignore[attr-defined]
        assert _get(url) == 503
        stop.set()
        assert _joined(loop, 2.0)
    source.release.set()


def test_a_healthy_loop_stays_healthy(tmp_path: Path) -> None:
    cluster = FakeCluster(2)
    c, _ = _controller(tmp_path, FollowingSource(cluster), cluster)
    stop = threading.Event()
    assert c.run(stop, max_ticks=1) == 1
    assert c.failed_ticks == 0 and cluster.spec_replicas == 4 and c.healthy()
