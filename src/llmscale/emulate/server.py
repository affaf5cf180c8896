"""HTTP for the emulated fleet: a front door, one listener per replica, the admin API.

The front door routes through the simulator's own router (least outstanding),
holds requests while no replica is ready and counts them on its own ``/metrics``
(activator.py), and serves the OpenAI API plus, when enabled, the admin API of
docs/notes/live-controller-contracts.md behind the checks of admin_guard.py
(off by default: ``/admin/*`` then answers 404). Each replica gets its own listener
from the moment its container exists (Loading) until it is gone: the OpenAI
API answers 503 until it is Ready (and again while it drains or sleeps), ``/metrics``
answers throughout; every endpoint also serves vLLM's ``/version``, ``/tokenize`` and
``/detokenize`` (ids need a tokenizer: ``--tokenizer``); errors take the body of the vLLM
release played (versions.py); with sleep mode it also serves vLLM's ``/sleep``, ``/wake_up`` and
``/is_sleeping`` (standby.py), and keeps its listener while asleep. One asyncio
task drives the simulator: it runs the fleet to the present, wakes the handlers
whose requests produced tokens, opens and closes replica listeners as phases
change, and sleeps until the next thing that can change (at most ``tick_s``
while tokens stream). A client that disconnects cancels its handler (aiohttp's
handler cancellation), which aborts its simulated request: its batch slot and KV
blocks are free at once, as in vLLM.
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

from llmscale.emulate.activator import ActivatorCollector, render_activator
from llmscale.emulate.admin_guard import admin_refusal, allowed_origins, read_admin_body
from llmscale.emulate.config import EmulateConfig
from llmscale.emulate.engine import Emulator, Flight, Outcome
from llmscale.emulate.metrics import CacheConfigInfo, ReplicaCollector, render_metrics
from llmscale.emulate.openai_api import (
    ApiError,
    ParsedRequest,
    chat_messages,
    chunk_object,
    final_object,
    logprobs_object,
    models_object,
    new_id,
    parse_request,
    unix_time,
    usage_chunk_object,
)
from llmscale.emulate.standby import add_sleep_routes, asleep, standby_state
from llmscale.emulate.tokens import load_token_counter, render_chat
from llmscale.emulate.versions import VllmVersion, parse_vllm_version
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
        self.runner = _runner(app)

    async def open(self) -> None:
        await self.runner.setup()
        await web.SockSite(self.runner, self.sock).start()

    async def close(self) -> None:
        await self.runner.cleanup()
        self.sock.close()


def _runner(app: web.Application) -> web.AppRunner:
    # handler_cancellation: a client that disconnects cancels its handler, which aborts its request.
    return web.AppRunner(app, access_log=None, shutdown_timeout=_SHUTDOWN_S, handler_cancellation=True)


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


def _json_error(e: ApiError, version: VllmVersion) -> web.Response:
    headers = {"WWW-Authenticate": "Bearer"} if e.status == 401 else None
    return web.json_response(
        version.error_body(str(e), e.kind, e.status, e.param), status=e.status, headers=headers
    )


def _error(request: web.Request, e: ApiError) -> web.Response:
    """``e`` in the error body of the release this endpoint's server plays."""
    return _json_error(e, _endpoint(request).server.version)


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
        self.tokens = load_token_counter(cfg.tokenizer)
        self.version = parse_vllm_version(cfg.vllm_version)
        model = get_model(cfg.model)
        self.served_model = cfg.served_model_name or model.hf_id
        # The served name first: a request without ``model`` gets it.
        self.accepted_models = (self.served_model, model.name, model.hf_id, *model.aliases)
        self._gpu_model = get_gpu(cfg.gpu).name
        fleet = self.emu.fleet
        self._cache_info = CacheConfigInfo(
            block_size=16,
            gpu_memory_utilization=fleet.config.gpu_memory_utilization,
            num_gpu_blocks=fleet.total_blocks,
            cache_dtype=cfg.kv_cache_dtype,
        )
        self._listeners: dict[str, _Listener] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._front: web.AppRunner | None = None
        self._front_sock: socket.socket | None = None
        self._driver: asyncio.Task[None] | None = None
        self.front_port = 0
        self.activator = ActivatorCollector(self.emu)

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Bind the front door and the initial replicas' listeners, start the engine loop."""
        try:
            self._front_sock = _bind(self.cfg.host, self.cfg.port)
        except OSError as e:
            raise ConfigError(f"cannot listen on {self.cfg.host}:{self.cfg.port}: {e.strerror}") from e
        self.front_port = int(self._front_sock.getsockname()[1])
        self._front = _runner(self._app(None))
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
        """Wait for listeners being opened or closed (tests and stop want them done).

        asyncio.wait, not gather: a handler cancelled while it waits here (its client left)
        must not cancel the listener tasks with it.
        """
        while self._tasks:
            await asyncio.wait(list(self._tasks))

    @property
    def admin_origins(self) -> frozenset[str]:
        """Origins the admin API accepts a browser request from (the front door's own)."""
        return allowed_origins(self.cfg.host, self.front_port)

    async def _drive(self) -> None:
        emu = self.emu
        loop = asyncio.get_running_loop()
        while True:
            now = emu.advance()
            self._reconcile()
            emu.wake.clear()
            # A timer sets the same event a submit or a scale sets. Not asyncio.wait_for: on
            # Python 3.11 a cancel that lands as its timeout fires (often, with the 0 s sleeps
            # of a fleet with a replica on its way) can leave it awaiting forever, and stop()
            # then never returns (seen: 2 of 8 runs of scale-up-then-stop).
            timer = loop.call_later(emu.wait_s(now), emu.wake.set)
            try:
                await emu.wake.wait()
            finally:
                timer.cancel()

    # ------------------------------------------------------------ listeners

    def _reconcile(self) -> None:
        """Open a listener for every replica past Pending; close those of replicas gone."""
        # Sleeping replicas keep their listener (vLLM's process is up): /is_sleeping, /wake_up, /metrics.
        live = {r.name: r for r in (*self.emu.fleet.replicas, *self.emu.fleet.sleeping)}
        for name, r in live.items():
            if r.phase >= Phase.LOADING and name not in self._listeners:
                self._open(name)
        for name in [n for n in self._listeners if n not in live]:
            self._spawn(self._listeners.pop(name).close())
            self.emu.forget_stats(name)

    def _open(self, name: str) -> None:
        replica = self.emu.replica(name)
        assert replica is not None
        sock = self._bind_replica()
        collector = ReplicaCollector(
            self.emu.fleet,
            replica,
            self.served_model,
            self._gpu_model,
            lambda: self.emu.fleet.now,
            stats=lambda: self.emu.stats_of(name),
            cache_info=self._cache_info,
            sleep_state=(lambda: asleep(self.emu, name)) if self.cfg.sleep_mode else None,
            version=self.version,
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
        admin = replica is None and self.cfg.admin_api
        app = web.Application(middlewares=[_admin_gate] if admin else [])
        app[_ENDPOINT] = _Endpoint(self, replica)
        app.router.add_post("/v1/completions", _completions)
        app.router.add_post("/v1/chat/completions", _chat_completions)
        app.router.add_get("/v1/models", _models)
        app.router.add_get("/health", _health)
        app.router.add_get("/version", _version)
        app.router.add_post("/tokenize", _tokenize)
        app.router.add_post("/detokenize", _detokenize)
        if replica is None:
            app.router.add_get("/metrics", _front_metrics)
        if admin:
            app.router.add_get("/admin/replicas", _admin_replicas)
            app.router.add_post("/admin/scale", _admin_scale)
            app.router.add_get("/admin/targets", _admin_targets)
        elif replica is None:
            app.router.add_route("*", "/admin{tail:.*}", _admin_off)
        else:
            app.router.add_get("/metrics", _metrics)
            if self.cfg.sleep_mode:
                # a /sleep waits for the replica's requests at most the drain grace (wall s)
                bound_s = self.cfg.grace_s / self.cfg.time_scale + 5.0
                add_sleep_routes(app, self.emu, replica, bound_s=bound_s)
        if admin and self.cfg.sleep_mode:
            app.router.add_post("/admin/standby", _admin_standby)
        return app

    def admin_document(self) -> dict[str, Any]:
        """``/admin/replicas``: the scale spec and every replica not gone, times in emulator seconds."""
        ports = self.replica_ports()
        return {
            "spec_replicas": self.emu.spec_replicas,
            **(standby_state(self.emu) if self.cfg.sleep_mode else {}),
            "now_s": round(self.emu.fleet.now, 6),
            "replicas": [
                {
                    "name": r.name,
                    "phase": r.phase.label,
                    "port": ports.get(r.name),
                    "created_s": round(r.created_s, 6),
                    "since_s": round(r.since_s, 6),
                    "max_num_seqs": r.max_num_seqs,
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
            body,
            chat=chat,
            served=srv.accepted_models,
            default_max_tokens=srv.cfg.default_max_tokens,
            counter=srv.tokens,
        )
        refusal = _not_ready(ep)  # the replica may have changed phase while the body was read
        if refusal is not None:
            raise refusal
        # vLLM refuses prompt + max_tokens beyond the context up front, whatever stop strings say.
        if p.input_tokens + p.max_tokens > emu.max_model_len:
            raise _too_long(p, emu.max_model_len)
    except ApiError as e:
        return _json_error(e, srv.version)
    flights = _submit(emu, p, ep.replica)
    if any(f.outcome == Outcome.REJECTED for f in flights):  # more KV blocks than the whole replica has
        for f in flights:
            emu.abort(f)
        return _json_error(_too_long(p, emu.max_model_len), srv.version)
    if p.stream:
        return await _stream(request, p, flights)
    changed = flights[0].changed
    try:
        while any(f.outcome is None for f in flights):
            await changed.wait()
            changed.clear()
    finally:
        for f in flights:
            if f.outcome is None:  # cancelled: the client went away while it waited
                emu.abort(f)
    headers = {"x-llmscale-replica": flights[0].replica_name or ""}
    failed = next((f for f in flights if f.outcome != Outcome.COMPLETED), None)
    if failed is None:
        obj = final_object(p, new_id(chat), unix_time())
        return web.json_response(obj, headers=headers)
    for f in flights:
        emu.abort(f)  # one sequence failed: vLLM fails the request, the others stop too
    status, kind, message = _FAILED.get(failed.outcome or "", _FAILED[Outcome.KILLED])
    return _json_error(ApiError(status, message, kind), srv.version)


def _submit(emu: Emulator, p: ParsedRequest, replica: str | None) -> list[Flight]:
    """The request's ``n`` sequences as simulated requests, sharing one wake-up event.

    The first is routed as any request; the others follow it to its replica when it has one
    that is ready (vLLM runs a request's n sequences in one engine), else they are routed too.
    The first sequence carries ``n`` for ``vllm:request_params_n`` (observed once a request).
    """
    changed = asyncio.Event()
    flights: list[Flight] = []
    for k in range(p.n):
        target = replica
        if k > 0 and target is None:
            first = flights[0].replica_name
            if first is not None and emu.phase_of(first) == Phase.READY:
                target = first
        flights.append(
            emu.submit(
                p.input_tokens,
                p.output.tokens,
                target,
                finish_reason=p.output.finish_reason,
                changed=changed,
                max_tokens_param=p.max_tokens_param,
                n_param=p.n if k == 0 else None,
            )
        )
    return flights


def _too_long(p: ParsedRequest, limit: int) -> ApiError:
    return ApiError(
        400,
        f"This model's maximum context length is {limit} tokens. However, you requested "
        f"{p.input_tokens + p.max_tokens} tokens ({p.input_tokens} in the messages, "
        f"{p.max_tokens} in the completion).",
    )


async def _stream(request: web.Request, p: ParsedRequest, flights: list[Flight]) -> web.StreamResponse:
    """Server-sent events, one chunk per token and choice, written as the simulator produces them.

    A token whose text is empty (past a stop string's start) sends no chunk, except the
    last one, which carries the finish reason. A client that goes away (a failed write, or
    the handler cancelled on a lost connection) aborts the request, every sequence of it.
    """
    srv = _endpoint(request).server
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    rid, created = new_id(p.chat), unix_time()
    last = p.output.tokens - 1
    sent = [0] * len(flights)
    changed = flights[0].changed
    try:
        await resp.prepare(request)
        while True:
            await changed.wait()
            changed.clear()
            out = []
            for index, flight in enumerate(flights):
                n = min(flight.emitted, p.output.tokens)
                for i in range(sent[index], n):
                    text = p.output.piece(i)
                    if text or i == last:
                        finish = p.output.finish_reason if i == last else None
                        lp = logprobs_object(p, i, i + 1, index)
                        chunk = chunk_object(
                            p, rid, created, text, first=i == 0, finish=finish, index=index, logprobs=lp
                        )
                        out.append(_sse(chunk))
                sent[index] = max(sent[index], n)
            if out:
                await resp.write("".join(out).encode())
            if all(f.outcome is not None for f in flights):
                break
            failed = next((f for f in flights if f.outcome not in (None, Outcome.COMPLETED)), None)
            if failed is not None:
                break
        failed = next((f for f in flights if f.outcome != Outcome.COMPLETED), None)
        if failed is None:
            if p.include_usage:
                await resp.write(_sse(usage_chunk_object(p, rid, created, sum(sent))).encode())
        else:
            status, kind, message = _FAILED.get(failed.outcome or "", _FAILED[Outcome.KILLED])
            await resp.write(_sse(srv.version.error_body(message, kind, status)).encode())
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
    except ConnectionError:
        pass  # the client went away: aborted below; nobody is left to answer
    finally:
        for flight in flights:
            if flight.outcome is None:
                srv.emu.abort(flight)
    return resp


async def _models(request: web.Request) -> web.Response:
    ep = _endpoint(request)
    refusal = _not_ready(ep)
    if refusal is not None:
        return _error(request, refusal)
    return web.json_response(models_object(ep.server.served_model, ep.server.emu.max_model_len))


async def _version(request: web.Request) -> web.Response:
    """vLLM's ``GET /version``: the release played."""
    return web.json_response({"version": _endpoint(request).server.version.text})


async def _token_body(request: web.Request) -> dict[str, Any]:
    """The JSON object of a /tokenize or /detokenize call, its model checked as the OpenAI API does."""
    srv = _endpoint(request).server
    try:
        body = await request.json()
    except ValueError as e:
        raise ApiError(400, f"the request body is not JSON: {e}") from e
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    model = body.get("model")
    if model is not None and model not in srv.accepted_models:
        raise ApiError(404, f"The model `{model}` does not exist.", "NotFoundError", "model")
    if srv.tokens.vocab_size is None:
        raise ApiError(
            400,
            "this emulator counts prompt tokens with an estimate and has no token ids; start it with "
            "--tokenizer PATH (a tokenizer.json) or --tokenizer builtin",
        )
    return body


async def _tokenize(request: web.Request) -> web.Response:
    """vLLM's ``POST /tokenize``: a ``prompt`` (special tokens added unless told not to) or chat
    ``messages`` (rendered through the chat template, as the chat API counts them)."""
    srv = _endpoint(request).server
    try:
        body = await _token_body(request)
        if "messages" in body:
            messages = chat_messages(body["messages"])
            text = render_chat(messages, bool(body.get("add_generation_prompt", True)))
            ids = srv.tokens.encode(text, add_special_tokens=bool(body.get("add_special_tokens", False)))
        elif isinstance(body.get("prompt"), str):
            ids = srv.tokens.encode(
                body["prompt"], add_special_tokens=bool(body.get("add_special_tokens", True))
            )
        else:
            raise ApiError(400, "give a prompt (a string) or messages", param="prompt")
    except ApiError as e:
        return _error(request, e)
    assert ids is not None  # _token_body checked that there is a tokenizer
    strs = srv.tokens.token_strs(ids) if body.get("return_token_strs") else None
    return web.json_response(
        {"count": len(ids), "max_model_len": srv.emu.max_model_len, "tokens": ids, "token_strs": strs}
    )


async def _detokenize(request: web.Request) -> web.Response:
    """vLLM's ``POST /detokenize``: token ids back to text."""
    srv = _endpoint(request).server
    try:
        body = await _token_body(request)
        ids = body.get("tokens")
        vocab = srv.tokens.vocab_size or 0
        if not isinstance(ids, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) and 0 <= i < vocab for i in ids
        ):
            raise ApiError(400, f"tokens must be a list of token ids in [0, {vocab})", param="tokens")
    except ApiError as e:
        return _error(request, e)
    return web.json_response({"prompt": srv.tokens.decode(ids)})


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


async def _front_metrics(request: web.Request) -> web.Response:
    """The front door's own page: the requests it holds for want of a ready replica (activator.py)."""
    srv = _endpoint(request).server
    srv.emu.advance()  # requests timed out at the gateway leave the count now, not at the next loop turn
    return web.Response(body=render_activator(srv.activator), headers={"Content-Type": CONTENT_TYPE_LATEST})


async def _present(srv: EmulateServer) -> None:
    """Bring the fleet and the listeners to now, so every replica past Pending has its port."""
    srv.emu.advance()
    srv._reconcile()
    await srv._settle()


def _is_admin(request: web.Request) -> bool:
    resource = request.match_info.route.resource
    canonical = resource.canonical if resource is not None else ""
    return request.path.startswith("/admin") or canonical.startswith("/admin")


@web.middleware
async def _admin_gate(request: web.Request, handler: Any) -> web.StreamResponse:
    """Every admin call passes admin_guard's checks first (the OpenAI API is not affected)."""
    if _is_admin(request):
        srv = _endpoint(request).server
        token = srv.cfg.admin_token
        assert token is not None  # checked by EmulateConfig when admin_api is on
        refusal = admin_refusal(request, token=token, origins=srv.admin_origins)
        if refusal is not None:
            return _error(request, refusal)
    response: web.StreamResponse = await handler(request)
    return response


async def _admin_off(request: web.Request) -> web.Response:
    return _error(
        request,
        ApiError(404, "the admin API is off: start emulate with --admin-api and a token", "NotFoundError"),
    )


async def _admin_replicas(request: web.Request) -> web.Response:
    srv = _endpoint(request).server
    await _present(srv)
    return web.json_response(srv.admin_document())


async def _admin_scale(request: web.Request) -> web.Response:
    srv = _endpoint(request).server
    try:
        body = json.loads(await read_admin_body(request))
    except ApiError as e:
        return _error(request, e)
    except ValueError:
        return _error(request, ApiError(400, "the request body is not JSON"))
    n = body.get("replicas") if isinstance(body, dict) else None
    drain = body.get("drain_until_idle", False) if isinstance(body, dict) else False
    if isinstance(n, bool) or not isinstance(n, int) or not isinstance(drain, bool):
        return _error(request, ApiError(400, 'expected {"replicas": <int >= 0>, "drain_until_idle": <bool>}'))
    spec, cap = srv.emu.spec_replicas, srv.cfg.admin_max_scale_up
    if n - spec > cap:
        return _error(
            request,
            ApiError(
                400,
                f"replicas = {n} would add {n - spec} to {spec}; one call may add at most {cap} "
                "(--admin-max-scale-up)",
                param="replicas",
            ),
        )
    try:
        srv.emu.scale_to(n, drain_until_idle=drain)
    except ConfigError as e:
        return _error(request, ApiError(400, str(e), param="replicas"))
    await _present(srv)
    return web.json_response(srv.admin_document())


async def _admin_standby(request: web.Request) -> web.Response:
    """``POST /admin/standby {"replicas": k}``: keep k replicas asleep beside the spec (emulate/standby.py).

    The orchestrator's part of the pool: a surplus is deleted, a shortfall starts replicas that sleep
    once ready; one call may add at most ``--admin-max-scale-up``.
    """
    srv = _endpoint(request).server
    try:
        body = json.loads(await read_admin_body(request))
    except ApiError as e:
        return _error(request, e)
    except ValueError:
        return _error(request, ApiError(400, "the request body is not JSON"))
    k = body.get("replicas") if isinstance(body, dict) else None
    if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= srv.cfg.max_replicas:
        return _error(
            request,
            ApiError(400, f'expected {{"replicas": <int in [0, {srv.cfg.max_replicas}]>}}', param="replicas"),
        )
    fleet = srv.emu.fleet
    pool = len(fleet.sleeping) + len(fleet.standby_starting)
    if k - pool > srv.cfg.admin_max_scale_up:
        return _error(
            request,
            ApiError(
                400,
                f"replicas = {k} would add {k - pool} to a pool of {pool}; one call may add at most "
                f"{srv.cfg.admin_max_scale_up} (--admin-max-scale-up)",
                param="replicas",
            ),
        )
    now = srv.emu.advance()
    fleet.set_standby(k, now)
    srv.emu.wake.set()
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
