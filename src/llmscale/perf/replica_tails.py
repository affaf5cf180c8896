"""The share of one replica's requests that miss TTFT or TPOT at an arrival rate: tails, not means.

A capacity planned on *mean* TPOT fails where the tail is the limit. With chunked prefill (vLLM
V1's default) a decode step that carries another request's prefill chunk lasts longer: for
Llama-3-8B on one H100 a decode step of ~40 sequences takes ~21 ms, the same step with a
2,048-token prompt chunk ~90 ms. A code completion with a 2k-token prompt and 30 output tokens
decodes in ~30 steps, so a few prefills arriving while it decodes set its TPOT, and at a rate
whose *mean* TPOT is well inside 0.1 s a large share of requests miss it (the capacity the mean
gives was 2.0-2.4x what one simulated replica holds at 99% attainment on that shape).

The model, per replica at rate ``lam`` of a fleet fed a Poisson stream, for lognormal prompt
and output lengths of given means and coefficients of variation (the policy sees only the
means; a CV of 1 is the default):

* **Prefill work of a prompt** of ``p`` tokens: what its chunks add to the decode steps they
  share, ``s(p) = sum over chunks of step(chunk, B decodes) - step(B decodes)`` from the
  step-time model (:mod:`llmscale.perf.step_time`), chunks of ``budget - B`` tokens.
* **Decode batch** by Little's law: ``B = lam x O x ITL``, the mean inter-token time
  ``ITL = d0(B) / (1 - lam x E[s])`` (a share ``lam x E[s]`` of engine time goes to prefill).
* **TPOT of a request with ``g = n - 1`` gaps** (``n`` output tokens) is ``d0 + S / g``, ``S``
  the prefill work of the prompts that arrive while it decodes: a compound Poisson sum. It
  misses its target ``T`` when that work exceeds ``g x (T - d0)``. The prompts that can share
  its steps are those arriving over its ``g + 1`` steps at the mean pace (one more: prompts that
  came during its own prefill are served in its first decode step) and over the *stretch* by
  which prefills make it late, ``g x (T - ITL)`` when it just misses. A replica alone receives
  the stretch's arrivals like any others; in a fleet of ``k`` replicas behind vLLM's
  least-outstanding-requests routing, a replica slowed by prefills finishes no request, holds
  more outstanding than the others and is passed over: it receives ~1/k of the stretch's
  arrivals. The router sees only counts, and sends nothing to a replica holding a request
  while another is idle: in a lightly held fleet (long prompts at a fraction of a request per
  replica) the prompts that meet a request's decode steps are the share of arrivals that find
  no idle replica (:func:`_share_reaching_busy_replica`). The tail ``P(S > x)`` is computed on
  a grid with one FFT per output-length quantile (the inverse transform of
  ``exp(mu (phi - 1))``), or as a normal tail past 60 arrivals. Short
  outputs carry the tail: one 2k-token prompt adds ~50 ms to a 5-gap request's 5 x 10 ms on
  Llama-3.1-8B / H100, and two make it miss 0.1 s.
  Checked on the simulator (code completions, prompts mean 2,000 / p99 8,000 tokens, outputs
  30 / 150, Llama-3.1-8B on H100s): one replica at 8 and 10 req/s misses TPOT for 2.6% and
  5.5% of requests, the model says 2.4% and 5.7%; six replicas at 10 and 12 req/s each miss
  0.4% and 2.0%, the model 0.3% and 0.8%; two at 9, 1.2% (model 0.7%). Where it errs the other
  way: Llama-3.1-70B on four H100s, one replica at 1.5 req/s, 0.4% measured, 2.6% modelled (the
  model assumes prompt CV 1; this mix's is 0.8, and a 70B model's long prefills weigh more).
* **TTFT** is the wait for the prefill work queued ahead plus the residual of the iteration
  under way plus the prompt's own chunks. A prompt waits only when the router, which sees
  outstanding-request counts and not who is prefilling, finds no idle replica
  (:func:`_chance_no_idle_replica`) and its replica is prefilling (the share of its busy time
  that prefills take); the work ahead is then exponential with Kingman's G/G/1 mean, a replica
  among ``k`` busy ones being dealt about every ``k``-th arrival (service = a prompt's share of
  saturated prefill iterations). A prompt that fits the target on an idle replica but not next
  to the decodes misses unless an idle replica takes it. Prompts whose own prefill on an idle
  replica already exceeds the target are *infeasible* (no fleet helps them; the backtest counts
  them apart), so they do not count against the budget.
  Checked on the simulator (``benchmarks/tail_capacity.py``: the largest rate per replica a
  fixed fleet holds at 99%): the Mooncake trace's lengths on six Llama-3.1-8B replicas, H100
  0.19 req/s per replica modelled against 0.205 simulated (Erlang's C on the prefill load, as if
  the router saw who prefills, said 0.41), A100 0.073 against 0.079 (0.050 before the TPOT
  thinning). Where it still errs: the policy sees mean lengths only and the model assumes a
  lognormal of CV 1; prompts of mean 8,000 with CV 0.46 on H100 (none near the 2 s prefill
  limit) hold 1.9 req/s per replica of six, the model with CV 1 (some within a step of it) 0.48.

The capacity is the highest rate whose miss share stays within ``miss_budget`` (1%: 99%
attainment, what the backtest's probe measures): mode ``"tail"``. Mode ``"mean"`` is the same
operating point judged on its *mean* inter-token time (``ITL <= T``, queues stable, the batch
within ``max_num_seqs`` and the KV cache), what ``capacity-calibrated`` plans on by design (seed
000 4.2: a replica sized by its mean occupancy); it ignores TTFT and the tails, so it is the
higher of the two wherever the tails bind (code completion 1.7-2.0x the simulator's 99% point,
long prompts 7-9x; within 8% of it on chat and long outputs: ``benchmarks/capacity_models.py``).

This is llmscale's only analytic model of what one replica holds: ``slo``,
``capacity-calibrated`` and ``token-rate`` (its default target) ask :func:`replica_capacity`,
which buckets the request shape and the fleet size and memoises per bucket, so re-planning every
tick costs a dictionary look-up (``tests/perf/test_one_capacity_model.py`` fails if a second
copy of the formula appears in a policy). The backtest's probe (:mod:`llmscale.backtest.sizing`)
is a measurement with the simulator, not a model; the peers' planners (``dynamo-sla``'s capacity
search) are their authors' algorithms and stay theirs. ``tests/perf/test_replica_tails.py``
compares the tail mode with the probe (one simulated replica) on chat and code-completion
shapes, and the miss shares with a simulated fleet.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from llmscale.slo import tpot_within, ttft_within

if TYPE_CHECKING:
    from llmscale.perf.profile import FactorScale
    from llmscale.perf.step_time import PerfModel
    from llmscale.precision import Precision

__all__ = [
    "CapacityMode",
    "OperatingPoint",
    "ReplicaCapacity",
    "TailModel",
    "fleet_bucket",
    "length_bucket",
    "replica_capacity",
    "replica_miss_share",
    "tail_capacity_rps",
]

#: what a replica's capacity is judged on: the per-request miss share of TTFT or TPOT
#: (``"tail"``, ``slo``) or the mean inter-token time (``"mean"``, ``capacity-calibrated``)
CapacityMode = Literal["tail", "mean"]
_MODES = ("tail", "mean")

_NORMAL = NormalDist()
#: equal-mass bins at whose midpoints the length distributions are taken
_BINS = 24
_MID_Q = tuple((i + 0.5) / _BINS for i in range(_BINS))
#: grid points of the compound Poisson FFT (the threshold sits at half the grid)
_GRID = 2048


def _lognormal_quantiles(mean: float, cv: float, cap: float) -> np.ndarray:
    """Midpoints of ``_BINS`` equal-mass bins of a lognormal with this mean and CV, in [1, cap]."""
    sigma = math.sqrt(math.log1p(cv * cv)) if cv > 0 else 0.0
    mu = math.log(max(mean, 1.0)) - sigma * sigma / 2.0
    z = np.array([_NORMAL.inv_cdf(q) for q in _MID_Q])
    return np.clip(np.exp(mu + sigma * z), 1.0, max(1.0, cap))


@dataclass(frozen=True, slots=True)
class OperatingPoint:
    """What the model predicts for one replica at one arrival rate (shares are of all requests)."""

    rate_rps: float
    batch: float
    decode_step_s: float
    #: share of engine time spent on prefill chunks
    prefill_share: float
    mean_itl_s: float
    tpot_miss: float
    ttft_miss: float
    #: share whose own prefill on an idle replica exceeds the TTFT target (no fleet helps)
    infeasible: float
    #: queues grow without bound, or the batch exceeds max_num_seqs or the KV cache
    saturated: bool

    @property
    def miss(self) -> float:
        """Share of *feasible* requests missing TTFT or TPOT (1 when saturated)."""
        if self.saturated:
            return 1.0
        feasible = max(1e-12, 1.0 - self.infeasible)
        return min(1.0, (self.tpot_miss + self.ttft_miss) / feasible)


class TailModel:
    """Per-request TTFT/TPOT miss shares of one replica of ``perf`` under vLLM's scheduler limits."""

    def __init__(
        self,
        perf: PerfModel,
        *,
        max_num_seqs: int = 256,
        max_num_batched_tokens: int = 8192,
        max_model_len: int | None = None,
    ) -> None:
        self.perf = perf
        self.max_num_seqs = max_num_seqs
        self.budget = max_num_batched_tokens
        self.kv_tokens = 0.9 * perf.kv_capacity_blocks(0.9, 16) * 16
        self.max_len = float(max_model_len or perf.model.max_context_tokens)
        #: replicas of the fleet behind the router (set per operating point)
        self._k = 1
        #: index of dispersion of one replica's arrivals (1: Poisson; set per operating point)
        self._batch = 1.0
        self._prefill_memo: dict[tuple[bytes, int, int], tuple[np.ndarray, np.ndarray, float]] = {}

    # -- step-time pieces ---------------------------------------------------------------
    def _d0(self, b: float, ctx: float) -> float:
        """Decode-only step of ``b`` sequences of mean context ``ctx`` (linear between integers)."""
        lo = max(1, int(b))
        a_lo = self.perf.decode_affine(lo)
        d_lo = a_lo.base_s + a_lo.per_ctx_s * lo * ctx
        if b <= lo:
            return float(d_lo)
        a_hi = self.perf.decode_affine(lo + 1)
        d_hi = a_hi.base_s + a_hi.per_ctx_s * (lo + 1) * ctx
        return float(d_lo + (d_hi - d_lo) * (b - lo))

    def _prefill(self, prompts: np.ndarray, b: float, ctx: float) -> tuple[np.ndarray, np.ndarray, float]:
        """Per prompt length: (work added to shared steps s, own wall time of its chunks), chunk size.

        ``own`` is the time from its first chunk's start to its last chunk's end when it is the
        only prompt in flight: one iteration (``d0`` + the chunk's extra) per chunk. Memoised per
        (lengths, whole batch, context): a capacity search revisits the same batches.
        """
        bi = max(0, round(b))
        key = (prompts.tobytes(), bi, round(ctx))
        hit = self._prefill_memo.get(key)
        if hit is None:
            hit = self._prefill_at(prompts, bi, ctx)
            self._prefill_memo[key] = hit
        return hit

    def _prefill_at(self, prompts: np.ndarray, bi: int, ctx: float) -> tuple[np.ndarray, np.ndarray, float]:
        b = float(bi)
        chunk = max(256, self.budget - bi)
        ctx_tokens = int(bi * ctx)
        d0 = self._d0(b, ctx) if bi else 0.0
        work = np.empty(prompts.size)
        own = np.empty(prompts.size)
        for i, p in enumerate(prompts):
            left, done, extra, iters = round(p), 0, 0.0, 0
            while left > 0:
                c = min(left, chunk)
                step = self.perf.step(c, c * (done + (c + 1) / 2.0), 1, bi, ctx_tokens).duration_s
                extra += max(1e-6, step - d0)
                done += c
                left -= c
                iters += 1
            work[i] = extra
            own[i] = iters * d0 + extra
        return work, own, float(chunk)

    # -- the operating point --------------------------------------------------------------
    def at(
        self,
        rate_rps: float,
        prompt_tokens: float,
        output_tokens: float,
        slo_ttft_s: float,
        slo_tpot_s: float,
        *,
        prompt_cv: float = 1.0,
        output_cv: float = 1.0,
        replicas: int = 1,
        tails: bool = True,
        dispersion: float = 1.0,
    ) -> OperatingPoint:
        """The operating point at ``rate_rps`` per replica of a fleet of ``replicas`` (module docstring).

        ``tails=False`` stops at the mean operating point (batch, mean ITL, saturation): the miss
        shares are then NaN, not computed (mode ``"mean"`` reads none of them).
        ``dispersion``: the arrival stream's index of dispersion (1: Poisson), read as the mean
        size ``E[X^2] / E[X]`` of the batches it arrives in (``docs/tail-model.md``).
        """
        lam = max(1e-9, rate_rps)
        self._k = max(1, replicas)
        prompts = _lognormal_quantiles(prompt_tokens, prompt_cv, self.max_len)
        outputs = np.maximum(1.0, np.round(_lognormal_quantiles(output_tokens, output_cv, self.max_len)))
        o_mean = float(outputs.mean())
        if tails:
            # The decode batch holds the requests *in flight*, and a request stays in it for as many
            # steps as it generates tokens: in flight, a request of o output tokens is seen with
            # weight o and is half-way through on average, so the mean context is
            # prompt + E[o^2] / (2 E[o]) = prompt + E[o] (1 + cv^2) / 2 (independent lengths).
            # Worked: outputs of mean 2,000 and CV 1 after a 600-token prompt: 600 + 2,000 = 2,600
            # tokens in flight, where an arriving request's mean is 600 + 1,000 = 1,600.
            ctx = float(prompts.mean() + float(np.mean(outputs * outputs)) / (2.0 * o_mean))
        else:
            # Mode "mean" (capacity-calibrated, seed 000 4.2) sizes by an arriving request's mean
            # occupancy, as its design states.
            ctx = float(prompts.mean() + o_mean / 2.0)
        # The batch size one replica receives a burst in: a least-outstanding router deals a burst
        # of X out over the k replicas, ~X / k each (never below one request: Poisson again).
        self._batch = max(1.0, max(1.0, dispersion) / self._k)
        # Idle prefill (no decodes): which prompts no fleet serves within the TTFT target.
        _, own_idle, _ = self._prefill(prompts, 0.0, ctx)
        feasible = ttft_within(own_idle, slo_ttft_s)
        infeasible = 1.0 - float(feasible.mean())

        def saturated(b: float) -> OperatingPoint:
            return OperatingPoint(lam, b, self._d0(min(b, self.max_num_seqs), ctx), 1.0, math.inf,
                                  1.0, 1.0, infeasible, True)  # fmt: skip

        # Little's law for the decode batch, with the prefill share stretching every step.
        b = max(1.0, lam * o_mean * self._d0(1.0, ctx))
        work = own = np.zeros(0)
        chunk = float(self.budget)
        rho = 0.0
        for _ in range(40):
            if b > self.max_num_seqs or b * ctx > self.kv_tokens:
                return saturated(b)
            work, own, chunk = self._prefill(prompts, b, ctx)
            rho = lam * float(work.mean())
            if rho >= 0.98:
                return saturated(b)
            itl = self._d0(b, ctx) / (1.0 - rho)
            new_b = max(1.0, lam * o_mean * itl)
            if abs(new_b - b) <= 0.005 * b:
                b = new_b
                break
            b = 0.5 * (b + new_b)
        if b > self.max_num_seqs or b * ctx > self.kv_tokens:
            return saturated(b)
        d0 = self._d0(b, ctx)
        itl = d0 / (1.0 - rho)

        # TTFT: M/G/1 wait for the prefill queued ahead, service = a prompt's share of saturated
        # iterations (full chunks of `chunk` tokens next to the decodes).
        full_step = d0 + float(self.perf.step(int(chunk), chunk * (chunk + 1) / 2.0, 1, round(b),
                                              int(round(b) * ctx)).duration_s - d0)  # fmt: skip
        service = np.where(prompts <= chunk, prompts / chunk * full_step, own)
        rho_pf = lam * float(service.mean())
        if rho_pf >= 0.98:
            return saturated(b)
        if not tails:
            return OperatingPoint(lam, b, d0, rho, itl, math.nan, math.nan, infeasible, False)

        # Requests a replica holds on average (Little's law: rate x time from arrival to last
        # token, its own prefill plus its decode). The router sees only these counts, so they
        # decide which prompts meet a busy replica (the functions below say how).
        held = lam * (float(own.mean()) + o_mean * itl)
        k = self._k
        reach = _share_reaching_busy_replica(k, held)
        tpot_miss = self._tpot_miss(lam * reach, work, outputs, d0, itl, slo_tpot_s)

        # The router sends a prompt to the replica with the fewest outstanding requests: to an idle
        # one while there is one (then it waits for nothing), else to one that holds requests,
        # which is prefilling with the share of its busy time that prefills take
        # (:func:`_chance_no_idle_replica`). Behind a prefill the prompt waits for the work queued
        # there, exponential with Kingman's G/G/1 mean E[S] (ca^2 + cs^2) / 2 / (1 - rho): a
        # replica among k that all hold requests is dealt about every k-th arrival of the fleet,
        # inter-arrival squared CV ca^2 = 1/k (one replica: 1, the M/G/1 mean).
        m_s = float(service.mean())
        cs2 = float(np.var(service)) / max(1e-18, m_s * m_s)
        no_idle = _chance_no_idle_replica(k, held)
        p_any = no_idle * min(1.0, rho_pf / max(1e-12, -math.expm1(-held)))
        mean_wait = p_any * m_s * (1.0 / k + cs2) / 2.0 / (1.0 - rho_pf)
        # Bursts: arrivals in batches of index D = E[X^2] / E[X] at this replica wait for the
        # batch-mates dealt ahead of them whether or not the replica was busy: M^X/G/1's
        # within-batch term, E[S] (D - 1) / 2 / (1 - rho) (a request is on average behind half of
        # the other D - 1 of its size-biased batch). Worked: D = 21 on one replica with prefills
        # of 0.1 s at rho 0.3: 0.1 x 20 / 2 / 0.7 = 1.43 s of mean wait from bursts alone. A share
        # (D - 1) / D of requests is not the first of its batch and so waits; with D = 1 both terms
        # vanish and the wait is the Poisson one above.
        burst = self._batch
        p_hold = p_any
        if burst > 1.0:
            mean_wait += m_s * (burst - 1.0) / 2.0 / (1.0 - rho_pf)
            p_hold = min(1.0, p_any + (1.0 - p_any) * (1.0 - 1.0 / burst))
        # The iteration under way when a prompt arrives (mean residual of a step ~ one ITL).
        slack = slo_ttft_s - own - itl
        if mean_wait > 0.0:
            p_wait = p_hold * np.exp(-p_hold * np.maximum(slack, 0.0) / mean_wait)
        else:
            p_wait = np.zeros_like(slack)
        # A prompt whose own prefill next to the decodes (plus the step under way) already takes
        # longer than its target, though it fits on an idle replica, misses unless the router has
        # an idle replica for it.
        p_wait = np.where(slack <= 0.0, no_idle, p_wait)
        ttft_miss = float(np.mean(np.where(feasible, p_wait, 0.0)))
        return OperatingPoint(lam, b, d0, rho, itl, tpot_miss, ttft_miss, infeasible, False)

    def _tpot_miss(
        self,
        lam: float,
        work: np.ndarray,
        outputs: np.ndarray,
        d0: float,
        itl: float,
        target_s: float,
    ) -> float:
        """Share of requests whose TPOT exceeds ``target_s`` (compound Poisson tails, one FFT each).

        ``lam``: the rate of prompts that reach the request's replica while it decodes (the
        per-replica rate thinned by :func:`_share_reaching_busy_replica`).
        """
        gaps = outputs - 1.0
        has_tpot = gaps >= 1.0
        if not has_tpot.any():
            return 0.0
        g = gaps[has_tpot]
        if d0 >= target_s:
            return float(has_tpot.mean())
        threshold = g * (target_s - d0)
        k = self._k
        # Prompts that share the request's decode steps arrive while it decodes: over its g steps
        # at the mean pace (g x ITL, plus one step for those that came during its own prefill),
        # and over the stretch by which prefills make it late, g x (target - ITL) when it just
        # misses. One replica alone receives the stretch's arrivals like any others; in a fleet
        # behind a least-outstanding-requests router, a replica slowed by prefills finishes no
        # request and so holds more outstanding than the others, and new requests go to them:
        # it receives about its 1/k share of the fleet's choices (k replicas).
        window = (g + 1.0) * itl + g * max(0.0, target_s - itl) / k
        mu = lam * window  # expected prompts arriving in the window
        m1, m2 = float(work.mean()), float(np.mean(work * work))
        # Mean and standard deviation of the work arriving in the window (compound Poisson). In
        # batches of index D the count's variance is D times its mean: Var S = mu (m2 - m1^2) +
        # D mu m1^2 (D = 1: mu m2).
        burst = self._batch
        mean_s = mu * m1
        sd_s = np.sqrt(mu * (m2 + (burst - 1.0) * m1 * m1))
        miss = np.zeros(g.size)
        # Rows whose threshold lies many deviations beyond the mean miss with no mass to speak of.
        live = threshold < mean_s + 10.0 * sd_s + float(work.max())
        # Many arrivals: the sum is close to normal (its skew ~ 1 / sqrt(count)).
        many = live & (mu > 60.0)
        if many.any():
            z = (threshold[many] - mean_s[many]) / np.maximum(sd_s[many], 1e-12)
            miss[many] = 0.5 * np.array([math.erfc(v / math.sqrt(2.0)) for v in z])
        few = live & ~many
        if few.any():
            miss[few] = self._compound_tail(work, mu[few], threshold[few])
        miss_given_gaps = np.clip(miss, 0.0, 1.0)
        return float(miss_given_gaps.sum() / outputs.size)

    def _compound_tail(self, work: np.ndarray, mu: np.ndarray, threshold: np.ndarray) -> np.ndarray:
        """P(sum of the work of N arrivals > threshold) per row, N Poisson of mean ``mu``.

        Exact on a grid: one FFT per row, ``exp(mu (phi - 1))`` with ``phi`` the transform of one
        prompt's work.
        """
        m1, m2 = float(work.mean()), float(np.mean(work * work))
        # The grid spans twice the threshold, or far enough past the mean that the mass the FFT
        # wraps around (beyond the grid) is negligible.
        burst = max(1.0, self._batch)
        span = np.maximum(2.0 * threshold, mu * m1 + 12.0 * np.sqrt(mu * m2 * burst) + float(work.max()))
        h = span / _GRID
        idx = np.minimum(np.rint(work[None, :] / h[:, None]).astype(np.int64), _GRID - 1)
        pmf = np.zeros((mu.size, _GRID))
        rows = np.repeat(np.arange(mu.size), work.size)
        np.add.at(pmf, (rows, idx.ravel()), 1.0 / work.size)
        phi = np.fft.rfft(pmf, axis=1)
        burst = self._batch
        if burst > 1.0:
            # Batches at Poisson times, of a geometric size X >= 1 with mean m = (D + 1) / 2 (its
            # E[X^2] / E[X] = 2m - 1 = D): E[phi^X] = phi / (m - (m - 1) phi), mu / m batches.
            m = (burst + 1.0) / 2.0
            per_batch = phi / (m - (m - 1.0) * phi)
            total = np.exp(mu[:, None] / m * (per_batch - 1.0))
        else:
            total = np.exp(mu[:, None] * (phi - 1.0))  # compound Poisson: E[phi^N], N ~ Poisson(mu)
        dist = np.clip(np.fft.irfft(total, n=_GRID, axis=1), 0.0, None)
        cdf = np.cumsum(dist, axis=1)
        cdf /= cdf[:, -1:]
        cut = np.minimum(np.floor(threshold / h).astype(np.int64), _GRID - 1)
        below = cdf[np.arange(mu.size), cut]
        out: np.ndarray = np.clip(1.0 - below, 0.0, 1.0)
        return out

    # -- capacity -------------------------------------------------------------------------
    def capacity_rps(
        self,
        prompt_tokens: float,
        output_tokens: float,
        slo_ttft_s: float,
        slo_tpot_s: float,
        *,
        miss_budget: float = 0.01,
        prompt_cv: float = 1.0,
        output_cv: float = 1.0,
        replicas: int = 1,
        mode: CapacityMode = "tail",
        dispersion: float = 1.0,
    ) -> float:
        """Highest rate per replica (req/s) of a fleet of ``replicas`` fed a Poisson stream whose
        feasible requests miss the SLO at most ``miss_budget`` (mode ``"tail"``), or whose mean
        inter-token time stays within ``slo_tpot_s`` (mode ``"mean"``: TTFT, the budget and the
        fleet size do not enter)."""
        if mode not in _MODES:
            raise ValueError(f"capacity mode {mode!r}: must be one of {', '.join(_MODES)}")

        def ok(lam: float) -> bool:
            op = self.at(lam, prompt_tokens, output_tokens, slo_ttft_s, slo_tpot_s,
                         prompt_cv=prompt_cv, output_cv=output_cv, replicas=replicas,
                         tails=mode == "tail", dispersion=dispersion)  # fmt: skip
            if mode == "mean":
                return meets_mean(op, slo_tpot_s)
            return op.miss <= miss_budget

        lo, hi = 0.0, 0.25
        while ok(hi):
            lo, hi = hi, hi * 2.0
            if hi > 1e5:
                return hi
        # 1% of the rate is finer than any tick's estimate of it.
        while hi - lo > 0.01 * hi:
            mid = 0.5 * (lo + hi)
            if ok(mid):
                lo = mid
            else:
                hi = mid
        return max(lo, 1e-3)


@lru_cache(maxsize=1024)
def tail_capacity_rps(
    model: str,
    gpu: str,
    tp: int,
    prompt_tokens: int,
    output_tokens: int,
    slo_ttft_s: float,
    slo_tpot_s: float,
    max_num_seqs: int = 256,
    max_num_batched_tokens: int = 8192,
    calibration: str | None = None,
    scale: FactorScale | None = None,
    miss_budget: float = 0.01,
    prompt_cv: float = 1.0,
    output_cv: float = 1.0,
    replicas: int = 1,
    mode: CapacityMode = "tail",
    dispersion: float = 1.0,
    precision: Precision | None = None,
) -> float:
    """:meth:`TailModel.capacity_rps` for a deployment, memoised (callers bucket the lengths).
    ``precision``: the served number formats (None: bf16 throughout; docs/fp8.md)."""
    shared = _shape_model(
        model, gpu, tp, max_num_seqs, max_num_batched_tokens, calibration, scale,
        prompt_tokens, output_tokens, prompt_cv, output_cv, mode == "tail", precision,
    )  # fmt: skip
    with _SHAPE_LOCK:
        return shared.capacity_rps(
            prompt_tokens,
            output_tokens,
            slo_ttft_s,
            slo_tpot_s,
            miss_budget=miss_budget,
            prompt_cv=prompt_cv,
            output_cv=output_cv,
            replicas=replicas,
            mode=mode,
            dispersion=dispersion,
        )


def meets_mean(op: OperatingPoint, slo_tpot_s: float) -> bool:
    """Mode ``"mean"``'s test of an operating point: stable queues and mean ITL within the target."""
    return not op.saturated and bool(tpot_within(op.mean_itl_s, slo_tpot_s))


def decode_only_batch(perf: Any, itl_target_s: float, context_tokens: int, max_num_seqs: int) -> int:
    """The largest decode batch a decode-only replica (a disaggregated pool's: no prefill shares its
    steps, so the step is the decode step alone) runs within ``itl_target_s`` per token at
    ``context_tokens`` of context each: the decode pool's sizing (``policies/disagg.py``) asks this
    model rather than pricing steps itself. 0 when even one sequence is slower."""
    return int(perf.max_decode_batch_for_tpot(itl_target_s, context_tokens, max_num_seqs))


def packed_prefill_tokens_s(
    perf: Any, budget_tokens: int, prompt_tokens: float, prompt_cv: float = 1.0
) -> float:
    """Prompt tokens/s of a prefill-only replica (a disaggregated pool's) that has prompts waiting.

    vLLM's scheduler fills each iteration up to ``budget_tokens`` (``max_num_batched_tokens``)
    with the waiting prompts' chunks, so under load the replica runs full iterations, not one
    prompt at a time: for Llama-3-8B on an H100, 37,400 tokens/s at 1,314-token prompts against
    29,700 for one prompt alone (1.26x; 3.0x at 256 tokens, where one prompt leaves most of
    an iteration's fixed cost unshared). This is the rate that decides whether the pool's queue
    drains, and the service the aggregated tail model gives a prompt ("its share of saturated
    iterations"). Attention is per prompt: a prompt of ``p`` tokens pairs ``p (p + 1) / 2``
    tokens however it is chunked, so weighted by tokens the iteration carries
    ``(E[p^2] / E[p] + 1) / 2 = (p (1 + cv^2) + 1) / 2`` pairs a token for prompts of mean ``p``
    and coefficient of variation ``cv``: long prompts weigh more, as in the KV of decodes.
    """
    p = max(1.0, float(prompt_tokens))
    budget = max(1, int(budget_tokens))
    pairs_per_token = (p * (1.0 + max(0.0, prompt_cv) ** 2) + 1.0) / 2.0
    prompts = max(1, math.ceil(budget / p))
    return budget / float(perf.step(budget, budget * pairs_per_token, prompts, 0, 0).duration_s)


def length_bucket(tokens: float) -> int:
    """Round a token count to ~5% log buckets so the capacity memo stays small (1,155 -> 1,146)."""
    if tokens <= 1:
        return 1
    return round(math.exp(round(math.log(tokens) / 0.05) * 0.05))


def fleet_bucket(replicas: int) -> int:
    """Round a fleet size down to one of few sizes (each up to 8, then ~20% steps: 8, 10, 12, 14, 17, ...).

    Down: a replica of a larger fleet holds more (fewer prompts meet one request's decode steps
    behind least-outstanding routing), so the smaller size is the cautious side.
    """
    if replicas <= 8:
        return max(1, replicas)
    b = 8
    while round(b * 1.2) <= replicas:
        b = round(b * 1.2)
    return b


@dataclass(frozen=True, slots=True)
class ReplicaCapacity:
    """What one replica of a deployment holds for a request shape, and its operating point there."""

    #: the highest arrival rate per replica the mode accepts (req/s)
    rate_rps: float
    #: decode batch at that rate (Little's law: rate x output tokens x mean ITL)
    batch: float
    #: mean inter-token time at that rate (s): decode step stretched by the prefill share
    mean_itl_s: float
    #: the bucketed shape and fleet size the numbers are of (:func:`length_bucket`, :func:`fleet_bucket`)
    prompt_tokens: int
    output_tokens: int
    replicas: int
    #: False when not even the least rate meets the mode's test (``rate_rps`` is then its floor,
    #: 0.001 req/s: e.g. a TPOT target below one sequence's decode step)
    within_target: bool


def replica_capacity(
    model: str,
    gpu: str,
    tp: int,
    prompt_tokens: float,
    output_tokens: float,
    slo_ttft_s: float,
    slo_tpot_s: float,
    *,
    mode: CapacityMode = "tail",
    max_num_seqs: int = 256,
    max_num_batched_tokens: int = 8192,
    calibration: str | None = None,
    scale: FactorScale | None = None,
    miss_budget: float = 0.01,
    replicas: int = 1,
    output_cv: float = 1.0,
    dispersion: float = 1.0,
    prompt_cv: float = 1.0,
    precision: Precision | None = None,
) -> ReplicaCapacity:
    """The one entry point: what each of ``replicas`` replicas holds for this mean request shape.

    Buckets the lengths (:func:`length_bucket`), the TTFT target (to 10 ms) and the fleet size
    (:func:`fleet_bucket`) and memoises per bucket, so every caller asking about the same
    deployment, shape and mode gets the same number. Worked (``tests/perf/test_one_capacity_model.py``):
    Llama-3-8B on one H100, prompts 1,155 / outputs 211 tokens, SLO 2 s / 0.1 s: ~12.6 req/s in
    mode ``"tail"``; ~12.9 in mode ``"mean"``, at a batch of ~249 decoding every ~96 ms.

    ``precision`` is the served model's number formats (None: bf16 throughout). FP8 weights and
    an FP8 KV cache change both the step time and the KV cache a replica holds (docs/fp8.md), so
    an FP8 fleet asked about as bf16 is sized for the slower, smaller replica.
    """
    key = _ShapeKey.of(prompt_tokens, output_tokens, slo_ttft_s, replicas, output_cv, dispersion, prompt_cv)
    return _capacity_point(
        model,
        gpu,
        tp,
        key.prompt_tokens,
        key.output_tokens,
        key.slo_ttft_s,
        slo_tpot_s,
        mode,
        max_num_seqs,
        max_num_batched_tokens,
        calibration,
        scale,
        miss_budget,
        key.replicas,
        key.output_cv,
        key.dispersion,
        key.prompt_cv,
        _non_default(precision),
    )


def _non_default(precision: Precision | None) -> Precision | None:
    """None for bf16 (the default formats), so a bf16 question memoises under the key it always had."""
    return None if precision is None or precision.is_default else precision


@dataclass(frozen=True, slots=True)
class _ShapeKey:
    """The bucketed request shape and fleet size both memoised paths (:func:`replica_capacity`,
    :func:`replica_miss_share`) key on, written once so the two can never bucket apart."""

    prompt_tokens: int
    output_tokens: int
    slo_ttft_s: float
    replicas: int
    output_cv: float
    dispersion: float
    prompt_cv: float

    @classmethod
    def of(
        cls,
        prompt_tokens: float,
        output_tokens: float,
        slo_ttft_s: float,
        replicas: int,
        output_cv: float,
        dispersion: float,
        prompt_cv: float,
    ) -> _ShapeKey:
        """Lengths to ~5% log buckets, the TTFT target to 10 ms, the fleet down to
        :func:`fleet_bucket`, the CVs to 0.1 (0.95 -> 1.0) and the dispersion to ~10% log steps
        (1 stays 1)."""
        return cls(
            length_bucket(prompt_tokens),
            length_bucket(output_tokens),
            round(slo_ttft_s, 2),
            fleet_bucket(replicas),
            round(max(0.0, output_cv), 1),
            1.0 if dispersion <= 1.0 else float(length_bucket(dispersion * 100.0)) / 100.0,
            round(max(0.0, prompt_cv), 1),
        )


@lru_cache(maxsize=1024)
def _capacity_point(
    model: str,
    gpu: str,
    tp: int,
    prompt_tokens: int,
    output_tokens: int,
    slo_ttft_s: float,
    slo_tpot_s: float,
    mode: CapacityMode,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    calibration: str | None,
    scale: FactorScale | None,
    miss_budget: float,
    replicas: int,
    output_cv: float = 1.0,
    dispersion: float = 1.0,
    prompt_cv: float = 1.0,
    precision: Precision | None = None,
) -> ReplicaCapacity:
    rate = tail_capacity_rps(
        model,
        gpu,
        tp,
        prompt_tokens,
        output_tokens,
        slo_ttft_s,
        slo_tpot_s,
        max_num_seqs,
        max_num_batched_tokens,
        calibration,
        scale,
        miss_budget,
        prompt_cv=prompt_cv,
        output_cv=output_cv,
        replicas=replicas,
        mode=mode,
        dispersion=dispersion,
        precision=precision,
    )
    tails = _shape_model(
        model, gpu, tp, max_num_seqs, max_num_batched_tokens, calibration, scale,
        prompt_tokens, output_tokens, prompt_cv, output_cv, mode == "tail", precision,
    )  # fmt: skip
    with _SHAPE_LOCK:
        op = tails.at(
            rate,
            prompt_tokens,
            output_tokens,
            slo_ttft_s,
            slo_tpot_s,
            replicas=replicas,
            tails=mode == "tail",
            output_cv=output_cv,
            dispersion=dispersion,
            prompt_cv=prompt_cv,
        )
    within = meets_mean(op, slo_tpot_s) if mode == "mean" else op.miss <= miss_budget
    return ReplicaCapacity(rate, op.batch, op.mean_itl_s, prompt_tokens, output_tokens, replicas, within)


#: up to this many terms :func:`_poisson_at_least` adds them all (every fleet a backtest runs); past
#: it the work is bounded whatever the fleet size (see there)
_POISSON_EXACT_TERMS = 4096
#: half-width, in standard deviations, of the terms that carry a Poisson's mass: outside
#: ``mean +- 12 sd`` (and 12 more terms) each term is below 1e-30
_POISSON_SPAN_SD = 12.0


def _poisson_at_least(mean: float, n: int) -> float:
    """P(N >= n) for N ~ Poisson(mean): one minus the first ``n`` terms, each in log space (no
    underflow of exp(-mean) for a large fleet).

    The work is bounded whatever ``n`` and ``mean``: a fleet size read from a page that reported
    a queue of 1e9 once asked for ~5e7 terms per call and the ``slo`` policy decided nothing for
    minutes (issue 19). Up to :data:`_POISSON_EXACT_TERMS` terms the sum is the one every backtest
    ran (decision logs unchanged); past it only the terms within 12 standard deviations of the
    mean are added (at most ~4,100 of them: the rest are each below 1e-30), and past that many
    the normal approximation with continuity correction (a Poisson of mean above ~29,000 is
    normal to ~1e-3). ``tests/perf/test_bounded_tails.py`` pins both.
    """
    if n <= 0:
        return 1.0
    if mean <= 0.0:
        return 0.0
    if not math.isfinite(mean):
        return 1.0
    log_mean = math.log(mean)
    if n <= _POISSON_EXACT_TERMS:
        below = sum(math.exp(j * log_mean - mean - math.lgamma(j + 1.0)) for j in range(n))
        return min(1.0, max(0.0, 1.0 - below))
    sd = math.sqrt(mean)
    lo = max(0, math.floor(mean - _POISSON_SPAN_SD * sd) - 12)
    hi = math.ceil(mean + _POISSON_SPAN_SD * sd) + 12
    if n <= lo:
        return 1.0
    if n > hi:
        return 0.0
    if hi - lo > _POISSON_EXACT_TERMS:
        return min(1.0, max(0.0, 1.0 - _NORMAL.cdf((n - 0.5 - mean) / sd)))
    at_least = sum(math.exp(j * log_mean - mean - math.lgamma(j + 1.0)) for j in range(n, hi + 1))
    return min(1.0, max(0.0, at_least))


def _share_reaching_busy_replica(replicas: int, held_per_replica: float) -> float:
    """Share of a replica's arrival rate that reaches it while it holds a decoding request.

    vLLM's router sends each request to the replica with the fewest outstanding requests, so a
    replica that holds one (the request whose TPOT is judged) receives a new prompt only when no
    other replica is idle. Requests from arrival to last token form an infinite-server system
    (each is served as soon as it arrives, in the batch), so the requests held by the rest of the
    fleet, seen from inside one request's stay, are Poisson with mean
    ``replicas x held_per_replica`` whatever the lengths; routing fills idle replicas first, so
    every other replica is busy when at least ``replicas - 1`` of them are out there:
    ``P(Poisson(k L) >= k - 1)``. While that holds, the fleet's arrivals are dealt out evenly,
    so the replica receives its own per-replica rate; otherwise none of it.

    One replica (``replicas`` 1): 1, it receives every arrival. A busy fleet (chat on
    Llama-3.1-8B / H100, ~14 req/s each for ~2.5 s: 35 held per replica): 1. Where it matters is
    a lightly held fleet of long prompts: the Mooncake trace on one A100 each, 0.1 req/s per
    replica holding ~0.5 requests (a 15k-token prompt prefills for ~2 s and decodes ~150
    tokens): among six replicas the other five hold at least five requests with chance
    P(Poisson(3) >= 5) = 0.18, so a short answer meets about a fifth of the long prefills the
    per-replica rate alone would put next to it. At that point the model now puts 0.27% of
    requests over the TPOT target (1.9% without the thinning); the simulated fleet, 0.08%.
    """
    k = max(1, replicas)
    return _poisson_at_least(k * max(0.0, held_per_replica), k - 1)


def _chance_no_idle_replica(replicas: int, held_per_replica: float) -> float:
    """Chance that an arriving request finds every replica holding at least one request.

    The same infinite-server count as :func:`_share_reaching_busy_replica`, now with all
    ``replicas`` held by others: ``P(Poisson(k L) >= k)``; one replica: ``1 - exp(-L)``, the
    chance it is not idle. Only then can a prompt land behind another prompt's prefill. E.g. the
    Mooncake trace's lengths on six Llama-3.1-8B / H100 replicas at 0.2 req/s each (0.48 held
    per replica): P(Poisson(2.9) >= 6) = 0.074, and the replica it lands on prefills for
    0.17 / (1 - exp(-0.48)) = 0.43 of its busy time. Erlang's C on the prefill load alone (6
    servers at 0.17) is 0.0006: it assumed the router sends a prompt to a replica that is not
    prefilling, which it cannot tell. The model's TTFT misses there went from ~0.1% to 0.83%
    (the simulated fleet: 0.88%), and its capacity from 0.41 req/s per replica to 0.19
    (simulated: 0.205).
    """
    k = max(1, replicas)
    return _poisson_at_least(k * max(0.0, held_per_replica), k)


def _deployment_model(
    model: str,
    gpu: str,
    tp: int,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    calibration: str | None,
    scale: FactorScale | None,
    precision: Precision | None = None,
) -> TailModel:
    """A fresh :class:`TailModel` of a deployment. Not shared between shapes: its prefill memo is keyed
    by the context rounded to a token, and two shapes whose contexts round alike would read each
    other's entries (the answers are memoised per shape bucket above it instead)."""
    from llmscale.perf import get_perf_model

    perf = get_perf_model(model, gpu, tp, calibration=calibration, scale=scale, precision=precision)
    return TailModel(perf, max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens)


#: request shapes whose :class:`TailModel` (and its prefill memo) is kept: a live fleet's smoothed
#: shape moves over a few buckets; each model's memo holds a few hundred batch sizes of ~1 KB
_SHAPE_MODELS = 32
#: one question at a time to a shared model: an operating point sets the fleet size and burst on it
#: before reading them (a KEDA or external-metrics thread could ask while a tick decides)
_SHAPE_LOCK = threading.RLock()


@lru_cache(maxsize=_SHAPE_MODELS)
def _shape_model(
    model: str,
    gpu: str,
    tp: int,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    calibration: str | None,
    scale: FactorScale | None,
    prompt_tokens: int,
    output_tokens: int,
    prompt_cv: float,
    output_cv: float,
    tails: bool,
    precision: Precision | None = None,
) -> TailModel:
    """The :class:`TailModel` every question about one request shape asks, whatever the fleet size,
    the arrivals' dispersion, the rate or the SLO.

    Its prefill memo is keyed by (prompt lengths, batch, context rounded to a token), and the
    context is a function of exactly these arguments (the lengths, their CVs and whether the tails
    are judged: :meth:`TailModel.at`), so every entry was computed with the very context a
    fresh model would use: the answers are the ones of a fresh model per question (decision logs
    unchanged, ``tests/backtest/test_decision_log_identity.py``). What it saves: ``slo``'s search
    for a fleet size asks one capacity per fleet bucket, and the arrivals' dispersion of a large
    fleet moves a bucket most ticks; each of those capacities re-priced the same prefills (half of
    a capacity's CPU), now priced once per shape (``benchmarks/controller_tick.py --replicas
    5000``). Shared, so asked under :data:`_SHAPE_LOCK` (an operating point sets the fleet size
    on the model before reading it).
    """
    del prompt_tokens, output_tokens, prompt_cv, output_cv, tails  # the memo key only
    return _deployment_model(
        model, gpu, tp, max_num_seqs, max_num_batched_tokens, calibration, scale, precision
    )


def replica_miss_share(
    model: str,
    gpu: str,
    tp: int,
    prompt_tokens: float,
    output_tokens: float,
    slo_ttft_s: float,
    slo_tpot_s: float,
    rate_per_replica_rps: float,
    *,
    max_num_seqs: int = 256,
    max_num_batched_tokens: int = 8192,
    calibration: str | None = None,
    scale: FactorScale | None = None,
    replicas: int = 1,
    output_cv: float = 1.0,
    dispersion: float = 1.0,
    prompt_cv: float = 1.0,
    precision: Precision | None = None,
) -> float:
    """Share of feasible requests the tail model puts over TTFT or TPOT at this rate per replica
    (1 when saturated): what ``slo`` weighs a replica more or fewer against. Bucketed and memoised
    like :func:`replica_capacity` (the rate to ~5% steps)."""
    if rate_per_replica_rps <= 0.0:
        return 0.0
    key = _ShapeKey.of(prompt_tokens, output_tokens, slo_ttft_s, replicas, output_cv, dispersion, prompt_cv)
    return _miss_share(
        model,
        gpu,
        tp,
        key.prompt_tokens,
        key.output_tokens,
        key.slo_ttft_s,
        slo_tpot_s,
        length_bucket(rate_per_replica_rps * 1000.0) / 1000.0,
        max_num_seqs,
        max_num_batched_tokens,
        calibration,
        scale,
        key.replicas,
        key.output_cv,
        key.dispersion,
        key.prompt_cv,
        _non_default(precision),
    )


@lru_cache(maxsize=4096)
def _miss_share(
    model: str,
    gpu: str,
    tp: int,
    prompt_tokens: int,
    output_tokens: int,
    slo_ttft_s: float,
    slo_tpot_s: float,
    rate_rps: float,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    calibration: str | None,
    scale: FactorScale | None,
    replicas: int,
    output_cv: float,
    dispersion: float,
    prompt_cv: float,
    precision: Precision | None = None,
) -> float:
    tails = _shape_model(
        model, gpu, tp, max_num_seqs, max_num_batched_tokens, calibration, scale,
        prompt_tokens, output_tokens, prompt_cv, output_cv, True, precision,
    )  # fmt: skip
    with _SHAPE_LOCK:
        op = tails.at(
            rate_rps, prompt_tokens, output_tokens, slo_ttft_s, slo_tpot_s,
            replicas=replicas, output_cv=output_cv, dispersion=dispersion, prompt_cv=prompt_cv,
        )  # fmt: skip
    return op.miss
