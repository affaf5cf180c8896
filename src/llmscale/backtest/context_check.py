"""Requests longer than the model's context: how many, and which catalogue model would take them.

A replica answers HTTP 400 to a request whose prompt + output tokens exceed
its limit (:mod:`llmscale.sim.limits`); the backtest counts it as rejected
(and as an SLO miss) and no policy sees it, as a vLLM fleet's metrics never
do. On a trace recorded against a long-context model that can be most of the
traffic: the Mooncake trace on Llama-3-8B (8,192 tokens) loses 2,121 of
3,993 requests (53%). :func:`check_context` measures this before a backtest
so the CLI can say it and the JSON and report can record it, and
:func:`within_context` gives the requests a replica admits, which is what
the backtest's defaults are sized from.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from llmscale.errors import ConfigError, LlmscaleError
from llmscale.sim.limits import ContextLimit, context_limit, exceeds_context
from llmscale.workloads.model import Workload

if TYPE_CHECKING:
    from llmscale.precision import Precision

__all__ = [
    "ContextCheck",
    "LongerContext",
    "alternatives_sentence",
    "check_context",
    "fleet_limit",
    "fmt_share",
    "within_context",
]

#: Catalogue models whose parameter count is within this factor of the chosen one count as
#: "of similar size" (they need about the same GPUs): for Llama-3-8B (8.0B) that is Mistral-7B
#: (7.2B), the Qwen2/2.5-7B models (7.6B) and Llama-2-13B (13.0B, x1.62), not Yi-34B (x4.3).
SIMILAR_SIZE_FACTOR = 2.0
#: Alternatives named in the warning, the JSON and the report.
MAX_ALTERNATIVES = 3


@dataclass(frozen=True)
class LongerContext:
    """A catalogue model of similar size and what it would admit on the same GPUs."""

    model: str
    admitted_tokens: int  # its limit on the backtest's GPU and TP (context, or KV pool if smaller)
    over_context_requests: int  # requests of the workload it would still reject


@dataclass(frozen=True)
class ContextCheck:
    """The workload against one replica's request-length limit."""

    model: str
    limit: ContextLimit
    requests: int
    over_context_requests: int
    longest_request_tokens: int
    #: similar-size models that reject fewer of the requests, fewest rejections first
    alternatives: tuple[LongerContext, ...] = ()

    @property
    def share(self) -> float:
        """Share of the workload's requests beyond the limit (0..1)."""
        return self.over_context_requests / self.requests if self.requests else 0.0

    def as_json(self) -> dict[str, Any]:
        """The ``context`` entry of the backtest JSON's ``workload`` section (worded by report/context.py)."""
        return {
            "model": self.model,
            "requests": self.requests,
            "max_model_len_tokens": self.limit.max_model_len_tokens,
            "kv_pool_tokens": self.limit.kv_pool_tokens,
            "admitted_tokens": self.limit.admitted_tokens,
            "over_context_requests": self.over_context_requests,
            "over_context_share": round(self.share, 6),
            "longest_request_tokens": self.longest_request_tokens,
            "long_context_models": [
                {
                    "model": a.model,
                    "admitted_tokens": a.admitted_tokens,
                    "over_context_requests": a.over_context_requests,
                }
                for a in self.alternatives
            ],
        }


def fleet_limit(
    model: str,
    gpu: str,
    tp: int,
    sim: Any,
    calibration: str | None = None,
    precision: Precision | None = None,
) -> ContextLimit:
    """The limit a fleet of ``model`` on ``tp`` x ``gpu`` with simulator settings ``sim`` applies.

    Read off a fleet built with no requests (its KV pool and max_model_len are
    fixed at construction), so the numbers are the fleet's own. Raises
    :class:`ConfigError` as the fleet would (weights do not fit, bad TP, ...).
    """
    from llmscale.perf import get_perf_model
    from llmscale.sim.fleet import Fleet

    perf = get_perf_model(model, gpu, tp, calibration=calibration, precision=precision)
    none_f = np.zeros(0, dtype=np.float64)
    none_i = np.zeros(0, dtype=np.int64)
    fleet = Fleet(perf, sim, none_f, none_i, none_i, initial_replicas=0, gpus_per_replica=tp)
    return context_limit(fleet)


def _count_over(workload: Workload, limit_tokens: int) -> int:
    return int(np.count_nonzero(exceeds_context(workload.input_tokens, workload.output_tokens, limit_tokens)))


def _alternatives(
    workload: Workload, model: str, gpu: str, tp: int, sim: Any, over_now: int
) -> tuple[LongerContext, ...]:
    from llmscale.perf.catalogue import MODELS, get_model

    chosen = get_model(model)
    found: list[tuple[int, float, int, LongerContext]] = []
    # The candidates' own context: a --max-model-len set for the chosen model is not theirs.
    own = replace(sim, max_model_len=None)
    for order, spec in enumerate(MODELS.values()):
        if spec.name == chosen.name:
            continue
        size = abs(math.log(spec.param_count / chosen.param_count))
        if size > math.log(SIMILAR_SIZE_FACTOR):
            continue
        try:
            lim = fleet_limit(spec.name, gpu, tp, own)
        except LlmscaleError:
            continue  # does not fit these GPUs, or this TP does not divide its heads
        over = _count_over(workload, lim.admitted_tokens)
        if over < over_now:
            found.append((over, size, order, LongerContext(spec.name, lim.admitted_tokens, over)))
    found.sort(key=lambda f: f[:3])
    return tuple(f[3] for f in found[:MAX_ALTERNATIVES])


def check_context(
    workload: Workload,
    model: str,
    gpu: str,
    tp: int,
    sim: Any,
    calibration: str | None = None,
    precision: Precision | None = None,
) -> ContextCheck:
    """Count the requests of ``workload`` beyond the fleet's limit; name longer-context models."""
    from llmscale.perf.catalogue import get_model

    limit = fleet_limit(model, gpu, tp, sim, calibration, precision)
    over = _count_over(workload, limit.admitted_tokens)
    alternatives = _alternatives(workload, model, gpu, tp, sim, over) if over else ()
    return ContextCheck(
        model=get_model(model).name,
        limit=limit,
        requests=workload.num_requests,
        over_context_requests=over,
        longest_request_tokens=int((workload.input_tokens + workload.output_tokens).max()),
        alternatives=alternatives,
    )


def within_context(workload: Workload, check: ContextCheck) -> Workload:
    """The requests of ``workload`` a replica admits (all of them when none is too long).

    Sizing reads this: a capacity probe fed requests that are rejected on
    arrival judges them as SLO misses and finds no rate one replica sustains
    (the Mooncake trace on Llama-3-8B measured ~0 req/s and asked for 3,650
    replicas), and a peak rate that counts them asks for replicas nobody
    serves. The time axis restarts at the first admitted request (usually the
    first request). Raises :class:`ConfigError` when no request fits.
    """
    if not check.over_context_requests:
        return workload
    keep = ~exceeds_context(workload.input_tokens, workload.output_tokens, check.limit.admitted_tokens)
    if not keep.any():
        raise ConfigError(
            f"every request of {workload.name} is longer than the {check.limit.admitted_tokens:,d} "
            f"tokens {check.model} admits (prompt + output): a backtest would reject them all. "
            f"{alternatives_sentence(check.as_json())}"
        )
    return Workload.from_arrays(
        workload.name,
        workload.arrival_s[keep],
        workload.input_tokens[keep],
        workload.output_tokens[keep],
        {**workload.meta, "within_context_of": check.model},
    )


def fmt_share(share: float) -> str:
    """A 0-1 share as a percentage, two significant digits below 1%: 0.5312 -> 53.1%, 0.000383 -> 0.038%.

    The report's ``fmt_pct`` would print 89 requests of 232,624 as "0.0%", which reads as none.
    """
    pct = 100.0 * share
    if pct >= 1.0 or pct <= 0.0:
        return f"{pct:.1f}%"
    decimals = 1 - math.floor(math.log10(pct))
    return f"{pct:.{decimals}f}%"


def _label(alt: Mapping[str, Any]) -> str:
    return f"{alt['model']} ({int(alt['admitted_tokens']):,d} tokens)"


def alternatives_sentence(ctx: Mapping[str, Any]) -> str:
    """Which similar-size catalogue models would take the too-long requests (or most of them)."""
    alts: Sequence[Mapping[str, Any]] = ctx.get("long_context_models") or ()
    takes_all = [a for a in alts if int(a["over_context_requests"]) == 0]
    if takes_all:
        return f"Of similar size, {', '.join(_label(a) for a in takes_all)} would take them all."
    if alts:
        best = alts[0]
        left = int(best["over_context_requests"])
        share = left / int(ctx["requests"]) if ctx.get("requests") else 0.0
        return (
            f"No catalogue model of similar size takes them all; {_label(best)} would reject "
            f"{left:,d} ({fmt_share(share)})."
        )
    return "No catalogue model of similar size would take more of them on these GPUs."
