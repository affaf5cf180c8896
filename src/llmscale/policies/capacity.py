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

``capacity-calibrated`` — the same idea with llmscale's fitted execution-time
model (:func:`llmscale.perf.get_perf_model`) in place of the constants: one
replica sustains the largest concurrency ``B`` whose iteration time, with
the prefill work of the requests that replace finished ones amortised over
the decode steps, keeps TPOT within ``ctx.slo_tpot_s``::

    t(B) = decode step of B sequences at mean context P + D/2
         + (B / D) x [mixed step with one prompt of P tokens - the same step without it]  <= slo_tpot

(B / D requests finish, and as many start, per decode step in steady state),
capped by ``max_num_seqs`` (the deployment's, vLLM's default 256) and by the KV
cache (capacity tokens / (P + D/2)).

The active requests cannot be divided by ``B`` as they are: how many requests
an arrival rate keeps in the system depends on how fast they decode now
(Little's law), so a lightly loaded fleet (TPOT 37 ms) holds far fewer than
the same rate would on fewer replicas at the SLO's TPOT, and ``active / B``
both under-sizes and oscillates (measured in a backtest: 2 <-> 63 replicas).
The demand is therefore the concurrency the arrival rate needs *at the SLO
operating point*, plus the backlog::

    demand   = max(rate x D x t(B), running) + waiting
    replicas = ceil(demand / (B x target_fraction))

(``request_rate_rps``; ``running`` as the floor: a fleet already slower than
t(B) holds more; without a rate, running alone.) Worked, Llama-3-8B on one
H100, TPOT SLO 100 ms, 1000-token prompts and 250-token answers: B = 169 at
t(B) <= 0.1 s, one replica ~ 169 / (256 x 0.1) = 6.6 req/s (buckets round the
shape up to 1024 / 256); 60 req/s -> ~ 60 x 256 x 0.1 / 169 = 9.1 -> 10
replicas. ``B`` and ``t(B)`` are memoised per (P, D) bucket of 32 tokens
(rounded up: a slightly longer request is the conservative side); the memo is a
pure function of the bucket, so decisions do not depend on call order.

Both policies size the fleet outright, like an HPA target; they carry HPA's
300 s scale-down stabilisation (``down_stabilization_s``, a guard override) so
that a dip in a noisy rate does not shed replicas that the next minute needs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from llmscale.errors import ConfigError
from llmscale.policies._cliff import CliffConfig, keep_off_the_cliff
from llmscale.policies.base import PolicyContext, register
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
    from llmscale.perf import PerfModel

__all__ = [
    "CalibratedCapacityPolicy",
    "CapacityConfig",
    "CapacityPolicy",
    "CapacityState",
    "seed_tps",
    "sustainable_concurrency",
]

_BUCKET_TOKENS = 32


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
    tp: int = 1
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


def sustainable_concurrency(
    perf: PerfModel, prompt_tokens: int, decode_tokens: int, tpot_s: float, max_seqs: int
) -> tuple[int, float]:
    """(B, t(B)): the largest concurrency of one replica with TPOT (prefill amortised) <= ``tpot_s``.

    B is 0 when even one sequence misses ``tpot_s`` (t is then t(1)). See the
    module docstring for t(B). Binary search: t(B) grows with B.
    """
    d = max(1, decode_tokens)
    p = max(0, prompt_tokens)
    mean_ctx = p + d // 2
    try:
        kv_cap = perf.kv_capacity_tokens() // max(1, mean_ctx)
    except ConfigError:
        return 0, math.inf
    hi = min(max_seqs, kv_cap)
    pairs = p * (p + 1) / 2.0

    def t(b: int) -> float:
        ctx = b * mean_ctx
        aff = perf.decode_affine(b)
        decode = aff.base_s + aff.per_ctx_s * ctx
        if p == 0:
            return decode
        mixed = perf.step(p, pairs, 1, b, ctx).duration_s
        return decode + (b / d) * (mixed - decode)

    if hi < 1:
        return 0, math.inf
    if t(1) > tpot_s:
        return 0, t(1)
    lo = 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if t(mid) <= tpot_s:
            lo = mid
        else:
            hi = mid - 1
    return lo, t(lo)


@dataclass(frozen=True)
class CalibratedCapacityPolicy:
    """Demand at the TPOT SLO's operating point / the concurrency one replica sustains there (perf model)."""

    perf: PerfModel
    tpot_s: float
    max_seqs: int
    target_fraction: float = param(1.0, "(0, 1]")
    tick_s: float = param(15.0, TICK_RANGE, unit="s")
    down_stabilization_s: float = param(300.0, DURATION_RANGE, unit="s")
    name: str = "capacity-calibrated"
    #: the measured latency cliff it keeps a margin from (policies/_cliff.py; off unless set)
    cliff: CliffConfig = field(default_factory=CliffConfig)
    #: memo of sustainable_concurrency per (prompt, decode) bucket: a pure function of its key
    _memo: dict[tuple[int, int], tuple[int, float]] = field(default_factory=dict, compare=False, repr=False)

    @property
    def guard_overrides(self) -> Mapping[str, Any]:
        return {"stabilization_down_s": self.down_stabilization_s}

    def initial_state(self) -> CapacityState:
        return CapacityState()

    def concurrency(self, prompt_tokens: float, decode_tokens: float) -> tuple[int, float, int, int]:
        """(B, t(B) s, prompt bucket, decode bucket) for a request shape."""
        pb = _BUCKET_TOKENS * max(1, math.ceil(prompt_tokens / _BUCKET_TOKENS))
        db = _BUCKET_TOKENS * max(1, math.ceil(decode_tokens / _BUCKET_TOKENS))
        key = (pb, db)
        hit = self._memo.get(key)
        if hit is None:
            hit = sustainable_concurrency(self.perf, pb, db, self.tpot_s, self.max_seqs)
            self._memo[key] = hit
        return hit[0], hit[1], pb, db

    def decide(self, signals: Signals, state: CapacityState, now_s: float) -> tuple[Decision, CapacityState]:
        current = signals.fleet.spec_replicas
        inp, state, why = _read(signals, state)
        if inp is None:
            return Decision(current, "no-data", {}, why, no_data=NoData()), state
        rate = signals.get("request_rate_rps")
        if inp.active == 0.0 and not rate:
            return Decision(1, "idle", {"active_requests": 0.0}, "nothing running or waiting"), state
        b, t_b, pb, db = self.concurrency(inp.prompt, inp.decode)
        note = f"{self.perf!r}: B = {b} at P {pb} / D {db} tokens, TPOT <= {self.tpot_s * 1000:.0f} ms"
        if b == 0:
            b = 1
            note += "; the TPOT SLO is out of reach even at B = 1: one request per replica"
        running = inp.active - inp.waiting
        at_slo = None if rate is None or not math.isfinite(t_b) else rate * db * t_b
        demand = (running if at_slo is None else max(at_slo, running)) + inp.waiting
        per_replica = max(1.0, b * self.target_fraction)
        desired = max(1, math.ceil(demand / per_replica))
        inputs: dict[str, float | None] = {
            "rate_rps": rate,
            "running": running,
            "waiting": inp.waiting,
            "prompt_tokens": inp.prompt,
            "decode_tokens": inp.decode,
            "sustainable_concurrency": float(b),
            "step_at_b_s": t_b if math.isfinite(t_b) else None,
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
    "seed 000 4.2: ceil((running + waiting) / int(2 s x 1200 / (1 + 0.002 avg_seq_len))) GPUs",
    params_of(CapacityConfig),
    reads=("running", "queue_waiting", "prompt_len_mean_tokens", "decode_steps_mean"),
)
def _make(ctx: PolicyContext, params: Mapping[str, Any]) -> CapacityPolicy:
    cfg = config_from(CapacityConfig, params, tp=max(1, ctx.tp))
    return CapacityPolicy(cfg)


@register(
    "capacity-calibrated",
    "seed 000 4.2 with the fitted step-time model: (rate x D x t(B) + waiting) / B, the largest batch "
    "within the TPOT SLO",
    {
        "tpot_s": Param(None, WINDOW_RANGE, kind=float, unit="s", help="default: the TPOT SLO"),
        "max_num_seqs": Param(None, f"[1, {COUNT_MAX}]", kind=int, help="default: the engine's"),
        **params_of(CalibratedCapacityPolicy),
        **params_of(CliffConfig),
    },
    needs_step_model=True,
    reads=("running", "queue_waiting", "prompt_len_mean_tokens", "decode_steps_mean", "request_rate_rps"),
)
def _make_calibrated(ctx: PolicyContext, params: Mapping[str, Any]) -> CalibratedCapacityPolicy:
    tpot = ctx.slo_tpot_s if params["tpot_s"] is None else float(params["tpot_s"])
    seqs = params["max_num_seqs"]
    max_seqs = int(ctx.max_num_seqs if seqs is None else seqs)
    if not tpot > 0 or max_seqs < 1:
        # From the deployment when not given: its SLO and engine settings.
        raise ConfigError(f"capacity-calibrated tpot_s = {tpot} must be > 0, max_num_seqs = {max_seqs} >= 1")
    # Imported here: the registry (and a configuration check) reads this module's declarations
    # without loading the step-time model.
    from llmscale.perf import get_perf_model

    perf = get_perf_model(ctx.model, ctx.gpu, ctx.tp, calibration=ctx.calibration, scale=ctx.perf_scale)
    return config_from(
        CalibratedCapacityPolicy,
        params,
        perf=perf,
        tpot_s=tpot,
        max_seqs=max_seqs,
        cliff=config_from(CliffConfig, params),
    )
