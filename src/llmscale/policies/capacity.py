"""``capacity`` and ``capacity-calibrated``: replicas = the requests to hold / what one replica holds.

``capacity`` — seed 000 4.2, "a fine-grained controller on vLLM / TGI",
``calc_gpu_quota(active_reqs, avg_seq_len)``:

    base_tps    = 1200 / (1 + 0.002 x avg_seq_len)      # "measured vLLM throughput model"
    req_per_gpu = int(base_tps x 2)                      # x the expected P95 latency, 2 s
    gpus        = max(1, ceil(active_reqs / req_per_gpu))

Worked (``test_seed_capacity.py``): avg_seq_len 1000 -> TPS 400, 800
requests per GPU, 1601 active -> 3. The section's parameter table maps
"active requests" to vLLM ``num_requests`` (running) / TGI
``waiting_requests``: active = ``running`` + ``queue_waiting`` (requests in
the system, which is what a Little's-law "throughput x latency" bound
counts); avg_seq_len = mean prompt + mean generated tokens of the window's
requests. The table's weights (0.4 active requests, 0.6 sequence length) do
not enter ``calc_gpu_quota``, so they are not used. The function returns
GPUs; a replica holds ``ctx.tp`` of them, so replicas = ceil(gpus / tp). The
constants (1200, 0.002, 2 s) are parameters (``tps_base``, ``seq_coef``,
``sla_s``). When no request finished in the window the last known request
shape is used (kept in the state); with nothing active the answer is 1, the
seed's floor. (With vLLM's 256 sequences per replica, 800 "requests per GPU"
is more than a replica can even hold: the seed's constants under-provision.)
It is the seed document's formula with the seed's constants, kept as written like a peer's
algorithm: it prices no engine iteration, so it is no copy of llmscale's capacity model.

``capacity-calibrated`` — the same idea with llmscale's capacity model in place of the
constants: one replica sustains the concurrency ``B`` at which its *mean* inter-token time, with
the prefill chunks of the requests that replace finished ones sharing the decode steps, reaches
``ctx.slo_tpot_s``. That is llmscale's one analytic capacity model
(:func:`llmscale.perf.replica_tails.replica_capacity`) in mode ``"mean"``: the highest rate
``lam`` whose operating point has ``ITL = d0(B) / (1 - lam x E[prefill work]) <= slo_tpot``
with ``B = lam x D x ITL`` (Little's law), the batch within ``max_num_seqs`` (the deployment's,
vLLM's default 256) and the KV cache, and the prefill queue stable. ``slo`` asks the same
function in mode ``"tail"`` (the per-request TTFT/TPOT miss shares); this policy keeps the seed's
meaning, a replica sized by its mean occupancy, so it ignores TTFT and the tails by design
(on code completions it plans ~2x what one replica holds at 99%, ``benchmarks/capacity_models.py``).

The active requests cannot be divided by ``B`` as they are: how many requests
an arrival rate keeps in the system depends on how fast they decode now
(Little's law), so a lightly loaded fleet (TPOT 37 ms) holds far fewer than
the same rate would on fewer replicas at the SLO's TPOT, and ``active / B``
both under-sizes and oscillates (measured in a backtest: 2 <-> 63 replicas).
The demand is therefore the concurrency the arrival rate needs *at the SLO
operating point*, plus the backlog::

    demand   = max(rate x B / capacity, running) + waiting
    replicas = ceil(demand / (B x target_fraction))

(``request_rate_rps``; ``B / capacity`` is a request's time decoding at the operating point,
``D x ITL`` by Little's law, taken from the model's own two numbers so that a fleet at exactly
its capacity needs exactly ``rate / capacity`` replicas; ``running`` as the floor: a fleet
already slower than ITL holds more; without a rate, running alone.) Worked, Llama-3-8B on one
H100, TPOT SLO 100 ms, 1000-token prompts and 250-token answers (buckets of ~5%: 992 / 245):
B ~ 246 at ITL ~ 76 ms (max_num_seqs, not the TPOT, binds), one replica ~ 13.9 req/s;
60 req/s -> 60 x 245.6 / 13.875 = 1,062 in flight / 245.6 = 4.3 -> 5 replicas
(``tests/policies/test_seed_capacity.py``).
The model memoises per (prompt, output) bucket; the memo is a pure function of
the bucket, so decisions do not depend on call order.

Both policies size the fleet outright, like an HPA target; they carry HPA's
300 s scale-down stabilisation (``down_stabilization_s``, a guard override) so
that a dip in a noisy rate does not shed replicas that the next minute needs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from llmscale.deployment import DEFAULT_DEPLOYMENT, Deployment
from llmscale.errors import ConfigError
from llmscale.policies._cliff import CliffConfig, keep_off_the_cliff
from llmscale.policies.base import register
from llmscale.policies.params import (
    AMOUNT_RANGE,
    COUNT_MAX,
    DURATION_RANGE,
    NONNEG_RANGE,
    TICK_RANGE,
    WINDOW_RANGE,
    Param,
    config_from,
    param,
    params_of,
)
from llmscale.types import Decision, NoData, Signals

if TYPE_CHECKING:
    from llmscale.perf.profile import FactorScale
    from llmscale.perf.replica_tails import ReplicaCapacity
    from llmscale.precision import Precision

__all__ = [
    "CalibratedCapacityPolicy",
    "CapacityConfig",
    "CapacityPolicy",
    "CapacityState",
    "seed_tps",
]


@dataclass(frozen=True)
class CapacityState:
    #: the last request shape seen (prompt, generated tokens), for windows with no finished request
    prompt_tokens: float | None = None
    decode_tokens: float | None = None


@dataclass(frozen=True)
class _Inputs:
    active: float
    waiting: float
    prompt: float
    decode: float
    shape_note: str


def _read(signals: Signals, state: CapacityState) -> tuple[_Inputs | None, CapacityState, str]:
    """Active requests and the request shape; (None, state, why) when they cannot be known."""
    running = signals.get("running")
    waiting = signals.get("queue_waiting")
    prompt = signals.get("prompt_len_mean_tokens")
    decode = signals.get("decode_steps_mean")
    if running is None or waiting is None:
        missing = [n for n, v in (("running", running), ("queue_waiting", waiting)) if v is None]
        return None, state, f"missing {', '.join(missing)}"
    note = ""
    if prompt is not None and decode is not None:
        state = CapacityState(prompt, decode)
    elif state.prompt_tokens is not None and state.decode_tokens is not None:
        prompt, decode = state.prompt_tokens, state.decode_tokens
        note = "no request finished in the window: the last known request shape"
    else:
        prompt = decode = 0.0
        if running + waiting > 0.0:
            return None, state, "no request shape known yet"
    return _Inputs(running + waiting, waiting, max(prompt, 0.0), max(decode, 0.0), note), state, ""


@dataclass(frozen=True)
class CapacityConfig:
    tps_base: float = param(1200.0, AMOUNT_RANGE, unit="tokens/s")
    seq_coef: float = param(0.002, NONNEG_RANGE)
    sla_s: float = param(2.0, WINDOW_RANGE, unit="s")
    tp: int = DEFAULT_DEPLOYMENT.tp
    tick_s: float = param(15.0, TICK_RANGE, unit="s")
    down_stabilization_s: float = param(300.0, DURATION_RANGE, unit="s")


def seed_tps(cfg: CapacityConfig, avg_seq_len: float) -> tuple[float, int]:
    """Seed 000 4.2: (base TPS, requests per GPU). 1000 tokens -> (400.0, 800)."""
    tps = cfg.tps_base / (1.0 + cfg.seq_coef * avg_seq_len)
    return tps, int(tps * cfg.sla_s)


@dataclass(frozen=True)
class CapacityPolicy:
    """Seed 000 4.2's ``calc_gpu_quota`` with its constants."""

    config: CapacityConfig
    name: str = "capacity"

    @property
    def tick_s(self) -> float:
        return self.config.tick_s

    @property
    def guard_overrides(self) -> Mapping[str, Any]:
        return {"stabilization_down_s": self.config.down_stabilization_s}

    def initial_state(self) -> CapacityState:
        return CapacityState()

    def decide(self, signals: Signals, state: CapacityState, now_s: float) -> tuple[Decision, CapacityState]:
        cfg = self.config
        current = signals.fleet.spec_replicas
        inp, state, why = _read(signals, state)
        if inp is None:
            return Decision(current, "no-data", {}, why, no_data=NoData()), state
        seq = inp.prompt + inp.decode
        tps, per_gpu = seed_tps(cfg, seq)
        gpus = max(1, math.ceil(inp.active / max(per_gpu, 1)))
        desired = max(1, math.ceil(gpus / cfg.tp))
        inputs: dict[str, float | None] = {
            "active_requests": inp.active,
            "avg_seq_len_tokens": seq,
            "tps": tps,
            "req_per_gpu": float(per_gpu),
            "gpus": float(gpus),
        }
        rule = "idle" if inp.active == 0.0 else "capacity"
        note = f"ceil({inp.active:.0f} active / {per_gpu} per GPU) = {gpus} GPU(s)"
        if inp.shape_note:
            note += f"; {inp.shape_note}"
        return Decision(desired, rule, inputs, note), state


# -- calibrated --------------------------------------------------------------------------


@dataclass(frozen=True)
class CalibratedCapacityPolicy:
    """Demand at the TPOT SLO's operating point / the concurrency one replica sustains there (the
    one capacity model, mode ``"mean"``)."""

    model: str
    gpu: str
    tp: int
    tpot_s: float
    max_seqs: int
    #: the TTFT SLO: no part of mode "mean", passed so that the call is the one ``slo`` makes
    ttft_s: float = DEFAULT_DEPLOYMENT.slo_ttft_s
    max_num_batched_tokens: int = DEFAULT_DEPLOYMENT.max_num_batched_tokens
    calibration: str | None = None
    perf_scale: FactorScale | None = None
    #: the served number formats (docs/fp8.md), or None for bf16 throughout
    precision: Precision | None = None
    #: plan each replica at this share of its mode-"mean" capacity, the margin ``slo`` keeps too
    #: (``target_utilization``): the capacity is where the batch reaches max_num_seqs or the mean
    #: ITL the TPOT, the edge of the latency cliff, and a rate read a little low goes over it. On
    #: the Azure trace x20 at 1.0 this policy held 93.6% (TTFT P99 11.6 s) for 10.84 GPU-hours,
    #: at 0.95 99.76% for 10.16 (``benchmarks/capacity_models.py`` puts the mode's chat capacity
    #: 3-6% above the simulator's 99% point).
    target_fraction: float = param(0.95, "(0, 1]", help="share of one replica's capacity planned")
    tick_s: float = param(15.0, TICK_RANGE, unit="s")
    down_stabilization_s: float = param(300.0, DURATION_RANGE, unit="s")
    name: str = "capacity-calibrated"
    #: the measured latency cliff it keeps a margin from (policies/_cliff.py; off unless set)
    cliff: CliffConfig = field(default_factory=CliffConfig)

    @property
    def guard_overrides(self) -> Mapping[str, Any]:
        return {"stabilization_down_s": self.down_stabilization_s}

    def initial_state(self) -> CapacityState:
        return CapacityState()

    def capacity(self, prompt_tokens: float, decode_tokens: float) -> ReplicaCapacity:
        """What one replica holds for this mean shape at the TPOT SLO (mode ``"mean"``, memoised)."""
        from llmscale.perf import replica_tails

        return replica_tails.replica_capacity(
            self.model,
            self.gpu,
            self.tp,
            prompt_tokens,
            decode_tokens,
            self.ttft_s,
            self.tpot_s,
            mode="mean",
            max_num_seqs=self.max_seqs,
            max_num_batched_tokens=self.max_num_batched_tokens,
            calibration=self.calibration,
            scale=self.perf_scale,
            precision=self.precision,
        )

    def decide(self, signals: Signals, state: CapacityState, now_s: float) -> tuple[Decision, CapacityState]:
        current = signals.fleet.spec_replicas
        inp, state, why = _read(signals, state)
        if inp is None:
            return Decision(current, "no-data", {}, why, no_data=NoData()), state
        rate = signals.get("request_rate_rps")
        if inp.active == 0.0 and not rate:
            return Decision(1, "idle", {"active_requests": 0.0}, "nothing running or waiting"), state
        cap = self.capacity(inp.prompt, inp.decode)
        b, itl = cap.batch, cap.mean_itl_s
        note = (
            f"{self.model} on {self.tp} x {self.gpu}: B = {b:.1f} at P {cap.prompt_tokens} / "
            f"D {cap.output_tokens} tokens, mean ITL {itl * 1000:.1f} <= {self.tpot_s * 1000:.0f} ms"
        )
        if not cap.within_target:
            note += "; the TPOT SLO is out of reach even at the least rate: one request per replica"
        running = inp.active - inp.waiting
        at_slo = None if rate is None else rate * b / cap.rate_rps
        demand = (running if at_slo is None else max(at_slo, running)) + inp.waiting
        per_replica = max(1.0, b * self.target_fraction) if cap.within_target else 1.0
        desired = max(1, math.ceil(demand / per_replica))
        inputs: dict[str, float | None] = {
            "rate_rps": rate,
            "running": running,
            "waiting": inp.waiting,
            "prompt_tokens": inp.prompt,
            "decode_tokens": inp.decode,
            "capacity_rps_per_replica": cap.rate_rps,
            "sustainable_concurrency": b,
            "mean_itl_s": itl if math.isfinite(itl) else None,
            "concurrency_at_slo": at_slo,
            "demand": demand,
            "per_replica": per_replica,
            "tpot_slo_s": self.tpot_s,
        }
        if at_slo is None:
            note += "; no request rate: the running requests alone"
        if inp.shape_note:
            note += f"; {inp.shape_note}"
        desired, rule, cliff_inputs = keep_off_the_cliff(self.cliff, rate, desired, "capacity")
        return Decision(desired, rule, {**inputs, **cliff_inputs}, note), state


@register(
    "capacity",
    "running + waiting over a fixed per-GPU batch: "
    "ceil((running + waiting) / int(2 s x 1200 / (1 + 0.002 avg_seq_len))) GPUs",
    params_of(CapacityConfig),
    reads=("running", "queue_waiting", "prompt_len_mean_tokens", "decode_steps_mean"),
)
def _make(ctx: Deployment, params: Mapping[str, Any]) -> CapacityPolicy:
    cfg = config_from(CapacityConfig, params, tp=max(1, ctx.tp))
    return CapacityPolicy(cfg)


@register(
    "capacity-calibrated",
    "capacity from llmscale's step-time model (mean mode): (rate x D x ITL + waiting) / B, the batch "
    "whose mean ITL reaches the TPOT SLO",
    {
        "tpot_s": Param(None, WINDOW_RANGE, kind=float, unit="s", help="default: the TPOT SLO"),
        "max_num_seqs": Param(None, f"[1, {COUNT_MAX}]", kind=int, help="default: the engine's"),
        **params_of(CalibratedCapacityPolicy),
        **params_of(CliffConfig),
    },
    needs_step_model=True,
    reads=("running", "queue_waiting", "prompt_len_mean_tokens", "decode_steps_mean", "request_rate_rps"),
)
def _make_calibrated(ctx: Deployment, params: Mapping[str, Any]) -> CalibratedCapacityPolicy:
    tpot = ctx.slo_tpot_s if params["tpot_s"] is None else float(params["tpot_s"])
    seqs = params["max_num_seqs"]
    max_seqs = int(ctx.max_num_seqs if seqs is None else seqs)
    if not tpot > 0 or max_seqs < 1:
        # From the deployment when not given: its SLO and engine settings.
        raise ConfigError(f"capacity-calibrated tpot_s = {tpot} must be > 0, max_num_seqs = {max_seqs} >= 1")
    return config_from(
        CalibratedCapacityPolicy,
        params,
        model=ctx.model,
        gpu=ctx.gpu,
        tp=ctx.tp,
        tpot_s=tpot,
        max_seqs=max_seqs,
        ttft_s=ctx.slo_ttft_s,
        max_num_batched_tokens=ctx.max_num_batched_tokens,
        calibration=ctx.calibration,
        perf_scale=ctx.perf_scale,
        precision=None if ctx.precision.is_default else ctx.precision,
        cliff=config_from(CliffConfig, params),
    )
