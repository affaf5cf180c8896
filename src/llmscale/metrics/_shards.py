"""Scrape and parse in worker processes: :class:`ShardPool`, what ``PodScrapeSource(workers=N)`` uses.

At fleet scale one Python process cannot fetch, parse and vet every replica's page within a
tick: on the emulator's 352-line pages the reader, the vetting and the counter history cost
~0.3 ms of CPU a page, 1.5 s for 5,000 replicas (``benchmarks/controller_tick.py --replicas 5000
--sim-replicas 200 --workers 2`` prints the tick with and without workers). So the targets are
split into ``N`` shards, each scraped by a process of its own running the very same
:class:`~llmscale.metrics.scrape.PodScrapeSource` (``workers=0``) over its share, with every
defence it has: the page limits, staleness, vetting, counter history and page layouts are per
URL, and a URL always goes to the same shard (a CRC of it), so each keeps its memory from tick
to tick.

What crosses back is compact: per replica its values and its kept histograms' counts as one
``array('d')`` each, their bounds sent once per answer as a table (the emulator's page: 17 values
and 7 histograms, ~2.6 KB pickled); the parent rebuilds the samples with bounds tuples shared
across ticks, so the window's memory is what a single process keeps.

The workers are plain child processes (``python -m llmscale.metrics._shards``) started once,
on the first tick, over a pair of pipes: no multiprocessing resource tracker or fork server
stays behind. A worker reads its stdin-side pipe until it closes, so a parent that dies leaves
none running. :meth:`ShardPool.close` asks each to stop, then terminates and kills what is left,
and waits for every one. A worker that does not answer within its bound (its shard's fetch
time-outs plus 30 s), or that died, makes its shard's replicas unknown for that tick and is
replaced by a fresh one on the next; the shard's error and a warning in the log say how it ended
(its exit status or the signal that killed it). A worker's stderr is the controller's, and it
starts with ``-X faulthandler``, so a worker that crashes, even while the interpreter starts,
leaves its traceback there.

A worker killed between ticks is replaced once :meth:`subprocess.Popen.poll` can reap it,
which is later than its main thread's end: a worker has two threads (its source's asyncio loop
runs on the second), and until the last one has exited and unmapped the process's memory,
``/proc/<pid>/stat`` already reads ``Z`` while ``waitpid`` still says "running" and the worker's
end of the pipe stays open. That took from 0.2 to 52 ms on a loaded 2-core machine (20 kills,
median 16 ms). A tick that starts in that window sends to the dying worker, reads an end of
file, and reports its shard unknown, the worker "killed by SIGKILL"; the next tick replaces it.
``tests/metrics/test_scrape_workers.py`` therefore waits for the pool to see the death (its
:meth:`ShardPool.pids`), not for ``Z``.
"""

from __future__ import annotations

import logging
import os
import pickle
import signal
import subprocess
import sys
import time
import zlib
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

__all__ = ["ShardPool", "ShardReply", "shard_of"]

log = logging.getLogger(__name__)

#: bounds tuples the parent keeps to share between samples (a fleet has a few histogram layouts)
_BOUNDS_KEPT = 4096
#: seconds a stopping worker gets before it is terminated, then killed
_STOP_GRACE_S = 5.0
#: seconds a worker whose pipe closed gets to end, so its exit status can be told
_EXIT_WAIT_S = 1.0


def shard_of(url: str, shards: int) -> int:
    """The shard of ``url``: the same every tick, whichever targets come and go."""
    return zlib.crc32(url.encode("utf-8", errors="replace")) % shards


#: a kept histogram as it crosses: (family, index into the bounds table, counts, sum, count)
_Packed = tuple[str, int, "array[float]", float, float]


@dataclass(frozen=True, slots=True)
class ShardReply:
    """One worker's tick: its samples in its targets' order, in the compact form (see the module)."""

    #: per target: (ok, values or None, histograms as (family, bounds index, counts, sum, count))
    samples: list[tuple[bool, dict[str, float] | None, tuple[_Packed, ...]]]
    bounds: list[tuple[float, ...]]
    errors: dict[str, str]
    gateway_queue: int | None
    layout_reads: int
    line_reads: int
    cpu_s: float
    #: how long the worker's slowest page took to arrive (``Observation.sample_lag_s``)
    sample_lag_s: float = 0.0
    #: its replicas whose page could not be dated (``Observation.undated_replicas``)
    undated_replicas: frozenset[str] = frozenset()


class _SetClock:
    """The parent's wall time of this tick, as the worker's ``wall_clock`` (one reading a tick)."""

    def __init__(self) -> None:
        self.t_s = 0.0

    def now_s(self) -> float:
        return self.t_s


def _worker(read_fd: int, write_fd: int) -> None:
    """A worker's loop: ``(settings)`` once, then ``(now_s, wall_s, targets)`` per tick, ``None`` to stop."""
    from llmscale.gc_tick import TickCollector
    from llmscale.metrics.scrape import PodScrapeSource, ScrapeTarget

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops its workers (Ctrl-C reaches the group)
    inbox = Connection(read_fd, writable=False)
    outbox = Connection(write_fd, readable=False)
    settings: dict[str, Any] = inbox.recv()
    current: list[tuple[ScrapeTarget, ...]] = [()]
    clock = _SetClock()
    source = PodScrapeSource(lambda: current[0], wall_clock=clock, **settings)
    # A worker keeps its shard's page hashes, counters and layouts from tick to tick, as the
    # controller keeps its window: the same collector discipline (gc_tick.py).
    collector = TickCollector()
    try:
        while True:
            try:
                msg = inbox.recv()
            except (EOFError, OSError):
                return  # the parent is gone
            if msg is None:
                return
            now_s, wall_s, targets = msg
            collector.before_tick()
            c0 = time.process_time()
            current[0] = targets
            clock.t_s = wall_s
            r0, l0 = source.layout_reads, source.line_reads
            obs = source.observe(now_s)
            bounds_index: dict[tuple[float, ...], int] = {}
            samples: list[tuple[bool, dict[str, float] | None, tuple[_Packed, ...]]] = []
            for s in obs.replicas:
                if not s.ok:
                    samples.append((False, None, ()))
                    continue
                hists: list[_Packed] = []
                for family, h in s.histograms.items():
                    b = bounds_index.setdefault(tuple(h.bounds), len(bounds_index))
                    counts = h.cumulative if isinstance(h.cumulative, array) else array("d", h.cumulative)
                    hists.append((family, b, counts, h.sum, h.count))
                samples.append((True, dict(s.values), tuple(hists)))
            reply = ShardReply(
                samples,
                list(bounds_index),
                dict(source.last_errors),
                obs.gateway_queue,
                source.layout_reads - r0,
                source.line_reads - l0,
                time.process_time() - c0,
                obs.sample_lag_s,
                obs.undated_replicas,
            )
            try:
                outbox.send_bytes(pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL))
            except (BrokenPipeError, OSError):
                return
            del obs, samples, reply  # what the tick made, gone before what it left is frozen
            collector.after_tick()
    finally:
        collector.close()
        source.close()


class _Worker:
    """One child process and its two pipe ends."""

    def __init__(self, settings: dict[str, Any]) -> None:
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        try:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-X",
                    "faulthandler",
                    "-m",
                    "llmscale.metrics._shards",
                    str(to_child_r),
                    str(from_child_w),
                ],
                pass_fds=(to_child_r, from_child_w),
                stdin=subprocess.DEVNULL,
                close_fds=True,
            )
        finally:
            os.close(to_child_r)
            os.close(from_child_w)
        self.inbox = Connection(from_child_r, writable=False)
        self.outbox = Connection(to_child_w, readable=False)
        self.busy = False  # a request was sent and its answer not read
        self.outbox.send(settings)

    def ended(self, wait_s: float = 0.0) -> str:
        """How the process ended ("exited with status 1", "killed by SIGKILL"), or "still running"
        after waiting up to ``wait_s`` seconds for it."""
        try:
            code = self.proc.wait(wait_s) if wait_s > 0 else self.proc.poll()
        except subprocess.TimeoutExpired:
            code = None
        return _ending(code)

    def stop(self) -> None:
        """Ask it to stop (terminate it at once when it is still busy with an abandoned tick)."""
        try:
            if not self.busy:
                self.outbox.send(None)
        except OSError:
            pass
        self.outbox.close()
        try:
            if self.busy:
                self.proc.terminate()
            self.proc.wait(_STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            self.proc.terminate()
            try:
                self.proc.wait(_STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.inbox.close()


def _ending(code: int | None) -> str:
    """An exit status in words (``Popen.returncode``: negative for the signal that killed it)."""
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with status {code}"


class ShardPool:
    """``n`` worker processes, each a ``PodScrapeSource`` over its shard of the targets.

    ``settings``: the keyword arguments of each worker's source (no targets, no clock: the pool
    sends both every tick). Started on the first :meth:`observe`; :meth:`close` stops every worker.
    """

    def __init__(self, n: int, settings: dict[str, Any]) -> None:
        if n < 1:
            raise ValueError(f"workers = {n}, must be >= 1")
        self.n = n
        self._settings = settings
        self._workers: list[_Worker | None] = [None] * n
        self._bounds: dict[tuple[float, ...], tuple[float, ...]] = {}
        self.closed = False

    def _worker(self, k: int) -> _Worker:
        w = self._workers[k]
        if w is None or w.proc.poll() is not None or w.busy:
            if w is not None:  # died, or still busy with a tick it was abandoned in
                why = "did not answer its last tick" if w.proc.returncode is None else w.ended()
                log.warning("scrape worker %d (pid %d) %s: starting a fresh one", k, w.proc.pid, why)
                w.stop()
            # the activator's page is fetched by the first worker only
            activator = self._settings.get("activator_url") if k == 0 else None
            settings = {**self._settings, "activator_url": activator}
            w = self._workers[k] = _Worker(settings)
        return w

    def observe(
        self, shards: Sequence[Sequence[Any]], now_s: float, wall_s: float, timeout_s: Sequence[float]
    ) -> list[ShardReply | str]:
        """Each shard's reply, or why there is none (the worker failed or did not answer in time)."""
        if self.closed:
            raise RuntimeError("the scrape workers were closed")
        sent: list[_Worker | str] = []
        for k, targets in enumerate(shards):
            msg = (now_s, wall_s, tuple(targets))
            try:
                w = self._worker(k)
                try:
                    w.outbox.send(msg)
                except OSError:  # it died since it was last seen alive: one fresh worker, once
                    w.busy = True  # stopped at once
                    w = self._worker(k)
                    w.outbox.send(msg)
                w.busy = True
                sent.append(w)
            except OSError as e:
                sent.append(f"scrape worker {k} could not be asked: {type(e).__name__}: {e}")
        out: list[ShardReply | str] = []
        start = time.monotonic()
        for k, asked in enumerate(sent):
            if isinstance(asked, str):
                out.append(asked)
                continue
            w = asked
            left = max(0.0, start + timeout_s[k] - time.monotonic())
            try:
                if not w.inbox.poll(left):
                    out.append(f"scrape worker {k} gave no answer within {timeout_s[k]:g} s")
                    continue  # left busy: replaced on the next tick
                data = w.inbox.recv_bytes()
            except (EOFError, OSError) as e:
                # its end of the pipe closed: it ended (or is ending), say how, waiting for that
                # no longer than its tick's bound has left
                left = min(_EXIT_WAIT_S, max(0.0, start + timeout_s[k] - time.monotonic()))
                why = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
                out.append(f"scrape worker {k} (pid {w.proc.pid}) failed: {why}, {w.ended(left)}")
                continue  # left busy: replaced (and logged) on the next tick
            w.busy = False
            reply = pickle.loads(data)
            assert isinstance(reply, ShardReply)
            out.append(reply)
        return out

    def shared_bounds(self, bounds: tuple[float, ...]) -> tuple[float, ...]:
        """One tuple object per distinct bounds, shared by every sample (the window keeps 20 ticks)."""
        kept = self._bounds.get(bounds)
        if kept is None:
            if len(self._bounds) >= _BOUNDS_KEPT:
                self._bounds.clear()
            kept = self._bounds[bounds] = bounds
        return kept

    def close(self) -> None:
        self.closed = True
        workers, self._workers = self._workers, [None] * self.n
        for w in workers:
            if w is not None:
                w.stop()

    def pids(self) -> list[int]:
        """Process ids of the running workers (tests check none is left after :meth:`close`)."""
        return [w.proc.pid for w in self._workers if w is not None and w.proc.poll() is None]


if __name__ == "__main__":
    # Through the module's own name, so what the worker pickles names llmscale.metrics._shards.
    from llmscale.metrics import _shards

    _shards._worker(int(sys.argv[1]), int(sys.argv[2]))
