"""``slo``: llmscale's default — predictive capacity planning plus a fast reactive path.

Three parts, each answering a failure of the policies users run today:

1. **Capacity from the calibrated execution-time model, on every SLO dimension.** How many
   requests per second one replica serves within the SLO depends on the request mix: the
   policy reads the observed mean prompt and output lengths, their CVs (vLLM's per-request
   token histograms: the output spread sets the length-biased context in flight) and the
   arrivals' index of dispersion (bursts), and asks
   :func:`llmscale.perf.replica_tails.replica_capacity` for the highest rate at which at most
   ``miss_budget`` of requests miss TTFT *or* per-request TPOT. It predicts their
   distributions, not their means: a decode step that shares an iteration with another
   request's prefill chunk lasts longer, and a code completion (2k-token prompt, 30 output
   tokens) that meets a few of them misses its TPOT while the mean TPOT is far inside the SLO
   (planning on the mean gave 2.2x the capacity one replica holds on that shape). GPU
   utilisation never enters it. It is llmscale's one capacity model
   (:func:`llmscale.perf.replica_tails.replica_capacity`, mode ``"tail"``), the one
   ``capacity-calibrated`` asks in mode ``"mean"``.
2. **A forecast one cold start ahead.** A replica asked for now serves in
   ``cold_start_s``; the policy smooths the arrival rate (served rate plus
   the change of requests in the system), fits its trend over the last
   ``trend_ticks`` ticks, and plans for the rate it forecasts at
   ``now + cold_start_s`` (rising trends only) plus ``burst_z`` times the
   recent spread of the raw rate around the smoothed one.
3. **A reactive path for what the forecast missed.** A backlog (queue
   beyond what the fleet drains in ``drain_s``), a TTFT P99 above the SLO or a per-request
   TPOT P99 above it (inter-token P99 where the engine exports no per-request histogram)
   adds the replicas that clear it; a flash crowd is met at the next tick,
   not after a stabilisation window. What the reactive path sizes for is what
   will still be there when new replicas are: a queue the clients abandon
   before a cold start ends (``client_timeout_s``, from the deployment) is sized
   over the time-out (it refills as fast as clients give up), abandoned requests
   are not read as negative arrivals, a queue already shrinking adds nothing,
   and a step in load is not extrapolated as a trend past ``max_trend_growth``.
4. **Decide by cost.** A step of one replica up (forecast or TPOT tail) is taken
   only when the misses it avoids over its least hold pay for its GPU-seconds and
   the fleet would overspend the miss budget tracked over ``budget_window_s``
   (``docs/tail-model.md``; rule ``hold-by-cost`` otherwise).

A standby pool (:mod:`llmscale.policies.standby`) keeps sleeping replicas
beside the fleet for crowds that outrun a cold start, sized from the bursts
observed and kept only while the misses it prevents pay for its GPU-hours
(none on the default preset: see the README); scale-ups wake them first.

Shrinking is left to the guards, all on: the highest proposal of the last
``stabilization_down_s`` wins, the KV headroom check, and drain-aware
removal (cordoned replicas leave only when idle, and come back on a
scale-up). ``pending_aware`` is off because the proposal is already an
absolute need compared against replicas that include the ones starting.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from llmscale.deployment import DEFAULT_DEPLOYMENT, Deployment
from llmscale.policies._cliff import CliffConfig, keep_off_the_cliff
from llmscale.policies.base import register
from llmscale.policies.params import (
    NONNEG_RANGE,
    TICK_RANGE,
    WINDOW_RANGE,
    DeploymentFitError,
    Param,
    config_from,
    param,
    params_of,
)
from llmscale.policies.standby import StandbyConfig, StandbyState, standby_pool
from llmscale.policies.trend import slope as _slope
from llmscale.policies.trend import slope_se as _slope_se
from llmscale.signals.histograms import LATENCY_WINDOW_S
from llmscale.types import Decision, NoData, Signals

if TYPE_CHECKING:
    from llmscale.perf.profile import FactorScale
    from llmscale.precision import Precision

__all__ = ["MAX_SEARCHED_REPLICAS", "SloConfig", "SloPolicy", "SloState"]

#: the largest fleet :meth:`SloPolicy.replicas_for` searches (a bound on its work, not a policy bound:
#: the guards' max_replicas clamps the decision)
MAX_SEARCHED_REPLICAS = 100_000


@dataclass(frozen=True)
class SloConfig:
    slo_ttft_s: float = DEFAULT_DEPLOYMENT.slo_ttft_s
    slo_tpot_s: float = DEFAULT_DEPLOYMENT.slo_tpot_s
    #: length-aware TTFT SLO (s per 1,000 prompt tokens), judged at the observed mean prompt
    slo_ttft_per_1k_tokens_s: float = DEFAULT_DEPLOYMENT.slo_ttft_per_1k_tokens_s
    cold_start_s: float = DEFAULT_DEPLOYMENT.cold_start_s
    tick_s: float = param(15.0, TICK_RANGE, unit="s")
    #: plan each replica at this share of its SLO capacity. The capacity model stops where mean
    #: TPOT reaches the SLO, and latency rises steeply near there (a static fleet of 4 on Poisson
    #: arrivals with the default preset's lengths held the SLO at 6 req/s per replica and missed it
    #: for most requests at the model's 7.5): a 5% margin keeps the plan off that edge when the
    #: arrival rate is read a little low. Above 1 plans replicas past the SLO's cliff. 0 divided
    #: every capacity by zero, and so does any share small enough to underflow (5e-324 x 7 req/s
    #: is 0.0): below 1% the plan would be over 100x the fleet the SLO needs anyway.
    target_utilization: float = param(0.95, "[0.01, 1]", help="share of one replica's SLO capacity planned")
    alpha: float = param(0.4, "(0, 1]", help="smoothing of the arrival rate per tick")
    shape_alpha: float = param(0.2, "(0, 1]", help="smoothing of the mean prompt and output lengths per tick")
    #: 0 would keep every level ever seen (history[-0:] is the whole history)
    trend_ticks: int = param(8, "[1, 10000]", help="ticks the trend is fitted over")
    #: the extrapolated trend adds at most this share of the level: a step in load looks like a
    #: steep trend through the smoothing for a few ticks, and carrying that slope over a whole cold
    #: start would plan for about twice the step
    max_trend_growth: float = param(1.0, NONNEG_RANGE, help="the trend adds at most this share of the level")
    #: plan for level + burst_z x the spread of recent arrival rates around it (off by default:
    #: the reactive path covers bursts more cheaply on the traces measured)
    burst_z: float = param(0.0, NONNEG_RANGE, help="plan for level + burst_z x spread")
    drain_s: float = param(30.0, WINDOW_RANGE, unit="s", help="a backlog should drain within this")
    queue_per_replica: float = param(4.0, NONNEG_RANGE, help="queue per serving replica before reacting")
    #: a TTFT P99 over the SLO adds no replica while the queue shrinks (the window remembers a
    #: backlog the fleet is already clearing)
    queue_shrink_holds: bool = param(True, help="no TTFT-driven scale-up while the queue shrinks")
    #: how long a client waits for its first token before it gives up (None: no limit known). A
    #: queue that will have timed out before a replica asked for now is ready is not sized for
    client_timeout_s: float | None = None
    min_replicas: int = DEFAULT_DEPLOYMENT.min_replicas
    max_replicas: int = DEFAULT_DEPLOYMENT.max_replicas
    #: capacity-model inputs
    model: str = DEFAULT_DEPLOYMENT.model
    gpu: str = DEFAULT_DEPLOYMENT.gpu
    tp: int = DEFAULT_DEPLOYMENT.tp
    max_num_seqs: int = DEFAULT_DEPLOYMENT.max_num_seqs
    #: the engine's token budget per iteration (chunk size of prefills sharing decode steps)
    max_num_batched_tokens: int = DEFAULT_DEPLOYMENT.max_num_batched_tokens
    #: share of requests the capacity model lets miss TTFT or TPOT at one replica's capacity (the
    #: backtest's capacity probe holds 99% of requests within the SLO: 0.01)
    miss_budget: float = param(
        0.01, "(0, 0.5]", help="share of requests one replica may miss at its planned capacity"
    )
    #: a latency tail over its target is answered with replicas only when the fleet carries at
    #: least this share of its planned capacity: below it the model predicts misses far under the
    #: budget, so the tail comes from what more replicas do not change (one long prompt, the
    #: engine itself) and adding replicas for it would not stop
    tail_reacts_above: float = param(
        0.5, "[0, 1]", help="latency tails add replicas only above this share of planned capacity"
    )
    #: a replica added now serves after a cold start and is then held at least this long (the
    #: scale-down stabilisation below): the GPU-seconds one more replica costs are
    #: tp x (cold_start_s + min_hold_s), 290 GPU-s for an 8B replica on one GPU
    min_hold_s: float = param(180.0, WINDOW_RANGE, unit="s", help="least time an added replica is held")
    #: the miss budget is tracked over this window (exponentially weighted): misses the fleet
    #: spent below ``miss_budget`` of the requests are a bank a small fleet may draw on before it
    #: adds a replica, misses above it make the next step up come sooner
    budget_window_s: float = param(
        3600.0, WINDOW_RANGE, unit="s", help="window over which the miss budget is tracked"
    )
    #: weight of the same time of past days in the forecast one cold start ahead, when the
    #: controller's history has at least two of them (``_seasonal``; 0: the causal forecast alone).
    #: Scaled by days / 7, so two days of history count 0.21 and a week 0.75
    seasonal_weight: float = param(
        0.75, "[0, 1]", help="weight of the same time of past days in the forecast (with history)"
    )
    #: the arrival stream's index of dispersion is planned for (off: Poisson arrivals)
    plan_dispersion: bool = param(True, help="plan for the observed dispersion of arrivals (bursts)")
    #: a calibration profile (``llmscale calibrate``) scaling the step-time model, or None
    calibration: str | None = None
    #: the live controller's online adjustment of the profile's factors (``drift.adapt``), or None
    perf_scale: FactorScale | None = None
    #: the served number formats (vLLM's ``--quantization``, ``--kv-cache-dtype``; docs/fp8.md), or
    #: None for bf16 throughout. FP8 weights and KV make a replica decode faster and hold more
    #: context, so its capacity is the FP8 model's: Llama-3-8B on an H100 with both in FP8 holds
    #: 1,006,229 KV tokens where bf16 holds 449,866
    precision: Precision | None = None
    #: used until the fleet has reported request lengths
    default_prompt_tokens: float = 1000.0
    default_output_tokens: float = 200.0
    #: the standby pool of sleeping replicas (policies/standby.py)
    standby: StandbyConfig = field(default_factory=StandbyConfig)
    #: the measured latency cliff it keeps a margin from (policies/_cliff.py; off unless set)
    cliff: CliffConfig = field(default_factory=CliffConfig)


@dataclass(frozen=True)
class SloState:
    level_rps: float | None = None
    #: recent (time_s, smoothed level, raw arrival estimate), oldest first
    history: tuple[tuple[float, float, float], ...] = ()
    last_t: float | None = None
    last_in_system: float | None = None
    #: (time_s, requests in the system) of the ticks within the served rate's window, oldest first
    in_system_history: tuple[tuple[float, float], ...] = ()
    prompt_tokens: float | None = None
    output_tokens: float | None = None
    last_queue: float | None = None
    #: ready replicas at the last tick, and when that count last rose
    last_ready: int | None = None
    ready_rose_t: float | None = None
    standby: StandbyState = field(default_factory=StandbyState)
    #: smoothed output-length CV and arrival index of dispersion (None: not observed yet)
    output_cv: float | None = None
    dispersion: float | None = None
    prompt_cv: float | None = None
    #: the miss budget: requests and (predicted or observed) misses over ``budget_window_s``,
    #: exponentially weighted
    budget_requests: float = 0.0
    budget_misses: float = 0.0


def _spread(residuals: list[float]) -> float:
    """Root mean square of the residuals (how far raw arrival rates stray from the level)."""
    return math.sqrt(sum(r * r for r in residuals) / len(residuals)) if residuals else 0.0


def _share_over(p95: float | None, p99: float | None, target: float) -> float:
    """Share of requests over ``target`` read from a window's P95 and P99 (0 when P99 is within it).

    Between the two percentiles the tail is taken as a power law (log share linear in log
    latency); past the P95 the share is at least 5%; without a P95 the P99's overshoot scales
    the 1% it marks. Worked: P95 0.08 s, P99 0.15 s, target 0.1 s -> 0.05 x 0.2^(ln 1.25 / ln
    1.875) = 0.05 x 0.2^0.355 = 2.8%; P99 0.12 s alone -> 1.2%.
    """
    if p99 is None or not p99 > target:
        return 0.0
    if p95 is not None and p95 >= target:
        return 0.05
    if p95 is None or not p95 > 0.0 or p99 <= p95:
        return min(0.05, 0.01 * p99 / target)
    return float(0.05 * 0.2 ** (math.log(target / p95) / math.log(p99 / p95)))


def _smooth(observed: float | None, previous: float | None, alpha: float) -> float | None:
    """EWMA step: the previous value moved ``alpha`` of the way to the observed one (either may be None)."""
    if observed is None or previous is None:
        return observed if observed is not None else previous
    return previous + alpha * (observed - previous)


@dataclass(frozen=True)
class SloPolicy:
    config: SloConfig
    name: str = "slo"
    guard_overrides: Mapping[str, Any] = field(
        default_factory=lambda: {
            "pending_aware": False,
            "stabilization_down_s": 180.0,
            # the shrink guards hold serving replicas through a dip, not starts whose reason
            # passed before they served (a crowd shorter than a cold start)
            "hold_starting": False,
            "headroom_max_usage": 0.80,
            "drain_aware": True,
        }
    )

    @property
    def tick_s(self) -> float:
        return self.config.tick_s

    def initial_state(self) -> SloState:
        return SloState()

    def _replica(self) -> tuple[str, str, int]:
        """(model, GPU, TP): the replica every question to the tail model is about."""
        c = self.config
        return c.model, c.gpu, c.tp

    def _engine(self) -> dict[str, Any]:
        """The engine settings every question to the tail model carries (vLLM's batch limits, the
        calibration and its online scale): one place, so capacity and miss share are always
        asked of the same engine."""
        c = self.config
        return {
            "max_num_seqs": c.max_num_seqs,
            "max_num_batched_tokens": c.max_num_batched_tokens,
            "calibration": c.calibration,
            "scale": c.perf_scale,
            "precision": c.precision,
        }

    def capacity(
        self,
        prompt_tokens: float,
        output_tokens: float,
        ttft_target_s: float | None = None,
        replicas: int = 1,
        *,
        output_cv: float = 1.0,
        dispersion: float = 1.0,
        prompt_cv: float = 1.0,
    ) -> float:
        """Requests/s each of ``replicas`` replicas holds with at most ``miss_budget`` missing TTFT
        or TPOT: the one capacity model in mode ``"tail"`` (memoised per length and fleet bucket),
        at the in-flight context of outputs of this CV and for arrivals of this index of dispersion."""
        from llmscale.perf import replica_tails

        c = self.config
        return replica_tails.replica_capacity(
            *self._replica(),
            prompt_tokens,
            output_tokens,
            c.slo_ttft_s if ttft_target_s is None else ttft_target_s,
            c.slo_tpot_s,
            mode="tail",
            **self._engine(),
            miss_budget=c.miss_budget,
            replicas=replicas,
            output_cv=output_cv,
            dispersion=dispersion,
            prompt_cv=prompt_cv,
        ).rate_rps

    def miss_share(
        self,
        rate_rps: float,
        replicas: int,
        prompt_tokens: float,
        output_tokens: float,
        ttft_target_s: float,
        *,
        output_cv: float = 1.0,
        dispersion: float = 1.0,
        prompt_cv: float = 1.0,
    ) -> float:
        """Share of requests the tail model puts over the SLO when ``replicas`` carry ``rate_rps``
        (1 with no replica, or saturated)."""
        from llmscale.perf import replica_tails

        if replicas <= 0:
            return 1.0 if rate_rps > 0.0 else 0.0
        return replica_tails.replica_miss_share(
            *self._replica(),
            prompt_tokens,
            output_tokens,
            ttft_target_s,
            self.config.slo_tpot_s,
            rate_rps / replicas,
            **self._engine(),
            replicas=replicas,
            output_cv=output_cv,
            dispersion=dispersion,
            prompt_cv=prompt_cv,
        )

    def replicas_for(
        self,
        rate_rps: float,
        prompt_tokens: float,
        output_tokens: float,
        ttft_target_s: float,
        *,
        output_cv: float = 1.0,
        dispersion: float = 1.0,
        prompt_cv: float = 1.0,
    ) -> int:
        """The fewest replicas whose capacity, at ``target_utilization``, carries ``rate_rps``.

        A replica's capacity grows with the fleet it is part of (the router deals arrivals out
        evenly, so fewer prefills meet one request's decode steps: a code-completion mix on
        Llama-3.1-8B / H100 holds 6.3 req/s on one replica, 8.1 on each of six; and a burst is
        dealt out over more replicas), so the count is searched: n x capacity(n) rises with n.
        """
        u = self.config.target_utilization

        def cap(n: int) -> float:
            return self.capacity(
                prompt_tokens,
                output_tokens,
                ttft_target_s,
                n,
                output_cv=output_cv,
                dispersion=dispersion,
                prompt_cv=prompt_cv,
            )

        def carries(n: int) -> bool:
            return rate_rps <= n * cap(n) * u + 1e-9

        one = rate_rps / (cap(1) * u)
        # Bounded search: a rate of 1e8 req/s (a page's queue of 1e9 read as growth) asked for a
        # fleet of ~2e7 and its tail model (issue 19); no deployment holds MAX_SEARCHED_REPLICAS.
        hi = MAX_SEARCHED_REPLICAS if not one < MAX_SEARCHED_REPLICAS else max(1, math.ceil(one - 1e-9))
        lo = 1
        while lo < hi:
            mid = (lo + hi) // 2
            if carries(mid):
                hi = mid
            else:
                lo = mid + 1
        return lo

    def decide(self, signals: Signals, state: SloState, now_s: float) -> tuple[Decision, SloState]:
        c = self.config
        current = signals.fleet.spec_replicas
        served = signals.get("request_rate_rps")
        queue = signals.get("queue_waiting")
        running = signals.get("running")
        if served is None or queue is None or running is None:
            return Decision(
                current, "no-data", {"request_rate_rps": served, "queue_waiting": queue}, no_data=NoData()
            ), state

        # Arrival rate = served rate + growth of the requests in the system. The served rate is
        # counted over the latency window (60 s), so the level takes the growth over the same
        # span: arrivals over a window = served over it + growth over it. Mixed with one tick's
        # growth (15 s) the two count different spans: as a backlog drains, the window's served
        # rate still holds the drain for a minute after the queue is gone, and the estimate read
        # 92-113 req/s on the matrix's chat / step cell at a steady 82 (the forecast planned 10
        # replicas where 7 serve it). The tick's growth is kept for the backlog path
        # (``arrivals_now``): a queue standing now shows the arrivals of the last tick, and a step
        # must be sized at once, not as a window fills (at the step's first backlog tick the window
        # read 57 req/s, the tick 84).
        in_system = queue + running
        arrivals = arrivals_now = served
        dt_s = now_s - state.last_t if state.last_t is not None and now_s > state.last_t else 0.0
        in_system_history = (
            *((t, n) for t, n in state.in_system_history if now_s - t <= LATENCY_WINDOW_S + 1e-9),
            (now_s, in_system),
        )
        t_then, n_then = in_system_history[0]
        if dt_s > 0.0 and state.last_in_system is not None and now_s > t_then:
            arrivals = max(0.0, served + (in_system - n_then) / (now_s - t_then))
            arrivals_now = max(0.0, served + (in_system - state.last_in_system) / dt_s)
            # Abandoned requests leave the system unserved: while a backlog persists on a fleet that
            # is not growing, the fleet serves all it can and what arrives is at least that; a
            # count in the system that falls is clients timing out, not less demand (a saturated
            # fleet serving 40 req/s whose queue lost 180 timed-out requests in 15 s read 28 req/s).
            persisted = (
                state.last_queue is not None
                and state.last_queue > 0.0
                and queue > 0.0
                and signals.fleet.starting == 0
                and (state.last_ready is None or signals.fleet.ready <= state.last_ready)
            )
            if persisted:
                arrivals = max(arrivals, served)
                arrivals_now = max(arrivals_now, served)
        level = arrivals if state.level_rps is None else c.alpha * arrivals + (1 - c.alpha) * state.level_rps
        history = (*state.history, (now_s, level, arrivals))[-c.trend_ticks :]
        trend = _slope([(t, lv) for t, lv, _ in history]) if len(history) >= 4 else 0.0
        spread = _spread([a - lv for _, lv, a in history]) if len(history) >= 4 else 0.0
        # Only a rising trend is extrapolated one cold start ahead; a falling one is left to the
        # scale-down guards (stabilisation, headroom, drain), which are slow on purpose.
        growth = min(max(0.0, trend) * c.cold_start_s, c.max_trend_growth * level)
        forecast = level + growth + c.burst_z * spread
        # The forecast's own noise: the trend's standard error carried over the cold start. A step
        # up by one is judged at the low edge of that band (never below the level): a trend no
        # surer than its noise does not buy a replica the stabilisation then holds.
        trend_se = _slope_se([(t, lv) for t, lv, _ in history], trend) if len(history) >= 4 else 0.0
        forecast, seasonal_inputs, note = self._seasonal(signals, now_s, level, forecast)
        sure_rps = max(level, forecast - trend_se * c.cold_start_s)

        # The request shape, smoothed over ticks: a window's mean of a few dozen long-context
        # prompts (CV ~1.2) strays by +-25% from tick to tick (Mooncake's: 10k to 19k tokens at
        # 0.45 req/s), and the capacity of such a mix moves 10x over that range.
        prompt = _smooth(signals.get("prompt_len_mean_tokens"), state.prompt_tokens, c.shape_alpha)
        output = _smooth(signals.get("decode_steps_mean"), state.output_tokens, c.shape_alpha)
        prompt = prompt or c.default_prompt_tokens
        output = output or c.default_output_tokens
        # The spread of output lengths sets the in-flight context (docs/tail-model.md), that of
        # prompts the prefill tail: a CV of 1 until the fleet has reported histograms of them.
        # The arrival stream's dispersion sets the size of the bursts one replica is dealt (1:
        # Poisson, also before it is observed).
        output_cv = _smooth(signals.get("output_len_cv"), state.output_cv, c.shape_alpha)
        prompt_cv = _smooth(signals.get("prompt_len_cv"), state.prompt_cv, c.shape_alpha)
        dispersion = _smooth(
            signals.get("arrival_dispersion") if c.plan_dispersion else None, state.dispersion, c.shape_alpha
        )
        shape = {
            "prompt_cv": 1.0 if prompt_cv is None else prompt_cv,
            "output_cv": 1.0 if output_cv is None else output_cv,
            "dispersion": 1.0 if dispersion is None else max(1.0, dispersion),
        }
        # A length-aware SLO gives each request its own TTFT target; the P99 of a histogram has
        # no length, so it is held to the target of the mean prompt (e.g. 2 s + 0.5 s per 1k
        # tokens at a 1,155-token mean: 2.58 s). Long prompts' own targets are higher, short
        # ones' lower: a P99 led by long prompts reads slow a little early.
        ttft_target_s = c.slo_ttft_s + c.slo_ttft_per_1k_tokens_s * prompt / 1000.0
        planned = self.replicas_for(forecast, prompt, output, ttft_target_s, **shape)
        cap = self.capacity(prompt, output, ttft_target_s, planned, **shape)
        rule = "forecast"
        desired = planned

        # Reactive: a backlog beyond what the fleet drains quickly, or TTFT over the SLO.
        serving = max(1, signals.fleet.ready)
        ttft_p99 = signals.get("ttft_p99_s")
        backlog = queue > c.queue_per_replica * serving
        slow = ttft_p99 is not None and ttft_p99 > ttft_target_s
        # TTFT over the SLO with nothing waiting and capacity on its way is the window's memory of
        # a burst already handled: not a reason to add more.
        # Likewise a queue already shrinking is being served by the replicas that arrived.
        shrinking = state.last_queue is not None and queue < state.last_queue
        # The P99 covers the last latency window (60 s): after replicas became ready it still
        # holds the tail they have since cut, so a tail is read again only once a whole window
        # has passed on the larger fleet: a replica added for a tail already cut is held for the
        # stabilisation window for nothing. (On the matrix's cells and the default hour no run
        # reaches this case: without the rule they come out the same, docs/tail-model.md.)
        ready_rose_t = state.ready_rose_t
        if state.last_ready is not None and signals.fleet.ready > state.last_ready:
            ready_rose_t = now_s
        settled = ready_rose_t is None or now_s - ready_rose_t >= LATENCY_WINDOW_S
        slow = (
            slow
            and queue > 0
            and signals.fleet.starting == 0
            and settled
            and not (c.queue_shrink_holds and shrinking)
        )
        # The per-request TPOT P99 (vLLM's request_time_per_output_token histogram), or the
        # inter-token P99 where the engine exports no per-request one (vLLM V0, whose every gap
        # is one sample: read against the same target it is stricter than the SLO).
        tpot_p99 = signals.get("tpot_p99_s")
        tpot_signal = "tpot_p99_s"
        if tpot_p99 is None:
            tpot_p99, tpot_signal = signals.get("itl_p99_s"), "itl_p99_s"
        # A TPOT tail is load-driven only while the fleet carries a good share of its capacity:
        # the model puts the miss share at a small fraction of the budget below that, and
        # replicas added for a tail they cannot shorten would be added without end. (A TTFT tail
        # counts only with requests waiting, which is load by itself.)
        loaded = arrivals >= c.tail_reacts_above * cap * serving
        # The same window's memory holds for the TPOT P99 (``settled`` above).
        tpot_slow = (
            tpot_p99 is not None
            and tpot_p99 > c.slo_tpot_s
            and loaded
            and settled
            and signals.fleet.starting == 0
        )
        if backlog or slow or tpot_slow:
            # Replicas asked for now serve after a cold start: drain the backlog over at least that.
            # A queue whose clients time out before a cold start ends will be gone by then, but
            # not the demand it shows: under saturation it refills as fast as clients give up,
            # ~queue / time-out (Little's law on the waiting room, each waiting out its time-out),
            # and that is the rate the arrival estimate misses. So the queue is sized for over
            # min(cold start, time-out): 240 waiting, time-out 60 s, start 110 s -> +4 req/s.
            horizon_s = (
                c.cold_start_s if c.client_timeout_s is None else min(c.cold_start_s, c.client_timeout_s)
            )
            drain_rps = queue / max(c.drain_s, horizon_s)
            need = self.replicas_for(
                max(arrivals, arrivals_now) + drain_rps, prompt, output, ttft_target_s, **shape
            )
            if (slow or tpot_slow) and not backlog:
                need = max(need, current + 1)
            if need > desired:
                desired = need
                rule = "backlog" if backlog else ("ttft-over-slo" if slow else "tpot-over-slo")
        # The miss budget over the rolling window: requests and the misses the fleet had at this
        # tick (what the model predicts for the ready fleet, or at least the 1% a P99 over the
        # SLO shows), each weighted down by exp(-dt / window).
        serving_now = signals.fleet.ready
        tpot_p95 = signals.get("tpot_p95_s") if tpot_signal == "tpot_p99_s" else signals.get("itl_p95_s")
        observed_share = _share_over(signals.get("ttft_p95_s"), ttft_p99, ttft_target_s) + _share_over(
            tpot_p95, tpot_p99, c.slo_tpot_s
        )
        share_now = max(
            self.miss_share(arrivals, serving_now, prompt, output, ttft_target_s, **shape), observed_share
        )
        keep = math.exp(-dt_s / c.budget_window_s)
        budget_requests = state.budget_requests * keep + arrivals * dt_s
        budget_misses = state.budget_misses * keep + share_now * arrivals * dt_s
        banked = c.miss_budget * budget_requests - budget_misses
        cost_inputs: dict[str, float | None] = {}
        if desired == current + 1 and rule in ("forecast", "tpot-over-slo"):
            desired, rule, cost_inputs = self._step_by_cost(
                current,
                sure_rps,
                cap,
                banked,
                observed_share if serving_now == current else 0.0,
                (prompt, output, ttft_target_s),
                shape,
                rule,
            )
        # Starts are cancelled by a shrink (the guards hold serving replicas only: hold_starting
        # off), so they are kept while a queue still builds: the arrival level is a 60 s
        # window's and lags a crowd's rise. Worked (matrix chat / flash, 8B on A100s): 15 s after
        # a TPOT tail asked for 8 of 4, the level read 29 req/s of the 40 arriving, planned 5 and
        # cancelled two starts while the queue built (attainment 77.6% with the rule, 73.4% without).
        queue_builds = state.last_queue is not None and queue > state.last_queue
        if queue_builds and signals.fleet.starting > 0 and desired < current:
            desired, rule = current, "hold-starts"
        desired, rule, cliff_inputs = keep_off_the_cliff(c.cliff, forecast, desired, rule)
        desired = max(c.min_replicas, min(c.max_replicas, desired))
        standby_state = state.standby
        standby_inputs: dict[str, float | None] = {}
        standby: int | None = None
        if c.standby.enabled:
            standby, standby_state, standby_inputs = standby_pool(
                # The excess over the level before this tick's arrivals moved it (alpha 0.4 would
                # hide 40% of a step in the level it is measured against).
                c.standby,
                state.standby,
                now_s,
                arrivals,
                level if state.level_rps is None else state.level_rps,
                cap * c.target_utilization,
            )
        decision = Decision(
            desired,
            rule,
            {
                **standby_inputs,
                "arrival_rps": round(arrivals, 4),
                "level_rps": round(level, 4),
                "trend_rps_per_s": round(trend, 5),
                "spread_rps": round(spread, 4),
                "forecast_rps": round(forecast, 4),
                "capacity_rps_per_replica": round(cap, 4),
                # the fleet size the capacity is of (a replica of a larger fleet holds more)
                "planned_replicas": planned,
                # Replicas are planned at this fraction of capacity: the margin off the cliff.
                "target_utilization": c.target_utilization,
                "prompt_tokens": round(prompt, 1),
                "output_tokens": round(output, 1),
                "queue_waiting": queue,
                "ttft_p99_s": ttft_p99,
                tpot_signal: tpot_p99,
                "output_cv": round(shape["output_cv"], 3),
                "prompt_cv": round(shape["prompt_cv"], 3),
                "arrival_dispersion": round(shape["dispersion"], 3),
                "trend_se_rps_per_s": round(trend_se, 5),
                "miss_share_now": round(share_now, 5),
                "budget_banked_misses": round(banked, 2),
                **seasonal_inputs,
                **cost_inputs,
                **cliff_inputs,
            },
            note,
            standby=standby,
        )
        new_state = SloState(
            level_rps=level,
            history=history,
            last_t=now_s,
            last_in_system=in_system,
            in_system_history=in_system_history,
            prompt_tokens=prompt,
            output_tokens=output,
            last_queue=queue,
            last_ready=signals.fleet.ready,
            ready_rose_t=ready_rose_t,
            standby=standby_state,
            output_cv=output_cv,
            dispersion=dispersion,
            prompt_cv=prompt_cv,
            budget_requests=budget_requests,
            budget_misses=budget_misses,
        )
        return decision, new_state

    def _seasonal(
        self, signals: Signals, now_s: float, level: float, forecast: float
    ) -> tuple[float, dict[str, float | None], str]:
        """The forecast one cold start ahead, raised by the same time of past days when they show a
        rise there (``signals.rate_history``, filed by the controller; seed 003 4.3's same hour
        of the past 7 days): (forecast, decision inputs, note).

        Today's level times the past days' move over the cold start (:func:`seasonal_rise`: the
        ratio planned is the low edge of its one-sigma band across days, so a rise the days
        disagree on adds little or nothing), blended with the causal forecast at
        ``seasonal_weight x min(1, days / 7)``. Only a rise is planned ahead: a seasonal fall is
        left to the scale-down guards, as the trend's is. Seed 002 5.1 is why it is a blend and
        the reactive path stays: a forecast from the same hour misses what the history never
        showed (a flash crowd, a holiday). Worked (``tests/policies/test_slo_seasonal.py``):
        level 20 req/s, seven past days rising x1.30 (sd 0.05) over the next 108 s: planned
        x1.247, 24.9 req/s; w = 0.75, so 0.75 x 24.9 + 0.25 x 20 = 23.7 req/s where the trend
        alone said 20. No history, or fewer than two days with both ends: the forecast as it
        was, and the decision log as it was.
        """
        c = self.config
        history = signals.rate_history
        if history is None or not c.seasonal_weight > 0.0:
            return forecast, {}, ""
        from llmscale.history import HISTORY_DAYS
        from llmscale.seasonal import seasonal_rise

        rise = seasonal_rise(history, now_s + signals.clock_epoch_s, c.cold_start_s)
        if rise is None:
            return forecast, {}, ""
        weight = c.seasonal_weight * min(1.0, rise.days / HISTORY_DAYS)
        seasonal_rps = level * rise.planned
        blended = weight * seasonal_rps + (1.0 - weight) * forecast
        inputs: dict[str, float | None] = {
            "seasonal_days": rise.days,
            "seasonal_ratio": round(rise.mean, 4),
            "seasonal_ratio_sd": round(rise.sd, 4),
            "seasonal_planned_ratio": round(rise.planned, 4),
            "seasonal_weight": round(weight, 4),
            "causal_forecast_rps": round(forecast, 4),
        }
        if not blended > forecast:
            return forecast, inputs, ""
        note = (
            f"seasonal: {rise.reason()}; forecast {blended:.1f} req/s = {weight:.2f} x "
            f"{seasonal_rps:.1f} + {1.0 - weight:.2f} x causal {forecast:.1f}"
        )
        return blended, inputs, note

    def _step_by_cost(
        self,
        current: int,
        rate_rps: float,
        capacity_rps: float,
        banked_misses: float,
        observed_share: float,
        lengths: tuple[float, float, float],
        shape: dict[str, float],
        rule: str,
    ) -> tuple[int, str, dict[str, float | None]]:
        """``current + 1`` only when the misses it avoids pay for its GPU-seconds and the fleet of
        ``current`` would spend more than its share of the miss budget; else ``current`` (rule
        ``hold-by-cost``).

        Over the least time an added replica serves (``min_hold_s``) at the rate judged (the
        forecast less its trend's standard error over a cold start, never below the level: the
        estimator's noise is the hysteresis band; over ``target_utilization``, the planner's
        margin), the model predicts ``M_n`` misses on ``n``
        replicas and ``M_n+1`` on one more. The step costs ``tp x (cold_start_s + min_hold_s)``
        GPU-seconds; the budget prices one GPU-second at ``miss_budget`` of the requests a
        replica carries per second at its planned capacity, over its GPUs. The step is taken when
        ``M_n - M_n+1`` exceeds that price x its GPU-seconds (``M_n`` is at least what the
        fleet's latency percentiles show it missing now, ``observed_share``) and ``M_n`` exceeds the budget's
        allowance over the hold, ``miss_budget x requests`` plus the banked misses' share of it
        (``banked x min_hold_s / budget_window_s``, negative after a run of misses).
        Worked (``tests/policies/test_slo_cost.py``): one 8B replica on an H100 at 9 req/s of the
        default lengths (capacity ~13 req/s), judged at 9 / 0.95 = 9.5, is predicted to miss ~0%:
        M_1 ~ 0 against an allowance of 0.01 x 9.5 x 180 = 17 requests, so a forecast trend that
        plans 2 holds 1.
        """
        c = self.config
        # Judged with the planner's own margin off the model's edge (target_utilization): the
        # model's miss share climbs steeply near its capacity, and a fleet held exactly at the
        # budget's edge has nothing left for the model's error.
        rate = rate_rps / c.target_utilization
        hold_s = c.min_hold_s
        share_n = max(self.miss_share(rate, current, *lengths, **shape), observed_share)
        m_n = share_n * rate * hold_s
        m_up = self.miss_share(rate, current + 1, *lengths, **shape) * rate * hold_s
        step_gpu_s = c.tp * (c.cold_start_s + hold_s)
        price = c.miss_budget * capacity_rps * c.target_utilization / c.tp
        allowance = max(0.0, c.miss_budget * rate * hold_s + banked_misses * hold_s / c.budget_window_s)
        pays = m_n - m_up > price * step_gpu_s
        over = m_n > allowance
        inputs: dict[str, float | None] = {
            "misses_at_n": round(m_n, 2),
            "misses_at_n_plus_1": round(m_up, 2),
            "miss_allowance": round(allowance, 2),
            "step_cost_gpu_s": round(step_gpu_s, 1),
            "step_pays_misses": round(price * step_gpu_s, 2),
        }
        if pays and over:
            return current + 1, rule, inputs
        return current, "hold-by-cost", inputs


#: the dataclass's declared fields, the clients' time-out (whose default is the deployment's) and
#: the standby pool's, under ``standby_`` (the pool's default is in the README: the attainment /
#: GPU-hours curve over pool sizes)
_PARAMS: dict[str, Param] = {
    **params_of(SloConfig),
    "client_timeout_s": Param(
        None, WINDOW_RANGE, kind=float, unit="s", help="clients' time-out (default: the deployment's)"
    ),
    **params_of(StandbyConfig, prefix="standby_"),
    **params_of(CliffConfig),
}


def _timeout(param: Any, deployment: Any) -> float | None:
    """The clients' time-out: the policy parameter if set, else what the deployment declares."""
    value = param if param is not None else deployment
    return None if value is None else float(value)


@register(
    "slo",
    "llmscale's default: model-based capacity (TTFT and TPOT tails) x load forecast one cold start ahead, "
    "reactive on backlog/TTFT/TPOT",
    _PARAMS,
    needs_step_model=True,
    reads=(
        "request_rate_rps",
        "queue_waiting",
        "queue_per_replica",
        "running",
        "ttft_p99_s",
        "tpot_p99_s",
        "itl_p99_s",
        "ttft_p95_s",
        "tpot_p95_s",
        "itl_p95_s",
        "prompt_len_mean_tokens",
        "decode_steps_mean",
        "output_len_cv",
        "prompt_len_cv",
        "arrival_dispersion",
    ),
)
def _make(ctx: Deployment, params: Mapping[str, Any]) -> SloPolicy:
    pool = params.get("standby_replicas")
    if pool is not None and pool > ctx.max_replicas:
        # A sleeping replica holds its GPUs like any other: a pool larger than the fleet's bound is
        # no fleet this deployment may have (--standby-replicas 1000000 built a million replicas
        # and ran out of memory after 50 s).
        # A rule of the deployment, not of the parameter alone: only building the policy finds it.
        raise DeploymentFitError(
            f"standby_replicas = {pool}, must be <= max_replicas ({ctx.max_replicas}) of the deployment "
            f"({ctx.model} on {ctx.tp} x {ctx.gpu})",
            "standby_replicas",
        )
    return SloPolicy(
        config_from(
            SloConfig,
            params,
            slo_ttft_s=ctx.slo_ttft_s,
            slo_tpot_s=ctx.slo_tpot_s,
            slo_ttft_per_1k_tokens_s=ctx.slo_ttft_per_1k_tokens_s,
            cold_start_s=ctx.cold_start_s,
            client_timeout_s=_timeout(params.get("client_timeout_s"), ctx.client_timeout_s),
            min_replicas=ctx.min_replicas,
            max_replicas=ctx.max_replicas,
            model=ctx.model,
            gpu=ctx.gpu,
            tp=ctx.tp,
            max_num_seqs=ctx.max_num_seqs,
            max_num_batched_tokens=ctx.max_num_batched_tokens,
            calibration=ctx.calibration,
            perf_scale=ctx.perf_scale,
            precision=None if ctx.precision.is_default else ctx.precision,
            standby=config_from(
                StandbyConfig,
                params,
                prefix="standby_",
                cold_start_s=ctx.cold_start_s,
                wake_s=ctx.wake_s,
                gpus_per_replica=ctx.tp,
                max_replicas=ctx.max_replicas,
            ),
            cliff=config_from(CliffConfig, params),
        )
    )
