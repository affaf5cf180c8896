"""Replay a workload's arrivals against an OpenAI-compatible endpoint, bounded in count and time.

Request i is sent at ``arrival_s[i]`` seconds after the replay starts (open
loop: a slow server does not slow the arrivals), unless a concurrency limit
holds it. Only requests arriving before ``max_duration_s`` and at most
``max_requests`` of them are planned; whatever is still in flight at
``max_duration_s`` is cancelled and counted as a time-out, so a replay never
runs longer than its bound (plus the cancellations).
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx
import numpy as np

from llmscale.clock import WallClock
from llmscale.errors import ConfigError, LlmscaleError
from llmscale.loadgen.client import Outcome, RequestRecord, request_body, send_one
from llmscale.workloads.model import Workload

__all__ = ["LoadgenError", "LoadgenResult", "base_url_of", "run_loadgen", "run_loadgen_async"]

_METRICS = ("ttft_s", "tpot_s", "e2e_s")
_QUANTILES = (50, 95, 99)


class LoadgenError(LlmscaleError):
    """The target cannot be used (unreachable, not OpenAI-compatible, no model)."""


@dataclass(frozen=True)
class LoadgenResult:
    """Every request's record plus what bounded the run."""

    target: str
    model: str
    chat: bool
    records: tuple[RequestRecord, ...]
    wall_s: float
    planned: int
    notes: tuple[str, ...] = field(default_factory=tuple)

    def count(self, outcome: str) -> int:
        return sum(1 for r in self.records if r.outcome == outcome)

    @property
    def ok(self) -> int:
        return self.count(Outcome.OK)

    @property
    def errors(self) -> int:
        return self.count(Outcome.ERROR)

    @property
    def timeouts(self) -> int:
        return self.count(Outcome.TIMEOUT)

    def values(self, metric: str) -> list[float]:
        """The measured ``ttft_s``, ``tpot_s`` or ``e2e_s`` of the successful requests."""
        if metric not in _METRICS:
            raise ValueError(f"metric {metric!r} must be one of {_METRICS}")
        out = []
        for r in self.records:
            v = getattr(r, metric)
            if r.outcome == Outcome.OK and v is not None:
                out.append(float(v))
        return out

    def percentiles(self, metric: str) -> dict[str, float | None]:
        """p50, p95, p99 and mean of ``metric`` in seconds (None when nothing was measured)."""
        v = self.values(metric)
        if not v:
            return {"p50": None, "p95": None, "p99": None, "mean": None, "n": 0}
        arr = np.asarray(v)
        q = np.percentile(arr, _QUANTILES)
        out: dict[str, float | None] = {f"p{p}": float(x) for p, x in zip(_QUANTILES, q, strict=True)}
        out["mean"] = float(arr.mean())
        out["n"] = float(arr.size)
        return out

    def as_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "model": self.model,
            "api": "chat" if self.chat else "completions",
            "planned": self.planned,
            "sent": len(self.records),
            "ok": self.ok,
            "errors": self.errors,
            "timeouts": self.timeouts,
            "wall_s": round(self.wall_s, 3),
            "latency_s": {m: self.percentiles(m) for m in _METRICS},
            "first_errors": [r.error for r in self.records if r.error][:5],
            "notes": list(self.notes),
        }


def base_url_of(target: str) -> str:
    """``http://host:port`` from a target URL that may end in ``/`` or ``/v1``."""
    parts = urlsplit(target)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"--target {target!r}: expected an http(s) URL such as http://127.0.0.1:8000")
    path = parts.path.rstrip("/")
    path = path.removesuffix("/v1")
    return f"{parts.scheme}://{parts.netloc}{path}"


async def _discover_model(http: httpx.AsyncClient, base: str) -> str:
    url = f"{base}/v1/models"
    try:
        resp = await http.get(url)
    except httpx.HTTPError as e:
        raise LoadgenError(f"cannot reach the target {url}: {type(e).__name__}: {e}") from e
    if resp.status_code != 200:
        raise LoadgenError(f"the target {url} answered HTTP {resp.status_code}: {resp.text[:200]}")
    try:
        models = resp.json()["data"]
        return str(models[0]["id"])
    except (ValueError, KeyError, IndexError, TypeError) as e:
        raise LoadgenError(f"the target {url} did not list a model (OpenAI /v1/models format)") from e


def _plan(workload: Workload, max_requests: int, max_duration_s: float) -> list[int]:
    arrivals = workload.arrival_s
    last = int(np.searchsorted(arrivals, max_duration_s, side="left"))
    return list(range(min(last, max_requests)))


async def run_loadgen_async(
    workload: Workload,
    target: str,
    *,
    max_requests: int,
    max_duration_s: float,
    concurrency_limit: int | None = None,
    chat: bool = False,
    model: str | None = None,
    request_timeout_s: float = 120.0,
    connect_timeout_s: float = 5.0,
) -> LoadgenResult:
    """The replay itself (see the module docstring); raises LoadgenError if the target is unusable."""
    if max_requests < 1:
        raise ConfigError(f"max_requests = {max_requests}, must be >= 1")
    if not max_duration_s > 0 or not math.isfinite(max_duration_s):
        raise ConfigError(f"max_duration_s = {max_duration_s}, must be a positive number of seconds")
    if concurrency_limit is not None and concurrency_limit < 1:
        raise ConfigError(f"concurrency_limit = {concurrency_limit}, must be >= 1")
    if request_timeout_s <= 0:
        raise ConfigError(f"request_timeout_s = {request_timeout_s}, must be > 0")
    base = base_url_of(target)
    clock = WallClock()
    # No pool limit unless asked: httpx's default of 100 connections would be a hidden concurrency cap.
    limits = httpx.Limits(max_connections=concurrency_limit, max_keepalive_connections=64)
    timeout = httpx.Timeout(request_timeout_s, connect=connect_timeout_s)
    async with httpx.AsyncClient(timeout=timeout, limits=limits) as http:
        served = model if model is not None else await _discover_model(http, base)
        url = f"{base}/v1/chat/completions" if chat else f"{base}/v1/completions"
        plan = _plan(workload, max_requests, max_duration_s)
        arrival = workload.arrival_s
        inp = workload.input_tokens
        out = workload.output_tokens
        sem = asyncio.Semaphore(concurrency_limit) if concurrency_limit else None
        start = clock.now_s()
        info: dict[asyncio.Task[RequestRecord], tuple[int, float]] = {}

        async def one(i: int, scheduled_s: float) -> RequestRecord:
            if sem is not None:
                await sem.acquire()
            try:
                sent_s = clock.now_s() - start
                body = request_body(served, int(inp[i]), int(out[i]), chat=chat)
                try:
                    return await asyncio.wait_for(
                        send_one(
                            http,
                            url,
                            body,
                            index=i,
                            scheduled_s=scheduled_s,
                            sent_s=sent_s,
                            input_tokens=int(inp[i]),
                            clock=clock,
                        ),
                        request_timeout_s,
                    )
                except TimeoutError:
                    return RequestRecord(
                        i,
                        scheduled_s,
                        sent_s,
                        int(inp[i]),
                        int(out[i]),
                        Outcome.TIMEOUT,
                        error=f"no complete answer within {request_timeout_s} s",
                    )
            finally:
                if sem is not None:
                    sem.release()

        for i in plan:
            delay = start + float(arrival[i]) - clock.now_s()
            if delay > 0:
                await asyncio.sleep(delay)
            task = asyncio.create_task(one(i, float(arrival[i])))
            info[task] = (i, float(arrival[i]))
        remaining = max(0.0, start + max_duration_s - clock.now_s())
        done: set[asyncio.Task[RequestRecord]] = set()
        pending: set[asyncio.Task[RequestRecord]] = set()
        if info:
            done, pending = await asyncio.wait(list(info), timeout=remaining)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        wall_s = clock.now_s() - start
    records = [t.result() for t in done]
    for task in pending:
        i, scheduled_s = info[task]
        records.append(
            RequestRecord(
                i,
                scheduled_s,
                scheduled_s,
                int(inp[i]),
                int(out[i]),
                Outcome.TIMEOUT,
                error=f"still running at --max-duration-s {max_duration_s}",
            )
        )
    records.sort(key=lambda r: r.index)
    notes = []
    if len(plan) < workload.num_requests:
        notes.append(f"replayed {len(plan)} of {workload.num_requests} requests (bounded by count and time)")
    return LoadgenResult(base, served, chat, tuple(records), wall_s, len(plan), tuple(notes))


def run_loadgen(workload: Workload, target: str, **kwargs: Any) -> LoadgenResult:
    """Blocking :func:`run_loadgen_async` (its own event loop); same keyword arguments."""
    return asyncio.run(run_loadgen_async(workload, target, **kwargs))
