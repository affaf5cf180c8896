"""Reading decision logs of both writers, and refusing bad ones with the file and line."""

from __future__ import annotations

import json

import pytest
from _logs import backtest_line, write_log

from llmscale.analyze.log import read_decision_log
from llmscale.errors import ConfigError


def test_backtest_log_keeps_one_policy_and_skips_the_oracle(tmp_path):
    lines = [
        {
            "time_s": 60.0,
            "policy": "oracle",
            "desired": 4,
            "rule": "smallest-meeting-slo",
            "inputs": {"requests": 9},
        },
        backtest_line(15.0, spec=2, final=2, observed={"ttft_p99_s": 0.2}, inputs={"arrival_rps": 10.0}),
        backtest_line(30.0, spec=2, final=3, observed={"ttft_p99_s": 0.4}, inputs={"arrival_rps": 12.0}),
        backtest_line(15.0, spec=5, final=5, observed={"ttft_p99_s": 0.1}, policy="static"),
    ]
    p = write_log(tmp_path / "d.jsonl", lines)
    t = read_decision_log(p)
    assert t.policy == "slo" and len(t) == 2
    assert t.quantity("p99_s").tolist() == [0.2, 0.4]
    assert t.resolved["load_rps"] == "arrival_rps"  # the policy's own input, preferred to the proxy
    assert t.final.tolist() == [2.0, 3.0] and t.spec.tolist() == [2.0, 2.0]
    assert len(read_decision_log(p, policy="static")) == 1
    with pytest.raises(ConfigError, match=r"no tick of policy .hpa.*slo, static"):
        read_decision_log(p, policy="hpa")


def test_live_log_keeps_the_last_line_of_a_trace_and_skips_failed_ticks(tmp_path):
    base = {"policy": "slo", "replicas": {"spec": 2, "ready": 2}, "error": None}
    lines = [
        {
            **base,
            "ts_unix": 100.0,
            "trace_id": "a",
            "final": 3,
            "signals": {"ttft_p99_s": 1.0},
            "applied": True,
        },
        {
            **base,
            "ts_unix": 115.0,
            "trace_id": "b",
            "final": None,
            "signals": None,
            "error": "NoDataError: x",
        },
        # the scale of tick "a" failed: its second line replaces the first
        {
            **base,
            "ts_unix": 100.0,
            "trace_id": "a",
            "final": 3,
            "signals": {"ttft_p99_s": 1.0},
            "applied": False,
        },
        {**base, "ts_unix": 130.0, "trace_id": "c", "final": 2, "signals": {"ttft_p99_s": 0.5}},
    ]
    p = tmp_path / "live.jsonl"
    p.write_text("".join(json.dumps(x) + "\n" for x in lines))
    t = read_decision_log(p)
    assert t.time_s.tolist() == [100.0, 130.0] and t.quantity("p99_s").tolist() == [1.0, 0.5]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            '{"time_s": 1, "inputs": {}}\nnot json\n', r"d.jsonl:2, column 1: not JSON", id="bad-json"
        ),
        pytest.param("[1, 2]\n", r"d.jsonl:1: a decision line must be a JSON object", id="not-object"),
        pytest.param(
            '{"inputs": {"a": 1}}\n', r"d.jsonl:1: field time_s \(or ts_unix\) = None", id="no-time"
        ),
        pytest.param('{"time_s": "x", "inputs": {}}\n', r"d.jsonl:1: field time_s", id="time-string"),
        pytest.param(
            '{"time_s": 1, "inputs": [1]}\n',
            r"d.jsonl:1: field inputs/signals must be an object",
            id="inputs",
        ),
        pytest.param(
            '{"time_s": 1, "inputs": {}, "replicas": 3}\n', r"d.jsonl:1: field replicas", id="replicas"
        ),
        pytest.param("\n\n", r"no controller tick with numbers", id="empty"),
    ],
)
def test_bad_logs_name_file_line_and_field(tmp_path, text, message):
    p = tmp_path / "d.jsonl"
    p.write_text(text)
    with pytest.raises(ConfigError, match=message):
        read_decision_log(p)


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read the decision log"):
        read_decision_log(tmp_path / "nope.jsonl")
