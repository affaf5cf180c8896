"""A hostile Prometheus (or whatever answers at its address) against the live PrometheusSource.

tests/fuzz/test_prometheus_answers.py fuzzes the shape of answers; this file keeps the attacks that
found defects and a sample of the others, each served by a real HTTP server on 127.0.0.1
(``support/answer_server.py``) between two good ticks (docs/hostile-servers.md):

* an answer of millions of tiny series is refused before it is parsed: parsed, 2.2 million
  one-point series in 63 MiB took the process to 1.35 GB, past the controller's 512Mi;
* ``status: success`` with partial data: a replica whose ``up`` is 1 but whose series no answer
  carries is unknown, as a scraped page with no read series is, never a replica with no load;
* HTML error pages, a 503, a warning, a result of another type, NaN strings, numbers past a
  double, 100,000 nested brackets: ``observe`` never raises, and the next good tick reads the
  fleet again.
"""

from __future__ import annotations

import json
import tracemalloc
from typing import Any

import pytest

from llmscale.metrics.promapi import MAX_ANSWER_VALUES, PrometheusMalformed, parse_answer
from llmscale.metrics.prometheus import PrometheusSource
from support.answer_server import Reply, answer_server

T = 1100.0


def vector(points: dict[str, str], t: float = T) -> bytes:
    result = [{"metric": {"pod": k}, "value": [t, v]} for k, v in points.items()]
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()


def tiny_series(n: int) -> bytes:
    item = b'{"metric":{},"value":[1,"1"]}'
    return b'{"status":"success","data":{"resultType":"vector","result":[' + b",".join([item] * n) + b"]}}"


def test_an_answer_of_millions_of_tiny_series_is_refused_before_it_is_parsed() -> None:
    body = tiny_series(MAX_ANSWER_VALUES // 5)  # 6 values a series: past the limit, 11 MB
    tracemalloc.start()
    try:
        with pytest.raises(PrometheusMalformed, match="JSON values"):
            parse_answer(200, body, server="http://p", query="up")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # parsed, these 400,000 series took ~230 MB; refused, nothing is built
    assert peak < 1 << 20, f"{peak / 2**20:.0f} MiB to refuse an {len(body) / 2**20:.0f} MiB answer"


def test_an_answer_under_the_value_limit_is_still_read() -> None:
    n = MAX_ANSWER_VALUES // 7  # 6 values a series: under the limit
    assert len(parse_answer(200, tiny_series(n), server="http://p", query="up").series) == n


class Fleet:
    """Two replicas a and b, 3 requests waiting and 1 running each; ``attack`` replaces the answers
    it names."""

    def __init__(self) -> None:
        self.attack: dict[str, Reply] = {}

    def __call__(self, path: str, params: dict[str, str]) -> Reply:
        query = params.get("query", "")
        kind = (
            "timestamp"
            if query.startswith("timestamp(")
            else "up"
            if query == "up"
            else "waiting"
            if "num_requests_waiting" in query
            else "running"
            if "num_requests_running" in query
            else "other"
        )
        if kind in self.attack or "all" in self.attack:
            return self.attack.get(kind) or self.attack["all"]
        t = float(params.get("time") or T)
        if kind == "up":
            return Reply(vector({"a": "1", "b": "1"}, t))
        if kind == "timestamp":
            return Reply(vector({"a": str(t - 1), "b": str(t - 1)}, t))
        if kind == "waiting":
            return Reply(vector({"a": "3", "b": "3"}, t))
        if kind == "running":
            return Reply(vector({"a": "1", "b": "1"}, t))
        return Reply(vector({}, t))


def _doc(**fields: Any) -> bytes:
    return json.dumps({"status": "success", **fields}).encode()


HTML = b"<html><body><h1>502 Bad Gateway</h1></body></html>"

#: name -> (answers replaced, what the tick reads of a and b: "read" both known, else both unknown:
#: "held" for the whole tick, "unknown" each replica for its impossible values)
ATTACKS = {
    "html-200-to-every-query": ({"all": Reply(HTML)}, "held"),
    "html-502-to-every-query": ({"all": Reply(HTML, status=502)}, "held"),
    "503-overloaded": ({"all": Reply(b'{"status":"error","errorType":"unavailable"}', status=503)}, "held"),
    "waiting-answers-a-matrix": (
        {"waiting": Reply(_doc(data={"resultType": "matrix", "result": []}))},
        "read",  # a result of another type: that metric refused, the others read
    ),
    "waiting-nan-strings": ({"waiting": Reply(vector({"a": "NaN", "b": "NaN"}))}, "unknown"),
    "waiting-past-a-double": ({"waiting": Reply(vector({"a": "1e999", "b": "1e999"}))}, "unknown"),
    "waiting-with-a-warning": (
        {
            "waiting": Reply(
                _doc(
                    warnings=["PromQL info: partial"],
                    data={
                        "resultType": "vector",
                        "result": [{"metric": {"pod": p}, "value": [T, "3"]} for p in "ab"],
                    },
                )
            )
        },
        "read",
    ),
    "up-nested-100000-deep": ({"up": Reply(b"[" * 100_000 + b"]" * 100_000)}, "held"),
    "up-wrong-types": ({"up": Reply(_doc(data={"resultType": "vector", "result": [{"metric": 1}]}))}, "held"),
    "up-millions-of-series": ({"up": Reply(tiny_series(MAX_ANSWER_VALUES // 5))}, "held"),
    "waiting-empty-success": ({"waiting": Reply(vector({}))}, "read"),
}


@pytest.mark.parametrize(("replaced", "then"), [pytest.param(*v, id=k) for k, v in ATTACKS.items()])
def test_the_live_source_holds_and_recovers(replaced: dict[str, Reply], then: str) -> None:
    fleet = Fleet()
    with answer_server(fleet) as server:
        src = PrometheusSource(server.url, dcgm=False, timeout_s=2.0)
        try:
            assert all(s.ok for s in src.observe(0.0).replicas), src.last_errors
            fleet.attack = replaced
            obs = src.observe(15.0)  # never raises
            seen = {s.replica: s for s in obs.replicas}
            assert set(seen) == {"a", "b"}  # nobody forgotten, nobody invented
            if then == "read":
                assert all(s.ok for s in seen.values()), src.last_errors
            else:
                assert not any(s.ok for s in seen.values()), src.last_errors
                assert all(not s.values for s in seen.values())
            fleet.attack = {}
            again = src.observe(30.0)
            assert all(s.ok for s in again.replicas), src.last_errors
            assert all(s.values["vllm:num_requests_waiting"] == 3 for s in again.replicas)
        finally:
            src.close()


def test_a_replica_up_but_absent_from_every_answer_is_unknown_not_idle() -> None:
    # status success, partial data: b's up series came back, none of its metrics did. Read as known,
    # b stood for a replica with nothing waiting and nothing served.
    fleet = Fleet()
    with answer_server(fleet) as server:
        src = PrometheusSource(server.url, dcgm=False, timeout_s=2.0)
        try:
            fleet.attack = {"waiting": Reply(vector({"a": "3"})), "running": Reply(vector({"a": "1"}))}
            seen = {s.replica: s for s in src.observe(0.0).replicas}
            assert seen["a"].ok and seen["a"].values["vllm:num_requests_waiting"] == 3
            assert not seen["b"].ok and "no series llmscale reads" in src.last_errors["b"]
        finally:
            src.close()
