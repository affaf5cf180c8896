"""A window of observations indexed once, so every signal reads it without re-scanning.

:class:`FleetWindow` indexes ``window`` (oldest first), each index on first
use: each replica's successful samples in time order (for counters and
histograms: one pass over every sample), and each observation's fleet totals
over *serving* replicas (READY with a successful scrape: for gauges and
per-observation series). Indexing costs one dict lookup per metric per
sample; 500 replicas x 20 observations is ~10k samples, a few milliseconds
(see ``tests/signals/test_signals_speed.py``). A controller ticking every 2 s
reads the newest queue and two latency percentiles at each tick, so it pays
for the newest observation's totals and the history, not for the rest.

Metric names come from :mod:`llmscale.metrics.names`: for each quantity a
replica is read under the first name of the table (vLLM, old vLLM, TGI,
Triton) that it exports, so a fleet mid-upgrade mixes old and new vLLM.

A FleetWindow lives for one ``compute_signals`` call. The controller builds
each tick's window from the previous one (``FleetWindow.build(window,
previous)``), which carries what the two windows share instead of recomputing
it: each observation's totals and each step's counter increases (functions of
one or two observations), and each replica's series of samples with its
restart check (:class:`ReplicaSeries`), advanced by the new observation.
Values are the same as indexing afresh (``tests/signals/test_signals_incremental.py``).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from llmscale.metrics.names import TGI, TRITON, VLLM, VLLM_OLD, Names
from llmscale.types import Observation, Phase, ReplicaSample

__all__ = [
    "E2E",
    "EXACT_COUNTER_LIMIT",
    "GENERATION_TOKENS",
    "ITL",
    "KV_USAGE",
    "PREEMPTIONS",
    "PROMPT_TOKENS",
    "QUEUE_TIME",
    "RUNNING",
    "TTFT",
    "WAITING",
    "FleetWindow",
    "ObsTotals",
    "ReplicaSeries",
    "Span",
    "StepTotals",
    "candidates",
    "first_value",
    "obs_totals",
    "start_index",
    "step_totals",
]

#: the backends' name tables, in the order a replica's names are tried
_TABLES: tuple[Names, ...] = (VLLM, VLLM_OLD, TGI, TRITON)

#: tolerance on window edges: a tick scheduled at exactly t-60 s is inside a 60 s window
_EDGE_S = 1e-6


def candidates(field: str) -> tuple[str, ...]:
    """Every exporter name of ``field`` (a :class:`Names` attribute), deduplicated, in table order."""
    out: list[str] = []
    for table in _TABLES:
        name = getattr(table, field)
        if name is not None and name not in out:
            out.append(name)
    return tuple(out)


RUNNING = candidates("running")
WAITING = candidates("waiting")
KV_USAGE = candidates("kv_usage")
PREEMPTIONS = candidates("preemptions")
PROMPT_TOKENS = candidates("prompt_tokens")
GENERATION_TOKENS = candidates("generation_tokens")
TTFT = candidates("ttft")
E2E = candidates("e2e")
ITL = candidates("itl")
TPOT = candidates("tpot")
QUEUE_TIME = candidates("queue_time")
OUTPUT_TOKENS = candidates("output_tokens")
PROMPT_LENGTHS = candidates("prompt_lengths")


def first_value(values: Mapping[str, float], names: Sequence[str]) -> float | None:
    """The value of the first of ``names`` present in ``values`` (None when none is)."""
    for n in names:
        v = values.get(n)
        if v is not None:
            return v
    return None


@dataclass(frozen=True, slots=True)
class ObsTotals:
    """One observation's totals over serving replicas (READY, scrape ok).

    ``*_n`` count the replicas that reported the metric: a sum over 3 of 4
    serving replicas is a sum over the *known* ones, never a zero for the fourth.
    """

    time_s: float
    serving: int  # READY replicas, whatever their scrape
    known: int  # READY replicas whose scrape succeeded
    running: float
    running_n: int
    waiting: float
    waiting_n: int
    kv_sum: float
    kv_n: int
    gateway: int | None

    def load(self) -> float | None:
        """Requests in the system (running + waiting on replicas + gateway queue), extrapolated.

        Unknown replicas are assumed to carry the known ones' mean: 3 known of 4
        serving with 30 requests between them reads 30 x 4/3 = 40, so a failed
        scrape neither dips nor spikes a series. A backend that exports no
        running gauge (Triton) contributes its waiting requests only. None when
        serving replicas exist but none reported.
        """
        if self.serving == 0:
            return float(self.gateway or 0)
        if self.running_n == 0 and self.waiting_n == 0:
            return None
        total = float(self.gateway or 0)
        if self.running_n:
            total += self.running * self.serving / self.running_n
        if self.waiting_n:
            total += self.waiting * self.serving / self.waiting_n
        return total

    def queue(self) -> float | None:
        """Waiting requests (replicas + gateway), extrapolated over unknown replicas like :meth:`load`."""
        if self.serving == 0:
            return float(self.gateway or 0)
        if self.waiting_n == 0:
            return None
        return self.waiting * self.serving / self.waiting_n + float(self.gateway or 0)

    def kv_mean(self) -> float | None:
        return self.kv_sum / self.kv_n if self.kv_n else None


#: counters that witness a process restart (they only ever grow while the process lives)
_RESTART_WITNESSES = GENERATION_TOKENS + PROMPT_TOKENS


class Span:
    """One replica's successful samples within a time window, oldest first (at least one).

    A view of the replica's :class:`ReplicaSeries` from one start on: the
    first and last samples and the count are read without copying; the
    ``(observation index, sample)`` pairs are made only when asked for.
    """

    __slots__ = ("_base", "_entries", "_j", "_series", "count", "first", "last", "restarted")

    #: samples in the span
    count: int
    #: the oldest and newest ``(observation index, sample)``
    first: tuple[int, ReplicaSample]
    last: tuple[int, ReplicaSample]
    #: a counter went down inside the span (the process restarted): increases must walk every
    #: sample; otherwise newest - oldest is the increase (one subtraction, not one per sample)
    restarted: bool

    def __init__(self, base: int, series: ReplicaSeries, j: int) -> None:
        # The window's base (its first observation's sequence number), not the window: the window
        # memoises its spans, and a span holding its window back made every tick's window a
        # reference cycle, freed only by a full collection of the cyclic garbage collector
        # (gc_tick.py keeps those rare).
        self._base = base
        self._series = series
        self._j = j
        self._entries: list[tuple[int, ReplicaSample]] | None = None
        seqs, samples = series.seqs, series.samples
        self.count = len(seqs) - j
        self.first = (seqs[j] - base, samples[j])
        self.last = (seqs[-1] - base, samples[-1])
        if series.witness is not None:
            # Only a decrease between two samples inside the span counts (see ReplicaSeries).
            self.restarted = series.restart_seq >= seqs[j]
        else:
            self.restarted = _restarted(self.entries)

    @property
    def samples(self) -> list[ReplicaSample]:
        """The samples, oldest first."""
        return self._series.samples[self._j :]

    def later(self, k: int) -> Span:
        """The same replica's span without its ``k`` oldest samples (0 < k < count)."""
        return Span(self._base, self._series, self._j + k)

    @property
    def entries(self) -> list[tuple[int, ReplicaSample]]:
        """``(observation index, sample)`` pairs, oldest first."""
        e = self._entries
        if e is None:
            base, j, ser = self._base, self._j, self._series
            e = self._entries = [(q - base, s) for q, s in zip(ser.seqs[j:], ser.samples[j:], strict=True)]
        return e


def _restarted(entries: list[tuple[int, ReplicaSample]]) -> bool:
    """Whether a monotone counter decreases anywhere in ``entries``.

    A restart resets every counter of the process at once, so one witness
    series per replica decides for all of them: the generation-token counter
    (vLLM), else the total count of the first latency histogram (TGI). With
    no witness the span is treated as restarted, which is only slower.
    """
    if len(entries) < 2:
        return False
    last = entries[-1][1]
    for name in _RESTART_WITNESSES:
        if name in last.values:
            prev = -math.inf
            for _, s in entries:
                v = s.values.get(name)
                if v is None:
                    continue
                if v < prev:
                    return True
                prev = v
            return False
    for name in last.histograms:
        prev = -math.inf
        for _, s in entries:
            h = s.histograms.get(name)
            if h is None:
                continue
            if h.count < prev:
                return True
            prev = h.count
        return False
    return True


def _witness(sample: ReplicaSample) -> str | None:
    """The restart witness :func:`_restarted` reads for a span ending at ``sample`` (None: none)."""
    values = sample.values
    for name in _RESTART_WITNESSES:
        if name in values:
            return name
    return None


class ReplicaSeries:
    """One replica's successful samples in a window, with what the restart check needs.

    Observations are numbered from the first the controller ever indexed
    (``seqs``), so a series carried to the next tick keeps its numbers: it
    drops what fell out of the window and appends the new sample, instead of
    being rebuilt from every observation. A series is never changed once a
    window holds it (each tick makes new ones), so a window built earlier, or
    its lazily computed signals, never sees a later tick's samples.

    Restarts: :func:`_restarted` walks a span's witness counter (the newest
    sample's :func:`_witness`) for a decrease between consecutive samples
    that report it. Here each new sample is compared with the previous one
    reporting the witness, and ``restart_seq`` keeps the observation number of
    the *earlier* sample of the latest decrease: a span starting at or before
    it holds both samples of that decrease, so it is restarted; a span
    starting after it holds none (decreases only get later, so the latest is
    the one to keep). E.g. generation tokens 10, 30, 5, 25 at observations
    7, 8, 9, 10: ``restart_seq`` = 8, so spans from 7 or 8 are restarted and
    spans from 9 or 10 are not, as :func:`_restarted` finds.
    """

    __slots__ = ("poss", "restart_seq", "samples", "seqs", "witness", "witness_seq", "witness_value")

    def __init__(
        self,
        seqs: list[int],
        samples: list[ReplicaSample],
        poss: list[int],
        witness: str | None,
        witness_seq: int,
        witness_value: float,
        restart_seq: int,
    ) -> None:
        #: observation numbers, ascending
        self.seqs = seqs
        self.samples = samples
        #: each sample's position in its observation (the from-scratch order of replicas needs it)
        self.poss = poss
        #: the witness counter tracked: the newest sample's (None: it has none; spans then walk)
        self.witness = witness
        #: observation number and value of the newest sample that reports the witness (-1: none yet)
        self.witness_seq = witness_seq
        self.witness_value = witness_value
        #: observation number of the earlier sample of the latest decrease (-1: none)
        self.restart_seq = restart_seq

    @staticmethod
    def of(seqs: list[int], samples: list[ReplicaSample], poss: list[int]) -> ReplicaSeries:
        """A series over ``samples``, its restart tracking computed by one walk."""
        witness = _witness(samples[-1])
        prev, prev_seq, restart = -math.inf, -1, -1
        if witness is not None:
            for q, s in zip(seqs, samples, strict=True):
                v = s.values.get(witness)
                if v is None:
                    continue
                if v < prev:
                    restart = prev_seq
                prev, prev_seq = v, q
        return ReplicaSeries(seqs, samples, poss, witness, prev_seq, prev, restart)

    def advanced(self, first: int, seq: int, pos: int, sample: ReplicaSample) -> ReplicaSeries:
        """This series from index ``first`` on, plus ``sample`` at observation ``seq``."""
        seqs = [*self.seqs[first:], seq]
        samples = [*self.samples[first:], sample]
        poss = [*self.poss[first:], pos]
        witness = _witness(sample)
        if witness is None or witness != self.witness:
            return ReplicaSeries.of(seqs, samples, poss)  # a new witness: walk the samples kept
        v = sample.values[witness]
        # A decrease from the previous sample reporting the witness; if that one has left the
        # window, restart_seq < every span's start and the decrease counts nowhere, as it should.
        restart = self.witness_seq if v < self.witness_value else self.restart_seq
        return ReplicaSeries(seqs, samples, poss, witness, seq, v, restart)

    def dropped(self, first: int) -> ReplicaSeries:
        """This series from index ``first`` on (pre: ``first < len(seqs)``)."""
        return ReplicaSeries(
            self.seqs[first:],
            self.samples[first:],
            self.poss[first:],
            self.witness,
            self.witness_seq,
            self.witness_value,
            self.restart_seq,
        )


def _index_series(observations: Sequence[Observation], base: int) -> dict[str, ReplicaSeries]:
    """Every replica's series over ``observations`` (numbered from ``base``), from scratch."""
    seqs: dict[str, list[int]] = {}
    samples: dict[str, list[ReplicaSample]] = {}
    poss: dict[str, list[int]] = {}
    for i, obs in enumerate(observations):
        q = base + i
        for pos, s in enumerate(obs.replicas):
            if s.ok:
                name = s.replica
                sq = seqs.get(name)
                if sq is None:
                    seqs[name], samples[name], poss[name] = [q], [s], [pos]
                else:
                    sq.append(q)
                    samples[name].append(s)
                    poss[name].append(pos)
    return {name: ReplicaSeries.of(sq, samples[name], poss[name]) for name, sq in seqs.items()}


def _advance_series(
    series: Mapping[str, ReplicaSeries], base: int, obs: Observation, seq: int
) -> dict[str, ReplicaSeries] | None:
    """``series`` with observations before ``base`` dropped and ``obs`` (number ``seq``) appended.

    The result's order is what :func:`_index_series` gives over the same
    window: by first appearance (observation, then position in it). None when
    ``obs`` names a replica twice (then index afresh, as it would).
    """
    out: dict[str, ReplicaSeries] = {}
    new: dict[str, tuple[int, ReplicaSample]] = {}
    ok = 0
    for pos, s in enumerate(obs.replicas):
        if s.ok:
            new[s.replica] = (pos, s)
            ok += 1
    if ok != len(new):
        return None
    for name, ser in series.items():
        first = 0
        seqs = ser.seqs
        n = len(seqs)
        while first < n and seqs[first] < base:
            first += 1
        got = new.pop(name, None)
        if got is not None:
            out[name] = ser.advanced(first, seq, got[0], got[1])
        elif first < n:
            out[name] = ser.dropped(first) if first else ser
    for name, (pos, s) in new.items():
        out[name] = ReplicaSeries.of([seq], [s], [pos])
    keys = [(ser.seqs[0], ser.poss[0]) for ser in out.values()]
    if any(keys[k] > keys[k + 1] for k in range(len(keys) - 1)):
        out = dict(sorted(out.items(), key=lambda kv: (kv[1].seqs[0], kv[1].poss[0])))
    return out


def obs_totals(obs: Observation) -> ObsTotals:
    """One observation's totals over its serving replicas (one pass over its samples).

    The first name of each table is tried inline (the common case, one dict lookup);
    the others only when it is missing. 500 samples x 3 gauges: ~0.3 ms.
    """
    ready = Phase.READY
    run0, wait0, kv0 = RUNNING[0], WAITING[0], KV_USAGE[0]
    serving = known = running_n = waiting_n = kv_n = 0
    running = waiting = kv_sum = 0.0
    for s in obs.replicas:
        if s.phase != ready:
            continue
        serving += 1
        if not s.ok:
            continue
        known += 1
        vals = s.values
        v = vals.get(run0)
        if v is None:
            v = first_value(vals, RUNNING[1:])
        if v is not None:
            running += v
            running_n += 1
        v = vals.get(wait0)
        if v is None:
            v = first_value(vals, WAITING[1:])
        if v is not None:
            waiting += v
            waiting_n += 1
        v = vals.get(kv0)
        if v is None:
            v = first_value(vals, KV_USAGE[1:])
        if v is not None:
            kv_sum += v
            kv_n += 1
    return ObsTotals(
        obs.time_s, serving, known, running, running_n, waiting, waiting_n, kv_sum, kv_n, obs.gateway_queue
    )


@dataclass(frozen=True, slots=True)
class StepTotals:
    """One step's fleet counter increases (observations i-1 to i), over the replicas sampled at both ends.

    Read under the first names of the tables (vLLM's generation-token counter
    and E2E histogram), reset-aware as :func:`llmscale.signals.histograms.counter_increase`.
    A function of the two observations alone, so a window carries it to the
    next tick's window (:meth:`FleetWindow.step_totals`).
    """

    requests: float  # finished requests: the E2E histogram's count increase
    requests_seen: bool  # some replica had the E2E histogram at both ends
    generation: float  # generated tokens
    generation_seen: bool
    #: every counter read was a whole number below :data:`EXACT_COUNTER_LIMIT`, so sums over
    #: up to 1,024 replicas are exact in any order (what lets
    #: :func:`llmscale.signals.rates.step_rates` add steps instead of replicas)
    exact: bool
    #: replicas in both observations that the sums leave out, unknown at either end: their share
    #: of the step's requests is missing from ``requests`` (what
    #: :func:`llmscale.signals.arrivals.arrival_dispersion_signal` must not read as a lull)
    missing: int = 0
    #: replicas whose E2E histogram is in ``requests`` (sampled at both ends)
    counted: int = 0


#: Whole floats are exact up to 2**53, and so are sums of 1,024 of them below 2**43 (a replica
#: generating 10k tokens/s reaches 2**43 = 8.8e12 tokens after 28 years).
EXACT_COUNTER_LIMIT = float(2**43)


def step_totals(before: Observation, after: Observation) -> StepTotals:
    """The :class:`StepTotals` of the step from ``before`` to ``after``."""
    g_name, e2e = GENERATION_TOKENS[0], E2E[0]
    prev = {s.replica: s for s in before.replicas if s.ok}
    # a replica named twice in one observation (a misbehaving source): leave it to the general path
    exact = len(prev) == sum(1 for s in before.replicas if s.ok)
    for name in before.undated_replicas:
        # A page that cannot be dated starts no step, as it starts no rate (signals/rates.py
        # _dated): its replica is unknown at this end, like one whose scrape failed.
        prev.pop(name, None)
    ok_after = [s for s in after.replicas if s.ok]
    exact = exact and len({s.replica for s in ok_after}) == len(ok_after)
    lim = EXACT_COUNTER_LIMIT
    req = gen = 0.0
    req_seen = gen_seen = False
    counted = 0
    for s in ok_after:
        p = prev.get(s.replica)
        if p is None:
            continue
        g, g0 = s.values.get(g_name), p.values.get(g_name)
        if g is not None and g0 is not None:
            gen += g - g0 if g >= g0 else g
            gen_seen = True
            exact = exact and g % 1.0 == 0.0 == g0 % 1.0 and -lim < g0 < lim and -lim < g < lim
        h, h0 = s.histograms.get(e2e), p.histograms.get(e2e)
        if h is not None and h0 is not None:
            c, c0 = h.count, h0.count
            req += c - c0 if c >= c0 else c
            req_seen = True
            counted += 1
            exact = exact and c % 1.0 == 0.0 == c0 % 1.0 and -lim < c0 < lim and -lim < c < lim
    missing = 0
    if len(ok_after) < len(after.replicas) or len(prev) < len(before.replicas):
        # Serving replicas in both observations but unknown at one end (a failed scrape, a refused
        # page); one starting up has no requests to miss.
        present = {s.replica for s in before.replicas}
        missing = sum(
            1
            for s in after.replicas
            if s.phase in _SERVING and s.replica in present and not (s.ok and s.replica in prev)
        )
    return StepTotals(req, req_seen, gen, gen_seen, exact, missing, counted)


#: phases whose replicas finish requests
_SERVING = (Phase.READY, Phase.DRAINING)


class FleetWindow:
    """The window indexed for signal functions. Build with :meth:`build`; pre: non-empty window.

    Each index is made on first use and kept for the life of this object (one
    ``compute_signals`` call): a policy that reads only the newest queue never
    pays for the per-replica series. Built with the previous tick's window
    (:meth:`build`'s ``previous``), the per-observation totals and the
    replicas' series are carried over and advanced by the one new observation
    rather than re-indexed from all of them. Immutable once built.
    """

    __slots__ = (
        "_carried",
        "_history",
        "_previous",
        "_series",
        "_spans",
        "_steps",
        "_totals",
        "base",
        "known",
        "observations",
        "serving",
    )

    #: the observations, oldest first
    observations: tuple[Observation, ...]
    #: the number of the oldest observation, counted from the first a chain of windows indexed
    #: (``ReplicaSeries.seqs``; observation index = number - base)
    base: int
    #: READY replicas in the newest observation (scrape ok or not)
    serving: tuple[ReplicaSample, ...]
    #: READY replicas in the newest observation whose scrape succeeded
    known: tuple[ReplicaSample, ...]

    def __init__(
        self,
        observations: tuple[Observation, ...],
        totals: list[ObsTotals | None] | None = None,
        base: int = 0,
        previous: FleetWindow | None = None,
        steps: list[StepTotals | None] | None = None,
        *,
        carried: bool = False,
    ) -> None:
        if not observations:
            raise ValueError("a signal window needs at least one observation")
        self.observations = observations
        self.base = base
        ready = Phase.READY
        self.serving = tuple(s for s in observations[-1].replicas if s.phase == ready)
        self.known = tuple(s for s in self.serving if s.ok)
        #: per observation, its totals once computed (None: not yet)
        self._totals: list[ObsTotals | None] = totals if totals is not None else [None] * len(observations)
        #: per observation i >= 1, the step from i - 1 to i once computed (index 0: no step)
        self._steps: list[StepTotals | None] = steps if steps is not None else [None] * len(observations)
        #: the previous tick's window, while its series can still be advanced into this one's
        self._previous = previous
        self._carried = carried
        self._series: dict[str, ReplicaSeries] | None = None
        self._history: dict[str, list[tuple[int, ReplicaSample]]] | None = None
        #: spans per window start, computed on first use
        self._spans: dict[int, dict[str, Span]] = {}

    @property
    def newest(self) -> Observation:
        return self.observations[-1]

    @property
    def now_s(self) -> float:
        return self.observations[-1].time_s

    @property
    def unknown(self) -> int:
        return len(self.serving) - len(self.known)

    @property
    def newest_totals(self) -> ObsTotals:
        """The newest observation's totals (without indexing the older ones)."""
        t = self._totals[-1]
        if t is None:
            t = self._totals[-1] = obs_totals(self.observations[-1])
        return t

    @property
    def totals(self) -> tuple[ObsTotals, ...]:
        """Per observation, fleet totals over serving replicas (oldest first)."""
        cache = self._totals
        for i, t in enumerate(cache):
            if t is None:
                cache[i] = obs_totals(self.observations[i])
        return tuple(t for t in cache if t is not None)

    @property
    def carried(self) -> bool:
        """Built as the continuation of the previous tick's window (so it carries what they share)."""
        return self._carried

    def all_step_totals(self) -> list[StepTotals]:
        """:meth:`step_totals` of every step, oldest first (the steps not carried computed now)."""
        steps = self._steps
        for i in range(1, len(steps)):
            if steps[i] is None:
                steps[i] = step_totals(self.observations[i - 1], self.observations[i])
        return [st for st in steps[1:] if st is not None]

    def step_totals(self, i: int) -> StepTotals:
        """The step from observation ``i - 1`` to ``i`` (pre: 1 <= i < len(observations))."""
        st = self._steps[i]
        if st is None:
            st = self._steps[i] = step_totals(self.observations[i - 1], self.observations[i])
        return st

    @property
    def series(self) -> Mapping[str, ReplicaSeries]:
        """Replica name -> its successful samples in the window (any phase), by first appearance.

        Every phase counts: a draining replica's finished requests are real observations.
        """
        ser = self._series
        if ser is None:
            prev = self._previous
            if prev is not None and prev._series is not None:
                ser = _advance_series(prev._series, self.base, self.observations[-1], self.last_seq)
            if ser is None:
                ser = _index_series(self.observations, self.base)
            self._series = ser
            self._previous = None
        return ser

    @property
    def last_seq(self) -> int:
        """The number of the newest observation."""
        return self.base + len(self.observations) - 1

    @property
    def history(self) -> Mapping[str, list[tuple[int, ReplicaSample]]]:
        """Replica name -> its successful samples ``(observation index, sample)``, oldest first.

        :attr:`series` with observation indices: for readers that want the pairs.
        """
        h = self._history
        if h is None:
            base = self.base
            h = self._history = {
                name: [(q - base, s) for q, s in zip(ser.seqs, ser.samples, strict=True)]
                for name, ser in self.series.items()
            }
        return h

    def spans(self, start: int) -> dict[str, Span]:
        """Per replica, its successful samples from observation index ``start`` on (replicas with any)."""
        memo = self._spans.get(start)
        if memo is not None:
            return memo
        out: dict[str, Span] = {}
        first = self.base + start
        for name, ser in self.series.items():
            seqs = ser.seqs
            if seqs[-1] >= first:
                out[name] = Span(self.base, ser, bisect_left(seqs, first))
        self._spans[start] = out
        return out

    @staticmethod
    def build(window: Sequence[Observation], previous: FleetWindow | None = None) -> FleetWindow:
        """Index ``window`` (oldest first).

        ``previous``: the window of the tick before. When ``window`` is it with
        one observation appended (and as many dropped from the front as the
        length limit asks), its per-observation totals and replica series are
        carried over; otherwise it is ignored and the window indexed afresh.
        """
        observations = tuple(window)
        if not observations:
            raise ValueError("a signal window needs at least one observation")
        totals: list[ObsTotals | None] = [None] * len(observations)
        if previous is None:
            return FleetWindow(observations, totals)
        before = previous.observations
        dropped = len(before) + 1 - len(observations)
        if dropped < 0 or not all(a is b for a, b in zip(observations[:-1], before[dropped:], strict=True)):
            return FleetWindow(observations, totals)
        totals[:-1] = previous._totals[dropped:]
        steps: list[StepTotals | None] = [None] * len(observations)
        # step i (observations i - 1, i) was the previous window's step i + dropped; the new one is not
        steps[1:-1] = previous._steps[dropped + 1 :]
        # Only a previous window whose series exist (or can still be advanced) is kept, so the
        # chain of windows each holds is one link long at most.
        link = previous if previous._series is not None else None
        return FleetWindow(observations, totals, previous.base + dropped, link, steps, carried=True)


def start_index(fw: FleetWindow, window_s: float) -> int:
    """Index of the oldest observation within ``window_s`` of the newest (inclusive edge).

    E.g. ticks at 0, 15, ..., 120 s and window_s = 60: index of t = 60 s, so
    the window spans 5 observations and 4 steps.
    """
    t0 = fw.now_s - window_s - _EDGE_S
    obs = fw.observations
    i = len(obs) - 1
    while i > 0 and obs[i - 1].time_s >= t0:
        i -= 1
    return i
