"""HTTP for the emulated fleet: a front door, one listener per replica, the admin API.

The front door routes through the simulator's own router (least outstanding)
and serves the OpenAI API plus the admin API of
docs/notes/live-controller-contracts.md. Each replica gets its own listener
from the moment its container exists (Loading) until it is gone: the OpenAI
API answers 503 until it is Ready (and again while it drains), ``/metrics``
answers throughout. One asyncio task drives the simulator: it runs the fleet
to the present, wakes the handlers whose requests produced tokens, opens and
closes replica listeners as phases change, and sleeps until the next thing
that can change (at most ``tick_s`` while tokens stream).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from llmscale.emulate.config import EmulateConfig
from llmscale.emulate.engine import Emulator, Flight, Outcome
from llmscale.emulate.metrics import ReplicaCollector, render_metrics
from llmscale.emulate.openai_api import (
    ApiError,
    ParsedRequest,
    chunk_object,
    error_object,
    filler_text,
    final_object,
    models_object,
    new_id,
    parse_request,
    unix_time,
    usage_chunk_object,
)
from llmscale.errors import ConfigError
from llmscale.types import Phase

__all__ = ["EmulateServer", "serve"]

#: How long stopping waits for open connections before closing them, s.
_SHUTDOWN_S = 2.0
#: Ports tried above the front door before giving up on finding a free one.
_PORT_TRIES = 2000


@dataclass(frozen=True)
class _Endpoint:
    server: EmulateServer
    replica: str | None  # None: the front door


_ENDPOINT = web.AppKey("endpoint", _Endpoint)


class _Listener:
    """One replica's own HTTP server. The socket is bound at once, so its port is known at once."""

    def __init__(self, name: str, sock: socket.socket, app: web.Application, collector: ReplicaCollector):
        self.name = name
        self.sock = sock
        self.port = int(sock.getsockname()[1])
        self.collector = collector
        self.runner = web.AppRunner(app, access_log=None, shutdown_timeout=_SHUTDOWN_S)

    async def open(self) -> None:
        await self.runner.setup()
        await web.SockSite(self.runner, self.sock).start()

    async def close(self) -> None:
        await self.runner.cleanup()
        self.sock.close()


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


def _json_error(e: ApiError) -> web.Response:
    return web.json_response(error_object(str(e), e.kind, e.status, e.param), status=e.status)


def _sse(obj: Any) -> str:
    return f"data: {json.dumps(obj, separators=(',', ':'))}\n\n"


# HTTP status and message for a request that ended without completing.
_FAILED = {
    Outcome.TIMED_OUT: (504, "TimeoutError", "the request waited the emulated timeout without a first token"),
    Outcome.KILLED: (503, "ServiceUnavailableError", "the replica was stopped while serving the request"),
    Outcome.SHUTDOWN: (503, "ServiceUnavailableError", "the emulator is shutting down"),
}


class EmulateServer:
    """The emulated fleet on HTTP. ``await start()``, then ``await stop()``; one event loop."""

    def __init__(self, cfg: EmulateConfig) -> None:
        from llmscale.perf import get_gpu, get_model

        self.cfg = cfg
        self.emu = Emulator(cfg)
        model = get_model(cfg.model)
        self.served_model = cfg.served_model_name or model.hf_id
        self.accepted_models = (self.served_model, model.name, model.hf_id, *model.aliases)
        self._gpu_model = get_gpu(cfg.gpu).name
        self._listeners: dict[str, _Listener] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._front: web.AppRunner | None = None
        self._front_sock: socket.socket | None = None
        self._driver: asyncio.Task[None] | None = None
        self.front_port = 0

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Bind the front door and the initial replicas' listeners, start the engine loop."""
        try:
            self._front_sock = _bind(self.cfg.host, self.cfg.port)
        except OSError as e:
            raise ConfigError(f"cannot listen on {self.cfg.host}:{self.cfg.port}: {e.strerror}") from e
        self.front_port = int(self._front_sock.getsockname()[1])
        self._front = web.AppRunner(self._app(None), access_log=None, shutdown_timeout=_SHUTDOWN_S)
        await self._front.setup()
        await web.SockSite(self._front, self._front_sock).start()
        self.emu.start()
        self.emu.advance()
        self._reconcile()
        await self._settle()
        self._driver = asyncio.create_task(self._drive())

    async def stop(self) -> None:
        """Stop the loop, end every open request with an error, close every listener."""
        if self._driver is not None:
            self._driver.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._driver
            self._driver = None
        self.emu.close_all()
        await asyncio.sleep(0)  # let the woken handlers write their last bytes
        await self._settle()
        for listener in list(self._listeners.values()):
            await listener.close()
        self._listeners.clear()
        if self._front is not None:
            await self._front.cleanup()
            self._front = None
        if self._front_sock is not None:
            self._front_sock.close()
            self._front_sock = None

    @property
    def base_url(self) -> str:
        host = f"[{self.cfg.host}]" if ":" in self.cfg.host else self.cfg.host
        return f"http://{host}:{self.front_port}"

    def replica_ports(self) -> dict[str, int]:
        return {name: lst.port for name, lst in self._listeners.items()}

    async def _settle(self) -> None:
        """Wait for listeners being opened or closed (tests and stop want them done)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def _drive(self) -> None:
        emu = self.emu
        while True:
            now = emu.advance()
            self._reconcile()
            emu.wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(emu.wake.wait(), emu.wait_s(now))

    # ------------------------------------------------------------ listeners

    def _reconcile(self) -> None:
        """Open a listener for every replica past Pending; close those of replicas gone."""
        live = {r.name: r for r in self.emu.fleet.replicas}
        for name, r in live.items():
            if r.phase >= Phase.LOADING and name not in self._listeners:
                self._open(name)
        for name in [n for n in self._listeners if n not in live]:
            self._spawn(self._listeners.pop(name).close())

    def _open(self, name: str) -> None:
        replica = self.emu.replica(name)
        assert replica is not None
        sock = self._bind_replica()
        collector = ReplicaCollector(
            self.emu.fleet, replica, self.served_model, self._gpu_model, lambda: self.emu.fleet.now
        )
        listener = _Listener(name, sock, self._app(name), collector)
        self._listeners[name] = listener
        self._spawn(listener.open())

    def _bind_replica(self) -> socket.socket:
        host = self.cfg.host
        if self.cfg.port == 0:
            return _bind(host, 0)
        taken = {lst.port for lst in self._listeners.values()} | {self.front_port}
        port = self.front_port
        for _ in range(_PORT_TRIES):
            port += 1
            if port > 65535:
                break
            if port in taken:
                continue
            with contextlib.suppress(OSError):
                return _bind(host, port)
        raise ConfigError(f"no free port above {self.front_port} on {host} for a new replica")

    def _spawn(self, coro: Any) -> None:
        task: asyncio.Task[None] = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ----------------------------------------------------------------- apps

    def _app(self, replica: str | None) -> web.Application:
        app = web.Application()
        app[_ENDPOINT] = _Endpoint(self, replica)
        app.router.add_post("/v1/completions", _completions)
        app.router.add_post("/v1/chat/completions", _chat_completions)
        app.router.add_get("/v1/models", _models)
        app.router.add_get("/health", _health)
        if replica is None:
            app.router.add_get("/admin/replicas", _admin_replicas)
            app.router.add_post("/admin/scale", _admin_scale)
            app.router.add_get("/admin/targets", _admin_targets)
        else:
            app.router.add_get("/metrics", _metrics)
        return app

    def admin_document(self) -> dict[str, Any]:
        """``/admin/replicas``: the scale spec and every replica not gone, times in emulator seconds."""
        ports = self.replica_ports()
        return {
            "spec_replicas": self.emu.spec_replicas,
            "now_s": round(self.emu.fleet.now, 6),
            "replicas": [
                {
                    "name": r.name,
                    "phase": r.phase.label,
                    "port": ports.get(r.name),
                    "created_s": round(r.created_s, 6),
                    "since_s": round(r.since_s, 6),
                }
                for r in self.emu.replicas()
            ],
        }

    def targets_document(self) -> list[dict[str, Any]]:
        """``/admin/targets``: Prometheus http_sd groups, one per replica with a listener."""
        host = f"[{self.cfg.host}]" if ":" in self.cfg.host else self.cfg.host
        ports = self.replica_ports()
        return [
            {"targets": [f"{host}:{ports[r.name]}"], "labels": {"pod": r.name, "phase": r.phase.label}}
            for r in self.emu.replicas()
            if r.name in ports
        ]


# ------------------------------------------------------------------- handlers


def _endpoint(request: web.Request) -> _Endpoint:
    return request.app[_ENDPOINT]


def _not_ready(ep: _Endpoint) -> ApiError | None:
    if ep.replica is None:
        return None
    phase = ep.server.emu.phase_of(ep.replica)
    if phase == Phase.READY:
        return None
    return ApiError(503, f"replica {ep.replica} is {phase.label}, not ready", "ServiceUnavailableError")


async def _completions(request: web.Request) -> web.StreamResponse:
    return await _openai(request, chat=False)


async def _chat_completions(request: web.Request) -> web.StreamResponse:
    return await _openai(request, chat=True)


async def _openai(request: web.Request, *, chat: bool) -> web.StreamResponse:
    ep = _endpoint(request)
    srv = ep.server
    emu = srv.emu
    emu.advance()
    try:
        refusal = _not_ready(ep)
        if refusal is not None:
            raise refusal
        try:
            body = await request.json()
        except ValueError as e:
            raise ApiError(400, f"the request body is not JSON: {e}") from e
        p = parse_request(
            body, chat=chat, served=srv.accepted_models, default_max_tokens=srv.cfg.default_max_tokens
        )
        refusal = _not_ready(ep)  # the replica may have changed phase while the body was read
        if refusal is not None:
            raise refusal
    except ApiError as e:
        return _json_error(e)
    flight = emu.submit(p.input_tokens, p.max_tokens, ep.replica)
    if flight.outcome == Outcome.REJECTED:
        limit = emu.max_model_len
        return _json_error(
            ApiError(
                400,
                f"This model's maximum context length is {limit} tokens. However, you requested "
                f"{p.input_tokens + p.max_tokens} tokens ({p.input_tokens} in the messages, "
                f"{p.max_tokens} in the completion).",
            )
        )
    if p.stream:
        return await _stream(request, p, flight)
    while flight.outcome is None:
        await flight.changed.wait()
        flight.changed.clear()
    headers = {"x-llmscale-replica": flight.replica_name or ""}
    if flight.outcome == Outcome.COMPLETED:
        obj = final_object(p, new_id(chat), unix_time(), p.max_tokens)
        return web.json_response(obj, headers=headers)
    status, kind, message = _FAILED.get(flight.outcome, _FAILED[Outcome.KILLED])
    return _json_error(ApiError(status, message, kind))


async def _stream(request: web.Request, p: ParsedRequest, flight: Flight) -> web.StreamResponse:
    """Server-sent events, one chunk per token, written as the simulator produces them."""
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    rid, created = new_id(p.chat), unix_time()
    sent = 0
    try:
        await resp.prepare(request)
        while True:
            await flight.changed.wait()
            flight.changed.clear()
            n = min(flight.emitted, p.max_tokens)
            if n > sent:
                out = []
                for i in range(sent, n):
                    finish = "length" if i == p.max_tokens - 1 else None
                    text = filler_text(i, i + 1)
                    out.append(_sse(chunk_object(p, rid, created, text, first=i == 0, finish=finish)))
                sent = n
                await resp.write("".join(out).encode())
            if flight.outcome is not None:
                break
        if flight.outcome == Outcome.COMPLETED:
            if p.include_usage:
                await resp.write(_sse(usage_chunk_object(p, rid, created, sent)).encode())
        else:
            status, kind, message = _FAILED.get(flight.outcome, _FAILED[Outcome.KILLED])
            await resp.write(_sse(error_object(message, kind, status)).encode())
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
    except (ConnectionError, asyncio.CancelledError):
        # The client went away. The simulated request runs on (the simulator has no abort).
        pass
    return resp


async def _models(request: web.Request) -> web.Response:
    ep = _endpoint(request)
    refusal = _not_ready(ep)
    if refusal is not None:
        return _json_error(refusal)
    return web.json_response(models_object(ep.server.served_model, ep.server.emu.max_model_len))


async def _health(request: web.Request) -> web.Response:
    ep = _endpoint(request)
    ep.server.emu.advance()
    if ep.replica is None:
        ok = bool(ep.server.emu.fleet.ready)
    else:
        ok = ep.server.emu.phase_of(ep.replica) == Phase.READY
    return web.Response(status=200 if ok else 503)


async def _metrics(request: web.Request) -> web.Response:
    ep = _endpoint(request)
    srv = ep.server
    srv.emu.advance()
    assert ep.replica is not None
    listener = srv._listeners.get(ep.replica)
    if listener is None:
        return web.Response(status=404, text="replica is gone\n")
    return web.Response(
        body=render_metrics(listener.collector), headers={"Content-Type": CONTENT_TYPE_LATEST}
    )


async def _present(srv: EmulateServer) -> None:
    """Bring the fleet and the listeners to now, so every replica past Pending has its port."""
    srv.emu.advance()
    srv._reconcile()
    await srv._settle()


async def _admin_replicas(request: web.Request) -> web.Response:
    srv = _endpoint(request).server
    await _present(srv)
    return web.json_response(srv.admin_document())


async def _admin_scale(request: web.Request) -> web.Response:
    srv = _endpoint(request).server
    try:
        body = await request.json()
    except ValueError:
        return _json_error(ApiError(400, "the request body is not JSON"))
    n = body.get("replicas") if isinstance(body, dict) else None
    drain = body.get("drain_until_idle", False) if isinstance(body, dict) else False
    if isinstance(n, bool) or not isinstance(n, int) or not isinstance(drain, bool):
        return _json_error(ApiError(400, 'expected {"replicas": <int >= 0>, "drain_until_idle": <bool>}'))
    try:
        srv.emu.scale_to(n, drain_until_idle=drain)
    except ConfigError as e:
        return _json_error(ApiError(400, str(e)))
    await _present(srv)
    return web.json_response(srv.admin_document())


async def _admin_targets(request: web.Request) -> web.Response:
    srv = _endpoint(request).server
    await _present(srv)
    return web.json_response(srv.targets_document())


# --------------------------------------------------------------------- running


async def serve(
    cfg: EmulateConfig,
    *,
    max_seconds: float | None = None,
    on_ready: Callable[[EmulateServer], None] | None = None,
    stop: asyncio.Event | None = None,
    handle_signals: bool = False,
) -> None:
    """Run the emulated fleet until ``stop`` is set, SIGINT/SIGTERM (with ``handle_signals``) or
    ``max_seconds`` of wall time; always closes every listener on the way out."""
    stop = stop or asyncio.Event()
    server = EmulateServer(cfg)
    loop = asyncio.get_running_loop()
    if handle_signals:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
    try:
        await server.start()
        if on_ready is not None:
            on_ready(server)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), max_seconds)
    finally:
        await server.stop()
        if handle_signals:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
