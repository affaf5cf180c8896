"""``PodScrapeSource(workers=N)``: scraping in worker processes reads what one process reads.

Real HTTP pages (tests/support/page_server.py), real child processes. The same targets are read
by a source without workers and by one with three, tick after tick while the pages move: the
samples (values, histograms), the errors and the activator's queue must be equal. A worker
killed mid-run is replaced (the next tick reads its shard again; one killed during a tick is
reported with the signal that killed it), and :meth:`close` leaves no worker process behind.
Every hostile-page case of ``test_page_validation.py`` also runs through two workers there (its
``scraper`` fixture).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time

import pytest
from metrics_pages import DCGM_TWO_GPUS, TGI, TRITON, VLLM_NEW, VLLM_OLD, dcgm_node_page, vllm_page

from llmscale.clock import ManualClock
from llmscale.metrics import scrape
from llmscale.metrics.names import ACTIVATOR
from llmscale.metrics.scrape import PodScrapeSource, ScrapeTarget
from llmscale.types import Observation
from support.wait import wait_for

WALL0 = 1_700_000_000.0


def _vllm(k: int, j: int) -> str:
    done = 10.0 + 7 * k + j
    return vllm_page(
        waiting=float(j % 4),
        running=3.0 + k,
        kv=0.1 * (j % 5),
        ttft_cumulative=(done * 0.2, done * 0.6, done * 0.9, done),
        ttft_sum=done * 0.4,
    )


def _pages(k: int) -> dict[str, str]:
    """Tick ``k``'s pages: vLLM replicas whose values move, other exporters, a hostile one, a node."""
    pages = {f"/v{j}": _vllm(k, j) for j in range(12)}
    pages |= {"/new": VLLM_NEW, "/old": VLLM_OLD, "/tgi": TGI, "/triton": TRITON}
    pages["/neg"] = vllm_page(waiting=-3.0, running=1.0, kv=0.1, ttft_cumulative=(1, 2, 3, 4), ttft_sum=1.0)
    pages["/garbage"] = "vllm:num_requests_waiting{ 2 3 4\n"
    pages["/node"] = dcgm_node_page([("0", "v0", 30.0 + k), ("1", "v1", 60.0)])
    pages["/gpus"] = DCGM_TWO_GPUS
    pages["/activator"] = f"# TYPE {ACTIVATOR.REQUESTS_HELD} gauge\n{ACTIVATOR.REQUESTS_HELD} {k}\n"
    return pages


def _targets(server) -> list[ScrapeTarget]:
    targets = [ScrapeTarget(f"v{j}", server.url(f"/v{j}"), server.url("/node")) for j in range(12)]
    others = ("new", "old", "tgi", "triton", "neg", "garbage")
    targets += [ScrapeTarget(p, server.url(f"/{p}")) for p in others]
    targets.append(ScrapeTarget("with-gpus", server.url("/new"), server.url("/gpus")))
    targets.append(ScrapeTarget("gone", "http://127.0.0.1:9/metrics"))  # nothing listens there
    return targets


def _read(obs: Observation) -> list[tuple]:
    return [
        (
            s.replica,
            s.phase,
            s.ok,
            dict(s.values),
            {n: (tuple(h.bounds), list(h.cumulative), h.sum, h.count) for n, h in s.histograms.items()},
        )
        for s in obs.replicas
    ]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"  # a zombie is not running (and a reaped pid has no /proc)
    except OSError:
        return False


def test_workers_read_what_one_process_reads_and_leave_nothing_behind(page_server) -> None:
    for path, body in _pages(0).items():
        page_server.set(path, body)
    targets = _targets(page_server)
    kw = {"timeout_s": 3.0, "activator_url": page_server.url("/activator"), "wall_clock": ManualClock(WALL0)}
    with PodScrapeSource(targets, **kw) as one, PodScrapeSource(targets, workers=3, **kw) as three:
        for k in range(4):
            for path, body in _pages(k).items():
                page_server.set(path, body)
            a, b = one.observe(10.0 * k), three.observe(10.0 * k)
            assert _read(a) == _read(b)
            assert a.gateway_queue == b.gateway_queue == k
            # the workers' slowest page reaches the observation: rates are judged against it
            assert a.sample_lag_s > 0.0 and b.sample_lag_s > 0.0
            assert one.last_errors == three.last_errors
            assert {"neg", "garbage", "gone"} <= set(three.last_errors)
            assert sum(s.ok for s in b.replicas) == len(targets) - 3
        assert three.layout_reads + three.line_reads == one.layout_reads + one.line_reads
        pids = three.worker_pids()
        assert len(pids) == 3 and all(_alive(p) for p in pids)
        assert three.last_worker_cpu_s > 0.0

        # A worker killed between ticks is replaced: the next tick reads every shard again. The
        # test waits until the pool can see the death (it reaps the worker), not until /proc
        # reads "Z": the worker's second thread may still be exiting then, for up to tens of
        # milliseconds, and a tick in that window is sent to the dying worker (metrics/_shards.py).
        os.kill(pids[1], signal.SIGKILL)
        wait_for(f"the pool to see worker {pids[1]} dead", lambda: pids[1] not in three.worker_pids())
        b = three.observe(40.0)
        missed = {r: e for r, e in three.last_errors.items() if "dcgm" not in r}
        assert sum(s.ok for s in b.replicas) == len(targets) - 3, missed
        assert len(three.worker_pids()) == 3
        pids = three.worker_pids()
    assert not any(_alive(p) for p in pids)
    assert three.worker_pids() == []
    # A tick after close (an abandoned one finishing late) starts no worker: it reads nothing.
    late = three.observe(50.0)
    assert not any(s.ok for s in late.replicas) and three.worker_pids() == []


def test_a_worker_that_does_not_answer_makes_its_shard_unknown(page_server, monkeypatch) -> None:
    page_server.set("/slow", _vllm(0, 1), delay_s=2.5)
    page_server.set("/fast", _vllm(0, 2))
    # Two targets on one worker: its bound is the fetch time-out twice plus a grace (30 s; 3 s
    # here), so a stopped worker (SIGSTOP: alive, silent) is waited for that long, no longer.
    monkeypatch.setattr(scrape, "WORKER_GRACE_S", 3.0)
    with PodScrapeSource(
        [("slow", page_server.url("/slow")), ("fast", page_server.url("/fast"))], timeout_s=1.0, workers=1
    ) as src:
        # The worker's start-up (imports) counts in its first tick's 5 s bound, so on a loaded
        # machine that tick may miss it: wait for a tick it answers, bounded.
        for k in range(10):
            obs = src.observe(float(k))
            if obs.replicas[1].ok:
                break
        assert [s.ok for s in obs.replicas] == [False, True]  # the slow page timed out in the worker
        assert "no answer within 1 s" in src.last_errors["slow"]
        (pid,) = src.worker_pids()
        os.kill(pid, signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            obs = src.observe(15.0)
            waited = time.monotonic() - t0
        finally:
            os.kill(pid, signal.SIGCONT)
        assert [s.ok for s in obs.replicas] == [False, False]
        assert "scrape worker 0 gave no answer" in src.last_errors["fast"]
        assert 5.0 <= waited < 20.0  # 2 x 1 s + 3 s, then give up
        # A fresh worker; its start-up (imports) counts in its first tick's 5 s bound, so on a
        # loaded machine that tick may still miss it: wait for the condition, bounded.
        for k in range(10):
            obs = src.observe(20.0 + k)
            if obs.replicas[1].ok:
                break
        assert obs.replicas[1].ok, src.last_errors
        assert pid not in src.worker_pids()
    assert not _alive(pid)


def test_a_worker_killed_mid_tick_is_reported_with_its_signal(page_server, caplog) -> None:
    # The slow page keeps the worker fetching for 2 s; it is killed once that fetch has arrived,
    # mid-tick. Its shard is unknown for that tick, and the error says how the worker ended, not
    # only that the pipe closed; the next tick logs it and replaces it.
    page_server.set("/slow", _vllm(0, 1), delay_s=2.0)
    page_server.set("/fast", _vllm(0, 2))
    with PodScrapeSource(
        [("slow", page_server.url("/slow")), ("fast", page_server.url("/fast"))], timeout_s=5.0, workers=1
    ) as src:
        for k in range(10):  # start-up counts in the first tick's bound: wait for an answered one
            if all(s.ok for s in src.observe(float(k)).replicas):
                break
        (pid,) = src.worker_pids()
        fetched = page_server.hits["/slow"]

        def kill_mid_fetch() -> None:
            wait_for("the worker to ask for /slow", lambda: page_server.hits["/slow"] > fetched)
            os.kill(pid, signal.SIGKILL)

        killer = threading.Thread(target=kill_mid_fetch)
        killer.start()
        try:
            obs = src.observe(20.0)
        finally:
            killer.join()
        assert not any(s.ok for s in obs.replicas)
        assert src.last_errors["fast"] == f"scrape worker 0 (pid {pid}) failed: EOFError, killed by SIGKILL"
        with caplog.at_level(logging.WARNING, logger="llmscale.metrics._shards"):
            obs = src.observe(30.0)
        assert [s.ok for s in obs.replicas] == [True, True], src.last_errors
        assert f"scrape worker 0 (pid {pid}) killed by SIGKILL: starting a fresh one" in caplog.messages
        assert pid not in src.worker_pids()


@pytest.mark.parametrize("workers", [-1, 65])
def test_workers_out_of_range_are_refused(workers: int) -> None:
    with pytest.raises(ValueError, match="workers"):
        PodScrapeSource([], workers=workers)
