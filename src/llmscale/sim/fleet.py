"""A simulated serving fleet: replicas with lifecycles, a router, a gateway queue, one event loop.

The fleet implements the ``Cluster`` protocol (``scale_to``, ``replicas``) so the
controller loop drives it exactly as it drives Kubernetes. Time only moves in
:meth:`Fleet.run_until`; arrivals come from the workload's sorted arrays (never
pushed on a heap). Every event carries a number from one per-fleet counter, and
events at the same time run in that order, so runs are deterministic. The end
of each replica's iteration in flight sits in a :class:`StepQueue` keyed
``(time, seq)``, where a replica knows its slot: a jump cut short moves its
entry instead of leaving a stale one behind, and nothing is allocated per
event. Lifecycle transitions (rare) are ``(time_s, seq, kind, replica, tag)``
tuples on a second heap.

Starts come in tiers (:data:`llmscale.perf.cold_start.START_TIERS`): a replica
woken from the standby pool (vLLM level-1 sleep) serves after ``wake_s``; one
placed on a node kept from an earlier replica (``node_keep_s``) skips the node
and the image pull; any other start is cold. Sleeping replicas, and replicas
starting in order to sleep, are outside ``replicas``: the controller sees
neither as capacity, but their GPUs are charged from creation until gone.

With a node pool (``SimConfig.node_start_s`` / ``max_nodes``; off by default) a
cold start first waits for a node in ``Phase.NODE_PENDING``: ``node_start_s``
while one is provisioned, or, with ``max_nodes`` nodes up, until a replica's
node frees, which the waiting replica then takes as a warm node. One replica
per node; a node is held from the start it serves until its replica is gone,
then kept ``node_keep_s`` (or handed to a waiting replica at once).
"""

from __future__ import annotations

import math
import random
from collections import deque
from heapq import heappop, heappush
from typing import Any, Final, final

import numpy as np
from librt.vecs import append, pop, vec
from mypy_extensions import i64, u8

from llmscale.errors import ConfigError
from llmscale.metrics.names import HISTOGRAM_BOUNDS, vllm_1_2_5_buckets
from llmscale.sim.config import SimConfig
from llmscale.sim.replica import BLOCK_TOKENS, IterationCosts, Replica, blocks_for
from llmscale.sim.request import DECODING, Req
from llmscale.types import Phase, ReplicaView, Status

__all__ = ["Fleet", "StepQueue"]

# Kinds of lifecycle event.
_PHASE: Final = 1
_GRACE: Final = 2
_FAULT: Final = 3  # an HBM-glitch edge or an adaptive-batch tick (sim/faults.py); no replica

# Start tiers (indices into llmscale.perf.cold_start.START_TIERS).
COLD: Final = 0
WARM_NODE: Final = 1
WOKEN: Final = 2

_INF: Final = math.inf


def _floats(a: np.ndarray) -> vec[float]:
    # Through the buffer protocol: for the 387k requests of benchmarks/sim_speed.py this takes
    # 0.02 s, where building from ``a.tolist()`` (a boxed float per element) took 0.27 s.
    return vec[float](np.ascontiguousarray(a, dtype=np.float64).data)


def _ints(a: np.ndarray) -> vec[i64]:
    return vec[i64](np.ascontiguousarray(a, dtype=np.int64).data)


def _by_outstanding(r: Replica) -> int:
    return r.outstanding


def _spans_s(spans: list[tuple[float, float]], open_since: list[Replica], now: float) -> float:
    """Seconds up to ``now`` in ``spans`` (since, until) and in the waits of ``open_since`` still on."""
    total = 0.0
    for since, until in spans:
        total += max(0.0, min(until, now) - since)
    for r in open_since:
        total += max(0.0, now - r.phase_since_s)
    return total


@final
class StepQueue:
    """Every replica's next iteration end, earliest first: a 4-ary min-heap on ``(time, seq)``.

    ``seq`` is the fleet-wide event number, so iteration ends at the same time
    run in the order they were scheduled. The keys sit in two vecs beside the
    list of replicas: a sift compares C doubles and ints and touches a replica
    only to move it. Each replica knows its slot (``Replica.heap_pos``), so a
    jump cut short moves its entry (no stale entry left behind to skip). Four
    children per node halve the depth (24 replicas: 3 levels, not 5); nearly
    every event re-keys the replica on top, and a level costs more in moves
    than in compares.
    """

    __slots__ = ("items", "seqs", "times")

    def __init__(self) -> None:
        self.items: list[Replica] = []
        self.times = vec[float]()
        self.seqs = vec[i64]()

    def __len__(self) -> int:
        return len(self.items)

    def schedule(self, r: Replica, t: float, seq: i64) -> None:
        """Key ``r``'s entry ``(t, seq)``, adding it if ``r`` has none."""
        pos = r.heap_pos
        if pos < 0:
            pos = len(self.items)
            self.items.append(r)
            self.times = append(self.times, t)
            self.seqs = append(self.seqs, seq)
            self._up(r, t, seq, pos)
            return
        parent = (pos - 1) >> 2
        if pos > 0 and (t < self.times[parent] or (t == self.times[parent] and seq < self.seqs[parent])):
            self._up(r, t, seq, pos)
        else:
            self._down(r, t, seq, pos)

    def remove(self, r: Replica) -> None:
        """Drop ``r``'s entry, if any."""
        pos = r.heap_pos
        if pos < 0:
            return
        r.heap_pos = -1
        last = self.items.pop()
        self.times, t = pop(self.times)
        self.seqs, seq = pop(self.seqs)
        if last is not r:
            # The last entry fills the hole and sifts from there (the hole's old keys are never read).
            self.items[pos] = last
            last.heap_pos = pos
            self.schedule(last, t, seq)

    def _up(self, r: Replica, t: float, seq: i64, pos: i64) -> None:
        items = self.items
        times = self.times
        seqs = self.seqs
        while pos > 0:
            parent = (pos - 1) >> 2
            pt = times[parent]
            if pt < t or (pt == t and seqs[parent] < seq):
                break
            p = items[parent]
            items[pos] = p
            times[pos] = pt
            seqs[pos] = seqs[parent]
            p.heap_pos = pos
            pos = parent
        items[pos] = r
        times[pos] = t
        seqs[pos] = seq
        r.heap_pos = pos

    def _down(self, r: Replica, t: float, seq: i64, pos: i64) -> None:
        items = self.items
        times = self.times
        seqs = self.seqs
        n: i64 = len(items)
        while True:
            first = 4 * pos + 1
            if first >= n:
                break
            # The earliest of the (up to) four children.
            child = first
            ct = times[first]
            cs = seqs[first]
            end = first + 4
            if end > n:
                end = n
            j = first + 1
            while j < end:
                jt = times[j]
                if jt < ct or (jt == ct and seqs[j] < cs):
                    child = j
                    ct = jt
                    cs = seqs[j]
                j += 1
            if t < ct or (t == ct and seq < cs):
                break
            c = items[child]
            items[pos] = c
            times[pos] = ct
            seqs[pos] = cs
            c.heap_pos = pos
            pos = child
        items[pos] = r
        times[pos] = t
        seqs[pos] = seq
        r.heap_pos = pos


@final
class Fleet:
    """The simulated cluster. Pre: workload arrays sorted by arrival time.

    Per-request outcomes are columns indexed by the request's index:
    ``status`` (a :class:`Status` code per request), ``ttft_s``, ``e2e_s``,
    ``tpot_s``, ``first_token_at_s`` and ``finish_at_s`` (NaN until known or
    when not applicable); ``counts`` tallies the statuses. They are
    ``librt.vecs`` vectors (C arrays once compiled, so a write allocates
    nothing): index them, iterate them, or read them with ``np.asarray`` /
    ``bytes()`` (buffer protocol, no copy).
    """

    def __init__(
        self,
        perf: Any,
        config: SimConfig,
        arrival_s: np.ndarray,
        input_tokens: np.ndarray,
        output_tokens: np.ndarray,
        *,
        initial_replicas: int,
        gpus_per_replica: float,
        pools: tuple[Any, ...] = (),
    ) -> None:
        self.perf = perf
        self.config = config
        self.gpus_per_replica = gpus_per_replica
        # vLLM sizes the KV pool after a profiling pass at the largest batch it will run.
        self.total_blocks = int(
            perf.kv_capacity_blocks(
                config.gpu_memory_utilization,
                BLOCK_TOKENS,
                max_num_batched_tokens=config.max_num_batched_tokens,
                max_num_seqs=config.max_num_seqs,
            )
        )
        self.costs = IterationCosts(perf, config.max_num_seqs)
        # A mixed fleet (llmscale.sim.mixed.GpuPool per GPU type; none: one type, as before): each
        # type prices its iterations and sizes its KV pool by its own GPU.
        self._pools = pools
        self._pool_costs: list[IterationCosts] = []
        self._pool_blocks: list[int] = []
        self._pool_weight: list[float] = []
        self._pool_of: dict[Replica, int] = {}
        self._pool_members: list[list[Replica]] = [[] for _ in pools]
        #: the pool a replica started by ``scale_to`` joins (``scale_mix`` sets it per type)
        self._start_pool = 0
        if pools:
            if config.node_pool:
                raise ConfigError(
                    "a mixed-GPU fleet has no node pool: node_start_s and max_nodes must be None"
                )
            for pool in pools:
                self._pool_costs.append(IterationCosts(pool.perf, config.max_num_seqs))
                self._pool_blocks.append(
                    int(
                        pool.perf.kv_capacity_blocks(
                            config.gpu_memory_utilization,
                            BLOCK_TOKENS,
                            max_num_batched_tokens=config.max_num_batched_tokens,
                            max_num_seqs=config.max_num_seqs,
                        )
                    )
                )
                self._pool_weight.append(float(pool.weight_rps))
            # A request is admitted only when every type can hold it (the router may send it anywhere).
            self.total_blocks = min(self._pool_blocks)
        # Settings read per request, held natively (the config is an ordinary Python object).
        self._timeout_s = config.timeout_s
        self._round_robin = config.router == "round-robin"
        self._max_queue = -1 if config.max_queue is None else config.max_queue  # -1: unbounded
        self.max_model_len = config.max_model_len or int(getattr(perf.model, "max_context_tokens", 8192))
        #: the latency families' buckets plus vLLM's 1-2-5 token buckets of
        #: ``vllm:request_generation_tokens`` up to max_model_len (what a real replica exports)
        self._histogram_bounds = {
            **HISTOGRAM_BOUNDS,
            "generation_tokens": tuple(float(b) for b in vllm_1_2_5_buckets(self.max_model_len)),
            "prompt_tokens": tuple(float(b) for b in vllm_1_2_5_buckets(self.max_model_len)),
        }
        if not config.chunked_prefill and config.max_num_batched_tokens < self.max_model_len:
            # vLLM refuses to start like this: a prompt longer than the budget could never run.
            raise ConfigError(
                f"max_num_batched_tokens = {config.max_num_batched_tokens} is below max_model_len = "
                f"{self.max_model_len}: without chunked prefill every prompt must fit one iteration "
                "(raise max_num_batched_tokens, lower max_model_len or enable chunked prefill)"
            )
        self._arr = _floats(arrival_s)
        self._inp = _ints(input_tokens)
        self._out = _ints(output_tokens)
        n: i64 = len(self._arr)
        self.num_requests = n
        self._next = 0
        self.now = 0.0
        self._steps = StepQueue()
        self._life: list[tuple[float, int, int, Replica | None, int]] = []  # lifecycle and fault events
        self._seq = 0
        self._rng = random.Random(config.seed)
        self._noise_sigma = config.step_noise

        # Per-request outcomes (see the class docstring).
        nan = np.full(n, math.nan)
        self.status = vec[u8](bytes(n))  # all Status.IN_FLIGHT (0)
        self.ttft_s = _floats(nan)
        self.e2e_s = _floats(nan)
        self.tpot_s = _floats(nan)
        self.first_token_at_s = _floats(nan)
        self.finish_at_s = _floats(nan)
        self.unresolved: i64 = 0
        self.counts = vec[i64]([0] * len(Status.NAMES))

        self.replicas: list[Replica] = []  # not yet gone
        self.ready: list[Replica] = []  # routable
        self.gateway: deque[Req] = deque()
        self._rr = 0
        self._names = 0
        self.spec_replicas = 0
        self.scale_events = 0
        self._gone_counters = [0.0, 0.0, 0.0]  # busy_s, active_s, dram_bytes of gone replicas
        self.last_resolved_s = 0.0
        #: GPU-seconds paid outside the simulated span (the oracle's early-provisioned cold starts)
        self.prepaid_gpu_s = 0.0
        #: (drain started, killed at, requests killed) for every replica killed at its grace deadline
        self.kill_log: list[tuple[float, float, int]] = []
        self._gone_spans: list[tuple[float, float]] = []  # (created_s, gone_s) of replicas gone
        # Phase durations (pending, loading, warmup) per start tier.
        self._tier_phases: list[tuple[float, float, float]] = [
            (config.pending_s, config.loading_s, config.warmup_s),
            (config.warm_node_pending_s, config.warm_node_loading_s, config.warm_node_warmup_s),
            (0.0, config.wake_s, 0.0),
        ]
        #: the standby pool asked for (set_standby): replicas kept asleep, GPU held
        self.standby_target = 0
        self.sleeping: list[Replica] = []  # asleep, oldest first
        self.standby_starting: list[Replica] = []  # starting, to sleep once ready
        self._free_nodes: list[float] = []  # when each kept node is released (node_keep_s)
        # The node pool (module docstring); with it off none of these change.
        self._node_pool = config.node_pool
        self._node_start_s = config.node_start_s or 0.0
        self._max_nodes = -1 if config.max_nodes is None else config.max_nodes  # -1: unbounded
        self._nodes_held = 0  # nodes up or provisioning that belong to a replica not yet gone
        self._node_waiting: list[Replica] = []  # NODE_PENDING with no node yet (pool full), oldest first
        self._node_provisioning: list[Replica] = []  # NODE_PENDING while their node is provisioned
        #: (since, until) of every wait for a node that ended; a wait in ``_node_waiting`` also held
        #: no GPU, and is listed in ``_unbilled_spans``
        self._node_wait_spans: list[tuple[float, float]] = []
        self._unbilled_spans: list[tuple[float, float]] = []
        #: (time_s, tier) of every start into service after the initial fleet (tier: START_TIERS
        #: index); a replica started for the pool is logged when it is woken or taken into service
        self.start_log: list[tuple[float, int]] = []

        for _ in range(initial_replicas):
            self._start_replica(0.0, warm=True)
        self.spec_replicas = initial_replicas
        #: HBM glitches and the adaptive batch fuse (seed 004 4.4); None without glitch windows (the
        #: fuse reads only glitches, so alone it has nothing to act on)
        self.faults: Any = None
        if config.hbm_glitches:
            from llmscale.sim.faults import FaultDriver

            self.faults = FaultDriver(self, perf, config.hbm_glitches, config.adaptive_batch)
            for t, tag in self.faults.initial_events():
                self._push(t, _FAULT, None, tag)

    def _fault(self, tag: int, now: float) -> None:
        """A fault event at ``now`` (sim/faults.py); it schedules its window's next one."""
        nxt = self.faults.on_event(tag, now)
        if nxt is not None:
            self._push(nxt[0], _FAULT, None, nxt[1])

    # ---------------------------------------------------------------- engine

    def noise(self) -> float:
        """Multiplicative step-time noise, drawn once per jump or prefill iteration."""
        if self._noise_sigma <= 0.0:
            return 1.0
        return math.exp(self._rng.gauss(0.0, self._noise_sigma))

    def push_step(self, r: Replica) -> None:
        """Schedule the end of ``r``'s iteration in flight at ``r.plan_end``, replacing any earlier one."""
        self._seq += 1
        self._steps.schedule(r, r.plan_end, self._seq)

    def cancel_step(self, r: Replica) -> None:
        """Forget ``r``'s iteration in flight, if any (its replica was killed or is gone)."""
        self._steps.remove(r)

    def _push(self, t: float, kind: int, r: Replica | None, tag: int) -> None:
        self._seq += 1
        heappush(self._life, (t, self._seq, kind, r, tag))

    def run_until(self, t_end: float) -> None:
        """Process every arrival and event with time <= ``t_end``; then ``now = t_end``."""
        steps = self._steps
        life = self._life
        arr = self._arr
        n: i64 = self.num_requests
        i: i64 = self._next
        while True:
            ta = arr[i] if i < n else _INF
            # The next event: the earliest iteration end, unless a lifecycle event comes first.
            th = steps.times[0] if steps.items else _INF
            is_step = True
            if life:
                tl = life[0][0]
                if tl < th or (tl == th and (not steps.items or life[0][1] < steps.seqs[0])):
                    th = tl
                    is_step = False
            if ta <= th:
                if ta > t_end:
                    break
                self.now = ta
                self._arrive(i, ta)
                i += 1
                self._next = i
            else:
                if th > t_end:
                    break
                self.now = th
                if is_step:
                    # The replica stays on top of the heap, keyed by this very time (no key is
                    # smaller), while it applies its iteration: scheduling its next one then costs
                    # one sift-down instead of a pop and a push. Still there unscheduled, it is idle.
                    r = steps.items[0]
                    seq = steps.seqs[0]
                    r.on_step_end(th)
                    if r.heap_pos >= 0 and steps.seqs[r.heap_pos] == seq:
                        steps.remove(r)
                    continue
                t, _, kind, ro, tag = heappop(life)
                if ro is None:
                    self._fault(tag, t)
                    continue
                r = ro
                if kind == _PHASE:
                    if r.phase == tag:
                        self._advance_phase(r, t)
                elif r.draining and r.drain_epoch == tag and not r.drain_until_idle:
                    self._kill(r, t)
        self._next = i
        self.now = t_end

    @property
    def arrivals_done(self) -> bool:
        return self._next >= self.num_requests

    # --------------------------------------------------------------- routing

    def _arrive(self, i: i64, now: float) -> None:
        req = Req(i, now, self._inp[i], self._out[i])
        self.unresolved += 1
        need = req.input_tokens + req.output_tokens
        if need > self.max_model_len or blocks_for(need) > self.total_blocks:
            # vLLM answers 400 for a request longer than the model's context.
            self._resolve(req, Status.REJECTED)
            return
        if self.ready:
            self._route(req, now)
        elif 0 <= self._max_queue <= len(self.gateway):
            self._resolve(req, Status.REJECTED)
        else:
            self.gateway.append(req)

    def _route(self, req: Req, now: float) -> None:
        ready = self.ready
        if self._pools:
            target = self._least_expected_wait(ready)
        elif self._round_robin:
            self._rr = (self._rr + 1) % len(ready)
            target = ready[self._rr]
        else:
            # The least outstanding requests; the first such in ready order (as min() would pick).
            target = ready[0]
            low = target.outstanding
            for r in ready:
                if r.outstanding < low:
                    target = r
                    low = r.outstanding
        target.enqueue(req, now)

    def _least_expected_wait(self, ready: list[Replica]) -> Replica:
        """A mixed fleet's router: the replica whose outstanding requests, this one included, it
        clears soonest, ``(outstanding + 1) / capacity`` (``GpuPool.weight_rps``). Of an idle A100
        (6.9 req/s) and an H100 holding one request (12.6 req/s): 1 / 6.9 = 0.145 s against
        2 / 12.6 = 0.159 s, the A100; with two held, the H100 takes the next of three. Types of
        equal weight: least outstanding, as the one-type router."""
        pool_of = self._pool_of
        weight = self._pool_weight
        target = ready[0]
        best = float(target.outstanding + 1) / weight[pool_of[target]]
        for r in ready:
            wait = float(r.outstanding + 1) / weight[pool_of[r]]
            if wait < best:
                target = r
                best = wait
        return target

    def _flush_gateway(self, now: float) -> None:
        gateway = self.gateway
        timeout_s = self._timeout_s
        while gateway and self.ready:
            req = gateway.popleft()
            if now - req.arrival_s >= timeout_s:
                self._resolve(req, Status.TIMED_OUT)
            else:
                self._route(req, now)

    def expire_gateway(self, now: float) -> None:
        """Count clients that gave up while waiting in front of an empty fleet."""
        gateway = self.gateway
        timeout_s = self._timeout_s
        while gateway and now - gateway[0].arrival_s >= timeout_s:
            self._resolve(gateway.popleft(), Status.TIMED_OUT)

    # ------------------------------------------------------ replica callbacks

    def on_complete(self, req: Req, now: float) -> None:
        i = req.idx
        self.finish_at_s[i] = now
        self.e2e_s[i] = now - req.arrival_s
        self.tpot_s[i] = (
            (now - req.first_token_s) / float(req.output_tokens - 1) if req.output_tokens > 1 else math.nan
        )
        self._resolve(req, Status.COMPLETED)

    def on_timed_out(self, req: Req, now: float) -> None:
        self._resolve(req, Status.TIMED_OUT)

    def _resolve(self, req: Req, status: int) -> None:
        # Every outcome field is written here, at resolution, so a resolution is
        # always complete (the oracle's trial runs rely on it).
        i = req.idx
        self.status[i] = status
        first = req.first_token_s
        self.first_token_at_s[i] = first if first >= 0.0 else math.nan
        self.ttft_s[i] = first - req.arrival_s if first >= 0.0 else math.nan
        if status != Status.COMPLETED:
            self.finish_at_s[i] = self.e2e_s[i] = self.tpot_s[i] = math.nan
        self.counts[status] += 1
        self.unresolved -= 1
        self.last_resolved_s = self.now

    def on_drained(self, replica: Replica, now: float) -> None:
        self._retire(replica, now)

    # ------------------------------------------------------------- lifecycle

    def _start_replica(self, now: float, *, warm: bool, standby: bool = False) -> Replica:
        cfg = self.config
        tier = COLD
        # Where the node comes from with the pool on: kept, provisioned now, or none free yet.
        node_wait = False
        provision = False
        if not warm:
            # A node kept from a replica gone within node_keep_s has the image and the weights.
            nodes = [t for t in self._free_nodes if t > now]
            if nodes:
                nodes.pop(0)
                tier = WARM_NODE
            elif self._node_pool:
                node_wait = True
                provision = self._max_nodes < 0 or self._nodes_held + len(nodes) < self._max_nodes
            self._free_nodes = nodes
            if not standby and (not node_wait or provision):
                self.start_log.append((now, tier))
        if self._node_pool and (provision or not node_wait):
            self._nodes_held += 1
        self._names += 1
        costs, blocks = self.costs, self.total_blocks
        if self._pools:
            costs, blocks = self._pool_costs[self._start_pool], self._pool_blocks[self._start_pool]
        r = Replica(
            f"replica-{self._names}",
            self,
            costs,
            total_blocks=blocks,
            max_seqs=cfg.max_num_seqs,
            max_batched_tokens=cfg.max_num_batched_tokens,
            timeout_s=cfg.timeout_s,
            created_s=now,
            phase=Phase.READY if warm else (Phase.NODE_PENDING if node_wait else Phase.PENDING),
            histogram_bounds=self._histogram_bounds,
            max_jump=cfg.max_jump_steps,
            chunked_prefill=cfg.chunked_prefill,
            step_token_stats=cfg.step_token_stats,
        )
        r.start_tier = tier
        if self._pools:
            self._pool_of[r] = self._start_pool
            self._pool_members[self._start_pool].append(r)
        if standby:
            self.standby_starting.append(r)
        else:
            self.replicas.append(r)
        if warm:
            self.ready.append(r)
        elif provision:
            self._node_provisioning.append(r)
            self._push(now + self._node_start_s, _PHASE, r, Phase.NODE_PENDING)
        elif node_wait:
            # The pool is full: unschedulable until a replica's node frees (_release_node).
            self._node_waiting.append(r)
        else:
            self._push(now + self._tier_phases[tier][0], _PHASE, r, Phase.PENDING)
        return r

    def _end_node_wait(self, r: Replica, now: float) -> None:
        """``r`` leaves NODE_PENDING at ``now`` (its node is up, or it is gone): book the wait."""
        if r in self._node_waiting:
            self._node_waiting.remove(r)
            self._unbilled_spans.append((r.phase_since_s, now))
        else:
            self._node_provisioning.remove(r)
        self._node_wait_spans.append((r.phase_since_s, now))

    def _bind(self, r: Replica, tier: int, now: float) -> None:
        """``r``, waiting for a node, got one at ``now``: its pod starts in ``tier``."""
        self._end_node_wait(r, now)
        r.start_tier = tier
        r.phase = Phase.PENDING
        r.phase_since_s = now
        self._push(now + self._tier_phases[tier][0], _PHASE, r, Phase.PENDING)

    def _release_node(self, r: Replica, now: float) -> None:
        """``r`` is going: the node it holds (if any) goes to the oldest waiting replica, else is
        kept ``node_keep_s``. A node still being provisioned is given up with its replica: the
        slot goes to a waiting replica, which asks for a node of its own."""
        if r.phase == Phase.NODE_PENDING:
            had_node = r in self._node_provisioning
            self._end_node_wait(r, now)
            if not had_node:
                return
            self._nodes_held -= 1
            if self._node_waiting:
                w = self._node_waiting[0]
                self._end_node_wait(w, now)
                self._node_waiting_to_provisioning(w, now)
            return
        if self._node_waiting:
            # The scheduler binds the waiting pod to the freed node: image and weights are there.
            w = self._node_waiting[0]
            self._bind(w, WARM_NODE, now)
            if w not in self.standby_starting:
                self.start_log.append((now, WARM_NODE))
            return
        self._nodes_held -= 1
        if self.config.node_keep_s > 0:
            self._free_nodes.append(now + self.config.node_keep_s)

    def _node_waiting_to_provisioning(self, w: Replica, now: float) -> None:
        """A waiting replica got a slot at ``now``: a node is provisioned for it (still NODE_PENDING)."""
        self._nodes_held += 1
        # A new span from now: the wait so far was booked (unbilled) by _end_node_wait.
        w.phase_since_s = now
        self._node_provisioning.append(w)
        self._push(now + self._node_start_s, _PHASE, w, Phase.NODE_PENDING)
        if w not in self.standby_starting:
            self.start_log.append((now, COLD))

    def _advance_phase(self, r: Replica, now: float) -> None:
        if r.phase == Phase.NODE_PENDING:
            # Its node joined the cluster: the pod is scheduled and starts cold.
            self._bind(r, COLD, now)
            return
        phases = self._tier_phases[r.start_tier]
        r.phase_since_s = now
        if r.phase == Phase.PENDING:
            r.phase = Phase.LOADING
            self._push(now + phases[1], _PHASE, r, Phase.LOADING)
        elif r.phase == Phase.LOADING:
            r.phase = Phase.WARMUP
            self._push(now + phases[2], _PHASE, r, Phase.WARMUP)
        elif r.phase == Phase.WARMUP:
            if r in self.standby_starting:
                # Started for the pool: vLLM is put to sleep as soon as it serves.
                self.standby_starting.remove(r)
                self._sleep(r, now)
                return
            r.phase = Phase.READY
            self.ready.append(r)
            self._flush_gateway(now)

    def _sleep(self, r: Replica, now: float) -> None:
        """Put idle ``r`` into level-1 sleep: out of service, its GPU still held."""
        r.phase = Phase.SLEEPING
        r.phase_since_s = now
        self.sleeping.append(r)

    def _wake(self, r: Replica, now: float) -> None:
        """Wake sleeping ``r``: it serves after ``wake_s`` (booked as loading)."""
        self.sleeping.remove(r)
        r.start_tier = WOKEN
        r.phase = Phase.LOADING
        r.phase_since_s = now
        r.drain_until_idle = False
        self.replicas.append(r)
        self.start_log.append((now, WOKEN))
        self._push(now + self._tier_phases[WOKEN][1], _PHASE, r, Phase.LOADING)

    def _retire(self, r: Replica, now: float) -> None:
        """An idle replica leaves service: to the standby pool while it is short, else gone.

        A replica still starting for the pool gives its place to this one, which is ready now.
        """
        short = len(self.sleeping) + len(self.standby_starting) < self.standby_target
        if not short and self.standby_starting and len(self.sleeping) < self.standby_target:
            self._gone(self.standby_starting[-1], now)
            short = True
        if short:
            r.sync(now)
            self.cancel_step(r)
            self.replicas.remove(r)
            if r in self.ready:
                self.ready.remove(r)
            self._sleep(r, now)
        else:
            self._gone(r, now)

    def _drain(self, r: Replica, now: float, *, until_idle: bool = False) -> None:
        self.ready.remove(r)
        r.phase = Phase.DRAINING
        r.phase_since_s = now
        r.drain_until_idle = until_idle
        r.drain_epoch += 1
        if r.outstanding == 0 and not r.busy:
            self._retire(r, now)
        elif not until_idle:
            self._push(now + self.config.grace_s, _GRACE, r, r.drain_epoch)

    def _kill(self, r: Replica, now: float) -> None:
        r.sync(now)
        killed = r.kill_all(now)
        for req in killed:
            self._resolve(req, Status.KILLED)
        self.kill_log.append((r.phase_since_s, now, len(killed)))
        self._gone(r, now)

    def _gone(self, r: Replica, now: float) -> None:
        r.sync(now)
        if r.phase == Phase.SLEEPING:
            self.sleeping.remove(r)
        elif r in self.standby_starting:
            self.standby_starting.remove(r)
        else:
            self.cancel_step(r)
            self.replicas.remove(r)
            if r in self.ready:
                self.ready.remove(r)
        if self._node_pool:
            self._release_node(r, now)
        elif self.config.node_keep_s > 0:
            self._free_nodes.append(now + self.config.node_keep_s)
        r.phase = Phase.GONE
        r.phase_since_s = now
        r.gone_s = now
        self._gone_spans.append((r.created_s, now))
        g = self._gone_counters
        g[0] += r.busy_s
        g[1] += r.active_s
        g[2] += r.dram_bytes

    # ------------------------------------------------------ Cluster protocol

    def replicas_view(self) -> tuple[ReplicaView, ...]:
        return tuple(ReplicaView(r.name, r.phase, r.phase_since_s, r.created_s) for r in self.replicas)

    def scale_to(self, n: int, now: float, *, warm: bool = False, drain_until_idle: bool = False) -> None:
        """Make ``n`` replicas active (ready or on the way); pre: n >= 0, ``now`` is the fleet's time.

        Growing first reclaims replicas that are draining until idle (they are
        warm), then adds Pending replicas that pay the full cold start.
        Shrinking first cancels replicas that are not ready yet (newest first,
        as a ReplicaSet deletes unready pods first), then drains the
        least-loaded ready ones: with ``drain_until_idle`` they leave once
        idle, otherwise they are killed at the grace deadline (Kubernetes'
        terminationGracePeriodSeconds). ``warm=True`` adds replicas that are
        Ready at once (the oracle, which provisioned them a cold start ahead
        and pays for that separately).
        """
        if n < 0:
            raise ConfigError(f"scale_to({n}): replicas must be >= 0")
        node_pending = Phase.NODE_PENDING
        active = [r for r in self.replicas if r.phase < Phase.DRAINING or r.phase == node_pending]
        if n != self.spec_replicas:
            self.scale_events += 1
        self.spec_replicas = n
        if n > len(active):
            missing = n - len(active)
            for r in [r for r in self.replicas if r.phase == Phase.DRAINING and r.drain_until_idle][:missing]:
                # Cordoned, still warm: put it back in service instead of paying a cold start.
                r.phase = Phase.READY
                r.phase_since_s = now
                r.drain_until_idle = False
                self.ready.append(r)
                missing -= 1
            if not warm:
                # The standby pool next: sleeping replicas wake in seconds, then those still
                # starting for the pool join as capacity on the way.
                while missing and self.sleeping:
                    self._wake(self.sleeping[0], now)
                    missing -= 1
                while missing and self.standby_starting:
                    r = self.standby_starting.pop(0)
                    self.replicas.append(r)
                    self.start_log.append((now, r.start_tier))
                    missing -= 1
            for _ in range(missing):
                self._start_replica(now, warm=warm)
            if self.gateway:
                self._flush_gateway(now)
        elif n < len(active):
            surplus = len(active) - n
            # A ReplicaSet deletes pods no node took first, then the newest (the key's first part is
            # the same for every replica without a node pool).
            starting = sorted(
                (r for r in active if r.phase < Phase.READY or r.phase == node_pending),
                key=lambda r: (r.phase != node_pending, -r.created_s),
            )
            for r in starting[:surplus]:
                self._gone(r, now)
            surplus -= min(surplus, len(starting))
            if surplus:
                for r in sorted(self.ready, key=_by_outstanding)[:surplus]:
                    self._drain(r, now, until_idle=drain_until_idle)

    def scale_mix(self, counts: tuple[int, ...], now: float, *, drain_until_idle: bool = False) -> None:
        """Make ``counts[k]`` replicas of GPU pool ``k`` active (ready or on the way); pre: a mixed
        fleet, one count >= 0 per pool, ``now`` is the fleet's time.

        Per type as :meth:`scale_to` does for the whole fleet: growing reclaims that type's
        replicas draining until idle, then wakes none (a mixed fleet keeps no standby pool of its
        own) and starts cold ones; shrinking cancels that type's unready replicas, newest first,
        then drains its least-loaded ready ones.
        """
        if len(counts) != len(self._pools) or any(n < 0 for n in counts):
            raise ConfigError(f"scale_mix({counts}): one count >= 0 per GPU pool ({len(self._pools)})")
        total = sum(counts)
        changed = total != self.spec_replicas
        for k, n in enumerate(counts):
            mine = [r for r in self.replicas if self._pool_of[r] == k]
            active = [r for r in mine if r.phase < Phase.DRAINING]
            if n > len(active):
                changed = True
                missing = n - len(active)
                for r in [r for r in mine if r.phase == Phase.DRAINING and r.drain_until_idle][:missing]:
                    r.phase = Phase.READY
                    r.phase_since_s = now
                    r.drain_until_idle = False
                    self.ready.append(r)
                    missing -= 1
                self._start_pool = k
                for _ in range(missing):
                    self._start_replica(now, warm=False)
                self._start_pool = 0
            elif n < len(active):
                changed = True
                surplus = len(active) - n
                starting = sorted((r for r in active if r.phase < Phase.READY), key=lambda r: -r.created_s)
                for r in starting[:surplus]:
                    self._gone(r, now)
                surplus -= min(surplus, len(starting))
                if surplus:
                    ready = [r for r in self.ready if self._pool_of[r] == k]
                    for r in sorted(ready, key=_by_outstanding)[:surplus]:
                        self._drain(r, now, until_idle=drain_until_idle)
        if changed:
            self.scale_events += 1
        self.spec_replicas = total
        if self.gateway:
            self._flush_gateway(now)

    @property
    def pools(self) -> tuple[Any, ...]:
        """The GPU pools of a mixed fleet (``llmscale.sim.mixed.GpuPool``); () for one type."""
        return self._pools

    def pool_counts(self) -> tuple[int, ...]:
        """Active replicas (ready or on the way, not draining) per GPU pool of a mixed fleet."""
        counts = [0] * len(self._pools)
        for r in self.replicas:
            if r.phase < Phase.DRAINING:
                counts[self._pool_of[r]] += 1
        return tuple(counts)

    def pool_ready_counts(self) -> tuple[int, ...]:
        """Ready (serving) replicas per GPU pool of a mixed fleet."""
        counts = [0] * len(self._pools)
        for r in self.replicas:
            if r.phase == Phase.READY:
                counts[self._pool_of[r]] += 1
        return tuple(counts)

    def set_standby(self, n: int, now: float) -> None:
        """Keep ``n`` replicas in vLLM level-1 sleep (the standby pool); pre: n >= 0.

        A surplus goes at once (replicas still starting for the pool first,
        newest first). A shortfall is filled by replicas that leave service
        (a drain that reaches idle puts its replica to sleep instead of
        removing it), so replicas draining now count towards the pool; the
        rest start now (in their tier) and fall asleep once ready.
        """
        if n < 0:
            raise ConfigError(f"set_standby({n}): replicas must be >= 0")
        self.standby_target = n
        while len(self.sleeping) + len(self.standby_starting) > n:
            pool = self.standby_starting if self.standby_starting else self.sleeping
            self._gone(pool[-1], now)
        draining = sum(1 for r in self.replicas if r.phase == Phase.DRAINING)
        for _ in range(n - len(self.sleeping) - len(self.standby_starting) - draining):
            self._start_replica(now, warm=False, standby=True)

    def starts_by_tier(self) -> dict[str, int]:
        """Starts after the initial fleet, by tier (START_TIERS' names)."""
        from llmscale.perf.cold_start import START_TIERS

        counts = dict.fromkeys(START_TIERS, 0)
        for _, tier in self.start_log:
            counts[START_TIERS[tier]] += 1
        return counts

    # ------------------------------------------------------------ accounting

    def sync_all(self, now: float) -> None:
        for r in self.replicas:
            r.sync(now)
        self.expire_gateway(now)

    def gpu_seconds(self, now: float) -> float:
        """GPU-seconds up to ``now``: every GPU of every replica from Pending until Gone.

        With a node pool, from the start of its node wait (a GPU node is billed while it boots),
        less any time it waited for a full pool to free a node: that replica held no GPU yet.
        """
        total = 0.0
        for created, gone in self._gone_spans:
            total += max(0.0, min(gone, now) - created)
        for group in (self.replicas, self.sleeping, self.standby_starting):
            # A sleeping replica still holds its GPU (level-1 sleep frees memory, not the device).
            for r in group:
                total += max(0.0, now - r.created_s)
        if self._node_pool:
            total -= _spans_s(self._unbilled_spans, self._node_waiting, now)
        return total * self.gpus_per_replica + self.prepaid_gpu_s

    def pool_gpu_seconds(self, now: float) -> tuple[float, ...]:
        """GPU-seconds up to ``now`` per GPU pool of a mixed fleet (their sum is :meth:`gpu_seconds`
        less the oracle's prepaid seconds): every replica of the type from creation until gone."""
        out = []
        for k, members in enumerate(self._pool_members):
            held = 0.0
            for r in members:
                end = r.gone_s if r.gone_s >= 0.0 else now
                held += max(0.0, min(end, now) - r.created_s)
            out.append(held * self._pools[k].gpus_per_replica)
        return tuple(out)

    def node_pending_seconds(self, now: float) -> float:
        """Replica-seconds spent in NODE_PENDING up to ``now`` (0 without a node pool)."""
        if not self._node_pool:
            return 0.0
        return _spans_s(self._node_wait_spans, self._node_waiting + self._node_provisioning, now)

    def counter_totals(self) -> tuple[float, float, float]:
        """(SM-busy seconds, iteration-active seconds, DRAM bytes) over all replicas ever."""
        g = self._gone_counters
        busy, active, dram = g[0], g[1], g[2]
        for r in self.replicas:
            busy += r.busy_s
            active += r.active_s
            dram += r.dram_bytes
        return busy, active, dram

    def finish(self, now: float) -> None:
        """Close the books at ``now``: clients still waiting past their time-out have given up."""
        self.sync_all(now)
        for r in self.replicas:
            for req in r.expire_waiting(now):
                self._resolve(req, Status.TIMED_OUT)

    # ----------------------------------------------------------- online use

    @property
    def next_event_s(self) -> float:
        """Time of the earliest queued engine or lifecycle event (inf when none); may be a stale entry."""
        t = self._steps.times[0] if self._steps.items else math.inf
        return min(t, self._life[0][0]) if self._life else t

    def submit(
        self, input_tokens: int, output_tokens: int, now_s: float, replica: Replica | None = None
    ) -> Req:
        """Admit one request arriving at ``now_s`` from outside the workload arrays; return it.

        For the wall-clock emulator, whose HTTP clients arrive one by one. The
        fleet first processes everything up to ``now_s``; the request then goes
        where ``_arrive`` would send it (rejected if too long, routed, or held at
        the gateway), or straight to ``replica`` when given (a client that called
        one replica's own port; pre: that replica is READY). Its outcome fields
        are appended to the per-request lists under ``req.idx``.
        Pre: every workload arrival is processed (the emulator builds the fleet
        with none), ``now_s >= self.now``, and ``input_tokens, output_tokens >= 1``.
        """
        if self._next < self.num_requests:
            raise ValueError("Fleet.submit: workload arrivals are still pending; submit mixes with none")
        self.run_until(now_s)
        i = self.num_requests
        self._arr = append(self._arr, now_s)
        self._inp = append(self._inp, input_tokens)
        self._out = append(self._out, output_tokens)
        self.num_requests = self._next = i + 1
        self.status = append(self.status, Status.IN_FLIGHT)
        self.ttft_s = append(self.ttft_s, math.nan)
        self.e2e_s = append(self.e2e_s, math.nan)
        self.tpot_s = append(self.tpot_s, math.nan)
        self.first_token_at_s = append(self.first_token_at_s, math.nan)
        self.finish_at_s = append(self.finish_at_s, math.nan)
        # The same decisions as _arrive, kept apart so the batch hot path is untouched.
        req = Req(i, now_s, input_tokens, output_tokens)
        self.unresolved += 1
        need = input_tokens + output_tokens
        if need > self.max_model_len or blocks_for(need) > self.total_blocks:
            self._resolve(req, Status.REJECTED)
        elif replica is not None:
            replica.enqueue(req, now_s)
        elif self.ready:
            self._route(req, now_s)
        elif 0 <= self._max_queue <= len(self.gateway):
            self._resolve(req, Status.REJECTED)
        else:
            self.gateway.append(req)
        return req

    def abort(self, req: Req, now_s: float) -> bool:
        """The client of ``req`` went away at ``now_s``: take it out of the gateway or its replica.

        Resolved as ``Status.ABORTED``; False (and nothing done) when it was
        resolved already. For the wall-clock emulator, whose HTTP clients may
        disconnect mid-stream. Pre: ``run_until(now_s)`` was called.
        """
        if self.status[req.idx] != Status.IN_FLIGHT:
            return False
        r = req.replica
        if isinstance(r, Replica):
            r.sync(now_s)
            if self.status[req.idx] != Status.IN_FLIGHT:
                return False  # that sync dropped it as timed out
            r.abort(req, now_s)
        else:
            self.gateway.remove(req)
        self._resolve(req, Status.ABORTED)
        return True

    def emitted_tokens(self, req: Req, now_s: float) -> int:
        """Output tokens ``req`` has produced by ``now_s``; pre: ``run_until(now_s)`` was called.

        A decoding request's count is lazy (see :class:`Req`): its replica is
        synced to the whole steps finished by ``now_s`` and the count is read
        off the replica's step counter. A completed request has all its tokens.
        """
        if req.state == DECODING:
            r = req.replica
            assert isinstance(r, Replica)
            r.sync(now_s)
            return req.gen_join + r.counter - req.counter_join
        if self.status[req.idx] == Status.COMPLETED:
            return req.output_tokens
        return req.generated
