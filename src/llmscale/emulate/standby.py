"""vLLM's sleep mode on emulated replicas, and the standby pool they form.

A replica started with ``--enable-sleep-mode`` (vLLM also needs ``VLLM_SERVER_DEV_MODE=1``) serves,
beside the OpenAI API (vllm/entrypoints/serve/sleep/api_router.py):

* ``POST /sleep?level=1``: put the engine to sleep. Level 1 keeps the weights in host memory and
  drops the KV cache; the emulator models level 1 only (level 2 answers 400). The replica stops
  taking requests at once, finishes those it has (vLLM's ``wait`` pause mode: a sleep here never
  kills a request), then sleeps; the answer (200, empty) comes once it sleeps, as vLLM's does.
* ``POST /wake_up``: wake it. The weights come back in the catalogue's sleeping tier
  (``perf.start_tiers(...).sleeping``: 1.6 s for Llama-3-8B on one H100; ``--wake-s`` overrides), booked
  as Loading; the answer comes once the replica serves again, and carries the wake time in
  ``x-llmscale-wake-s`` (simulated seconds).
* ``GET /is_sleeping`` -> ``{"is_sleeping": bool}``: true while asleep and while waking.

The fleet is the simulator's, whose standby pool (``Fleet.sleeping``) the backtest already runs: a
replica put to sleep leaves the serving spec for the pool (spec - 1), a woken one rejoins it (spec
+ 1), so ``/admin/scale``'s spec stays the count of replicas in service. The orchestrator's share
(creating and deleting pool replicas) is the admin API's ``POST /admin/standby {"replicas": k}``
(``Fleet.set_standby``): a surplus is deleted, a shortfall starts replicas that are put to sleep as
soon as they serve. A scale-up through ``/admin/scale`` wakes sleepers before starting any cold.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from llmscale.emulate.engine import Emulator
from llmscale.errors import ConfigError
from llmscale.types import Phase

__all__ = ["add_sleep_routes", "asleep", "sleep_replica", "standby_state", "wake_replica", "waking"]

#: the wake tier's index in the fleet's start tiers (sim/fleet.py WOKEN)
_WOKEN = 2
#: how often a /sleep or /wake_up answer re-checks its replica, wall seconds
_POLL_S = 0.02


def sleep_replica(emu: Emulator, name: str) -> None:
    """Take READY replica ``name`` out of service into the pool; it sleeps once idle.

    Raises ConfigError when it is not READY. The fleet's standby target grows by one, so the drain's
    end (``Fleet._retire``) puts this replica to sleep rather than deleting it.
    """
    r = emu.replica(name)
    if r is None or r.phase != Phase.READY:
        phase = Phase.GONE if r is None else r.phase
        raise ConfigError(f"replica {name} is {phase.label}: only a ready replica can be put to sleep")
    now = emu.advance()
    fleet = emu.fleet
    fleet.spec_replicas -= 1
    fleet.standby_target += 1
    fleet._drain(r, now, until_idle=True)
    emu.advance()
    emu.wake.set()


def wake_replica(emu: Emulator, name: str) -> None:
    """Wake sleeping replica ``name``: it serves again after the wake tier; spec + 1. Raises ConfigError
    when it is not asleep."""
    r = emu.replica(name)
    if r is None or r.phase != Phase.SLEEPING:
        phase = Phase.GONE if r is None else r.phase
        raise ConfigError(f"replica {name} is {phase.label}, not sleeping")
    now = emu.advance()
    fleet = emu.fleet
    fleet._wake(r, now)
    fleet.spec_replicas += 1
    fleet.standby_target = max(0, fleet.standby_target - 1)
    emu.advance()
    emu.wake.set()


def waking(emu: Emulator, name: str) -> bool:
    """Whether ``name`` is on its way back from sleep (woken, not serving yet)."""
    r = emu.replica(name)
    return r is not None and r.start_tier == _WOKEN and r.phase < Phase.READY


def asleep(emu: Emulator, name: str) -> bool:
    """What ``/is_sleeping`` answers: asleep, or woken and not serving yet (vLLM's wake_up returns
    once the weights are back)."""
    return emu.phase_of(name) == Phase.SLEEPING or waking(emu, name)


def standby_state(emu: Emulator) -> dict[str, int]:
    """The pool in the admin document's terms: asleep, starting for the pool, and the target."""
    fleet = emu.fleet
    return {
        "standby_replicas": len(fleet.sleeping),
        "standby_starting": len(fleet.standby_starting),
        "standby_target": int(fleet.standby_target),
    }


async def _until(emu: Emulator, name: str, done: Phase, bound_s: float) -> Phase:
    """Poll until replica ``name`` is in phase ``done`` (or gone, or ``bound_s`` wall seconds passed)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + bound_s
    while True:
        emu.advance()
        phase = emu.phase_of(name)
        if phase in (done, Phase.GONE) or loop.time() >= deadline:
            return phase
        await asyncio.sleep(_POLL_S)


def _error(status: int, message: str) -> web.Response:
    kind = "BadRequestError" if status == 400 else "ServiceUnavailableError"
    return web.json_response({"error": {"message": message, "type": kind, "code": status}}, status=status)


def add_sleep_routes(app: web.Application, emu: Emulator, name: str, *, bound_s: float) -> None:
    """Serve vLLM's sleep-mode endpoints for replica ``name`` on ``app`` (its own listener).

    ``bound_s``: the longest a ``/sleep`` answer waits for the replica's requests to finish (wall s).
    """

    async def sleep(request: web.Request) -> web.Response:
        level = request.query.get("level", "1")
        if level != "1":
            return _error(400, f"sleep level {level!r}: the emulator models level 1 only")
        emu.advance()
        if emu.phase_of(name) == Phase.SLEEPING:
            return web.Response(status=200)  # asleep already: vLLM answers 200 too
        try:
            sleep_replica(emu, name)
        except ConfigError as e:
            return _error(400, str(e))
        phase = await _until(emu, name, Phase.SLEEPING, bound_s)
        if phase != Phase.SLEEPING:
            return _error(503, f"replica {name} is {phase.label}, not asleep after {bound_s:g} s")
        return web.Response(status=200)

    async def wake_up(request: web.Request) -> web.Response:
        emu.advance()
        phase = emu.phase_of(name)
        if phase == Phase.READY:
            return web.Response(status=200)  # awake already
        start_s = emu.fleet.now
        if phase == Phase.SLEEPING:
            try:
                wake_replica(emu, name)
            except ConfigError as e:
                return _error(400, str(e))
        elif not waking(emu, name):
            return _error(400, f"replica {name} is {phase.label}, not sleeping")
        # The wake tier in simulated seconds, on the wall clock: bounded at 10x its length plus 5 s.
        cfg = emu.cfg
        bound = 10.0 * emu.fleet.config.wake_s / cfg.time_scale + 5.0
        phase = await _until(emu, name, Phase.READY, bound)
        if phase != Phase.READY:
            return _error(503, f"replica {name} is {phase.label}, not awake after {bound:g} s")
        r = emu.replica(name)
        took_s = (r.phase_since_s if r is not None else emu.fleet.now) - start_s  # when it began serving
        return web.Response(status=200, headers={"x-llmscale-wake-s": f"{took_s:.3f}"})

    async def is_sleeping(request: web.Request) -> web.Response:
        emu.advance()
        return web.json_response({"is_sleeping": asleep(emu, name)})

    app.router.add_post("/sleep", sleep)
    app.router.add_post("/wake_up", wake_up)
    app.router.add_get("/is_sleeping", is_sleeping)
