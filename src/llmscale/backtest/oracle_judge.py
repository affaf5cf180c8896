"""What the oracle is held to: the feasible requests, each judged over its whole life, one miss budget.

A request counts when it is *feasible* (:mod:`llmscale.backtest.feasibility`:
no fleet can serve an over-context request or one whose prefill alone on an
idle replica misses its TTFT target, so no count is bought for them). A
feasible request meets the SLO as :mod:`llmscale.slo` says, the rule every
policy's result is scored with: completed, TTFT within
its target and TPOT within the SLO over its *whole* generation, however many
intervals it spans (a 1,500-token answer at 30 ms a token runs 45 s).

The oracle's target is one budget for the run: at most
``allowed_misses = F - ceil(target x F)`` of the ``F`` feasible requests may
miss. E.g. 232,535 feasible requests at 99%: 2,325 misses, spent wherever
they buy the most GPU-hours, not 1% of every minute.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from llmscale.backtest.feasibility import infeasible_mask
from llmscale.backtest.runner import BacktestSettings
from llmscale.sim.fleet import Fleet
from llmscale.sim.request import Req
from llmscale.slo import slo_met, tpot_within, ttft_target_s, ttft_within
from llmscale.types import Status
from llmscale.workloads.model import Workload

__all__ = ["Judge"]


@dataclass(frozen=True)
class Judge:
    """The oracle's scoring of a (trial) fleet; arrays are per request of the workload."""

    #: True for each request some fleet can serve within its SLO
    feasible: np.ndarray
    #: each request's TTFT target (s), or one for all
    ttft_target_s: float | np.ndarray
    slo_tpot_s: float
    #: feasible requests that may miss the SLO in the whole run
    allowed_misses: int

    @classmethod
    def build(cls, workload: Workload, settings: BacktestSettings, target: float) -> Judge:
        feasible = ~infeasible_mask(workload, settings)
        count = int(feasible.sum())
        # 1e-9: 0.99 x 100 is 99.00000000000001 in floats, and 99 misses-free requests must do.
        need = math.ceil(target * count - 1e-9)
        return cls(
            feasible=feasible,
            ttft_target_s=ttft_target_s(
                workload.input_tokens, settings.slo_ttft_s, settings.slo_ttft_per_1k_tokens_s
            ),
            slo_tpot_s=settings.slo_tpot_s,
            allowed_misses=max(0, count - need),
        )

    @property
    def num_feasible(self) -> int:
        return int(self.feasible.sum())

    def ttft_target_at(self, idx: int) -> float:
        """Request ``idx``'s TTFT target (s)."""
        t = self.ttft_target_s
        return float(t) if np.ndim(t) == 0 else float(t[idx])  # type: ignore[index]

    def outcomes(self, fleet: Fleet, i0: int = 0, i1: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(resolved, met the SLO) per request ``i0:i1`` of ``fleet`` as it stands."""
        i1 = fleet.num_requests if i1 is None else i1
        status = np.frombuffer(bytes(fleet.status[i0:i1]), dtype=np.uint8)
        ttft = np.asarray(fleet.ttft_s[i0:i1], dtype=np.float64)
        tpot = np.asarray(fleet.tpot_s[i0:i1], dtype=np.float64)
        t = self.ttft_target_s
        target = t if np.ndim(t) == 0 else t[i0:i1]  # type: ignore[index]
        met = slo_met(status, ttft, tpot, target, self.slo_tpot_s)
        return status != Status.IN_FLIGHT, met

    def misses(self, fleet: Fleet) -> int:
        """Feasible requests of ``fleet`` resolved without meeting the SLO (final: a miss stays one)."""
        resolved, met = self.outcomes(fleet)
        return int(np.count_nonzero(resolved & ~met & self.feasible))

    def sure_misses(self, fleet: Fleet, now_s: float) -> int:
        """:meth:`misses` plus the feasible requests queued past their TTFT target: a lower bound
        on the run's final misses, whatever the fleet does after ``now_s``."""
        return self.misses(fleet) + self.late_without_first_token(fleet, 0, fleet.num_requests, now_s)

    def late_without_first_token(self, fleet: Fleet, i0: int, i1: int, now_s: float) -> int:
        """Feasible requests ``i0:i1`` with no first token at ``now_s`` and past their TTFT target.

        An unresolved request without a first token is in the gateway queue, in a
        replica's waiting queue, or running with prompt tokens left (its
        replica's prefill queue, a subset of its running requests; the first
        token comes with the last prompt token). The three are disjoint, so none
        is counted twice. A request preempted after its first token is not one:
        it has a TTFT already.
        """
        late = 0
        queued: list[Iterable[Req]] = [fleet.gateway]
        for r in fleet.replicas:
            queued.append(r.waiting.items())
            # The prefill queue is linked through pf_next and has no iterator; between two
            # run_until calls it is whole (a replica detaches it only inside an iteration's end).
            prefilling = []
            req = r.prefill.first
            while req is not None:
                prefilling.append(req)
                req = req.pf_next
            queued.append(prefilling)
        feasible = self.feasible
        for queue in queued:
            for req in queue:
                idx = req.idx
                if (
                    i0 <= idx < i1
                    and req.first_token_s < 0.0
                    and feasible[idx]
                    # waited past its target already: its TTFT, when it comes, is longer still
                    and not ttft_within(now_s - req.arrival_s, self.ttft_target_at(idx))
                ):
                    late += 1
        return late

    def on_track(self, fleet: Fleet, i0: int, i1: int, now_s: float) -> int:
        """Feasible requests ``i0:i1`` generating at ``now_s`` that meet the SLO if they keep pace:
        their first token came within its target and each token since within the TPOT target.

        E.g. a 1,500-token answer 30 s after its first token with 1,200 tokens out has averaged
        25 ms a token: on track for a 0.1 s TPOT target, though it will run 7 s more.
        """
        feasible = self.feasible
        count = 0
        for r in fleet.replicas:
            for req in r.running.items():
                idx = req.idx
                first = req.first_token_s
                if not (i0 <= idx < i1 and feasible[idx]) or first < 0.0:
                    continue
                if not ttft_within(first - req.arrival_s, self.ttft_target_at(idx)):
                    continue
                emitted = fleet.emitted_tokens(req, now_s)
                # the TPOT so far (NaN with one token out: nothing to judge yet)
                pace_s = (now_s - first) / (emitted - 1) if emitted > 1 else math.nan
                if not tpot_within(pace_s, self.slo_tpot_s):
                    continue
                count += 1
        return count

    def attainment(self, met: np.ndarray) -> float:
        """Share of the feasible requests that met the SLO (1 when none is feasible)."""
        count = self.num_feasible
        return float(np.count_nonzero(met & self.feasible)) / count if count else 1.0
