"""The oracle and the causal reference of a mixed-GPU fleet, measured in cost.

A mixed fleet (``BacktestSettings.gpus``) may run any GPU type of its list, and ``gpu-mix``
chooses the cheapest mix in currency, not in GPU-hours: on the default prices an A100 replica of
an 8B model carries about half what an H100 replica carries for 43% of its price, so a fleet of
A100s uses more GPU-hours and costs less (docs/gpu-mix.md). An oracle that scales one type is
then no lower bound on cost unless that type is the cheapest per request served.

So both yardsticks are taken over the types:

1. For every type of ``settings.gpus`` that can serve the deployment, the one-type oracle
   (:func:`~llmscale.backtest.oracle.run_oracle`, ``gpu`` = that type, the fleet's own lifecycle
   and prices) and its causal reference (:func:`~llmscale.backtest.causal_reference.
   run_causal_reference`: the same definition, the oracle's schedule learnt late with headroom
   bisected to the target).
2. The mixed oracle is the cheapest of the one-type oracles **by cost** among those reaching
   min(the oracle's target, the best attainment any of them reached - 0.5 point): a type whose
   oracle cannot hold the target is no answer; the mixed reference likewise among the
   references (:func:`cheapest_by_cost`).

Cost is the measure because it is what the mix optimises and what its prices trade: judged by
GPU-hours, the A100 fleet that saves 36% of the money would count as the dearer one. GPU-hours
stay in the row.

What it does not search: a schedule mixing types in one interval. Without ``max_gpus`` limits
the cheapest fleet for a rate is the type with the most req/s per currency unit, save for
rounding to whole replicas (one replica's price at most per interval: 4 A100 + 1 H100 can beat
6 A100 by less than one A100's price); with a limit that binds, a type whose oracle holds more
GPUs than its ``max_gpus`` is left out, and a fleet held under the limit by mixing could be
cheaper than every remaining one-type answer. The row lists each type's numbers
(``mixed_by_gpu``), so such a case shows.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import replace
from typing import IO, Any

from llmscale.backtest.causal_reference import REFERENCE, ReferenceSettings, run_causal_reference
from llmscale.backtest.oracle import OracleSettings, run_oracle
from llmscale.backtest.results import PolicyResult
from llmscale.backtest.runner import BacktestSettings
from llmscale.errors import ConfigError
from llmscale.workloads.model import Workload

__all__ = ["MIXED_SLACK", "cheapest_by_cost", "run_mixed_oracle", "type_settings"]

#: attainment a type's answer may trail the best type's and still count (0.5 point, the matrix's
#: criterion's slack)
MIXED_SLACK = 0.005


def type_settings(settings: BacktestSettings, gpu: str) -> BacktestSettings:
    """``settings`` with one GPU type: the fleet every replica of which is ``gpu``, with the mixed
    fleet's lifecycle and prices (so its cost is comparable with the mixed runs)."""
    return replace(settings, gpu=gpu, gpus=())


def _types(settings: BacktestSettings) -> list[str]:
    from llmscale.mix.fleet import unavailable_reason
    from llmscale.mix.prices import canonical_gpu

    if not settings.gpus:
        raise ConfigError("run_mixed_oracle: settings.gpus is empty (not a mixed fleet)")
    first = canonical_gpu(settings.gpu)
    names = [first, *(g for g in (canonical_gpu(x) for x in settings.gpus) if g != first)]
    return [g for g in names if unavailable_reason(settings.model, g, settings.tp) is None]


def _within_limit(row: dict[str, Any], settings: BacktestSettings, gpu: str) -> bool:
    """Whether a one-type run never held more GPUs of ``gpu`` than its ``max_gpus``."""
    prices = settings.gpu_prices
    limit = None if prices is None else prices.of(gpu).max_gpus
    top = row.get("replicas_max")
    return limit is None or top is None or int(top) * settings.tp <= limit


def cheapest_by_cost(rows: dict[str, PolicyResult], target: float) -> str:
    """The type whose result is cheapest by ``cost`` among those reaching min(``target``, the best
    attainment - :data:`MIXED_SLACK`). E.g. target 99%: A100 99.2% $4.25, H100 99.98% $5.40,
    H200 98.5% $6.64: need 99%, the A100; with every type below 99% (best 98.5%), need 98%."""
    if not rows:
        raise ConfigError("cheapest_by_cost: no GPU type to choose from")
    best = max(float(r.summary["slo_attainment"] or 0.0) for r in rows.values())
    need = min(target, best - MIXED_SLACK)
    meeting = {g: r for g, r in rows.items() if float(r.summary["slo_attainment"] or 0.0) >= need}
    return min(meeting, key=lambda g: (float(meeting[g].summary["cost"] or 0.0), g))


def run_mixed_oracle(
    workload: Workload,
    settings: BacktestSettings,
    oracle: OracleSettings | None = None,
    reference: ReferenceSettings | None = None,
    *,
    spare_workers: Callable[[], int] | None = None,
    decisions_out: IO[str] | None = None,
) -> PolicyResult:
    """The mixed fleet's oracle (module docstring), its ``causal_reference`` attached when
    ``reference`` is given. Each row names the type it chose (``gpu``) and every type's numbers
    (``mixed_by_gpu``: attainment, GPU-hours, cost of the type's oracle and reference).
    ``decisions_out`` gets the decision log of the chosen type's oracle (each type's is kept
    until the choice is known)."""
    oracles: dict[str, PolicyResult] = {}
    references: dict[str, PolicyResult] = {}
    logs: dict[str, io.StringIO] = {}
    for gpu in _types(settings):
        one = type_settings(settings, gpu)
        log = io.StringIO() if decisions_out is not None else None
        result = run_oracle(workload, one, oracle, spare_workers=spare_workers, decisions_out=log)
        if not _within_limit(result.summary, settings, gpu):
            continue
        oracles[gpu] = result
        if log is not None:
            logs[gpu] = log
        if reference is not None:
            ref = run_causal_reference(workload, one, result, reference, spare_workers=spare_workers)
            if _within_limit(ref.summary, settings, gpu):
                references[gpu] = ref

    def table() -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for gpu, r in oracles.items():
            out[gpu] = {"oracle": _brief(r)}
            if gpu in references:
                out[gpu]["causal_reference"] = _brief(references[gpu])
        return out

    by_gpu = table()
    target = float((oracle or OracleSettings()).target)
    chosen = cheapest_by_cost(oracles, target)
    best = oracles[chosen]
    if decisions_out is not None:
        decisions_out.write(logs[chosen].getvalue())
    summary = dict(best.summary)
    summary.update(gpu=chosen, mixed_by_gpu=by_gpu, mixed_measure="cost")
    out = PolicyResult(summary, best.series)
    if references:
        pick = cheapest_by_cost(references, target)
        ref_summary = dict(references[pick].summary)
        ref_summary.update(policy=REFERENCE, gpu=pick, mixed_by_gpu=by_gpu, mixed_measure="cost")
        if float(summary["cost"] or 0.0) > 0.0:
            ref_summary["price_of_foresight_cost"] = round(
                float(ref_summary["cost"]) / float(summary["cost"]), 4
            )
        out.causal_reference = PolicyResult(ref_summary, references[pick].series)
    return out


def _brief(r: PolicyResult) -> dict[str, Any]:
    s = r.summary
    return {k: s.get(k) for k in ("slo_attainment", "gpu_hours", "cost", "replicas_max")}
