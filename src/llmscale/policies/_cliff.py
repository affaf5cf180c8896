"""The latency cliff a capacity-model policy keeps a margin from: seed 003 2.3's knee, measured.

``llmscale analyze DECISIONS.jsonl --policy-config-out cliff.yaml`` finds the load per serving
replica where P99 latency turns up (:func:`llmscale.analyze.knee.latency_cliff_rps_per_replica`,
the seed's second-derivative rule) and writes it as ``cliff_rps_per_replica`` for the policies
that plan a rate per replica (``slo``, ``capacity-calibrated``). With it set, such a policy never
plans more than ``cliff_margin x cliff_rps_per_replica`` per replica, whatever its own model says:
``desired >= ceil(rate / (margin x cliff))``. Worked (``tests/policies/test_cliff.py``): a P99
curve bending at 5.52 req/s per replica, whose knee the binned rule puts at 5.77 (a bin is 0.5
wide), margin 0.9, 60 req/s -> ceil(60 / 5.196) = ceil(11.55) = 12 replicas, where ``slo``'s own
model plans 5.

Unset (the default) it changes nothing: no input, no rule, the decision as before.

The margin: seed 003 gives the knee rule but no margin from it. The rule already errs early (the
first load whose second derivative reaches 0.8 of its peak: on a soft hockey stick 0.96 of its
width before the bend's centre, ``analyze/knee.py``), so the margin is for what the knee cannot
resolve, its bin: ``analyze`` bins the logged loads in 20, and on a log whose load per replica
reaches twice the knee a bin is a tenth of it. Hence 0.9: one bin below the knee. The parameter's
declared default is None (read as 0.9) rather than 0.9 so that ``llmscale tune``, which searches
every parameter with a default, does not search a margin that acts only once a cliff is set.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from llmscale.policies.params import AMOUNT_RANGE, param

__all__ = ["DEFAULT_CLIFF_MARGIN", "CliffConfig", "cliff_floor", "keep_off_the_cliff"]

#: one knee bin of twenty over a log reaching twice the knee (module docstring)
DEFAULT_CLIFF_MARGIN: Final = 0.9


@dataclass(frozen=True)
class CliffConfig:
    cliff_rps_per_replica: float | None = param(
        None,
        AMOUNT_RANGE,
        kind=float,
        unit="req/s",
        help="load per serving replica where P99 turns up (llmscale analyze --policy-config-out); "
        "None: no cap",
    )
    cliff_margin: float | None = param(
        None, "[0.01, 1]", kind=float, help="plan at most this share of the cliff per replica (None: 0.9)"
    )

    @property
    def margin(self) -> float:
        return DEFAULT_CLIFF_MARGIN if self.cliff_margin is None else self.cliff_margin


def cliff_floor(cliff: CliffConfig, rate_rps: float) -> int | None:
    """The fewest replicas that carry ``rate_rps`` at ``margin x cliff`` each; None without a cliff."""
    if cliff.cliff_rps_per_replica is None:
        return None
    return max(1, math.ceil(max(0.0, rate_rps) / (cliff.margin * cliff.cliff_rps_per_replica) - 1e-9))


def keep_off_the_cliff(
    cliff: CliffConfig, rate_rps: float | None, desired: int, rule: str
) -> tuple[int, str, dict[str, float | None]]:
    """``(desired, rule, inputs)`` raised to :func:`cliff_floor` when that is more (rule
    ``cliff-margin``); unchanged, with no inputs, when no cliff is set or no rate is known."""
    if cliff.cliff_rps_per_replica is None or rate_rps is None:
        return desired, rule, {}
    floor = cliff_floor(cliff, rate_rps)
    assert floor is not None
    inputs: dict[str, float | None] = {
        "cliff_rps_per_replica": cliff.cliff_rps_per_replica,
        "cliff_margin": cliff.margin,
        "cliff_floor_replicas": float(floor),
    }
    if floor > desired:
        return floor, "cliff-margin", inputs
    return desired, rule, inputs
