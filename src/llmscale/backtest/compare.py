"""Several policies over the same workload and seed, side by side, plus the oracle.

Policies run in worker processes when ``jobs > 1`` (each simulation is
single-threaded and independent); results come back in the order asked for.
:func:`run_backtest_seeds` repeats that over several seeds (one workload and
settings per seed) in the same pool: every (policy, seed) pair is one job.

Scheduling: the jobs start longest first (:func:`schedule`), so the short
ones fill the cores at the end instead of one long job running alone. And
once fewer jobs are left than workers, the idle cores are offered to the
oracle (``spare_workers``), which runs the trials its search will likely
need next alongside the current one.
"""

from __future__ import annotations

import multiprocessing as mp
import queue as queue_mod
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import asdict
from typing import Any

from llmscale.backtest.causal_reference import ReferenceSettings, run_causal_reference
from llmscale.backtest.context_check import check_context
from llmscale.backtest.feasibility import infeasible_summary
from llmscale.backtest.oracle import OracleSettings, run_oracle
from llmscale.backtest.results import PolicyResult
from llmscale.backtest.runner import BacktestSettings, run_policy
from llmscale.workloads.model import Workload

__all__ = ["ORACLE", "build_document", "run_backtest", "run_backtest_seeds"]

ORACLE = "oracle"

_progress_queue: Any = None
#: workers left idle by the jobs still to finish (a multiprocessing Value the parent keeps current)
_spare_workers: Any = None
#: the workload of each seed, inherited by the forked workers (a job does not pickle a copy)
_workloads: Sequence[Workload] = ()

#: Relative cost of each job on the default workload: wall seconds of its simulated hour with
#: both cores busy, the oracle's scaled to 100 (shared 2-core VM, rounded; the order is what
#: counts). The oracle forks ~150 trial runs; knative-kpa pays for a controller tick every 2 s;
#: the rest is mostly the simulation, more for a policy holding more replicas.
#: A policy not listed counts as :data:`_DEFAULT_COST`.
_COST_HINT: dict[str, float] = {
    "oracle": 100.0,
    "knative-kpa": 57.0,
    "aibrix-apa": 28.0,
    "ray-serve": 27.0,
    "keda-queue": 20.0,
    "slo": 18.0,
    "static": 17.0,
    "wva-saturation": 15.0,
    "dynamo-sla": 14.0,
    "hpa-gpu-util": 9.0,
}
_DEFAULT_COST = 15.0


def schedule(names: Sequence[str]) -> list[str]:
    """``names`` in the order to start them: longest expected run first (the oracle), ties as given.

    Longest-first keeps both cores busy to the end: with 2 workers the last
    jobs to start are the shortest, so the two workers finish close together.
    """
    return sorted(names, key=lambda n: -_COST_HINT.get(n, _DEFAULT_COST))


def _init_worker(q: Any, spare: Any, workloads: Sequence[Workload]) -> None:
    global _progress_queue, _spare_workers, _workloads
    _progress_queue = q
    _spare_workers = spare
    _workloads = workloads


class _Throttled:
    """Report simulated time at most every ``every_s`` wall seconds."""

    def __init__(self, name: str, sink: Callable[[str, float], None], every_s: float = 0.25) -> None:
        self.name = name
        self.sink = sink
        self.every_s = every_s
        self._last = 0.0

    def __call__(self, t: float) -> None:
        now = time.monotonic()
        if now - self._last >= self.every_s:
            self._last = now
            self.sink(self.name, t)


class _Decisions:
    """Collects decision-log lines in memory (workers send them back with the result)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def write(self, s: str) -> int:
        self.lines.append(s)
        return len(s)


def _run_one(
    name: str,
    label: str,
    k: int,
    settings: BacktestSettings,
    oracle: OracleSettings,
    want_decisions: bool,
    reference: ReferenceSettings | None,
) -> tuple[PolicyResult, list[str]]:
    assert _workloads, "a backtest worker runs after _init_worker"
    workload = _workloads[k]
    q = _progress_queue
    progress = _Throttled(label, lambda n, t: q.put((n, t))) if q is not None else None
    spare = _spare_workers
    spare_workers = (lambda: int(spare.value)) if spare is not None else None
    return _run_here(name, workload, settings, oracle, want_decisions, progress, spare_workers, reference)


def _run_here(
    name: str,
    workload: Workload,
    settings: BacktestSettings,
    oracle: OracleSettings,
    want_decisions: bool,
    progress: Callable[[float], None] | None,
    spare_workers: Callable[[], int] | None = None,
    reference: ReferenceSettings | None = None,
) -> tuple[PolicyResult, list[str]]:
    sink = _Decisions() if want_decisions else None
    if name == ORACLE:
        result = run_oracle(
            workload,
            settings,
            oracle,
            decisions_out=sink,  # type: ignore[arg-type]
            progress=progress,
            spare_workers=spare_workers,
        )
        # The reference is derived from the oracle's schedule, so it runs in the oracle's job,
        # right after it (it writes no decision log: the oracle's lines stay as they were). In a
        # pool's worker (``spare_workers`` given) its runs that wait for no verdict fork beside
        # its search: the oracle's job is the longest, and the reference would otherwise extend
        # it alone while the other workers finish (benchmarks/causal_reference_cost.py).
        if reference is not None:
            result.causal_reference = run_causal_reference(
                workload, settings, result, reference, spare_workers=spare_workers
            )
    else:
        result = run_policy(workload, name, settings, decisions_out=sink, progress=progress)  # type: ignore[arg-type]
    return result, (sink.lines if sink else [])


def _run_job(
    workload: Workload,
    name: str,
    settings: BacktestSettings,
    oracle: OracleSettings,
    want_decisions: bool,
    reference: ReferenceSettings | None,
) -> tuple[PolicyResult, list[str]]:
    """One job on a Ray worker: :func:`_run_here` with no progress (the workload from the store)."""
    return _run_here(name, workload, settings, oracle, want_decisions, None, None, reference)


def run_backtest(
    workload: Workload,
    policies: Sequence[str],
    settings: BacktestSettings,
    *,
    oracle: OracleSettings | None = None,
    include_oracle: bool = True,
    jobs: int = 1,
    want_decisions: bool = False,
    on_progress: Callable[[str, float], None] | None = None,
    ray_address: str | None = None,
    reference: ReferenceSettings | None = None,
) -> tuple[list[PolicyResult], PolicyResult | None, list[str]]:
    """Run each policy (and the oracle) on the same workload; returns (results, oracle, decision lines).

    With ``reference`` (and the oracle) the oracle's result carries the causal reference
    (``causal_reference``, :mod:`~llmscale.backtest.causal_reference`)."""
    return run_backtest_seeds(
        [workload],
        policies,
        [settings],
        oracle=oracle,
        include_oracle=include_oracle,
        jobs=jobs,
        want_decisions=want_decisions,
        on_progress=on_progress,
        ray_address=ray_address,
        reference=reference,
    )[0]


def seed_label(name: str, k: int, num_seeds: int) -> str:
    """How progress names the run of ``name`` on the ``k``-th seed: the name alone for one seed."""
    return name if num_seeds == 1 else f"{name} #{k + 1}"


def run_backtest_seeds(
    workloads: Sequence[Workload],
    policies: Sequence[str],
    settings: Sequence[BacktestSettings],
    *,
    oracle: OracleSettings | None = None,
    include_oracle: bool = True,
    jobs: int = 1,
    want_decisions: bool = False,
    on_progress: Callable[[str, float], None] | None = None,
    ray_address: str | None = None,
    reference: ReferenceSettings | None = None,
) -> list[tuple[list[PolicyResult], PolicyResult | None, list[str]]]:
    """:func:`run_backtest` for each (workload, settings) pair, every run a job of one pool.

    ``workloads[k]`` runs with ``settings[k]`` (normally the same but for the simulator's seed).
    Progress is reported under :func:`seed_label`. Returns one (results, oracle, decision lines)
    per seed, in order. With ``ray_address`` every job is a task on that Ray cluster
    (:mod:`llmscale.backtest.ray_fanout`) and ``jobs`` is not used: the cluster's CPUs are.
    """
    if len(workloads) != len(settings) or not workloads:
        raise ValueError(f"one settings per workload: {len(workloads)} workloads, {len(settings)} settings")
    oracle = oracle or OracleSettings()
    names = list(policies) + ([ORACLE] if include_oracle else [])
    n = len(workloads)
    keys = [(name, k) for k in range(n) for name in names]
    outputs: dict[tuple[str, int], tuple[PolicyResult, list[str]]] = {}
    if ray_address:
        from llmscale.backtest.ray_fanout import run_jobs

        def done(key: tuple[str, int]) -> None:
            if on_progress:
                on_progress(seed_label(*key, n), float("inf"))

        outputs = run_jobs(
            ray_address,
            [(name, k) for name in schedule(names) for k in range(n)],
            workloads,
            _run_job,
            lambda key: (key[0], settings[key[1]], oracle, want_decisions, reference),
            done,
        )
    elif jobs <= 1 or len(keys) == 1:
        for name, k in keys:
            label = seed_label(name, k, n)
            progress = _Throttled(label, on_progress) if on_progress else None
            outputs[name, k] = _run_here(
                name, workloads[k], settings[k], oracle, want_decisions, progress, None, reference
            )
    else:
        ctx = mp.get_context("fork")
        q = ctx.Queue()
        workers = min(jobs, len(keys))
        spare = ctx.Value("i", 0, lock=False)
        with ProcessPoolExecutor(
            # Forked workers inherit the workloads with the initializer's arguments, so no job
            # pickles the ~6 MB of request arrays (the default workload) to send it.
            max_workers=workers,
            mp_context=ctx,
            initializer=_init_worker,
            initargs=(q, spare, tuple(workloads)),
        ) as pool:
            # The pool starts jobs in submission order: longest first (the oracles), then by seed.
            order = [(name, k) for name in schedule(names) for k in range(n)]
            futures: dict[tuple[str, int], Future[tuple[PolicyResult, list[str]]]] = {
                (name, k): pool.submit(
                    _run_one, name, seed_label(name, k, n), k, settings[k], oracle, want_decisions, reference
                )
                for name, k in order
            }
            pending = set(futures)
            while pending:
                spare.value = max(0, workers - len(pending))
                try:
                    label, t = q.get(timeout=0.2)
                    if on_progress:
                        on_progress(label, t)
                except queue_mod.Empty:
                    pass
                for key in list(pending):
                    if futures[key].done():
                        outputs[key] = futures[key].result()
                        pending.discard(key)
                        if on_progress:
                            on_progress(seed_label(*key, n), float("inf"))
    return [
        (
            [outputs[name, k][0] for name in policies],
            outputs[ORACLE, k][0] if include_oracle else None,
            [line for name in names for line in outputs[name, k][1]],
        )
        for k in range(n)
    ]


def build_document(
    workload: Workload,
    settings: BacktestSettings,
    results: Sequence[PolicyResult],
    oracle_result: PolicyResult | None,
    *,
    with_series: bool,
) -> dict[str, Any]:
    """The JSON document of a backtest (``--json``); with series it also feeds the report."""
    sim = asdict(settings.sim)
    config: dict[str, Any] = {
        "model": settings.model,
        "gpu": settings.gpu,
        "tp": settings.tp,
        "min_replicas": settings.min_replicas,
        "max_replicas": settings.max_replicas,
        "initial_replicas": settings.initial_replicas,
        "slo_ttft_s": settings.slo_ttft_s,
        "slo_tpot_s": settings.slo_tpot_s,
        "slo_ttft_per_1k_tokens_s": settings.slo_ttft_per_1k_tokens_s,
        "seed": settings.seed,
        "policy_params": settings.policy_params,
        # step_token_stats only keeps a histogram the emulator exports: it changes no result
        **{
            f"sim_{k}": (None if v == float("inf") else v)
            for k, v in sim.items()
            if k not in ("step_token_stats", "hbm_glitches", "adaptive_batch", "node_start_s", "max_nodes")
        },
    }
    # FP8 likewise: a bf16 run writes the document it wrote before number formats were modelled.
    if not settings.precision.is_default:
        config["dtype"] = settings.dtype
        config["quantization"] = settings.quantization
        config["kv_cache_dtype"] = settings.kv_cache_dtype
    # The node pool likewise: a run without it writes the document it wrote before the pool.
    if settings.sim.node_pool:
        config["sim_node_start_s"] = sim["node_start_s"]
        config["sim_max_nodes"] = sim["max_nodes"]
    # Faults appear only when injected, so a healthy run's document is what it was before them.
    if sim["hbm_glitches"]:
        config["sim_hbm_glitches"] = sim["hbm_glitches"]
    if sim["adaptive_batch"] is not None:
        config["sim_adaptive_batch"] = sim["adaptive_batch"]
    workload_doc: dict[str, Any] = {"name": workload.name, **workload.summary()}
    # Requests beyond the model's context: the fleet rejects them on arrival (HTTP 400).
    workload_doc["context"] = check_context(
        workload,
        settings.model,
        settings.gpu,
        settings.tp,
        settings.sim,
        settings.calibration,
        settings.precision,
    ).as_json()
    workload_doc["infeasible"] = infeasible_summary(workload, settings)
    workload_doc["source"] = dict(workload.meta)
    return {
        "workload": workload_doc,
        "config": config,
        "results": [r.as_json(with_series=with_series) for r in results],
        "oracle": oracle_result.as_json(with_series=with_series) if oracle_result else None,
        **_reference_doc(oracle_result, with_series=with_series),
    }


def _reference_doc(oracle_result: PolicyResult | None, *, with_series: bool) -> dict[str, Any]:
    """``causal_reference`` (same fields as ``oracle``) and ``price_of_foresight`` (its GPU-hours
    / the oracle's; on a mixed fleet its cost / the oracle's, ``oracle.mixed_measure``), when
    the run has them; nothing otherwise, so a run without the reference writes the document it
    wrote before it."""
    from llmscale.backtest.fleet_yardsticks import price_of_foresight

    ref = oracle_result.causal_reference if oracle_result is not None else None
    if oracle_result is None or ref is None:
        return {}
    measure = str(oracle_result.summary.get("mixed_measure") or "gpu_hours")
    price = price_of_foresight(oracle_result.summary, ref.summary, measure)
    return {"causal_reference": ref.as_json(with_series=with_series), "price_of_foresight": price}
