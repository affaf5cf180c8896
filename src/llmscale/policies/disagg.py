"""Sizing two pools: ``slo-disagg``, llmscale's pool-aware policy for prefill/decode disaggregation.

Each pool of a disaggregated deployment (:mod:`llmscale.sim.disagg`) gets its own
controller, its own guards and one instance of this policy built for its role;
each reads only its own pool's signals, as a live deployment's per-pool scrape
would give them.

Prefill (``pool = "prefill"``): TTFT and the prefill queue drive it.
    Capacity: a replica with prompts waiting fills each iteration with their chunks up to
    ``max_num_batched_tokens``, so it prefills ``C`` prompt tokens/s of full iterations
    (``replica_tails.packed_prefill_tokens_s`` at the observed mean prompt and its spread); the
    pool needs the fewest replicas at which at most ``miss_budget`` of prompts wait past what the
    TTFT budget leaves after a prompt's own iteration (:func:`prefill_pool_replicas`: one queue
    before the pool, Erlang's C with the arrivals' dispersion and the prompts' spread), at most
    ``util_max`` busy; ``target_util`` where the budget leaves a mean prompt no wait.
    Reaction: the pool's own P95 TTFT (queue + prefill) over its budget -- the
    SLO less the KV transfer of a mean prompt and one decode step at the ITL
    target -- asks for ``ceil(ready x ttft / budget)`` (at least one more, at
    most twice the ready count); more prompts waiting per replica than half the wait budget
    drains (at least ``queue_per_replica_max``), for one more.
    E.g. Llama-3-8B on an H100 prefills 2,048-token prompts of CV 1 at about 33,800 tokens/s
    in full 8,192-token iterations (one prompt alone: 31,800); 20 req/s of them under a 2 s TTFT
    are 1.21 Erlangs: 2 replicas (tests/policies/test_disagg_policies.py).

Decode (``pool = "decode"``): inter-token latency and KV usage drive it.
    Capacity: the largest batch ``B`` whose step stays within ``itl_target_s x
    itl_headroom`` at the context of the sequences in flight, ``ISL + OSL (1 + cv^2) / 2``
    (outputs in flight are length-biased: ``cv`` the observed spread of output lengths), also
    within ``kv_high`` of the KV pool (``perf.replica_tails.decode_only_batch``); its rate
    ``T = B / step(B)`` tokens/s;
    the pool needs ``ceil(rate x OSL / (T x u))``; ``u`` holds the Poisson count of sequences
    in flight (``rate x OSL x B / T``, Little's law) within ``B`` per replica but for
    ``miss_budget`` of the time, within [``target_util``, ``util_max``].
    Reaction: a P95 ITL over the target asks for ``ceil(ready x itl / target)``
    (at least one more, at most twice the ready count); the fullest replica's KV
    above ``kv_high``, for one more.

Until a pool has reported them, lengths are taken as exponential (CV 1) and arrivals as Poisson.

The rule that asks for more wins; a scale-down is the capacity figure, left to
the guards' stabilisation window. While replicas of the pool are still starting
the reactions wait (``scaling-in-progress``: the spec, or the capacity figure if
more), as Dynamo's planner waits for a previous change. Without a request rate or shape yet the pool
holds (``no-data``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import TYPE_CHECKING, Any, ClassVar

from llmscale.deployment import DEFAULT_DEPLOYMENT, Deployment
from llmscale.errors import ConfigError
from llmscale.policies.trend import slope, slope_se
from llmscale.types import Decision, NoData, Signals

if TYPE_CHECKING:
    from llmscale.perf.interconnect import Interconnect

#: the two pools (``perf.interconnect.POOLS``; the registry imports every policy module, so this
#: one imports the performance model only when a policy is built)
POOLS = ("prefill", "decode")

__all__ = ["PoolSloConfig", "PoolSloPolicy", "PoolSloState", "make_slo_disagg"]


@dataclass(frozen=True)
class PoolSloConfig:
    pool: str
    slo_ttft_s: float
    itl_target_s: float
    link: Interconnect
    kv_bytes_per_token_per_gpu: float
    max_num_batched_tokens: int = DEFAULT_DEPLOYMENT.max_num_batched_tokens
    max_num_seqs: int = DEFAULT_DEPLOYMENT.max_num_seqs
    kv_capacity_tokens: int = 0
    tick_s: float = 15.0
    #: the decode pool is planned at no less than this share of its capacity, and the prefill pool
    #: at this share where its TTFT budget leaves a mean prompt no time to wait
    target_util: float = 0.7
    #: each pool is planned at the utilisation its latency tail allows (the prefill pool's wait
    #: within its TTFT budget, :func:`prefill_pool_replicas`; the decode pool's sequences in
    #: flight within its batch), at most this
    util_max: float = 0.9
    #: share of requests those tails may put over their target
    miss_budget: float = 0.01
    #: decode batches are sized for this share of the ITL target (step-time noise, mixed lengths)
    itl_headroom: float = 0.8
    kv_high: float = 0.85
    #: prompts waiting per replica past which the prefill pool grows by one: at least this many,
    #: and at least what drains in half the wait the TTFT budget leaves
    queue_per_replica_max: float = 4.0
    #: weight of the newest observation of the request shape (mean prompt and output)
    shape_alpha: float = 0.3
    #: a replica asked for now serves this much later: a rising rate is planned this far ahead
    cold_start_s: float = DEFAULT_DEPLOYMENT.cold_start_s
    #: smoothing of the arrival rate per tick, for its trend
    rate_alpha: float = 0.4
    #: ticks the smoothed rate's trend is fitted over (4 at least before it is used)
    trend_ticks: int = 8
    #: the trend adds at most this share of the rate (a step is not extrapolated as a trend)
    max_trend_growth: float = 1.0
    min_replicas: int = DEFAULT_DEPLOYMENT.min_replicas
    max_replicas: int = DEFAULT_DEPLOYMENT.max_replicas

    def __post_init__(self) -> None:
        if self.pool not in POOLS:
            raise ConfigError(f"pool = {self.pool!r}, must be one of {', '.join(POOLS)}")
        for name in (
            "target_util",
            "itl_headroom",
            "kv_high",
            "shape_alpha",
            "rate_alpha",
            "util_max",
            "miss_budget",
        ):
            v = getattr(self, name)
            if not 0.0 < v <= 1.0:
                raise ConfigError(f"slo-disagg.{name} = {v}, must be in (0, 1]")
        if self.slo_ttft_s <= 0 or self.itl_target_s <= 0:
            raise ConfigError("slo-disagg: the TTFT and ITL targets must be > 0")
        if not (isinstance(self.trend_ticks, int) and 1 <= self.trend_ticks <= 10_000):
            raise ConfigError(
                f"slo-disagg.trend_ticks = {self.trend_ticks!r}, must be an integer in [1, 10000]"
            )
        for name in ("cold_start_s", "max_trend_growth"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0.0):
                raise ConfigError(f"slo-disagg.{name} = {v}, must be a finite number >= 0")


@dataclass(frozen=True)
class PoolSloState:
    #: smoothed mean prompt and output lengths (None until observed)
    isl_tokens: float | None = None
    osl_tokens: float | None = None
    #: smoothed spreads of the request shape and of the arrivals (None until observed: then 1,
    #: exponential lengths and Poisson arrivals)
    prompt_cv: float | None = None
    output_cv: float | None = None
    dispersion: float | None = None
    #: (time, smoothed arrival rate) of the last ``trend_ticks`` ticks
    rate_history: tuple[tuple[float, float], ...] = ()


#: the rules that size from what the ready replicas show (latency, queue, KV), not from the load
_REACTIVE = frozenset({"ttft-over-budget", "prefill-queue", "itl-over-target", "kv-high"})


def _smooth(prev: float | None, new: float | None, alpha: float) -> float | None:
    if new is None or not math.isfinite(new) or new <= 0:
        return prev
    return new if prev is None else prev + alpha * (new - prev)


def erlang_c(servers: int, load: float) -> float:
    """The chance an arrival waits in an M/M/k queue of ``servers`` at offered ``load`` (Erlangs).

    Erlang's B by its recursion ``B(k) = a B(k-1) / (k + a B(k-1))`` (stable for any k), then
    ``C = B / (1 - (a / k)(1 - B))``; 1 when the queue is unstable (``load >= servers``).
    E.g. 2 servers at 1.2 Erlangs: B = 0.2466, C = 0.450.
    """
    if servers <= 0 or load >= servers:
        return 1.0
    if load <= 0.0:
        return 0.0
    b = 1.0
    for k in range(1, servers + 1):
        b = load * b / (k + load * b)
    return b / (1.0 - (load / servers) * (1.0 - b))


def prefill_pool_replicas(
    rate_rps: float,
    service_s: float,
    wait_budget_s: float,
    miss_budget: float,
    *,
    variability: float = 1.0,
    util_max: float = 0.9,
    max_replicas: int = 10_000,
) -> int | None:
    """The fewest prefill replicas at which at most ``miss_budget`` of prompts wait past
    ``wait_budget_s`` (what the TTFT budget leaves after a prompt's own prefill), at most
    ``util_max`` busy; None when no count up to ``max_replicas`` does (the budget leaves no wait).

    The pool is taken as one queue before ``k`` servers, each serving a prompt in ``service_s``
    (mean prompt / a replica's prompt tokens/s): the router hands a prompt to the replica with
    the fewest outstanding requests, which is what a shared queue does. The wait is Erlang's C
    with the Allen-Cunneen correction for the arrivals' and the prompts' spread:
    ``P(wait > t) = C(k, a) exp(-(k - a) t / (service_s x variability))``, ``a = rate x
    service_s`` and ``variability = (ca^2 + cs^2) / 2`` (1: Poisson arrivals, exponential
    service). A replica alone is the M/M/1 queue; pooled, long prompts can run far hotter than
    one replica could, and short ones at ``util_max``. E.g. 20 req/s of 2,048-token prompts at
    33,800 tokens/s (a = 1.21) with 1.65 s to wait: 2 replicas, the chance of any wait 0.46 and of
    one past 1.65 s ~1e-10; 1.3 req/s of 14,600-token prompts at 15,900 tokens/s (0.92 s each, a
    = 1.2) with 0.95 s left and prompt CV 1.2: 4 (the chance falls 0.23, 0.031, 0.0035).
    """
    if service_s <= 0.0 or rate_rps <= 0.0:
        return 0
    if wait_budget_s <= 0.0 or variability <= 0.0:
        return None
    load = rate_rps * service_s
    if not math.isfinite(load):
        return None
    first = max(1, math.ceil(load / util_max))
    # Erlang's B carried up k by k (the recursion erlang_c runs), not recomputed for each count
    b = 1.0
    for k in range(1, min(first, max_replicas + 1)):
        b = load * b / (k + load * b)
    for k in range(first, max_replicas + 1):
        b = load * b / (k + load * b)
        if k > load:
            waits = b / (1.0 - (load / k) * (1.0 - b))
            late = waits * math.exp(-(k - load) * wait_budget_s / (service_s * variability))
            if late <= miss_budget:
                return k
    return None


def _clamp(n: int, lo: int, hi: int) -> int:
    return max(lo, min(hi, n))


@dataclass(frozen=True)
class PoolSloPolicy:
    config: PoolSloConfig
    perf: Any
    guard_overrides: ClassVar[dict[str, Any]] = {}

    @property
    def name(self) -> str:
        return f"slo-disagg:{self.config.pool}"

    @property
    def tick_s(self) -> float:
        return self.config.tick_s

    def initial_state(self) -> PoolSloState:
        return PoolSloState()

    def ttft_budget_s(self, isl_tokens: float) -> float:
        """The prefill pool's share of the TTFT SLO: less the transfer and one decode step.

        E.g. a 1 s SLO, 2,048-token prompts over InfiniBand (5.4 ms) and a 50 ms ITL
        target: 1 - 0.0054 - 0.05 = 0.945 s for queue + prefill.
        """
        cfg = self.config
        from llmscale.perf.interconnect import kv_transfer_s

        transfer = float(kv_transfer_s(isl_tokens, cfg.kv_bytes_per_token_per_gpu, cfg.link))
        return max(0.05 * cfg.slo_ttft_s, cfg.slo_ttft_s - transfer - cfg.itl_target_s)

    def decide(self, signals: Signals, state: PoolSloState, now_s: float) -> tuple[Decision, PoolSloState]:
        cfg = self.config
        spec = signals.fleet.spec_replicas
        ready = signals.fleet.ready
        rate = signals.get("arrival_rate_rps")
        if rate is None:
            rate = signals.get("request_rate_rps")
        if rate is not None and not (math.isfinite(rate) and rate >= 0.0):
            rate = None  # not a rate to plan on: held as missing data
        isl = _smooth(state.isl_tokens, signals.get("prompt_len_mean_tokens"), cfg.shape_alpha)
        osl = state.osl_tokens
        if cfg.pool == "decode":
            osl = _smooth(osl, signals.get("decode_steps_mean"), cfg.shape_alpha)
        history = state.rate_history
        if rate is not None:
            # the trend is fitted to the smoothed rate: a window's rate strays tick to tick, and
            # a slope fitted to the raw one read +17% a cold start ahead on a ramp rising 6%
            level = rate if not history else history[-1][1] + cfg.rate_alpha * (rate - history[-1][1])
            history = (*history, (now_s, level))[-cfg.trend_ticks :]
        new_state = PoolSloState(
            isl,
            osl,
            _smooth(state.prompt_cv, signals.get("prompt_len_cv"), cfg.shape_alpha),
            _smooth(state.output_cv, signals.get("output_len_cv"), cfg.shape_alpha),
            _smooth(state.dispersion, signals.get("arrival_dispersion"), cfg.shape_alpha),
            history,
        )
        # Until the pool has reported them: exponential lengths and Poisson arrivals.
        prompt_cv = 1.0 if new_state.prompt_cv is None else new_state.prompt_cv
        output_cv = 1.0 if new_state.output_cv is None else new_state.output_cv
        dispersion = 1.0 if new_state.dispersion is None else max(1.0, new_state.dispersion)
        shape_missing = isl is None or (cfg.pool == "decode" and osl is None)
        if rate is None or shape_missing:
            return Decision(spec, "no-data", {}, "no request rate or shape observed yet", no_data=NoData()), (
                new_state
            )
        assert isl is not None
        # A replica asked for now serves a cold start later: a rising rate is planned that far
        # ahead, by its trend less the trend's own standard error (a slope no surer than its
        # noise buys nothing); a falling one is left to the guards' stabilisation. Without it a
        # pool sized from an accurate capacity fell behind the matrix's chat ramp by a replica
        # for the whole cold start (TTFT P95 4.5 s).
        growth = 0.0
        if len(history) >= 4:
            trend = slope(list(history))
            sure = trend - slope_se(list(history), trend)
            growth = min(max(0.0, sure) * cfg.cold_start_s, cfg.max_trend_growth * rate)
        planned = rate + growth
        if cfg.pool == "prefill":
            decision = self._prefill(signals, (rate, planned), isl, ready, prompt_cv, dispersion)
        else:
            assert osl is not None
            decision = self._decode(signals, (rate, planned), isl, osl, ready, output_cv)
        if spec > ready and decision.rule in _REACTIVE:
            # Replicas are still starting: the latency the pool shows is that of the backlog
            # they were asked for, and a ratio of it would ask again for the same load (a 108 s
            # cold start under a 10 s TTFT read 2 ready replicas as a need for 16). Hold what
            # is on the way, or the capacity figure if that is more.
            capacity = int(decision.inputs.get("capacity_replicas") or 0)
            held = _clamp(max(spec, capacity), cfg.min_replicas, cfg.max_replicas)
            note = f"{ready} ready of {spec}: {decision.rule} waits for them"
            decision = Decision(held, "scaling-in-progress", decision.inputs, note)
        return decision, new_state

    def _prefill(
        self,
        signals: Signals,
        rates: tuple[float, float],
        isl: float,
        ready: int,
        prompt_cv: float,
        dispersion: float,
    ) -> Decision:
        """``rates``: (the arrival rate now, the rate planned for a cold start ahead)."""
        cfg = self.config
        now_rps, rate = rates
        from llmscale.perf.replica_tails import packed_prefill_tokens_s

        # A replica with prompts waiting runs full iterations of several prompts: that rate
        # decides whether its queue drains (one prompt alone is slower: a fixed 1,314-token
        # prompt planned a pool of 3 where 2 held 100%).
        cap = packed_prefill_tokens_s(self.perf, cfg.max_num_batched_tokens, isl, prompt_cv)
        demand = rate * isl
        budget = self.ttft_budget_s(isl)
        # A prompt's own prefill, behind the queue: the full iteration that carries its last chunk
        # (its own chunks when longer); the queue's variability: the arrivals' dispersion and
        # the prompts' spread (a prompt's service is its length at that rate). Where the budget
        # leaves a mean prompt no wait at all, the pool is planned at ``target_util``: waiting
        # is then not what decides its TTFT.
        own = max(isl, float(cfg.max_num_batched_tokens)) / cap if cap > 0 else 0.0
        variability = (dispersion + prompt_cv**2) / 2.0
        pooled = (
            prefill_pool_replicas(
                rate,
                isl / cap,
                budget - own,
                cfg.miss_budget,
                variability=variability,
                util_max=cfg.util_max,
                max_replicas=max(cfg.max_replicas, 1),
            )
            if cap > 0
            else None
        )
        if pooled is None:
            wanted = math.ceil(demand / (cap * cfg.target_util)) if demand > 0 and cap > 0 else 0
        else:
            wanted = pooled
        util = demand / (cap * wanted) if wanted > 0 and cap > 0 else 0.0
        # A queue is a warning once it takes half the wait the budget leaves to drain: a replica
        # packing 6 prompts an iteration clears 7 waiting 1,300-token prompts in 0.25 s, nothing
        # against a 1.65 s wait budget (a fixed 4 a replica asked for a third replica there).
        drain_prompts = 0.5 * max(0.0, budget - own) * cap / isl if cap > 0 else 0.0
        queue_max = max(cfg.queue_per_replica_max, drain_prompts)
        rule = "capacity"
        ttft = signals.get("ttft_p95_s")
        queue = signals.get("queue_per_replica")
        inputs: dict[str, float | None] = {
            "rate_rps": now_rps,
            "forecast_rps": rate,
            "isl_tokens": isl,
            "prompt_cv": prompt_cv,
            "arrival_dispersion": dispersion,
            "prefill_capacity_tokens_s": cap,
            "planned_util": util,
            "capacity_replicas": float(wanted),
            "ttft_p95_s": ttft,
            "ttft_budget_s": budget,
            "queue_per_replica": queue,
            "queue_per_replica_max": queue_max,
        }
        # More replicas shorten the wait, not a prompt's own prefill: a P95 TTFT over the budget
        # is acted on only while the P95 wait (vLLM's queue-time histogram) takes more than half
        # the wait the budget leaves. Long-context prompts whose prefill alone is near the budget
        # held the P95 over it with no prompt waiting, and the reaction doubled the pool to its
        # bound (32 replicas where 3 served them).
        waited = signals.get("queue_time_p95_s")
        inputs["queue_time_p95_s"] = waited
        waiting_matters = waited is None or waited > 0.5 * max(0.0, budget - own)
        if ready > 0 and ttft is not None and ttft > budget and waiting_matters:
            react = max(ready + 1, min(2 * ready, math.ceil(ready * ttft / budget)))
            if react > wanted:
                wanted, rule = react, "ttft-over-budget"
        if ready > 0 and queue is not None and queue > queue_max and ready + 1 > wanted:
            wanted, rule = ready + 1, "prefill-queue"
        return Decision(_clamp(wanted, cfg.min_replicas, cfg.max_replicas), rule, inputs)

    def _decode(
        self,
        signals: Signals,
        rates: tuple[float, float],
        isl: float,
        osl: float,
        ready: int,
        output_cv: float,
    ) -> Decision:
        cfg = self.config
        now_rps, rate = rates
        # The context of the sequences in flight, not of an arriving one: a request stays in the
        # batch for as many steps as it generates, so outputs in flight are length-biased,
        # E[o^2] / E[o] = E[o] (1 + cv^2), each halfway through on average (docs/tail-model.md).
        ctx = max(1, round(isl + osl * (1.0 + output_cv**2) / 2.0))
        from llmscale.perf.replica_tails import decode_only_batch

        batch = decode_only_batch(self.perf, cfg.itl_target_s * cfg.itl_headroom, ctx, cfg.max_num_seqs)
        if cfg.kv_capacity_tokens > 0:
            batch = min(batch, int(cfg.kv_capacity_tokens * cfg.kv_high // ctx))
        reachable = batch >= 1
        batch = max(1, batch)
        thpt = float(self.perf.decode_throughput(batch, ctx))
        demand = rate * osl
        wanted = math.ceil(demand / (thpt * cfg.target_util)) if demand > 0 else 0
        if demand > 0 and reachable:
            # Sequences in flight at ``batch`` per replica: each decodes ``osl`` steps of
            # ``batch / thpt`` s, so ``in_flight = demand x batch / thpt`` (Little). Poisson
            # arrivals make the count in flight Poisson: the pool holds its 1 - miss_budget
            # quantile within ``batch`` per replica. E.g. 4,800 tokens/s of demand at 128
            # sequences decoding 3,200 tokens/s each: 192 in flight, +2.33 x 13.9 = 224.3 ->
            # 2 replicas, where 0.7 planned 3. Kept between the figures at ``util_max`` and at
            # ``target_util`` of the capacity. The count stays Poisson on bursty arrivals too: a
            # sequence past the batch waits for a slot, which on a burst frees within seconds
            # (widened by the arrivals' dispersion, the matrix's chat / burst cell split in two
            # pools held 100% either way, for 10% more GPU-hours widened).
            in_flight = demand * batch / thpt
            z = NormalDist().inv_cdf(1.0 - cfg.miss_budget)
            tail = math.ceil((in_flight + z * math.sqrt(in_flight)) / batch)
            ceiling = math.ceil(demand / (thpt * cfg.util_max))
            wanted = min(wanted, max(tail, ceiling))
        rule = "capacity" if reachable else "itl-unreachable"
        itl = signals.get("itl_p95_s")
        kv = signals.get("kv_usage_max")
        inputs: dict[str, float | None] = {
            "rate_rps": now_rps,
            "forecast_rps": rate,
            "isl_tokens": isl,
            "osl_tokens": osl,
            "output_cv": output_cv,
            "context_tokens": float(ctx),
            "batch": float(batch),
            "decode_tokens_s": thpt,
            "capacity_replicas": float(wanted),
            "itl_p95_s": itl,
            "kv_usage_max": kv,
        }
        if ready > 0 and itl is not None and itl > cfg.itl_target_s:
            react = max(ready + 1, min(2 * ready, math.ceil(ready * itl / cfg.itl_target_s)))
            if react > wanted:
                wanted, rule = react, "itl-over-target"
        if ready > 0 and kv is not None and kv > cfg.kv_high and ready + 1 > wanted:
            wanted, rule = ready + 1, "kv-high"
        return Decision(_clamp(wanted, cfg.min_replicas, cfg.max_replicas), rule, inputs)


def make_slo_disagg(
    pool: str, deployment: Deployment, params: dict[str, Any], link: Interconnect
) -> PoolSloPolicy:
    """``slo-disagg`` for ``pool``, planning with the deployment's model and SLOs (``params``
    override the :class:`PoolSloConfig` tunables: ``tick_s``, ``target_util``, ...)."""
    from llmscale.perf import get_perf_model

    perf = get_perf_model(deployment.model, deployment.gpu, deployment.tp, calibration=deployment.calibration)
    try:
        kv_tokens = int(
            perf.kv_capacity_tokens(
                max_num_batched_tokens=deployment.max_num_batched_tokens, max_num_seqs=deployment.max_num_seqs
            )
        )
    except ConfigError:
        kv_tokens = 0
    allowed = {
        "tick_s",
        "target_util",
        "util_max",
        "miss_budget",
        "itl_headroom",
        "kv_high",
        "queue_per_replica_max",
        "shape_alpha",
        "rate_alpha",
        "trend_ticks",
        "max_trend_growth",
    }
    unknown = sorted(set(params) - allowed)
    if unknown:
        raise ConfigError(
            f"slo-disagg has no parameter {unknown[0]!r}; parameters: {', '.join(sorted(allowed))}"
        )
    cfg = PoolSloConfig(
        pool=pool,
        slo_ttft_s=deployment.slo_ttft_s,
        itl_target_s=deployment.slo_tpot_s,
        link=link,
        kv_bytes_per_token_per_gpu=float(perf.kv_bytes_per_token),
        max_num_batched_tokens=deployment.max_num_batched_tokens,
        max_num_seqs=deployment.max_num_seqs,
        kv_capacity_tokens=kv_tokens,
        cold_start_s=deployment.cold_start_s,
        min_replicas=max(1, deployment.min_replicas),
        max_replicas=deployment.max_replicas,
        **params,
    )
    return PoolSloPolicy(cfg, perf)
