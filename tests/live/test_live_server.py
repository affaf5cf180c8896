"""The controller's own endpoints: every contract metric on /metrics, /healthz, /readyz."""

from __future__ import annotations

import io
import json
import urllib.error
import urllib.request

from live_fakes import FakeCluster, FollowingSource, controller, static_run
from prometheus_client.parser import text_string_to_metric_families

from llmscale.clock import ManualClock
from llmscale.controller.decision_log import DecisionLog
from llmscale.controller.server import CONTRACT_METRICS, ControllerServer
from llmscale.types import Mode


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_endpoints_and_every_contract_metric():
    clock = ManualClock(1000.0)
    cluster = FakeCluster(2)
    c = controller(
        FollowingSource(cluster),
        cluster,
        mode=Mode.SHADOW,
        primary=static_run(3),
        shadow=static_run(4),
        clock=clock,
    )
    with ControllerServer("127.0.0.1", 0, c.metrics, c.ready) as server:
        host, port = server.address
        base = f"http://{host}:{port}"
        assert _get(base + "/healthz")[0] == 200
        assert _get(base + "/readyz")[0] == 503  # no tick yet
        c.tick(clock.now_s())
        assert _get(base + "/readyz")[0] == 200
        clock.advance_to(1000.0 + 3 * c.tick_s)  # three intervals without a tick: not ready
        assert _get(base + "/readyz")[0] == 503
        code, text = _get(base + "/metrics")
        assert code == 200
        assert _get(base + "/nope")[0] == 404
    samples = {s.name: s for f in text_string_to_metric_families(text) for s in f.samples}
    names = {f.name for f in text_string_to_metric_families(text)}
    for name in CONTRACT_METRICS:
        # The parser names counter families without _total and histograms by their base name.
        assert name in samples or name.removesuffix("_total") in names, name
    phases = {
        s.labels["phase"]
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "llmscale_current_replicas"
    }
    assert phases == {"node_pending", "pending", "loading", "warmup", "ready", "draining"}
    assert samples["llmscale_desired_replicas"].value == 3
    assert samples["llmscale_last_tick_timestamp_seconds"].value == 1000.0
    signal_names = {
        s.labels["signal"]
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "llmscale_signal_value"
    }
    assert "running" in signal_names


def test_server_stops_cleanly_and_frees_its_port():
    cluster = FakeCluster(1)
    c = controller(FollowingSource(cluster), cluster)
    server = ControllerServer("127.0.0.1", 0, c.metrics, c.ready)
    server.start()
    host, port = server.address
    server.stop()
    again = ControllerServer(host, port, c.metrics, c.ready)
    again.start()  # the port is free again
    again.stop()


def test_decision_log_lines_are_json_with_trace_and_version(tmp_path):
    path = tmp_path / "decisions.jsonl"
    log = DecisionLog(path)
    cluster = FakeCluster(2)
    c = controller(FollowingSource(cluster), cluster, primary=static_run(3), log=log)
    for t in (1700000000.0, 1700000015.0):
        c.tick(t)
    log.close()
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert len(lines) == 2
    assert lines[0]["trace_id"] != lines[1]["trace_id"] and len(lines[0]["trace_id"]) == 32
    assert lines[0]["policy_version"] == lines[1]["policy_version"]
    assert lines[0]["policy_version"].startswith("static:") and "@llmscale-" in lines[0]["policy_version"]
    assert lines[0]["ts"] == "2023-11-14T22:13:20.000Z" and lines[0]["time_s"] == 1700000000.0
    first = lines[0]
    assert (
        first["mode"] == "apply"
        and first["desired_before_guards"] == 3
        and first["desired"] == 3
        and first["applied"]
    )
    assert first["inputs"] == {"replicas": 3.0} and first["rule"] == "fixed"
    assert first["replicas"]["spec"] == 2 and first["actuation_error"] is None and first["shadow"] is None


def test_decision_log_to_a_stream_writes_one_line_per_tick():
    out = io.StringIO()
    cluster = FakeCluster(2)
    c = controller(FollowingSource(cluster), cluster, log=DecisionLog("-", stream=out))
    c.tick(0.0)
    c.tick(15.0)
    assert len(out.getvalue().splitlines()) == 2
