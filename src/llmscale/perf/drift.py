"""Drift between the deployed engine and the step-time model, and its bounded online correction.

The capacity-model policies (``slo``, ``capacity-calibrated``, ``dynamo-sla``) plan replicas
from :class:`~llmscale.perf.PerfModel` step times. When the engine the fleet runs is not the
one the model (or its calibration profile) describes — a driver update, another vLLM version,
a different memory clock — every plan is off by the same factor. This module says by how much,
and, opt-in, corrects the profile's scale factors. Everything is pure: no I/O, time is an
argument, perf models come in through arguments.

**The ratios.** Over the live controller's latency window (60 s) the fleet reports its mean
inter-token latency (ITL) and, while requests hardly queue, its mean time to first token
(TTFT) (:mod:`llmscale.signals.drift`). The model predicts the same means at the observed
operating point (:func:`predict_itl_s`, :func:`predict_prefill_s`, :func:`predict_ttft_s`):

* ITL = ``decode(B, ctx) / (1 - rho)``: one decode step of the observed batch ``B`` at the
  observed context, stretched by the share ``rho = lambda x t_p`` of engine time the replica's
  prefills take (``lambda`` prefills/s per replica, ``t_p`` the extra time one prompt adds to
  the steps it rides in). vLLM's ITL histogram counts a mixed step's duration for every
  decode token in it, so without ``rho`` a perfectly calibrated model would read slow under
  load: 3 prompts/s of 1,000 tokens at ~25 ms each is rho = 0.075, 8% on every ITL.
* TTFT, once the request is scheduled = the steps that prefill one mean prompt next to the
  decode batch (in chunks of ``max_num_batched_tokens - B`` tokens, as vLLM's chunked
  prefill does). The fleet's side is mean TTFT minus mean queue time
  (``vllm:request_queue_time_seconds``), compared only while requests wait on average less
  than one engine step to be scheduled: beyond that they are admitted several to a step, which
  a one-prompt prediction does not describe. At 3 requests/s on one replica a request waits
  ~6 ms for the step in progress, about half a step: every window qualifies.
* Without a queue-time histogram: TTFT = half a step (the wait for the step in progress; none
  on an idle engine) + the prefill steps, compared only over windows in which no observation
  saw a request waiting.

``ratio = observed / predicted``: 1 is as modelled, 1.4 a fleet 40% slower than planned.

**The physics of the correction.** A calibration profile scales four groups of coefficients
(:mod:`llmscale.perf.profile`): ``bandwidth`` (weight and KV streaming), ``compute`` (GEMM and
attention FLOP rate), ``host`` (CPU phases, kernel launches) and ``comm`` (all-reduce). A
decode step is memory- and host-bound: Llama-3-8B on one H100 at batch 16 and 1,200 tokens
of context takes 10.39 ms, and its elasticities (d ln t / d ln factor) are -0.64 to bandwidth,
+0.36 to host, 0 to compute. A prefill of 1,000 tokens is compute-bound (-0.62 to compute).
So the ITL ratio moves the decode-side factors (bandwidth, host) and the TTFT ratio the
compute factor; ``comm`` is left alone (no window separates it).

One ratio cannot tell bandwidth from host: the smallest change of the log factors that removes
a log error ``l`` along elasticities ``e`` is ``delta = l x e / |e|^2`` (each factor moves by
its share of the explanation). Worked: an engine whose HBM reaches 0.6 of what the model
assumes decodes that batch in 14.86 ms, ratio 1.43, ``l = ln 1.43 = 0.358``;
``|e|^2 = 0.64^2 + 0.36^2 = 0.54``, so the full correction is bandwidth x exp(-0.358 x 0.64 /
0.54) = x0.65 and host x exp(+0.358 x 0.36 / 0.54) = x1.27, after which the model predicts the
observed ITL again. Windows at other batch sizes pull the two apart, slowly: the elasticities
change little with the batch (-0.65/+0.35 at batch 1, -0.63/+0.37 at 64).

**Smoothing and bounds** (:func:`adapt_step`). Each tick moves the log factors a fraction
``g = 1 - exp(-dt / time_constant_s)`` of the way to the correction its window asks for: the
log factor follows an exponentially weighted moving average of the windows' targets with
that time constant (600 s by default: a lasting 40% drift is 63% corrected after 10 minutes).
A tick moves a factor by at most ``max_step`` (3%; a longer step is shortened as a whole, so
it keeps the split the elasticities asked for), and no factor leaves ``[start / 2,
start x 2]`` (``bound``). The tick's ITL and TTFT windows overlap by most of their 60 s, so
successive targets are not independent: the time constant, not the tick, sets the speed.

**Enough data.** A ratio is only computed (and so warned on and adapted from) when its window
holds enough: ``min_tokens`` inter-token gaps (2,000 by default; in a batch of 16 that is
~125 steps, whose mean step time is then known within ~5% if step times vary by 50%) and
``min_requests`` finished requests for the context (20); for TTFT, ``min_first_tokens`` first
tokens (50: TTFTs of one mix vary by ~25% from the prompt lengths and the wait for the step in
progress, so 50 give the mean within ~4%; 20 read 1.16 at the first window of a simulated
fleet whose model was exact).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from llmscale.errors import ConfigError
from llmscale.perf.profile import FACTOR_NAMES, FactorScale

__all__ = [
    "ADJUSTS",
    "PREDICTORS",
    "AdaptConfig",
    "AdaptState",
    "DriftAlarm",
    "DriftLimits",
    "Evidence",
    "OperatingPoint",
    "Reading",
    "adapt_step",
    "alarm_step",
    "clear_threshold",
    "elasticities",
    "predict_itl_s",
    "predict_prefill_s",
    "predict_ttft_s",
    "quantized",
]

#: which factors each quantity's drift adjusts (see the module docstring)
ADJUSTS: Mapping[str, tuple[str, ...]] = {"itl": ("bandwidth", "host"), "ttft": ("compute",)}


class StepModel(Protocol):
    """What the predictions ask of a step-time model (:class:`~llmscale.perf.PerfModel` has it)."""

    def step(
        self,
        prefill_tokens: int,
        prefill_attn_pairs: float,
        num_prefill_seqs: int,
        num_decode: int,
        decode_ctx_tokens: int,
    ) -> tuple[float, ...]: ...


@dataclass(frozen=True, slots=True)
class OperatingPoint:
    """Where one replica of the fleet ran over the window (means; see :mod:`llmscale.signals.drift`)."""

    batch: float
    context_tokens: float
    prompt_tokens: float
    #: prefills per second per replica
    prefill_rps: float
    #: vLLM's ``max_num_batched_tokens``: the token budget of one iteration
    budget_tokens: int = 8192


#: longer mean prompts are read as this (no served model has a longer context)
_MAX_PROMPT_TOKENS = 1_000_000
#: the prefill share of engine time is capped here: beyond it the replica is saturated and the
#: queueing, not the step time, sets the latency
_MAX_PREFILL_SHARE = 0.9


def _duration(model: StepModel, p: int, pairs: float, n_p: int, b: int, ctx: int) -> float:
    return float(model.step(p, pairs, n_p, b, ctx)[0])


def _decode_s(model: StepModel, batch: float, ctx: float) -> float:
    """A decode step at a fractional batch (linear between the whole batches around it), >= batch 1."""
    b = max(1.0, batch)
    lo = int(b)
    c = max(1, round(ctx))
    t_lo = _duration(model, 0, 0.0, 0, lo, lo * c)
    if b == lo:
        return t_lo
    t_hi = _duration(model, 0, 0.0, 0, lo + 1, (lo + 1) * c)
    return t_lo + (t_hi - t_lo) * (b - lo)


def _prefill_steps_s(model: StepModel, op: OperatingPoint) -> tuple[float, float]:
    """(duration of the steps that prefill one mean prompt next to the batch, the same steps without it).

    The prompt goes in chunks of ``budget - B`` tokens (vLLM gives decodes their token first);
    a chunk of ``c`` tokens after ``done`` has ``c x (done + (c + 1) / 2)`` attention pairs.
    """
    b = max(0, round(op.batch))
    ctx = max(1, round(op.context_tokens))
    p = max(1, min(_MAX_PROMPT_TOKENS, round(op.prompt_tokens)))
    # vLLM gives every decode its token of the budget first; a batch near the budget (a setting
    # no one runs: max_num_seqs is 256 against 8,192 tokens) still prefills in half-budget chunks
    # here, so the loop stays short
    chunk = max(1, op.budget_tokens - b, op.budget_tokens // 2)
    done = 0
    with_prefill = without = 0.0
    decode_only = _duration(model, 0, 0.0, 0, b, b * ctx) if b else 0.0
    while done < p:
        c = min(chunk, p - done)
        with_prefill += _duration(model, c, c * (done + (c + 1) / 2.0), 1, b, b * ctx)
        without += decode_only
        done += c
    return with_prefill, without


def predict_itl_s(model: StepModel, op: OperatingPoint) -> float:
    """Mean inter-token latency at ``op``: ``decode(B, ctx) / (1 - rho)``; see the module docstring."""
    t_dec = _decode_s(model, op.batch, op.context_tokens)
    with_prefill, without = _prefill_steps_s(model, op)
    rho = min(_MAX_PREFILL_SHARE, max(0.0, op.prefill_rps) * max(0.0, with_prefill - without))
    return t_dec / (1.0 - rho)


def predict_prefill_s(model: StepModel, op: OperatingPoint) -> float:
    """Mean time from a request's scheduling to its first token at ``op``: its prefill steps."""
    return _prefill_steps_s(model, op)[0]


def predict_ttft_s(model: StepModel, op: OperatingPoint) -> float:
    """Mean TTFT at ``op`` with nothing queued: half a step in progress + the prefill steps."""
    with_prefill, _ = _prefill_steps_s(model, op)
    busy = min(1.0, max(0.0, op.batch))  # an idle engine starts the prefill at once
    return 0.5 * busy * predict_itl_s(model, op) + with_prefill


#: what a :class:`Reading` was predicted with (its ``basis``), for the adjustment's elasticities
PREDICTORS: Mapping[str, Callable[[StepModel, OperatingPoint], float]] = {
    "decode": predict_itl_s,
    "prefill": predict_prefill_s,
    "wait+prefill": predict_ttft_s,
}


def elasticities(
    predict: Callable[[FactorScale], float], scale: FactorScale, factors: Sequence[str], h: float = 0.05
) -> dict[str, float]:
    """``d ln predict / d ln factor`` at ``scale`` for each of ``factors`` (central differences, +-5%)."""
    out: dict[str, float] = {}
    for f in factors:
        v = getattr(scale, f)
        up = predict(replace(scale, **{f: v * math.exp(h)}))
        down = predict(replace(scale, **{f: v * math.exp(-h)}))
        out[f] = (math.log(up) - math.log(down)) / (2.0 * h) if up > 0.0 and down > 0.0 else 0.0
    return out


# -- readings and the warning ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DriftLimits:
    """When a window says enough to compare (module docstring, *Enough data*)."""

    min_tokens: float = 2000.0
    min_requests: float = 20.0
    min_first_tokens: float = 50.0

    def __post_init__(self) -> None:
        if min(self.min_tokens, self.min_requests, self.min_first_tokens) < 1:
            raise ConfigError(
                f"drift min_tokens = {self.min_tokens}, min_requests = {self.min_requests} and "
                f"min_first_tokens = {self.min_first_tokens} must be >= 1"
            )


@dataclass(frozen=True, slots=True)
class Reading:
    """One quantity over one window: observed and predicted means, or why there is no ratio."""

    quantity: str
    observed_s: float | None
    predicted_s: float | None
    #: observations behind ``observed_s`` (inter-token gaps, or first tokens)
    samples: float
    note: str = ""
    #: the :data:`PREDICTORS` entry ``predicted_s`` came from
    basis: str = "decode"

    @property
    def ratio(self) -> float | None:
        o, p = self.observed_s, self.predicted_s
        if o is None or p is None or not o > 0.0 or not p > 0.0:
            return None
        return o / p

    def as_json(self) -> dict[str, float | str | None]:
        r = self.ratio
        return {
            "observed_s": None if self.observed_s is None else round(self.observed_s, 6),
            "predicted_s": None if self.predicted_s is None else round(self.predicted_s, 6),
            "ratio": None if r is None else round(r, 4),
            "samples": round(self.samples, 1),
            "note": self.note,
        }


@dataclass(frozen=True, slots=True)
class DriftAlarm:
    """Whether a quantity is currently drifting beyond the warning threshold, and since when."""

    drifting: bool = False
    since_s: float | None = None


def clear_threshold(warn: float) -> float:
    """How near 1 a ratio must come back for a drift alarm to clear: 2/3 of ``warn`` (15% -> 10%)."""
    return warn * 2.0 / 3.0


def alarm_step(
    alarm: DriftAlarm, ratio: float | None, now_s: float, warn: float = 0.15, clear: float | None = None
) -> tuple[DriftAlarm, str | None]:
    """The alarm after a tick, and the event to log once: "drifting", "back" or None.

    Enters when ``|ratio - 1| > warn`` (1.16 or 0.84 with the default 15%); leaves when
    ``|ratio - 1| < clear`` (default ``2/3 x warn``: 10%). The band between keeps a ratio that
    hovers at 15% from logging a line every tick. No ratio (a thin window, no data) changes
    nothing: a gap is not a recovery.
    """
    if clear is None:
        clear = clear_threshold(warn)
    if ratio is None:
        return alarm, None
    off = abs(ratio - 1.0)
    if not alarm.drifting and off > warn:
        return DriftAlarm(True, now_s), "drifting"
    if alarm.drifting and off < clear:
        return DriftAlarm(False, None), "back"
    return alarm, None


# -- online adaptation ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AdaptConfig:
    """How fast and how far the online adjustment may move the factors (module docstring)."""

    time_constant_s: float = 600.0
    #: most a factor moves in one tick, relative (0.03: 3%)
    max_step: float = 0.03
    #: a factor stays within [start / bound, start x bound]
    bound: float = 2.0
    #: a window whose prediction responds less than this to its factors (|e|) moves nothing:
    #: 128-token prompts are host-bound, so their TTFT says nothing about compute
    min_elasticity: float = 0.2

    def __post_init__(self) -> None:
        if not self.time_constant_s > 0.0:
            raise ConfigError(f"drift time_constant_s = {self.time_constant_s}, must be > 0")
        if not 0.0 < self.max_step <= 1.0:
            raise ConfigError(f"drift max_step = {self.max_step}, must be in (0, 1]")
        if not self.bound > 1.0:
            raise ConfigError(f"drift bound = {self.bound}, must be > 1")


@dataclass(frozen=True, slots=True)
class Evidence:
    """One window's case for moving factors: its log ratio and how its prediction responds to them."""

    quantity: str
    log_ratio: float
    #: d ln(predicted) / d ln(factor) for the factors this quantity adjusts (:data:`ADJUSTS`)
    elasticity: Mapping[str, float]


@dataclass(frozen=True, slots=True)
class AdaptState:
    """The multipliers on the starting factors so far, and when they were last updated."""

    scale: FactorScale = field(default_factory=FactorScale)
    last_s: float | None = None


def adapt_step(
    state: AdaptState, evidence: Sequence[Evidence], cfg: AdaptConfig, now_s: float
) -> tuple[AdaptState, dict[str, str]]:
    """Move the factors toward what ``evidence`` asks, smoothed and bounded; also say why per quantity.

    Pre: the evidence comes from windows with enough data (the caller's :class:`DriftLimits`).
    The first call only starts the clock (``dt = 0``: nothing moves).
    """
    dt = 0.0 if state.last_s is None else max(0.0, now_s - state.last_s)
    gain = 1.0 - math.exp(-dt / cfg.time_constant_s)
    max_log_step = math.log1p(cfg.max_step)
    max_log = math.log(cfg.bound)
    logs = {f: math.log(getattr(state.scale, f)) for f in FACTOR_NAMES}
    notes: dict[str, str] = {}
    for ev in evidence:
        norm2 = sum(e * e for e in ev.elasticity.values())
        if norm2 < cfg.min_elasticity**2:
            notes[ev.quantity] = (
                f"held: the prediction hardly responds to {'/'.join(ev.elasticity)} here "
                f"(|e| = {math.sqrt(norm2):.2f} < {cfg.min_elasticity})"
            )
            continue
        steps = {f: gain * ev.log_ratio * e / norm2 for f, e in ev.elasticity.items()}
        # A step beyond the cap is shortened as a whole, not factor by factor: it keeps its
        # direction, the split the elasticities asked for.
        longest = max(abs(v) for v in steps.values())
        if longest > max_log_step:
            steps = {f: v * max_log_step / longest for f, v in steps.items()}
        moved = []
        for f, step in steps.items():
            before = logs[f]
            logs[f] = max(-max_log, min(max_log, before + step))
            moved.append(f"{f} {math.expm1(logs[f] - before) * 100:+.2f}%")
        notes[ev.quantity] = ", ".join(moved)
    scale = FactorScale(**{f: math.exp(v) for f, v in logs.items()})
    return AdaptState(scale, now_s), notes


#: the policies plan with the adjustment rounded to 1% steps in log space: a new model (and a
#: policy rebuilt around it) at most when a factor has moved by 1%, not at every tick's
#: 0.05% change; bounded at [1/2, 2] that is at most 139 values per factor
QUANTUM = 0.01


def quantized(scale: FactorScale, quantum: float = QUANTUM) -> FactorScale:
    """``scale`` with every multiplier rounded to ``exp(k x quantum)``."""
    return FactorScale(
        **{f: math.exp(round(math.log(getattr(scale, f)) / quantum) * quantum) for f in FACTOR_NAMES}
    )
