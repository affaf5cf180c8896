"""Where the trials of ``llmscale tune`` run: in this process, in local worker processes, or as
Ray tasks on an existing cluster.

The study asks for a trial's parameters and tells its outcome in the main process (Optuna's
ask/tell, one writer of the SQLite storage); an executor only evaluates. Every executor has the
same three calls, so the study loop does not know where a trial ran:

* ``submit(key, params)``: start evaluating one trial;
* ``next_done(timeout_s)``: one finished ``(key, outcome or the exception it raised)``, or None
  when none finished within the time-out;
* ``close()``: stop the workers (a trial still running is abandoned; the study marks it failed).

``slots`` is how many trials may run at once: ``--jobs`` locally; on Ray, ``--jobs`` when given,
else the cluster's CPUs (each trial is one single-threaded simulation and asks Ray for one CPU).
"""

from __future__ import annotations

import multiprocessing as mp
from collections import deque
from collections.abc import Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import replace
from typing import Any, Protocol

from llmscale.backtest.ray_fanout import connect
from llmscale.errors import ConfigError
from llmscale.tune.objective import TrialOutcome, TuneCase, evaluate

__all__ = ["Executor", "InlineExecutor", "LocalExecutor", "RayExecutor", "make_executor"]

Done = tuple[int, TrialOutcome | BaseException]


class Executor(Protocol):
    slots: int

    def submit(self, key: int, params: Mapping[str, Any]) -> None: ...

    def next_done(self, timeout_s: float) -> Done | None: ...

    def close(self) -> None: ...


class InlineExecutor:
    """One trial at a time in this process (``--jobs 1``): no fork, errors with their traceback."""

    slots = 1

    def __init__(self, policy: str, cases: Sequence[TuneCase]) -> None:
        self._policy = policy
        self._cases = tuple(cases)
        self._done: deque[Done] = deque()

    def submit(self, key: int, params: Mapping[str, Any]) -> None:
        try:
            self._done.append((key, evaluate(self._policy, params, self._cases)))
        except ConfigError as e:
            self._done.append((key, e))

    def next_done(self, timeout_s: float) -> Done | None:
        return self._done.popleft() if self._done else None

    def close(self) -> None:
        self._done.clear()


#: the tuning cases, inherited by forked workers (a trial does not pickle the request arrays)
_cases: tuple[TuneCase, ...] = ()


def _init_worker(cases: tuple[TuneCase, ...]) -> None:
    global _cases
    _cases = cases


def _evaluate_here(policy: str, params: Mapping[str, Any]) -> TrialOutcome:
    assert _cases, "a tuning worker runs after _init_worker"
    return evaluate(policy, params, _cases)


class LocalExecutor:
    """``jobs`` forked worker processes on this machine."""

    def __init__(self, policy: str, cases: Sequence[TuneCase], jobs: int) -> None:
        self.slots = jobs
        self._policy = policy
        # fork: the workers inherit the cases with the initializer's arguments, as the backtest's
        # pool does (llmscale.backtest.compare), so the request arrays are not pickled per trial.
        self._pool = ProcessPoolExecutor(
            max_workers=jobs,
            mp_context=mp.get_context("fork"),
            initializer=_init_worker,
            initargs=(tuple(cases),),
        )
        self._futures: dict[Future[TrialOutcome], int] = {}

    def submit(self, key: int, params: Mapping[str, Any]) -> None:
        self._futures[self._pool.submit(_evaluate_here, self._policy, dict(params))] = key

    def next_done(self, timeout_s: float) -> Done | None:
        if not self._futures:
            return None
        done, _ = wait(self._futures, timeout=timeout_s, return_when=FIRST_COMPLETED)
        if not done:
            return None
        future = next(iter(done))
        key = self._futures.pop(future)
        error = future.exception()
        return (key, error) if error is not None else (key, future.result())

    def close(self) -> None:
        for future in self._futures:
            future.cancel()
        self._pool.shutdown(wait=True, cancel_futures=True)


def _evaluate_remote(policy: str, params: Mapping[str, Any], cases: tuple[TuneCase, ...]) -> TrialOutcome:
    """A Ray task: one trial on a worker of the cluster (``cases`` arrive from the object store)."""
    import ray

    outcome = evaluate(policy, params, cases)
    return replace(outcome, ran_on=f"ray node {ray.get_runtime_context().get_node_id()}")


class RayExecutor:
    """Trials as Ray tasks on the cluster at ``address`` (``ray start --head`` prints it)."""

    def __init__(self, policy: str, cases: Sequence[TuneCase], address: str, jobs: int | None) -> None:
        # Only a cluster that is already running: tune never starts one behind the user's back.
        ray = connect(address)
        self._ray = ray
        self._policy = policy
        # Once into the object store: every task reads the same copy, not a pickle per trial.
        self._cases_ref = ray.put(tuple(cases))
        # max_retries=0: a trial that raised is a failed trial, not one to run again.
        self._remote = ray.remote(num_cpus=1, max_retries=0)(_evaluate_remote)
        cpus = int(ray.cluster_resources().get("CPU", 1))
        self.slots = jobs if jobs else max(1, cpus)
        self._refs: dict[Any, int] = {}

    def submit(self, key: int, params: Mapping[str, Any]) -> None:
        self._refs[self._remote.remote(self._policy, dict(params), self._cases_ref)] = key

    def next_done(self, timeout_s: float) -> Done | None:
        if not self._refs:
            return None
        ready, _ = self._ray.wait(list(self._refs), num_returns=1, timeout=timeout_s)
        if not ready:
            return None
        key = self._refs.pop(ready[0])
        try:
            return key, self._ray.get(ready[0])
        except self._ray.exceptions.RayTaskError as e:
            cause = e.cause if isinstance(getattr(e, "cause", None), BaseException) else e
            return key, cause

    def close(self) -> None:
        for ref in self._refs:
            self._ray.cancel(ref, force=True)
        self._refs.clear()
        self._ray.shutdown()


def make_executor(policy: str, cases: Sequence[TuneCase], *, jobs: int, ray_address: str | None) -> Executor:
    """The executor the options ask for: Ray when ``ray_address``, else local processes."""
    if ray_address:
        return RayExecutor(policy, cases, ray_address, jobs or None)
    if jobs <= 1:
        return InlineExecutor(policy, cases)
    return LocalExecutor(policy, cases, jobs)
