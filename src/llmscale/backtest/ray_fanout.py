"""Backtest jobs as Ray tasks on an existing cluster (``backtest --ray ADDRESS``).

A backtest is a set of independent jobs, one per (policy or oracle, seed); each is one
single-threaded, deterministic simulation of a workload. On one machine they run in a process
pool (:mod:`llmscale.backtest.compare`); a two-week trace under every policy with ten seeds is
~100 jobs of an hour or more each, which is what a cluster is for. Here each job is a Ray task
asking for one CPU, each seed's workload goes into the object store once (a job reads that copy
instead of a pickle of its own: the default workload's request arrays are ~6 MB), and the
results come back in the order asked for. A job runs the very function the local pool runs, so
a run on Ray writes the same JSON and decision logs as one on this machine
(``tests/backtest/test_backtest_ray.py``).

What does not cross: the oracle's use of idle local cores for trials ahead of its search (a
Ray task is one CPU; the search finds the same schedule without them, only later), and live
progress within a job (the bar moves when a job finishes).

The connection is only to a cluster that already runs: nothing here starts one behind the
user's back, and an address nothing listens on is refused within :data:`PROBE_TIMEOUT_S`
instead of Ray's client retrying it without end.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable, Sequence
from typing import Any

from llmscale.errors import ConfigError, LlmscaleError

#: How long the reachability probe waits for the cluster's port. A head node on a LAN answers in
#: milliseconds; 5 s allows a slow VPN without leaving a user staring at a silent terminal.
PROBE_TIMEOUT_S = 5.0

#: Where ``ray start --head`` records the address of the cluster it started on this machine
#: (what ``--ray auto`` connects to).
RAY_CURRENT_CLUSTER = "/tmp/ray/ray_current_cluster"


def host_port(address: str) -> tuple[str, int] | None:
    """``host:port`` of a Ray address (``host:port``, ``ray://host:port``; ``auto`` read from the
    file ``ray start`` writes), or None when the form is not one to probe."""
    if address == "auto":
        address = os.environ.get("RAY_ADDRESS", "")
        if not address or address == "auto":
            try:
                with open(RAY_CURRENT_CLUSTER, encoding="utf-8") as f:
                    address = f.read().strip()
            except OSError:
                return None  # no local cluster recorded: ray.init says so itself, at once
    address = address.removeprefix("ray://")
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def check_reachable(address: str) -> None:
    """Refuse an address nothing listens on before handing it to ``ray.init``.

    Ray's client retries a GCS it cannot reach without an end (``--ray 127.0.0.1:1`` printed a
    reconnect warning every 35 s and never returned), so a typo in the address would hang the
    command. One TCP connect with a bound tells a refused or silent port apart from a cluster in
    a few seconds at most.
    """
    target = host_port(address)
    if target is None:
        return
    try:
        with socket.create_connection(target, timeout=PROBE_TIMEOUT_S):
            pass
    except OSError as e:
        reason = "no answer" if isinstance(e, TimeoutError) else (e.strerror or str(e))
        raise ConfigError(
            f"--ray {address}: cannot reach a Ray cluster at {target[0]}:{target[1]} ({reason} "
            f"within {PROBE_TIMEOUT_S:g} s); give the address `ray start --head` printed"
        ) from e


def connect(address: str) -> Any:
    """The ``ray`` module, connected to the running cluster at ``address``; ConfigError (exit 2)
    when ray is not installed or nothing answers there."""
    try:
        import ray
    except ImportError as e:
        raise ConfigError("--ray needs the ray package: pip install 'llmscale[ray]' (or ray itself)") from e
    check_reachable(address)
    if ray.is_initialized():
        return ray  # a caller (a test, a notebook) already connected this process
    try:
        ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise ConfigError(f"--ray {address}: cannot connect to a Ray cluster there: {e}") from e
    return ray


Job = tuple[str, int]  # (policy name or "oracle", seed index)


def run_jobs(
    address: str,
    order: Sequence[Job],
    workloads: Sequence[Any],
    run_job: Callable[..., Any],
    job_args: Callable[[Job], tuple[Any, ...]],
    on_done: Callable[[Job], None] | None = None,
) -> dict[Job, Any]:
    """Run ``run_job(workload, *job_args(job))`` for each job of ``order`` as a Ray task, the
    workload of seed ``k`` shared through the object store; the results by job.

    A task that raised re-raises its error here (the run fails as a local one would, naming the
    job); the others are cancelled. A connection this call made is closed when it returns.
    """
    try:
        import ray as ray_module

        owned = not ray_module.is_initialized()
    except ImportError:
        owned = False
    ray = connect(address)
    try:
        return _run(ray, order, workloads, run_job, job_args, on_done)
    finally:
        if owned:
            ray.shutdown()


def _run(
    ray: Any,
    order: Sequence[Job],
    workloads: Sequence[Any],
    run_job: Callable[..., Any],
    job_args: Callable[[Job], tuple[Any, ...]],
    on_done: Callable[[Job], None] | None,
) -> dict[Job, Any]:
    refs = [ray.put(w) for w in workloads]
    # max_retries=0: a job that raised is a failed run, not one to try again on another node
    remote = ray.remote(num_cpus=1, max_retries=0)(run_job)
    pending: dict[Any, Job] = {remote.remote(refs[job[1]], *job_args(job)): job for job in order}
    out: dict[Job, Any] = {}
    try:
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            job = pending.pop(ready[0])
            try:
                out[job] = ray.get(ready[0])
            except ray.exceptions.RayTaskError as e:
                cause = e.cause if isinstance(getattr(e, "cause", None), BaseException) else e
                if isinstance(cause, LlmscaleError):
                    raise cause from e  # bad input found by a job: the CLI's one-line error and exit code
                where = f"backtest job {job[0]} (seed #{job[1] + 1})"
                raise RuntimeError(f"{where} failed on Ray: {cause}") from e
            if on_done is not None:
                on_done(job)
    finally:
        for ref in pending:
            ray.cancel(ref, force=True)
    return out
