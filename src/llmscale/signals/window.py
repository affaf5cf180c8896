"""A window of observations indexed once, so every signal reads it without re-scanning.

:meth:`FleetWindow.build` makes one pass over ``window`` (oldest first): it
keeps each replica's successful samples in time order (for counters and
histograms) and each observation's fleet totals over *serving* replicas (READY
with a successful scrape: for gauges and per-observation series). Building
costs one dict lookup per metric per sample; 500 replicas x 20 observations
is ~10k samples, a few milliseconds (see ``tests/signals/test_signals_speed.py``).

Metric names come from :mod:`llmscale.metrics.names`: for each quantity a
replica is read under the first name of the table (vLLM, old vLLM, TGI,
Triton) that it exports, so a fleet mid-upgrade mixes old and new vLLM.

Nothing is cached between calls: a FleetWindow lives for one
``compute_signals`` call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from llmscale.metrics.names import TGI, TRITON, VLLM, VLLM_OLD, Names
from llmscale.types import Observation, Phase, ReplicaSample

__all__ = [
    "E2E",
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
    "Span",
    "candidates",
    "first_value",
    "start_index",
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
QUEUE_TIME = candidates("queue_time")


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


@dataclass(frozen=True, slots=True)
class Span:
    """One replica's successful samples within a time window, oldest first (at least one)."""

    entries: list[tuple[int, ReplicaSample]]
    #: a counter went down inside the span (the process restarted): increases must walk every
    #: sample; otherwise newest - oldest is the increase (one subtraction, not one per sample)
    restarted: bool


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
            prev = -1.0
            for _, s in entries:
                v = s.values.get(name)
                if v is None:
                    continue
                if v < prev:
                    return True
                prev = v
            return False
    for name in last.histograms:
        prev = -1.0
        for _, s in entries:
            h = s.histograms.get(name)
            if h is None:
                continue
            if h.count < prev:
                return True
            prev = h.count
        return False
    return True


@dataclass(frozen=True, slots=True)
class FleetWindow:
    """The window indexed for signal functions. Build with :meth:`build`; pre: non-empty window."""

    observations: tuple[Observation, ...]
    #: per observation, fleet totals over serving replicas
    totals: tuple[ObsTotals, ...]
    #: replica name -> its successful samples ``(observation index, sample)``, oldest first (any phase)
    history: Mapping[str, list[tuple[int, ReplicaSample]]]
    #: READY replicas in the newest observation (scrape ok or not)
    serving: tuple[ReplicaSample, ...]
    #: READY replicas in the newest observation whose scrape succeeded
    known: tuple[ReplicaSample, ...]
    #: spans per window start, computed on first use (lives as long as this FleetWindow: one call)
    _spans: dict[int, dict[str, Span]] = field(default_factory=dict, compare=False, repr=False)

    @property
    def newest(self) -> Observation:
        return self.observations[-1]

    @property
    def now_s(self) -> float:
        return self.observations[-1].time_s

    @property
    def unknown(self) -> int:
        return len(self.serving) - len(self.known)

    def spans(self, start: int) -> dict[str, Span]:
        """Per replica, its successful samples from observation index ``start`` on (replicas with any)."""
        memo = self._spans.get(start)
        if memo is not None:
            return memo
        out: dict[str, Span] = {}
        for name, entries in self.history.items():
            j = len(entries) - 1
            if entries[j][0] < start:
                continue
            while j > 0 and entries[j - 1][0] >= start:
                j -= 1
            span = entries[j:] if j else entries
            out[name] = Span(span, _restarted(span))
        self._spans[start] = out
        return out

    @staticmethod
    def build(window: Sequence[Observation]) -> FleetWindow:
        if not window:
            raise ValueError("a signal window needs at least one observation")
        history: dict[str, list[tuple[int, ReplicaSample]]] = {}
        totals: list[ObsTotals] = []
        ready = Phase.READY
        # The first name of each table is tried inline (the common case, one dict lookup);
        # the others only when it is missing. 10k samples x 3 gauges: ~5k lookups per ms.
        run0, wait0, kv0 = RUNNING[0], WAITING[0], KV_USAGE[0]
        run_rest, wait_rest, kv_rest = RUNNING[1:], WAITING[1:], KV_USAGE[1:]
        for i, obs in enumerate(window):
            serving = known = running_n = waiting_n = kv_n = 0
            running = waiting = kv_sum = 0.0
            for s in obs.replicas:
                if s.ok:
                    h = history.get(s.replica)
                    if h is None:
                        history[s.replica] = [(i, s)]
                    else:
                        h.append((i, s))
                    if s.phase != ready:
                        continue
                    serving += 1
                    known += 1
                    vals = s.values
                    v = vals.get(run0)
                    if v is None:
                        v = first_value(vals, run_rest)
                    if v is not None:
                        running += v
                        running_n += 1
                    v = vals.get(wait0)
                    if v is None:
                        v = first_value(vals, wait_rest)
                    if v is not None:
                        waiting += v
                        waiting_n += 1
                    v = vals.get(kv0)
                    if v is None:
                        v = first_value(vals, kv_rest)
                    if v is not None:
                        kv_sum += v
                        kv_n += 1
                elif s.phase == ready:
                    serving += 1
            totals.append(
                ObsTotals(
                    obs.time_s,
                    serving,
                    known,
                    running,
                    running_n,
                    waiting,
                    waiting_n,
                    kv_sum,
                    kv_n,
                    obs.gateway_queue,
                )
            )
        newest = window[-1]
        serving_now = tuple(s for s in newest.replicas if s.phase == ready)
        return FleetWindow(
            observations=tuple(window),
            totals=tuple(totals),
            history=history,
            serving=serving_now,
            known=tuple(s for s in serving_now if s.ok),
        )


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
