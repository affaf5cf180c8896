"""Controller tick: scrape, parse, signals and decide over many emulated replicas' ``/metrics`` pages.

Issue 4's target: one tick of the live controller over 500 replica pages in
under 1 s and under 300 MB; issue 23's: over 5,000 pages, under 1 s and under
1 GB (``--replicas 5000 --emulators 4``). The memory a replica costs is what the
controller's window keeps of it: ``WINDOW_LEN`` observations of the values and
histograms llmscale reads (``PageReader(keep_values=..., keep_histograms=...)``),
the histograms' counts packed in arrays (``metrics/scrape.py``'s PackedHistogram).
The run prints the process's RSS before the first scrape and its peak, and their
difference per replica.

The replicas are ``llmscale emulate``'s, in ``--emulators`` separate processes
(so their memory and most of their CPU are not the measuring process's), each
replica on its own 127.0.0.1 port with the emulator's own listener and
``/metrics`` handler. A Poisson load (``--rps-per-replica``, token lengths
drawn around a chat mix) runs through the simulator for ``--warmup-s`` before
the first scrape and goes on during the run, so the pages carry non-trivial
histograms, counters and gauges, and the counters move from tick to tick.

At fleet scale (``--replicas 5000 --sim-replicas 200``) a port and a simulation per replica cost
more than the two cores can give before the first tick, so ``--sim-replicas`` replicas are
simulated and each emulator process also serves its share of ``--replicas`` as paths
``/replica/<j>/metrics`` on one 127.0.0.1 listener. The scraper sees 5,000 distinct targets over
real HTTP keep-alive connections; the listener is a minimal HTTP/1.1 responder over the cached
pages (its CPU is printed with the emulators').

Which page a path shows decides what the fleet's signals read, so it is chosen to keep a fleet of
``n`` simulated replicas behaving like ``--replicas`` independent ones. Path ``j`` of a process
with ``n`` simulated replicas is copy ``c = j // n`` of replica ``j mod n``, and shows that
replica's page as it was ``2c`` ticks ago (each process keeps its last ``2(C-1) + 1`` page
snapshots, ``C`` copies; the warm-up takes that many snapshots, one per tick, before the first
scrape). Why a lag, and why every second tick:

* Copies showing the *same* page (``j mod n``, no lag) move in lock-step: the fleet's per-tick
  arrivals are ``C`` times one replica's, whose variance is ``C^2`` times, so the arrival
  dispersion (``signals/arrivals.py``, Var/mean of per-step counts) reads ``C`` times a real
  fleet's (25 at 5,000 over 200), and ``slo``'s capacity memo misses on nearly every tick.
* A lag makes copies count the replica's arrivals over *different* ticks, which are independent
  (Poisson load, a stationary fleet: a replica 10 ticks ago is as good a sample of "a replica"
  as another replica now). Consecutive lags (``c`` ticks) would not do: the dispersion is read
  from consecutive differences of the fleet's counts, and copy ``c+1`` at tick ``t+1`` repeats
  copy ``c`` at tick ``t``, so the difference telescopes to two ticks' counts and the dispersion
  reads ``1/C`` of a real fleet's. With lags ``0, 2, 4, ...`` no two copies of a replica are one
  tick apart, every count in a difference is a different tick of a replica, and a Poisson fleet
  reads a dispersion near 1, as ``--replicas`` independent replicas would.
* Each path still serves a whole page of a real simulated replica (same series, same histogram
  buckets, counters that only grow, a page that changes every tick), so parsing and vetting it
  costs what a real replica's page costs.

``--workers N`` builds the measured source with ``metrics.scrape.workers: N``: the pages are
fetched, parsed and vetted by N worker processes (``metrics/_shards.py``); the tick's CPU then
counts the workers' CPU as well as the measuring process's, and the memory target counts their
peak RSS with its own. The baseline below always scrapes in the measuring process.

Beside the full tick, the same process runs the same tick over the first
``--baseline-replicas`` targets (their own source and window, same pages) and prints the
ratio: linear scaling would take 10x the time for 10x the replicas.

The measuring process builds the live controller's path from a validated
``LiveConfig`` with ``wiring.py`` (``build_source``: a
``PodScrapeSource`` over the static targets; ``policy_run``: the ``slo``
policy and its guards), then per tick: ``source.observe`` (scrape + parse),
the core's ``observe`` (the signals over the window of ``WINDOW_LEN`` observations,
indexed as the live loop indexes it: what the previous tick's window shares with this one
is carried, not recomputed; filled by untimed ticks first so every timed tick sees a
steady-state window), and
the core's ``decide`` without actuation. Observations are stamped on a controller
clock that advances ``--tick-s`` per tick (the config default, 15 s), as the
live loop's would. Not included: the live loop's alignment with the cluster's
replica list (one Kubernetes list call) and its own ``/metrics`` export.

Why the pages are cached between ticks (``--live-render`` turns it off):
the emulator renders a page with prometheus_client's ``generate_latest``,
which costs ~10 ms of emulator CPU per page on a quiet core and several times
that on this shared 2-core VM: 500 pages a tick would put seconds of *emulator*
work on the two cores the measured tick runs on, where real replicas render on
their own machines. So before each tick (untimed) every emulator process
re-renders each of its replicas' pages from the live simulation into a cache,
with a formatter checked at start-up to produce byte-for-byte what
``render_metrics`` produces, and its ``/metrics`` handler serves that cache
during the tick. The emulators' CPU seconds during the timed ticks are printed.

Same process, after the timed ticks (the emulators paused, their pages fixed):

* parsing the same pages three ways: the source's ``PageReader`` (each page
  read through the layout learnt from its replica's earlier pages, as in the
  timed ticks), ``parse_exposition`` line by line (the reader's fallback, and
  what the source used before), and prometheus_client's parser alone
  (``text_string_to_metric_families``, no folding);
* fetching all pages ``--compare-fetch`` times with the source's lean HTTP
  client and with aiohttp (``PodScrapeSource(lean_http=False)``), alternating,
  CPU seconds and wall time of each;
* a fixed pure-Python machine reference (``sum(range(10**7))``) before and after.

    .venv/bin/python benchmarks/controller_tick.py [--replicas 500] [--ticks 7] [--emulators 2]
    .venv/bin/python benchmarks/controller_tick.py --replicas 5000 --sim-replicas 200 --ticks 4
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import multiprocessing as mp
import resource
import signal
import statistics
import sys
import time
from collections import deque
from dataclasses import replace
from multiprocessing.connection import Connection
from typing import Any

TARGET_TICK_S = 1.0
#: issue 4: 300 MB at 500 replicas; issue 23: 1 GB at 5,000 (~150 KB a replica beyond the start)
TARGET_PEAK_MB = 1000.0
QUIET_REF_S = 0.2  # sum(range(10**7)) on a quiet modern core (benchmarks/sim_speed.py)


# ---------------------------------------------------------------------------------------------
# The emulator processes


def _page_formatter() -> Any:
    """A fast renderer of one replica's page, producing what ``render_metrics`` produces.

    It reads the replica's sample through the collector's own ``SimMetricSource``
    (so DCGM averaging windows advance exactly as a real scrape advances them)
    and writes the text prometheus_client's ``generate_latest`` writes for the
    collector's families. Private names of emulate/metrics.py are read on
    purpose; :func:`_check_formatter` fails loudly when they drift.
    """
    from prometheus_client.utils import floatToGoString as fmt

    from llmscale.emulate.metrics import _COUNTERS, _ENGINE_HISTOGRAMS, _HELP, DERIVED, _le

    def labelstr(pairs: tuple[tuple[str, str], ...]) -> str:
        return ",".join(f'{k}="{v}"' for k, v in sorted(pairs))

    def doc_of(text: str) -> str:
        return text.replace("\\", r"\\").replace("\n", r"\n")

    def page(collector: Any) -> bytes:
        obs = collector._source.observe(collector._now_s())
        if not obs.replicas or not obs.replicas[0].ok:
            return b""
        sample = obs.replicas[0]
        vllm = labelstr(collector._vllm_labels)
        dcgm = labelstr(collector._dcgm_labels)
        out: list[str] = []
        add = out.append
        # The replica's own bandwidth P95 over 60 s, as collect() adds it (seed 004's signal).
        values = {**sample.values, DERIVED.DRAM_ACTIVE_P95_60S: collector._bw_p95(sample, obs.time_s)}
        exports = collector._version.exports  # the vLLM release the emulator plays
        for name, value in values.items():
            if not exports(name):
                continue
            is_dcgm = name.startswith("DCGM_")
            doc = _HELP.get(name, f"{name} (DCGM field)" if is_dcgm else name)
            kind = "counter" if name in _COUNTERS else "gauge"
            if kind == "counter":
                name = name.removesuffix("_total") + "_total"
            add(f"# HELP {name} {doc_of(doc)}\n# TYPE {name} {kind}\n")
            add(f"{name}{{{dcgm if is_dcgm else vllm}}} {fmt(value)}\n")
        pairs = collector._vllm_labels
        for name, hist in sample.histograms.items():
            if not exports(name) or (name in _ENGINE_HISTOGRAMS and collector._stats is not None):
                continue  # not this release's, or engine_families writes the emulator's own count
            add(f"# HELP {name} {doc_of(_HELP.get(name, name))}\n# TYPE {name} histogram\n")
            for bound, count in zip(hist.bounds, hist.cumulative, strict=True):
                add(f"{name}_bucket{{{labelstr((*pairs, ('le', _le(bound))))}}} {fmt(count)}\n")
            add(f"{name}_count{{{vllm}}} {fmt(hist.cumulative[-1])}\n")
            add(f"{name}_sum{{{vllm}}} {fmt(hist.sum)}\n")
        # The few families only emulate exports (request outcomes, tokens per step, cache
        # settings): written from the collector's own family objects, as generate_latest would.
        for family in collector.engine_families():
            kind = family.type
            name = family.name + "_total" if kind == "counter" else family.name
            add(f"# HELP {name} {doc_of(family.documentation)}\n# TYPE {name} {kind}\n")
            for s in family.samples:
                add(f"{s.name}{{{labelstr(tuple(s.labels.items()))}}} {fmt(s.value)}\n")
        return "".join(out).encode()

    return page


def _check_formatter(server: Any, page: Any, n: int = 3) -> None:
    """Fresh collectors of ``n`` replicas: the fast formatter and ``render_metrics`` must agree."""
    from llmscale.emulate.metrics import ReplicaCollector, render_metrics

    emu = server.emu
    emu.advance()

    def fresh(r: Any) -> ReplicaCollector:
        return ReplicaCollector(emu.fleet, r, server.served_model, server._gpu_model, lambda: emu.fleet.now)

    for r in list(emu.fleet.replicas)[:n]:
        want, got = render_metrics(fresh(r)), page(fresh(r))
        if want != got:
            raise RuntimeError(
                f"the cached-page formatter drifted from emulate's render_metrics ({r.name}); "
                "update benchmarks/controller_tick.py or run with --live-render"
            )


class _PausableClock:
    """Monotonic wall time that stands still while paused (the emulator's simulated time follows it)."""

    def __init__(self) -> None:
        self._paused_at: float | None = None
        self._lost = 0.0

    def now_s(self) -> float:
        t = time.monotonic() if self._paused_at is None else self._paused_at
        return t - self._lost

    def pause(self) -> None:
        if self._paused_at is None:
            self._paused_at = time.monotonic()

    def resume(self) -> None:
        if self._paused_at is not None:
            self._lost += time.monotonic() - self._paused_at
            self._paused_at = None


class _PagesProtocol(asyncio.Protocol):
    """HTTP/1.1 keep-alive answers to ``GET /replica/<j>/metrics``: replica ``j``'s cached page.

    Path ``j`` serves the page of the process's simulated replica ``j mod n`` as it was ``2(j // n)``
    snapshots ago (see the module docstring: copies that count different ticks), so the page
    changes from tick to tick as the simulation runs: one listener stands for many replicas.
    Kept minimal on purpose (~30 us of CPU an answer against aiohttp's ~0.4 ms): the measured
    process shares the machine's two cores with it, and at 5,000 replicas aiohttp's server
    alone would take ~2 s of CPU a tick.
    """

    def __init__(self, history: deque[list[bytes]]) -> None:
        self._history = history  # per snapshot (newest last), per simulated replica: the whole answer
        self._buf = b""
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        self._buf += data
        while self._transport is not None:
            end = self._buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head, self._buf = self._buf[:end], self._buf[end + 4 :]
            parts = head.split(b" ", 2)
            path = parts[1].split(b"/") if len(parts) == 3 else []
            history = self._history
            if len(path) == 4 and path[1] == b"replica" and path[2].isdigit() and path[3] == b"metrics":
                j = int(path[2])
                n = len(history[-1])
                lag = min(2 * (j // n), len(history) - 1)  # the warm-up fills the history first
                self._transport.write(history[-1 - lag][j % n])
            else:
                self._transport.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")


def _serve_pages(history: deque[list[bytes]], stop: Any) -> int:
    """Start the many-paths listener on a thread of its own (127.0.0.1, a free port); its port."""
    import threading

    port_box: list[int] = []
    ready = threading.Event()

    def run() -> None:
        async def main() -> None:
            loop = asyncio.get_running_loop()
            srv = await loop.create_server(lambda: _PagesProtocol(history), "127.0.0.1", 0, backlog=1024)
            port_box.append(srv.sockets[0].getsockname()[1])
            ready.set()
            while not stop.is_set():
                await asyncio.sleep(0.2)
            srv.close()

        asyncio.run(main())

    threading.Thread(target=run, name="pages", daemon=True).start()
    if not ready.wait(30.0):
        raise RuntimeError("the many-paths page listener did not start")
    return port_box[0]


def _answer(body: bytes) -> bytes:
    head = f"HTTP/1.1 200 OK\r\nContent-Type: {_CONTENT_TYPE}\r\nContent-Length: {len(body)}\r\n\r\n"
    return head.encode("latin-1") + body


#: prometheus_client's CONTENT_TYPE_LATEST for the text format, as the emulator answers
_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _emulator_main(conn: Connection, opts: dict[str, Any]) -> None:
    """One emulator process: its share of replicas under a Poisson load, driven by the parent.

    Commands: ``"advance"`` runs the fleet for ``run_s`` wall seconds under the load, then
    snapshots every replica's page and pauses simulated time (answer: simulated now and how
    long the snapshot took); ``"cpu"`` answers this process's CPU seconds; ``"stop"``.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops us, also on Ctrl-C
    import threading

    import numpy as np
    from aiohttp import web
    from prometheus_client import CONTENT_TYPE_LATEST

    import llmscale.emulate.server as server_mod
    from llmscale.emulate import EmulateConfig, EmulatorThread

    deadline = time.monotonic() + opts["max_seconds"]
    live_render = opts["live_render"]
    paths = opts.get("paths", 0)  # > 0: also serve that many replica paths on one listener
    # Path j shows copy j // n of replica j mod n, 2 (j // n) snapshots back (module docstring).
    copies = -(-paths // opts["replicas"]) if paths else 1
    history: deque[list[bytes]] = deque(maxlen=2 * (copies - 1) + 1)
    stop_pages = threading.Event()
    cache: dict[str | None, bytes] = {}
    if not live_render:
        real_handler = server_mod._metrics

        async def cached_metrics(request: web.Request) -> web.StreamResponse:
            # The replica's page as of the last snapshot (the emulator's own handler would run
            # the whole fleet to now and render with prometheus_client on every request).
            body = cache.get(request.app[server_mod._ENDPOINT].replica)
            if body is None:
                return await real_handler(request)
            return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

        server_mod._metrics = cached_metrics  # read when each replica's app is built, at start
    page = _page_formatter()
    rng = np.random.default_rng(opts["seed"])
    rate = opts["rps_per_replica"] * opts["replicas"]
    clock = _PausableClock()
    fleet = EmulatorThread(
        EmulateConfig(
            replicas=opts["replicas"],
            max_replicas=max(512, opts["replicas"]),
            port=0,
            host="127.0.0.1",
            pending_s=0.0,
            loading_s=0.0,
            warmup_s=0.0,
            time_scale=opts["time_scale"],
            seed=opts["seed"],
        )
    )

    def feed(server: Any, n: int) -> None:
        # Straight into the simulator, as Emulator.submit does without an HTTP client waiting
        # on the flight; routed by the simulator's router (least outstanding).
        if n <= 0:
            return
        emu = server.emu
        now = emu.advance()
        ins = np.clip(rng.lognormal(math.log(700.0), 0.8, n), 16, 6000).astype(int)
        outs = np.clip(rng.lognormal(math.log(150.0), 0.8, n), 8, 1024).astype(int)
        for i, o in zip(ins, outs, strict=True):
            emu.fleet.submit(int(i), int(o), now, None)
        emu.wake.set()

    def resume(server: Any) -> None:
        clock.resume()
        if server._driver is None:  # private: the engine loop, stopped while the fleet is paused
            server._driver = asyncio.get_running_loop().create_task(server._drive())

    def pause(server: Any) -> None:
        # With simulated time frozen, the engine loop would wake every few microseconds of the
        # next event's distance and spin; it is stopped instead (handlers do not need it: they
        # serve the snapshot). Cancelled between two awaits, it holds no half-done state.
        clock.pause()
        if server._driver is not None:
            server._driver.cancel()
            server._driver = None

    def run_for(wall_s: float) -> None:
        fleet.call(resume)
        end = last = time.monotonic()
        end += wall_s
        while True:
            time.sleep(min(0.05, max(0.0, end - time.monotonic())))
            # Arrivals for exactly wall_s (not for the time the last feed or the pause ran late on
            # a loaded machine): every tick's arrivals are Poisson of the same mean, so the lagged
            # copies (module docstring) add up counts of equal-length ticks, as a fleet's would.
            now = min(time.monotonic(), end)
            n = int(rng.poisson(rate * (now - last) * opts["time_scale"]))
            last = now
            fleet.call(lambda s, n=n: feed(s, n), timeout_s=120.0)
            if now >= end:
                break

    def snapshot(server: Any) -> float:
        pause(server)
        now = server.emu.advance()
        if not live_render:
            for name, lst in server._listeners.items():  # private: the listeners hold the collectors
                cache[name] = page(lst.collector)
            if paths:
                history.append([_answer(cache[name]) for name in sorted(cache, key=str)])
        return float(now)

    try:
        fleet.start(timeout_s=300.0)
        # Private: the emulator's clock becomes pausable (same monotonic time line, so no jump).
        fleet.call(lambda s: setattr(s.emu, "_clock", clock))
        if not live_render:
            fleet.call(lambda s: _check_formatter(s, page), timeout_s=120.0)
        ports = fleet.call(lambda s: s.replica_ports(), timeout_s=60.0)
        run_for(opts["warmup_s"])
        fleet.call(snapshot, timeout_s=300.0)
        while len(history) < (history.maxlen or 1) and paths:  # one snapshot a tick, as the run takes them
            run_for(opts["run_s"])
            fleet.call(snapshot, timeout_s=300.0)
        paths_port = _serve_pages(history, stop_pages) if paths else None
        conn.send(("ready", (ports, paths_port)))
        while time.monotonic() < deadline:
            if not conn.poll(0.5):
                continue
            cmd = conn.recv()
            if cmd == "stop":
                break
            if cmd == "advance":
                run_for(opts["run_s"])
                t0 = time.perf_counter()
                now = fleet.call(snapshot, timeout_s=300.0)
                conn.send(("ok", (now, time.perf_counter() - t0)))
            elif cmd == "cpu":
                conn.send(("ok", time.process_time()))
    except (EOFError, BrokenPipeError):
        pass  # the parent is gone: stop
    except BaseException as e:
        with contextlib.suppress(Exception):
            conn.send(("error", f"{type(e).__name__}: {e}"))
        raise
    finally:
        stop_pages.set()
        fleet.stop()


class Emulators:
    """The emulator processes; :meth:`close` stops every one of them, whatever state they are in."""

    def __init__(self, counts: list[int], opts: dict[str, Any], paths: list[int] | None = None) -> None:
        self._ctx = mp.get_context("spawn")
        self.procs: list[Any] = []
        self.conns: list[Connection] = []
        for k, n in enumerate(counts):
            parent, child = self._ctx.Pipe()
            p = self._ctx.Process(
                target=_emulator_main,
                args=(
                    child,
                    {**opts, "replicas": n, "seed": opts["seed"] + k, "paths": paths[k] if paths else 0},
                ),
                name=f"emulator-{k}",
                daemon=True,
            )
            p.start()
            child.close()
            self.procs.append(p)
            self.conns.append(parent)

    def _recv(self, conn: Connection, timeout_s: float) -> Any:
        if not conn.poll(timeout_s):
            raise TimeoutError(f"an emulator process gave no answer within {timeout_s:g} s")
        kind, payload = conn.recv()
        if kind == "error":
            raise RuntimeError(f"emulator process failed: {payload}")
        return payload

    def wait_ready(self, timeout_s: float) -> list[tuple[dict[str, int], int | None]]:
        return [self._recv(c, timeout_s) for c in self.conns]

    def ask(self, cmd: str, timeout_s: float = 300.0) -> list[Any]:
        for c in self.conns:
            c.send(cmd)
        return [self._recv(c, timeout_s) for c in self.conns]

    def close(self) -> None:
        for c in self.conns:
            with contextlib.suppress(Exception):
                c.send("stop")
        for p in self.procs:
            p.join(20.0)
            if p.is_alive():
                p.terminate()
                p.join(5.0)
            if p.is_alive():
                p.kill()
                p.join(5.0)
        for c in self.conns:
            c.close()


# ---------------------------------------------------------------------------------------------
# The measuring process


def _machine_reference() -> float:
    t0 = time.perf_counter()
    sum(range(10**7))
    return time.perf_counter() - t0


def _pct(xs: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0-100)."""
    s = sorted(xs)
    return s[max(0, math.ceil(q / 100.0 * len(s)) - 1)]


async def _fetch_pages(urls: list[str]) -> list[bytes]:
    import aiohttp

    async with aiohttp.ClientSession() as session:

        async def one(url: str) -> bytes:
            async with session.get(url, timeout=aiohttp.ClientTimeout(total=30)) as resp:
                resp.raise_for_status()
                return await resp.read()

        return list(await asyncio.gather(*(one(u) for u in urls)))


def _split(total: int, parts: int) -> list[int]:
    parts = max(1, min(parts, total))
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--replicas", type=int, default=500)
    ap.add_argument(
        "--sim-replicas",
        type=int,
        default=None,
        help="replicas simulated (default --replicas, each on its own port); fewer: each emulator "
        "process also serves its share of --replicas as paths /replica/<j>/metrics on one listener, "
        "path j showing simulated replica j mod its count as it was 2 (j // count) ticks ago",
    )
    ap.add_argument("--ticks", type=int, default=7, help="timed ticks; the first is a warm-up, not counted")
    ap.add_argument("--emulators", type=int, default=2, help="emulator processes sharing the replicas")
    ap.add_argument(
        "--window", type=int, default=None, help="observations in the window (default WINDOW_LEN)"
    )
    ap.add_argument("--tick-s", type=float, default=5.0, help="simulated seconds between ticks")
    ap.add_argument("--run-s", type=float, default=1.0, help="wall seconds the fleet runs between ticks")
    ap.add_argument("--rps-per-replica", type=float, default=1.0, help="Poisson load, simulated req/s")
    ap.add_argument("--warmup-s", type=float, default=10.0, help="wall seconds of load before the first tick")
    ap.add_argument(
        "--scrape-timeout-s", type=float, default=5.0, help="PodScrapeSource's per-target time-out"
    )
    ap.add_argument(
        "--baseline-replicas",
        type=int,
        default=500,
        help="also time the tick over this many of the targets, in the same process (when fewer)",
    )
    ap.add_argument(
        "--workers",
        type=int,
        default=0,
        help="scrape worker processes of the measured source (metrics.scrape.workers; 0: scrape and "
        "parse in the measuring process)",
    )
    ap.add_argument("--profile", default=None, help="cProfile the timed ticks' main thread into this file")
    ap.add_argument("--baseline-pages", type=int, default=50, help="pages parsed by prometheus_client alone")
    ap.add_argument(
        "--compare-fetch",
        type=int,
        default=3,
        help="rounds of the lean-vs-aiohttp fetch comparison (0: none)",
    )
    ap.add_argument(
        "--plain-gc",
        action="store_true",
        help="leave the garbage collector as Python sets it (default: a raised young-generation "
        "threshold during each tick and a freeze after it, as the live loop does: gc_tick.py)",
    )
    ap.add_argument("--live-render", action="store_true", help="emulators render every page on request")
    ap.add_argument("--max-seconds", type=float, default=1200.0, help="bound on the whole run")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.replicas < 1 or args.ticks < 2 or args.emulators < 1:
        ap.error("needs --replicas >= 1, --ticks >= 2 (one is the warm-up), --emulators >= 1")
    if args.tick_s <= 0 or args.run_s <= 0 or args.warmup_s < 0:
        ap.error("needs --tick-s > 0, --run-s > 0, --warmup-s >= 0")
    time_scale = args.tick_s / args.run_s
    sim = args.replicas if args.sim_replicas is None else args.sim_replicas
    if not 1 <= sim <= args.replicas:
        ap.error(f"--sim-replicas = {sim}, must be in [1, --replicas ({args.replicas})]")
    if sim < args.replicas and args.live_render:
        ap.error("--sim-replicas below --replicas serves cached pages: not with --live-render")

    def on_term(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)  # unwinds through the finally that stops the emulators

    signal.signal(signal.SIGTERM, on_term)
    started = time.monotonic()
    ref_before = _machine_reference()
    counts = _split(sim, args.emulators)
    paths = _split(args.replicas, len(counts)) if sim < args.replicas else None
    print(
        f"starting {sim} emulated replicas in {len(counts)} process(es) {counts}"
        + (f" serving {args.replicas} replica paths {paths}, " if paths else ", ")
        + f"{args.rps_per_replica:g} req/s per replica, {args.warmup_s * time_scale:g} simulated s of load "
        f"first, then {args.tick_s:g} simulated s ({args.run_s:g} s wall) between ticks"
    )
    emus = Emulators(
        counts,
        {
            "rps_per_replica": args.rps_per_replica,
            "warmup_s": args.warmup_s,
            "run_s": args.run_s,
            "time_scale": time_scale,
            "live_render": args.live_render,
            "max_seconds": args.max_seconds + 60.0,
            "seed": args.seed,
        },
        paths,
    )
    try:
        return _run(args, emus, started, ref_before)
    finally:
        emus.close()


def _run(args: argparse.Namespace, emus: Emulators, started: float, ref_before: float) -> int:
    from llmscale.config import deployment_of, parse_config
    from llmscale.controller.core import WINDOW_LEN, Controller, ControllerState, decide
    from llmscale.gc_tick import FULL_COLLECTION_EVERY_TICKS, TickCollector
    from llmscale.wiring import build_source, policy_run

    ready = emus.wait_ready(timeout_s=300.0 + args.warmup_s)
    if ready[0][1] is None:  # a port per replica
        targets = [
            {"name": f"e{k}-{name}", "url": f"http://127.0.0.1:{port}/metrics"}
            for k, (ports, _) in enumerate(ready)
            for name, port in sorted(ports.items())
        ]
    else:  # paths on one listener per emulator process
        targets = [
            {"name": f"e{k}-p{j}", "url": f"http://127.0.0.1:{paths_port}/replica/{j}/metrics"}
            for k, ((_, paths_port), n) in enumerate(
                zip(ready, _split(args.replicas, len(ready)), strict=True)
            )
            for j in range(n)
        ]
    print(f"emulators ready after {time.monotonic() - started:.1f} s: {len(targets)} replica targets")

    # The live controller's parts, from a validated config as `llmscale run` builds them.
    def scraping(some: list[dict[str, str]], workers: int = 0) -> dict[str, Any]:
        scrape = {"static_targets": some, "timeout_s": args.scrape_timeout_s, "workers": workers}
        return {"source": "scrape", "scrape": scrape}

    raw: dict[str, Any] = {
        "target": {"name": "bench", "model": "llama-3-8b", "gpu": "h100-80gb"},
        "metrics": scraping(targets, args.workers),
        "policy": {"name": "slo"},
        "guards": {"min_replicas": 1, "max_replicas": max(1000, 2 * len(targets))},
        "mode": "dry-run",
        "actuator": {"kind": "emulate", "emulate": {"url": "http://127.0.0.1:9"}},  # never called
    }
    cfg = parse_config(raw, source="controller_tick")
    run = policy_run(cfg, cfg.policy)
    # The baseline in the same process: the same tick over the first --baseline-replicas targets
    # (their own source and window), run right after each full tick on the same pages.
    n_base = min(args.baseline_replicas, len(targets)) if args.baseline_replicas < len(targets) else 0
    base_cfg = (
        parse_config({**raw, "metrics": scraping(targets[:n_base])}, source="controller_tick baseline")
        if n_base
        else None
    )
    start_mb = _rss_mb()
    source: Any = build_source(cfg, None)
    base_source: Any = build_source(base_cfg, None) if base_cfg is not None else None
    base_state = ControllerState(policy_state=run.policy.initial_state())
    base_rows: list[float] = []
    prof: Any = None
    if args.profile:
        import cProfile

        prof = cProfile.Profile()
    core = Controller(run.policy, run.guards, deployment_of(cfg))
    window_len = WINDOW_LEN if args.window is None else max(1, min(args.window, WINDOW_LEN))
    state = ControllerState(policy_state=run.policy.initial_state())
    rows: list[dict[str, float]] = []
    last_record: Any = None
    last_signals: Any = None
    gc_clock = _GcClock()
    collector = None if args.plain_gc else TickCollector(full_every_ticks=10**9)  # the full one: below
    unknown: list[int] = []
    layout_reads = line_reads = 0
    try:
        fill = window_len - 1
        total = fill + args.ticks
        for k in range(total):
            if time.monotonic() - started > args.max_seconds:
                print(f"stopping: --max-seconds {args.max_seconds:g} reached", file=sys.stderr)
                return 3
            answers = emus.ask("advance")  # the fleet runs, then every page is snapshot
            now_s = max(now for now, _ in answers)  # controller time = simulated time of the pages
            refresh_s = max(took for _, took in answers)
            timed = k >= fill
            cpu_emu0 = sum(emus.ask("cpu")) if timed else 0.0
            reads0 = (source.layout_reads, source.line_reads)
            if prof is not None and timed:
                prof.enable()
            gc_s0 = gc_clock.total_s
            if collector is not None:
                collector.before_tick()
            c0, t0 = time.process_time(), time.perf_counter()
            obs = source.observe(now_s)
            t1 = time.perf_counter()
            state, signals = _observe(state, obs, window_len)
            window = state.window
            t2 = time.perf_counter()
            record, state = decide(core, state, signals, now_s)
            if collector is not None:
                collector.after_tick()  # as the live loop does after each tick (gc_tick.py)
            t3, c3 = time.perf_counter(), time.process_time()
            c3 += getattr(source, "last_worker_cpu_s", 0.0)  # the scrape workers' CPU for this tick
            if prof is not None and timed:
                prof.disable()
            if base_source is not None:
                if collector is not None:
                    collector.before_tick()
                b0 = time.perf_counter()
                base_state, base_signals = _observe(base_state, base_source.observe(now_s), window_len)
                _, base_state = decide(core, base_state, base_signals, now_s)
                if collector is not None:
                    collector.after_tick()
                if timed:
                    base_rows.append(time.perf_counter() - b0)
            cpu_emu = sum(emus.ask("cpu")) - cpu_emu0 if timed else 0.0
            bad = sum(1 for s in obs.replicas if not s.ok)
            if timed:
                unknown.append(bad)
                layout_reads += source.layout_reads - reads0[0]
                line_reads += source.line_reads - reads0[1]
                rows.append(
                    {
                        "scrape": t1 - t0,
                        "signals": t2 - t1,
                        "decide": t3 - t2,
                        "total": t3 - t0,
                        "cpu": c3 - c0,
                        "cpu_emu": cpu_emu,
                        "gc": gc_clock.total_s - gc_s0,
                    }
                )
            last_record = record
            last_signals = signals
            label = "warm-up" if k == fill else ("tick" if timed else "fill")
            print(
                f"  {label:7s} {k - fill + 1 if timed else k + 1:2d}: {t3 - t0:6.3f} s "
                f"(scrape+parse {t1 - t0:.3f}, signals {t2 - t1:.3f}, decide {t3 - t2:.4f}); "
                f"window {len(window)}, unknown {bad}, page refresh {refresh_s:.2f} s"
            )
            if bad:
                print(f"    errors: {dict(list(source.last_errors.items())[:3])}", file=sys.stderr)
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
        worker_mb = [_peak_rss_mb(pid) for pid in getattr(source, "worker_pids", list)()]
        # Same process, same (paused) pages: the reader as the timed ticks left it.
        pages = [b.decode("utf-8") for b in asyncio.run(_fetch_pages([t["url"] for t in _targets(cfg)]))]
        parse_cmp = _compare_parsers(pages, [t["url"] for t in _targets(cfg)], args.baseline_pages)
        fetch_cmp = _compare_fetch(cfg, args)
        full_gc_s = _full_collection_s(collector)
    finally:
        gc_clock.stop()
        source.close()
        if base_source is not None:
            base_source.close()

    measured = rows[1:]  # the first timed tick is the warm-up
    if prof is not None:
        prof.dump_stats(args.profile)
    ref_after = _machine_reference()

    def stat(key: str) -> tuple[float, float]:
        xs = [r[key] for r in measured]
        return statistics.median(xs), _pct(xs, 90)

    print()
    print(
        f"machine reference: sum(range(10**7)) took {ref_before:.3f} s before, {ref_after:.3f} s after "
        f"(a quiet modern core: ~{QUIET_REF_S} s); load average {_loadavg()}"
    )
    print(
        f"{len(measured)} ticks over {args.replicas} replicas (window {window_len}, "
        f"unknown replicas per tick: max {max(unknown)}), median / p90 wall:"
    )
    for key, label in (("scrape", "scrape+parse"), ("signals", "signals"), ("decide", "decide+guards")):
        med, p90 = stat(key)
        print(f"  {label:14s} {med:7.3f} s / {p90:7.3f} s")
    med, p90 = stat("total")
    cpu_med, _ = stat("cpu")
    emu_med, _ = stat("cpu_emu")
    print(f"  {'tick':14s} {med:7.3f} s / {p90:7.3f} s")
    if base_rows[1:]:
        base_med = statistics.median(base_rows[1:])
        print(
            f"  baseline: the same tick over the first {n_base} replicas, same process and pages: "
            f"median {base_med:.3f} s -> {args.replicas} / {n_base} replicas: {med / base_med:.1f}x the "
            f"time for {args.replicas / n_base:g}x the replicas"
        )
    print(
        f"  CPU of the measuring process per tick (all threads"
        f"{f', and its {args.workers} scrape workers' if args.workers else ''}): median {cpu_med:.3f} s; "
        f"emulator processes' CPU during the tick: median {emu_med:.3f} s"
    )
    ref = min(ref_before, ref_after)
    gc_med, _ = stat("gc")
    print(
        f"  of which the measuring process's cyclic garbage collector: median {gc_med:.3f} s "
        f"({gc_clock.full} full collections over all ticks)"
    )
    if collector is not None:
        print(
            f"  the live loop's full collection once in {FULL_COLLECTION_EVERY_TICKS} ticks (not in the "
            f"ticks above), measured with this window alive: {full_gc_s:.3f} s, "
            f"{full_gc_s / FULL_COLLECTION_EVERY_TICKS:.3f} s a tick amortised"
        )
    print(
        f"  tick median / machine reference: {med / ref:.2f}  (at a quiet core's reference "
        f"~{med * QUIET_REF_S / ref:.3f} s, an estimate)"
    )
    print(
        f"  pages read through a learnt layout in the timed ticks: {layout_reads}, line by line: {line_reads}"
    )
    print(
        f"peak RSS of the measuring process: {peak_mb:.0f} MB ({start_mb:.0f} MB before the first scrape: "
        f"{(peak_mb - start_mb) * 1024 / args.replicas:.0f} KB per replica for pages in flight, "
        f"page layouts and a window of {window_len} observations)"
    )
    if worker_mb:
        print(
            f"peak RSS of the {len(worker_mb)} scrape workers: "
            f"{' + '.join(f'{m:.0f}' for m in worker_mb)} MB; with the measuring process "
            f"{peak_mb + sum(worker_mb):.0f} MB"
        )
    if last_record is not None:
        r = last_record
        print(
            f"last decision: {r.proposed.desired} proposed ({r.proposed.rule}), {r.final} after guards "
            f"({r.guard or 'no guard'}); fleet state {r.fleet_state}"
        )

    if last_signals is not None:
        # A fleet of independent replicas under Poisson load reads ~1 (module docstring: the lags)
        disp = last_signals.values["arrival_dispersion"]
        print(f"arrival dispersion the last tick read: {disp.value!r} ({disp.note})")
    print(parse_cmp)
    if fetch_cmp:
        print(fetch_cmp)
    peak_mb += sum(worker_mb)  # the target counts the workers' memory too
    ok_t, ok_m = med < TARGET_TICK_S, peak_mb < TARGET_PEAK_MB
    print(
        f"target: tick < {TARGET_TICK_S:g} s: {'PASS' if ok_t else 'MISS'} (median {med:.3f} s); "
        f"peak memory < {TARGET_PEAK_MB:.0f} MB: {'PASS' if ok_m else 'MISS'} ({peak_mb:.0f} MB)"
    )
    # The same target read on a quiet modern core: the tick scaled by the machine reference taken
    # around it (pure-Python work on one core, as most of a tick is). An estimate, printed as one.
    quiet_s = med * QUIET_REF_S / ref
    print(
        f"target on a quiet core (estimate: median x {QUIET_REF_S:g} s / machine reference {ref:.3f} s): "
        f"tick < {TARGET_TICK_S:g} s: {'PASS' if quiet_s < TARGET_TICK_S else 'MISS'} ({quiet_s:.3f} s)"
    )
    print(f"run took {time.monotonic() - started:.0f} s")
    return 0


def _full_collection_s(collector: Any) -> float:
    """Wall time of the full collection :class:`TickCollector` runs every so many ticks (window alive)."""
    import gc

    if collector is None:
        return 0.0
    t0 = time.perf_counter()
    gc.unfreeze()
    gc.collect()
    took = time.perf_counter() - t0
    collector.close()
    return took


class _GcClock:
    """Wall time the cyclic garbage collector spends (``gc.callbacks``), and its full collections.

    A window of 20 observations of 5,000 replicas holds millions of objects; a full collection
    walks all of them, so the collector's share of a tick is printed beside the tick.
    """

    def __init__(self) -> None:
        import gc

        self.total_s = 0.0
        self.full = 0
        self._t0 = 0.0
        gc.callbacks.append(self._on)

    def _on(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
        else:
            self.total_s += time.perf_counter() - self._t0
            self.full += info.get("generation") == 2

    def stop(self) -> None:
        import gc

        if self._on in gc.callbacks:
            gc.callbacks.remove(self._on)


def _observe(state: Any, obs: Any, window_len: int) -> tuple[Any, Any]:
    """``controller.core.observe`` with a window of ``window_len``: the live loop's path, whose
    indexed window carries what consecutive windows share (step totals, replica series) to the
    next tick instead of recomputing it over all ``window_len`` observations."""
    from llmscale.signals.fleet import window_signals
    from llmscale.signals.window import FleetWindow

    window = (*state.window, obs)[-window_len:]
    indexed = FleetWindow.build(window, state.indexed)
    return replace(state, window=window, indexed=indexed), window_signals(indexed)


def _compare_parsers(pages: list[str], urls: list[str], baseline_pages: int) -> str:
    """The same pages through a reader (layouts learnt first), line by line, and prometheus_client alone."""
    from prometheus_client.parser import text_string_to_metric_families

    from llmscale.metrics.exposition import PageReader, parse_exposition

    reader = PageReader()
    for text, url in zip(pages, urls, strict=True):  # learn each replica's layout, as a first tick does
        reader.parse(text, key=url, source=url)

    def per_page(parse: Any, texts: list[str], keys: list[str]) -> float:
        c0 = time.process_time()
        for text, key in zip(texts, keys, strict=True):
            parse(text, key)
        return (time.process_time() - c0) / len(texts)

    layout_before = reader.layout_reads
    by_layout = min(per_page(lambda t, k: reader.parse(t, key=k, source=k), pages, urls) for _ in range(3))
    fast_share = (reader.layout_reads - layout_before) / (3 * len(pages))
    by_line = min(per_page(lambda t, k: parse_exposition(t, source=k), pages, urls) for _ in range(3))
    sub = pages[: max(1, min(baseline_pages, len(pages)))]
    theirs = per_page(lambda t, k: list(text_string_to_metric_families(t)), sub, sub)
    lines = statistics.mean(p.count("\n") for p in pages)
    n = len(pages)
    return (
        f"parsing ({lines:.0f} lines, {statistics.mean(len(p) for p in pages) / 1024:.1f} KiB a page; "
        f"CPU, best of 3): "
        f"PageReader {by_layout * 1e3:.3f} ms/page ({by_layout * n:.2f} s for {n}, {fast_share:.0%} through "
        f"layouts); parse_exposition line by line {by_line * 1e3:.3f} ms/page ({by_line * n:.2f} s) -> "
        f"reader {by_line / by_layout:.1f}x less CPU; prometheus_client's parser alone {theirs * 1e3:.2f} "
        f"ms/page ({theirs * n:.2f} s) -> {theirs / by_layout:.0f}x"
    )


def _compare_fetch(cfg: Any, args: argparse.Namespace) -> str:
    """All pages fetched (and parsed) by a lean-client source and an aiohttp one, alternating rounds."""
    from llmscale.metrics.scrape import PodScrapeSource

    if args.compare_fetch <= 0:
        return ""
    targets = [(t["name"], t["url"]) for t in _targets(cfg)]
    rows: dict[str, list[tuple[float, float]]] = {"lean": [], "aiohttp": []}
    with (
        PodScrapeSource(targets, timeout_s=args.scrape_timeout_s) as lean,
        PodScrapeSource(targets, timeout_s=args.scrape_timeout_s, lean_http=False) as full,
    ):
        for k in range(args.compare_fetch + 1):  # the first round opens connections: not counted
            for name, src in (("lean", lean), ("aiohttp", full)):
                c0, t0 = time.process_time(), time.perf_counter()
                obs = src.observe(float(k))
                took = (time.process_time() - c0, time.perf_counter() - t0)
                if any(not s.ok for s in obs.replicas):
                    errors = dict(list(src.last_errors.items())[:3])
                    return f"fetch comparison: {name} left replicas unknown: {errors}"
                if k:
                    rows[name].append(took)
    (lc, lw), (ac, aw) = (
        (statistics.median(c for c, _ in rows[n]), statistics.median(w for _, w in rows[n])) for n in rows
    )
    return (
        f"scrape+parse of all pages, same process, median of {args.compare_fetch} alternating rounds: "
        f"lean client {lc:.3f} s CPU / {lw:.3f} s wall, aiohttp {ac:.3f} s CPU / {aw:.3f} s wall "
        f"-> {ac / lc:.1f}x less CPU, {aw / lw:.1f}x less wall"
    )


def _targets(cfg: Any) -> list[dict[str, str]]:
    static = cfg.metrics.scrape.static_targets or ()
    return [{"name": t.name, "url": t.url} for t in static]


def _rss_mb() -> float:
    """The process's resident memory now (MB), from /proc (the peak is ru_maxrss)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize() / 2**20
    except OSError:
        return float("nan")


def _peak_rss_mb(pid: int) -> float:
    """A process's peak resident memory (MB), from /proc (VmHWM)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return float("nan")


def _loadavg() -> str:
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


if __name__ == "__main__":
    sys.exit(main())
