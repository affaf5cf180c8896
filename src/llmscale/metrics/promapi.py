"""Asking Prometheus's HTTP API: one GET with a total deadline, and an answer checked against its shape.

Every command and source that queries Prometheus (the live :class:`~llmscale.metrics.prometheus.
PrometheusSource`, ``analyze``/``diagnose``/``calibrate --prometheus``, ``node-check``) goes through
:func:`fetch`, so each of them gets the same three guarantees:

* **A total deadline per request.** httpx's own time-outs bound each read, not the request: a
  server that sends one byte a second never trips a 5 s read time-out, and a 2 KiB answer then
  takes 34 minutes. :func:`fetch` wraps connect, send and every read in one ``asyncio.timeout``,
  so at 1 byte/s the request ends at its deadline (tests/fuzz/test_prometheus_answers.py's
  slow-drip server checks it, with the server's own count of open connections).
* **No abandoned connection.** A request that times out or is cancelled closes its response, and
  httpx then drops a connection whose answer was not read to the end (it cannot be reused); the
  clients of the CLI readers are closed when the command's queries end.
* **The documented shape, or a typed error.** ``{"status": "success", "data": {"resultType":
  "vector"|"matrix"|"scalar"|"string", "result": ...}, "warnings": [...]}``; a sample is
  ``[<unix time>, "<value>"]`` (the value a string, so ``"NaN"`` and ``"+Inf"`` travel); an error
  answer is ``{"status": "error", "errorType": ..., "error": ...}``. Anything else raises
  :class:`PrometheusMalformed` naming the server, the query and the first place that is wrong.

The errors are one line each and derive from :class:`~llmscale.errors.LlmscaleError` with exit
code 2, so a CLI command prints them instead of a traceback. The live source maps them onto its
contract: :class:`PrometheusUnavailable` and :class:`PrometheusMalformed` mark every replica
unknown for the tick (held, never zero load), :class:`PrometheusRefused` leaves that one query's
metric out.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from llmscale.errors import LlmscaleError

__all__ = [
    "MAX_ANSWER_BYTES",
    "MAX_ANSWER_VALUES",
    "Answer",
    "PrometheusError",
    "PrometheusMalformed",
    "PrometheusRefused",
    "PrometheusUnavailable",
    "Series",
    "fetch",
    "parse_answer",
    "range_series",
    "run_sync",
]

#: An answer larger than this is not one llmscale asked for: a range query at its 11,000-step
#: limit returns ~30 bytes a point, 0.33 MB a series; the live tick's largest answer (TTFT buckets
#: of 500 pods x 15 buckets) is ~3 MB.
MAX_ANSWER_BYTES = 64 * 1024 * 1024

#: JSON values an answer may hold, counted before it is parsed (every ",", "[" and "{" of the
#: body: an upper bound on its values less one). Parsed, a JSON value costs ~50-100 bytes of
#: Python objects against its 2-6 bytes of text: a 63 MiB answer of 2.2 million one-point series
#: (``{"metric":{},"value":[1,"1"]}``) took the process to 1.35 GB and 17 s of CPU, past the
#: controller's 512Mi. Two million values peak near 200 MB; the live tick's largest answer (TTFT
#: buckets of 5,000 pods x 15 buckets, ~10 values a series) holds ~750,000.
MAX_ANSWER_VALUES = 2_000_000

_RESULT_TYPES = ("vector", "matrix", "scalar", "string")

T = TypeVar("T")


def _one_line(text: object, limit: int = 300) -> str:
    """``text`` on one line, at most ``limit`` characters (a server's message may hold newlines)."""
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 3] + "..."


class PrometheusError(LlmscaleError):
    """Prometheus at ``server`` gave no usable answer to ``query``; the message names both."""

    exit_code = 2

    def __init__(self, server: str, query: str, why: str) -> None:
        self.server = server
        self.query = query
        self.why = _one_line(why)
        super().__init__(f"prometheus {server}: query {_one_line(query, 400)!r}: {self.why}")


class PrometheusUnavailable(PrometheusError):
    """No answer: the connection failed, the deadline passed, or Prometheus answered 5xx."""


class PrometheusMalformed(PrometheusError):
    """An answer that is not of the HTTP API's documented shape (a proxy, another server, a bug)."""


class PrometheusRefused(PrometheusError):
    """Prometheus refused the query (an error answer, 4xx), or its well-formed result cannot serve
    this caller (another result type, several series where one is needed, native histograms)."""


@dataclass(frozen=True, slots=True)
class Series:
    """One series of a result: its labels and its (unix time s, value) samples (NaN, +-Inf kept)."""

    labels: Mapping[str, str]
    points: tuple[tuple[float, float], ...]


@dataclass(frozen=True, slots=True)
class Answer:
    """A validated ``status: success`` answer.

    ``series``: a vector's series hold one point each, a matrix's any number, a scalar is one
    unlabelled series of one point; a string result has no series and its text in ``text``.
    """

    server: str
    query: str
    result_type: str
    series: tuple[Series, ...]
    warnings: tuple[str, ...] = ()
    text: str | None = None

    def expect(self, *types: str) -> Answer:
        """This answer when its result type is one of ``types``; else :class:`PrometheusRefused`."""
        if self.result_type not in types:
            need = " or ".join(types)
            raise PrometheusRefused(self.server, self.query, f"result type {self.result_type!r}, need {need}")
        return self


# -- validation -------------------------------------------------------------------------------


def _short(value: object) -> str:
    return _one_line(json.dumps(value) if not isinstance(value, str | bytes) else repr(value), 80)


def _time(t: object, bad: Callable[[str], PrometheusMalformed], where: str) -> float:
    if isinstance(t, bool) or not isinstance(t, int | float):
        raise bad(f"{where}: sample time {_short(t)}, must be a number (unix seconds)")
    try:
        x = float(t)  # an integer of 400 digits overflows here
    except OverflowError:
        x = math.inf
    if not (math.isfinite(x) and x >= 0):
        raise bad(f"{where}: sample time {_short(t)}, must be a finite number >= 0")
    return x


def _value(v: object, bad: Callable[[str], PrometheusMalformed], where: str) -> float:
    # The API sends values as strings ("NaN", "+Inf", "1.5e3"); a plain JSON number is unambiguous
    # too, and some Prometheus-compatible servers send one, so it is read as well.
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            raise bad(f"{where}: sample value {_short(v)} is not a number") from None
    if isinstance(v, int | float) and not isinstance(v, bool):
        try:
            return float(v)
        except OverflowError:
            return math.inf if v > 0 else -math.inf
    raise bad(f"{where}: sample value {_short(v)}, must be a string holding a number")


def _sample(item: object, bad: Callable[[str], PrometheusMalformed], where: str) -> tuple[float, float]:
    if not isinstance(item, list) or len(item) != 2:
        raise bad(f'{where}: a sample is [<unix time>, "<value>"], got {_short(item)}')
    return _time(item[0], bad, where), _value(item[1], bad, where)


def _labels(item: Mapping[str, Any], bad: Callable[[str], PrometheusMalformed], where: str) -> dict[str, str]:
    metric = item.get("metric", {})
    if not isinstance(metric, dict):
        raise bad(f"{where}: metric = {_short(metric)}, must be an object of label names to strings")
    for k, v in metric.items():
        if not isinstance(v, str):
            raise bad(f"{where}: label {k!r} = {_short(v)}, must be a string")
    return metric


def parse_answer(status: int, body: bytes, *, server: str, query: str) -> Answer:
    """The answer in ``body`` (HTTP ``status``), validated; raises a :class:`PrometheusError`.

    5xx: :class:`PrometheusUnavailable` (Prometheus's own time-out and overload answer 503);
    an error answer otherwise: :class:`PrometheusRefused` with its ``errorType`` and ``error``;
    anything not of the documented shape: :class:`PrometheusMalformed`.
    """

    def bad(why: str) -> PrometheusMalformed:
        return PrometheusMalformed(server, query, f"not a Prometheus API answer: {why}")

    # Three C-level scans (~40 ms for 64 MiB) before json.loads builds an object per value.
    values = body.count(b",") + body.count(b"[") + body.count(b"{")
    if values > MAX_ANSWER_VALUES:
        if status >= 500:
            raise PrometheusUnavailable(server, query, f"HTTP {status}")
        raise bad(f"HTTP {status}, ~{values} JSON values (limit {MAX_ANSWER_VALUES}): not parsed")
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
        if status >= 500:
            raise PrometheusUnavailable(server, query, f"HTTP {status}") from None
        raise bad(f"HTTP {status}, body is not JSON ({_one_line(e, 80)})") from None
    if not isinstance(doc, dict):
        if status >= 500:
            raise PrometheusUnavailable(server, query, f"HTTP {status}")
        raise bad(f"HTTP {status}, top level is a JSON {type(doc).__name__}, not an object")
    state = doc.get("status")
    if state == "error" or status >= 400:
        kind, text = doc.get("errorType"), doc.get("error")
        why = f"HTTP {status}"
        if isinstance(kind, str) and kind:
            why += f", {kind}"
        if isinstance(text, str) and text:
            why += f": {text}"
        if status >= 500:
            raise PrometheusUnavailable(server, query, why)
        if state != "error":
            raise bad(f"HTTP {status} with status = {_short(state)}")
        raise PrometheusRefused(server, query, why)
    if state != "success":
        raise bad(f'status = {_short(state)}, must be "success" or "error"')
    if not 200 <= status < 300:
        raise bad(f"HTTP {status} with status success")
    warnings: list[str] = []
    for key in ("warnings", "infos"):
        extra = doc.get(key)
        if extra is None:
            continue
        if not isinstance(extra, list) or not all(isinstance(w, str) for w in extra):
            raise bad(f"{key} = {_short(extra)}, must be a list of strings")
        warnings += [_one_line(w, 200) for w in extra]
    data = doc.get("data")
    if not isinstance(data, dict):
        raise bad(f"data = {_short(data)}, must be an object")
    kind = data.get("resultType")
    if kind not in _RESULT_TYPES:
        raise bad(f"data.resultType = {_short(kind)}, must be one of {', '.join(_RESULT_TYPES)}")
    result = data.get("result")
    where = "data.result"
    if kind in ("scalar", "string"):
        if not isinstance(result, list) or len(result) != 2:
            raise bad(f'{where}: a {kind} is [<unix time>, "<value>"], got {_short(result)}')
        t = _time(result[0], bad, where)
        if kind == "string":
            if not isinstance(result[1], str):
                raise bad(f"{where}: a string result's value {_short(result[1])} is not a string")
            return Answer(server, query, kind, (), tuple(warnings), text=result[1])
        return Answer(
            server, query, kind, (Series({}, ((t, _value(result[1], bad, where)),)),), tuple(warnings)
        )
    if not isinstance(result, list):
        raise bad(f"{where} = {_short(result)}, must be a list of series")
    series: list[Series] = []
    key = "value" if kind == "vector" else "values"
    for i, item in enumerate(result):
        at = f"{where}[{i}]"
        if not isinstance(item, dict):
            raise bad(f"{at} = {_short(item)}, must be an object")
        labels = _labels(item, bad, at)
        raw = item.get(key)
        if raw is None:
            if (item.get("histogram") or item.get("histograms")) is not None:
                raise PrometheusRefused(
                    server, query, f"{at}: native histogram samples; llmscale reads floats"
                )
            raise bad(f"{at}.{key} is missing or null")
        if kind == "vector":
            points: tuple[tuple[float, float], ...] = (_sample(raw, bad, f"{at}.value"),)
        else:
            if not isinstance(raw, list):
                raise bad(f"{at}.values = {_short(raw)}, must be a list of samples")
            points = tuple(_sample(p, bad, f"{at}.values[{j}]") for j, p in enumerate(raw))
        series.append(Series(labels, points))
    return Answer(server, query, kind, tuple(series), tuple(warnings))


# -- one request --------------------------------------------------------------------------------


async def fetch(
    client: Any,
    server: str,
    endpoint: str,
    params: Mapping[str, str],
    *,
    query: str,
    timeout_s: float,
) -> Answer:
    """GET ``server + endpoint`` with ``params`` on an ``httpx.AsyncClient``; the validated answer.

    The whole request -- waiting for a pooled connection, connecting, sending, every read -- ends
    within ``timeout_s``, else :class:`PrometheusUnavailable`. A cancelled or timed-out request's
    response is closed on the way out (httpx drops its connection: half an answer is unusable).
    """
    import httpx

    url = server + endpoint
    body = bytearray()
    try:
        async with asyncio.timeout(timeout_s):
            async with client.stream("GET", url, params=dict(params)) as resp:
                status = resp.status_code
                async for chunk in resp.aiter_bytes():
                    body += chunk
                    if len(body) > MAX_ANSWER_BYTES:
                        raise PrometheusMalformed(
                            server, query, f"answer larger than {MAX_ANSWER_BYTES // 2**20} MiB"
                        )
    except TimeoutError:
        raise PrometheusUnavailable(
            server, query, f"no whole answer within {timeout_s:g} s ({len(body)} bytes arrived)"
        ) from None
    except httpx.HTTPError as e:
        raise PrometheusUnavailable(server, query, f"{type(e).__name__}: {e}") from e
    except OSError as e:  # below httpx's own mapping (rare): still unreachable, not a traceback
        raise PrometheusUnavailable(server, query, f"{type(e).__name__}: {e}") from e
    return parse_answer(status, bytes(body), server=server, query=query)


def new_client(timeout_s: float, headers: Mapping[str, str] | None = None, connections: int = 64) -> Any:
    """An ``httpx.AsyncClient`` for :func:`fetch` (its own per-phase time-outs are a backstop).

    ``connections`` bounds the requests open at once (a live tick asks ~31 queries at once: vLLM
    with DCGM, 15 values, 5 histograms x 3, the liveness time). No connection is kept for a later
    request: h11 keeps whatever arrives after an answer for the next request on that connection,
    so a server or proxy that answered one query twice (the second 50 ms late) had every later
    query on that connection read the answer to the one before it, tick after tick (a TTFT bucket
    query read a queue's vector; tests/fuzz/test_hostile_prometheus.py). A new connection per
    query costs a connect; the ~31 of a tick against Prometheus's fake in the tests cost no
    measurable CPU next to the answers' parsing.
    """
    import httpx

    return httpx.AsyncClient(
        timeout=httpx.Timeout(timeout_s),
        headers=dict(headers or {}),
        limits=httpx.Limits(max_connections=connections, max_keepalive_connections=0),
        follow_redirects=False,
    )


def run_sync(make: Callable[[], Awaitable[T]]) -> T:
    """Run ``make()`` to completion from synchronous code, even when this thread runs a loop
    (a test or a notebook): then on a fresh loop in a helper thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:

        async def main() -> T:
            return await make()

        return asyncio.run(main())
    box: dict[str, Any] = {}

    def worker() -> None:
        try:
            box["value"] = run_sync(make)
        except BaseException as e:
            box["error"] = e

    thread = threading.Thread(target=worker, name="llmscale-prometheus-sync", daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


async def _gather_or_cancel(calls: Sequence[Awaitable[T]]) -> list[T]:
    """Every result, or the first error with the other requests cancelled (no wave waits out a
    dead server's deadline behind the first one that hit it)."""
    tasks = [asyncio.ensure_future(c) for c in calls]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


#: concurrent requests of one CLI read: the 14 range queries of ``analyze`` in 4 waves, well
#: under Prometheus's ``--query.max-concurrency`` (20)
_CLI_CONNECTIONS = 4


def range_series(
    server: str,
    queries: Mapping[str, str],
    start_s: float,
    end_s: float,
    step_s: float,
    *,
    timeout_s: float = 30.0,
) -> dict[str, dict[float, float]]:
    """Range queries that each return at most one series: name -> {unix time: value}.

    For the offline readers (``analyze``, ``diagnose``, ``calibrate --prometheus``). NaN and
    +-Inf values are left out (``histogram_quantile`` answers +Inf when the quantile falls in the
    last bucket: no finite estimate, so no number at that step). Each request ends within
    ``timeout_s``; the first error cancels the rest and is raised (a :class:`PrometheusError`,
    exit code 2). The client and its connections are closed before this returns.
    """
    server = server.rstrip("/")

    failed = asyncio.Event()

    async def one(client: Any, gate: asyncio.Semaphore, name: str, expr: str) -> dict[float, float]:
        params = {"query": expr, "start": f"{start_s:.3f}", "end": f"{end_s:.3f}", "step": f"{step_s:g}"}
        async with gate:
            if failed.is_set():  # woken by a failed request's exit: start nothing new (its error
                return {}  # reaches the gather, which then cancels the rest and raises it)
            try:
                answer = await fetch(
                    client, server, "/api/v1/query_range", params, query=expr, timeout_s=timeout_s
                )
            except BaseException:
                failed.set()
                raise
        answer.expect("matrix")
        if len(answer.series) > 1:
            raise PrometheusRefused(
                server, expr, f"{len(answer.series)} series, expected one (aggregate it, e.g. sum(...))"
            )
        out: dict[float, float] = {}
        # a step is start + k * step_s; 1 ms of slack for the 3 decimals sent
        lo, hi = start_s - 1e-3, end_s + 1e-3
        for s in answer.series:
            for t, v in s.points:
                if not lo <= t <= hi:
                    raise PrometheusMalformed(
                        server, expr, f"sample time {t} outside the range asked ({start_s}..{end_s})"
                    )
                if math.isfinite(v):
                    out[t] = v
        return out

    async def all_of() -> dict[str, dict[float, float]]:
        gate = asyncio.Semaphore(_CLI_CONNECTIONS)
        async with new_client(timeout_s, connections=_CLI_CONNECTIONS) as client:
            results = await _gather_or_cancel([one(client, gate, n, q) for n, q in queries.items()])
        return dict(zip(queries, results, strict=True))

    return run_sync(all_of)
