"""A hostile Prometheus (or whatever answers at its address) against the live PrometheusSource.

tests/fuzz/test_prometheus_answers.py fuzzes the shape of answers; this file keeps the attacks that
found defects and a sample of the others, each served by a real HTTP server on 127.0.0.1
(``support/answer_server.py``) between two good ticks (docs/hostile-servers.md):

* an answer of millions of tiny series is refused before it is parsed: parsed, 2.2 million
  one-point series in 63 MiB took the process to 1.35 GB, past the controller's 512Mi;
* ``status: success`` with partial data: a replica whose ``up`` is 1 but whose series no answer
  carries is unknown, as a scraped page with no read series is, never a replica with no load;
* a server that answers one query twice: the answer nobody asked for never answers the next
  query (with connections kept, every later query on that connection read the answer to the one
  before it);
* HTML error pages, a 503, a warning, a result of another type, NaN strings, numbers past a
  double, 100,000 nested brackets: ``observe`` never raises, and the next good tick reads the
  fleet again.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import tracemalloc
from typing import Any
from urllib.parse import parse_qs, urlsplit

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


@pytest.mark.parametrize("over", [0, 1], ids=["at-the-limit", "one-past"])
def test_the_value_limit_counts_the_bytes_that_open_values(over: int) -> None:
    # One series whose label holds commas: counted as values (the count is an upper bound, read
    # from the bytes before parsing), cheap to parse. At the limit it is read; one more is refused.
    shell = vector({"a": "1"}).replace(b'"pod": "a"', b'"pod": "a", "filler": "%s"')
    base = shell.count(b",") + shell.count(b"[") + shell.count(b"{")
    body = shell.replace(b"%s", b"," * (MAX_ANSWER_VALUES - base + over))
    if over:
        with pytest.raises(PrometheusMalformed, match="JSON values"):
            parse_answer(200, body, server="http://p", query="up")
    else:
        assert len(parse_answer(200, body, server="http://p", query="up").series) == 1


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


class DoubleAnswer:
    """A Prometheus stand-in on 127.0.0.1 (its own loop thread) that answers each query for the
    waiting queue twice: its answer (3), then 50 ms later a stale one (999) nobody asked for."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="double-answer", daemon=True)
        self.port = 0
        self._server: asyncio.Server | None = None

    @staticmethod
    def _answer(body: bytes) -> bytes:
        head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        return head.encode() + body

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
                params = parse_qs(urlsplit(head.split(" ", 2)[1]).query)
                query, t = params.get("query", [""])[0], float(params.get("time", [T])[0])
                waiting = "num_requests_waiting" in query
                if query.startswith("timestamp("):
                    body = vector({"a": str(t - 1)}, t)
                elif query == "up":
                    body = vector({"a": "1"}, t)
                elif waiting:
                    body = vector({"a": "3"}, t)
                elif "num_requests_running" in query:
                    body = vector({"a": "1"}, t)
                else:
                    body = vector({}, t)
                writer.write(self._answer(body))
                await writer.drain()
                if waiting:
                    await asyncio.sleep(0.05)
                    writer.write(self._answer(vector({"a": "999"}, t)))
                    await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _stop(self) -> None:
        assert self._server is not None
        self._server.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=5.0)

    def __enter__(self) -> DoubleAnswer:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10.0)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self.loop).result(10.0)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10.0)
        self.loop.close()


def test_an_answer_nobody_asked_for_never_answers_another_query() -> None:
    # With connections kept, the stale 999 reached the next query sent on that connection, and the
    # real answer of each query then answered the one after it, for as long as the connection
    # lived: bucket queries read a queue's vector ("bucket series with le = None"), "up" read
    # another query's answer and the replica went missing.
    with DoubleAnswer() as prom, PrometheusSource(f"http://127.0.0.1:{prom.port}", dcgm=False) as src:
        for tick in range(6):
            obs = src.observe(15.0 * tick)
            assert [s.replica for s in obs.replicas] == ["a"]
            a = obs.replicas[0]
            assert a.ok and a.values["vllm:num_requests_waiting"] == 3, (tick, src.last_errors)
            assert not src.last_errors, (tick, src.last_errors)
            time.sleep(0.1)
