"""Signals at the documents' own resolution: HBM bytes and tokens per 100 ms, the queue every second.

Seed 004 samples memory bandwidth with ``nvidia-smi dmon -d 100`` (every
100 ms) and takes the P95 over 60 s, i.e. over 600 samples; the queue
entropy reads one queue length per second over 30 s. A controller observes
every 2-180 s, so one reading per observation is 5 samples a minute at a
15 s tick, and the "P95" of 5 is nearly their maximum.

:class:`StepBuckets` gives a replica's bytes per 100 ms of simulated time
without stepping the simulator at 100 ms: the replica hands it each span of
iterations it applies (``Replica._apply_decode_steps`` for a closed-form
decode jump, ``Replica._start_mixed`` for a prefill iteration) with the
bytes the span moved, and the bytes are spread evenly over the span's
100 ms buckets. Spreading a decode jump evenly assumes its bytes per
second stay put over the jump. Its per-step bytes grow: each step re-reads
the weights (16 GB for Llama-3-8B) and a KV context one token longer per
sequence (128 KiB a token), so at a batch of 64 at 1,000 tokens (8.4 GB
of KV) a 2 s jump of 17 ms steps ends ~4 % heavier than it began; but a
decode step is bound by the bytes it streams, so its duration grows with
them and the rate, which is what a bucket reads, changes far less. A span
costs one call and one add per bucket it covers (a 17 ms step: one, a 2 s
jump: 20); the replica makes no call at all when no log is installed, the
backtest's default.

The same buckets count generated tokens, for seed 000 2.4's token
throughput over an adaptive window of 200-1000 ms: a decode jump's tokens
(one per sequence per step) are spread over it like its bytes, and a
prefill iteration's (its decodes' and its finished prompts' first tokens)
land at its end, when they are emitted.

A bucket is final once no later span can reach into it: the replica's
spans start no earlier than the start of the iteration in progress
(``plan_t0`` of a decode jump) or ``now`` (a prefill iteration's bytes are
handed over when it starts), so :meth:`StepBuckets.take` is given that
horizon and returns the buckets that end before it. (A prefill iteration
in progress hands its tokens over at its end, after ``now``: into a bucket
that is not final yet.)
"""

from __future__ import annotations

import math

__all__ = ["BW_SAMPLE_PERIOD_S", "QUEUE_SAMPLE_PERIOD_S", "StepBuckets"]

#: seed 004: ``nvidia-smi dmon -s u -d 100``, one bandwidth sample every 100 ms
BW_SAMPLE_PERIOD_S = 0.1
#: seed 004: "the queued requests q[t] of every second of the past 30 s"
QUEUE_SAMPLE_PERIOD_S = 1.0
#: a boundary within this many bucket widths of a time counts as reached
_EPS = 1e-9


class StepBuckets:
    """HBM bytes and generated tokens per bucket of ``period_s`` seconds, from ``start_s`` (rounded
    down to a bucket) on.

    Buckets are numbered from time 0: bucket ``j`` is ``[j x period, (j+1) x period)``.
    Positions are kept in bucket units (``t / period``) so that a boundary is an
    integer and a span's share of a bucket is a plain difference.
    """

    __slots__ = ("_buf", "_first", "_tok", "period_s")

    def __init__(self, start_s: float, period_s: float = BW_SAMPLE_PERIOD_S) -> None:
        if not period_s > 0.0:
            raise ValueError(f"StepBuckets period_s = {period_s}, must be > 0")
        self.period_s = period_s
        #: index of the bucket ``_buf[0]`` holds; buckets before it were taken (or predate the log)
        self._first = math.floor(start_s / period_s + _EPS)
        self._buf: list[float] = []
        self._tok: list[float] = []

    def add(self, t0_s: float, t1_s: float, nbytes: float, ntokens: float = 0.0) -> None:
        """Spread ``nbytes`` moved and ``ntokens`` generated over ``[t0_s, t1_s]`` evenly over its buckets.

        Worked (period 0.1 s): 30 MB over [0.17, 0.22] -> 18 MB in bucket 1
        ([0.1, 0.2): 0.03 s of 0.05) and 12 MB in bucket 2. A span of zero
        length puts its bytes in the bucket of ``t0_s``; the part of a span
        before the first bucket kept is dropped (it was taken already, or
        predates the log).
        """
        inv = 1.0 / self.period_s
        x0 = t0_s * inv
        x1 = t1_s * inv
        j0 = math.floor(x0)
        first = self._first
        buf = self._buf
        tok = self._tok
        if x1 <= x0 or j0 == math.floor(x1):
            i = j0 - first
            if i < 0:
                return
            while len(buf) <= i:
                buf.append(0.0)
                tok.append(0.0)
            buf[i] += nbytes
            tok[i] += ntokens
            return
        j1 = math.floor(x1)
        span = x1 - x0
        need = j1 - first + 1
        while len(buf) < need:
            buf.append(0.0)
            tok.append(0.0)
        for j in range(max(j0, first), j1 + 1):
            lo = x0 if j == j0 else float(j)
            hi = x1 if j == j1 else float(j + 1)
            share = (hi - lo) / span
            buf[j - first] += nbytes * share
            tok[j - first] += ntokens * share

    def take(self, horizon_s: float) -> tuple[float, list[float], list[float]]:
        """The buckets that end at or before ``horizon_s``, oldest first: the end time of the last,
        their bytes and their tokens.

        Taken buckets are forgotten. With none to give, the lists are empty and
        the time is the end of the last bucket given so far.
        """
        # buckets < j_end end at or before the horizon (0.3 / 0.1 is 2.9999999999999996 in floats)
        j_end = math.floor(horizon_s / self.period_s + _EPS)
        n = j_end - self._first
        if n <= 0:
            return self._first * self.period_s, [], []
        buf = self._buf
        tok = self._tok
        out = buf[:n]
        out_tok = tok[:n]
        if len(out) < n:
            pad = [0.0] * (n - len(out))  # no span reached them: idle buckets
            out.extend(pad)
            out_tok.extend(pad)
        del buf[:n]
        del tok[:n]
        self._first = j_end
        return j_end * self.period_s, out, out_tok
