"""``knative-kpa``: the Knative Pod Autoscaler (KPA) on in-flight requests per pod, panic mode included.

Re-implemented from knative/serving (v1.x) ``pkg/autoscaler/scaling/autoscaler.go``
(``Scale``, ``newAutoscaler``) and ``pkg/reconciler/autoscaling/kpa/scaler.go``
(``applyBounds``, ``handleScaleToZero``), with the defaults of
``config/core/configmaps/autoscaler.yaml``:

- metric: concurrency, i.e. requests in flight. For a vLLM replica that is
  ``running + waiting`` (llmscale's ``running`` + ``queue_waiting`` signals, the
  gateway queue included as Knative counts the activator's buffer);
- target per pod ``target_concurrency`` = container-concurrency-target-default
  100 x container-concurrency-target-percentage 70 % = **70** (Knative's
  default for unlimited container concurrency). A vLLM replica does not
  queue like a web server: a user sets ``containerConcurrency`` to the batch
  the replica serves well (e.g. ``max_num_seqs``) and the target follows as
  70 % of it; 70 is kept as the default and exposed;
- stable window 60 s, panic window 10 % of it (6 s), averages of the per-tick
  totals in each window (Knative averages per-second buckets; llmscale's
  signals arrive once per 2 s tick, the KPA's own ``tick-interval``, and the
  samples are kept in the state);
- desired stable / panic pods = ceil(average / target), each bounded to
  ``[floor(ready / max-scale-down-rate 2), ceil(ready x max-scale-up-rate 1000)]``
  with ``ready = max(1, ready pods)`` -- so one decision at most halves the
  ready pods (E.g. 10 ready, no load: floor(10 / 2) = 5);
- panic: entered when ``ceil(panic average / target) / ready >= 200 %``; each
  tick still over the threshold restarts the 60 s clock; left when not over
  it and 60 s have passed. In panic the desired count is the larger of
  stable and panic, and never decreases (ratcheted). A new autoscaler starts
  in panic when more than one pod is ready, holding the ready count (metric
  history lost on restart must not scale a fleet down);
- ``scale-down-delay`` (default 0: off) keeps the highest count of its window;
- bounds: ``applyBounds(min, max)``; scale to zero only when ``min_replicas`` is
  0 and ``enable-scale-to-zero`` (true): the last pod stays until the
  desired count has been 0 for ``scale-to-zero-grace-period`` (30 s).

Deviations: when this tick's concurrency cannot be computed the decision is
``no-data`` and holds (Knative would still average older buckets if any
were left in the window); the activator's burst capacity (which decides
whether the activator stays in the request path) is not modelled; the
scale-to-zero grace is counted from the first desired-zero tick rather
than from the moment the activator is confirmed in the path.

Guards: ``guard_overrides`` =
:data:`~llmscale.policies._hpa_behavior.PEER_GUARD_OVERRIDES`: Knative's
windows, panic ratchet and rate limits run inside ``decide``; llmscale's
pending-aware cap and KV-headroom check, which the real project does not have,
are off. Hold-on-missing-data, drain-aware scale-down and the bounds stay on.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from llmscale.deployment import DEFAULT_DEPLOYMENT, Deployment
from llmscale.policies._hpa_behavior import PEER_GUARD_OVERRIDES, clamp
from llmscale.policies.base import register
from llmscale.policies.params import (
    AMOUNT_RANGE,
    DURATION_RANGE,
    FACTOR_RANGE,
    TICK_RANGE,
    Param,
    config_from,
    param,
    params_of,
)
from llmscale.types import Decision, NoData, Signals

__all__ = ["KpaConfig", "KpaPolicy", "KpaState", "KpaStep", "kpa_scale"]


@dataclass(frozen=True)
class KpaConfig:
    target_concurrency: float = param(70.0, AMOUNT_RANGE, help="in-flight requests per pod")
    #: Knative's own lower bounds: a stable window of at least 6 s, a panic window of at least 1%
    #: of it (docs: "Configuring the Autoscaler"; serving's config validation). Shorter, the panic
    #: window holds no sample at all.
    stable_window_s: float = param(60.0, "[6, 604800]", unit="s")
    panic_window_pct: float = param(
        10.0, "[1, 100]", unit="%", help="panic window as a share of the stable one"
    )
    panic_threshold_pct: float = param(200.0, AMOUNT_RANGE, unit="%")
    max_scale_up_rate: float = param(1000.0, FACTOR_RANGE)
    max_scale_down_rate: float = param(2.0, FACTOR_RANGE)
    scale_to_zero_grace_s: float = param(30.0, DURATION_RANGE, unit="s")
    enable_scale_to_zero: bool = param(True)
    scale_down_delay_s: float = param(0.0, DURATION_RANGE, unit="s")
    tick_s: float = param(2.0, TICK_RANGE, unit="s")
    min_replicas: int = DEFAULT_DEPLOYMENT.min_replicas
    max_replicas: int = DEFAULT_DEPLOYMENT.max_replicas

    @property
    def panic_window_s(self) -> float:
        return self.stable_window_s * self.panic_window_pct / 100.0


@dataclass(frozen=True)
class KpaState:
    #: (time_s, total concurrency) within the stable window, oldest first
    samples: tuple[tuple[float, float], ...] = ()
    #: Knative's ``panicTime``: None when not panicking
    panic_time_s: float | None = None
    max_panic_pods: int = 0
    started: bool = False
    #: (time_s, desired) for the scale-down delay window
    delay_window: tuple[tuple[float, int], ...] = ()
    #: when the bounded desired count first became 0 (scale-to-zero grace)
    zero_since_s: float | None = None


def _window_mean(samples: tuple[tuple[float, float], ...], now_s: float, window_s: float) -> float | None:
    vals = [v for t, v in samples if now_s - t < window_s]
    return sum(vals) / len(vals) if vals else None


@dataclass(frozen=True)
class KpaStep:
    """One evaluation of Knative's ``Scale`` from its window averages (:func:`kpa_scale`)."""

    desired: int
    rule: str
    panic_time_s: float | None
    max_panic_pods: int
    delay_window: tuple[tuple[float, int], ...]
    max_up: int
    max_down: int
    dspc: int
    dppc: int


def kpa_scale(
    cfg: KpaConfig,
    ready_pods: int,
    stable: float,
    panic: float,
    now_s: float,
    panic_time_s: float | None,
    max_panic_pods: int,
    delay_window: tuple[tuple[float, int], ...] = (),
    reachable: bool = True,
) -> KpaStep:
    """Knative's ``Scale`` after the metric client answered: the rate-limited stable and panic
    counts, the panic state and its ratchet, the scale-down delay; before bounds and scale to zero.

    ``reachable`` False (a revision no route sends traffic to) drops the scale-down floor to 0,
    as Knative does; the policy's revision is always reachable. Checked against Knative's own code
    on recorded ticks (``tests/peers/test_knative_recorded.py``).
    """
    ready = float(max(1, ready_pods))
    max_up = math.ceil(cfg.max_scale_up_rate * ready)
    max_down = math.floor(ready / cfg.max_scale_down_rate) if reachable else 0
    dspc = math.ceil(stable / cfg.target_concurrency)
    dppc = math.ceil(panic / cfg.target_concurrency)
    stable_pods = int(min(max(dspc, max_down), max_up))
    panic_pods = int(min(max(dppc, max_down), max_up))

    over = dppc / ready >= cfg.panic_threshold_pct / 100.0
    panic_time = panic_time_s
    max_panic = max_panic_pods
    if over:
        panic_time = now_s  # enter, or extend the panic
    elif panic_time is not None and panic_time + cfg.stable_window_s < now_s:
        panic_time, max_panic = None, 0  # the surge has reached the stable window

    desired = stable_pods
    rule = "stable"
    if panic_time is not None:
        desired = max(stable_pods, panic_pods)
        rule = "panic"
        if desired > max_panic:
            max_panic = desired
        elif desired < max_panic:
            rule = "panic-no-scale-down"
        desired = max_panic

    if cfg.scale_down_delay_s > 0 and reachable:
        delay_window = (
            *(d for d in delay_window if now_s - d[0] < cfg.scale_down_delay_s),
            (now_s, desired),
        )
        delayed = max(n for _, n in delay_window)
        if delayed != desired:
            desired, rule = delayed, "scale-down-delayed"
    return KpaStep(desired, rule, panic_time, max_panic, delay_window, max_up, max_down, dspc, dppc)


@dataclass(frozen=True)
class KpaPolicy:
    config: KpaConfig
    name: str = "knative-kpa"
    guard_overrides: ClassVar[Mapping[str, Any]] = PEER_GUARD_OVERRIDES

    @property
    def tick_s(self) -> float:
        return self.config.tick_s

    def initial_state(self) -> KpaState:
        return KpaState()

    def decide(self, signals: Signals, state: KpaState, now_s: float) -> tuple[Decision, KpaState]:
        cfg = self.config
        fleet = signals.fleet
        if not state.started:
            # newAutoscaler: start in panic holding the ready pods when more than one is ready.
            if fleet.ready > 1:
                state = KpaState(panic_time_s=now_s, max_panic_pods=fleet.ready, started=True)
            else:
                state = KpaState(started=True)
        running = signals.get("running")
        waiting = signals.get("queue_waiting")
        if running is None or waiting is None:
            held = clamp(fleet.spec_replicas, cfg.min_replicas, cfg.max_replicas)
            missing = "running" if running is None else "queue_waiting"
            return Decision(
                held, "no-data", {"ready": float(fleet.ready)}, f"{missing} unavailable", no_data=NoData()
            ), state

        concurrency = running + waiting
        kept = tuple(s for s in state.samples if now_s - s[0] < cfg.stable_window_s)
        samples = (*kept, (now_s, concurrency))
        stable = _window_mean(samples, now_s, cfg.stable_window_s)
        panic = _window_mean(samples, now_s, cfg.panic_window_s)
        # The sample just added is inside both windows.
        assert stable is not None and panic is not None

        step = kpa_scale(
            cfg, fleet.ready, stable, panic, now_s, state.panic_time_s, state.max_panic_pods,
            state.delay_window,
        )  # fmt: skip
        desired, rule, panic_time = step.desired, step.rule, step.panic_time_s
        max_panic, delay_window = step.max_panic_pods, step.delay_window
        ready = float(max(1, fleet.ready))
        max_up, max_down, dspc, dppc = step.max_up, step.max_down, step.dspc, step.dppc

        desired = clamp(desired, cfg.min_replicas, cfg.max_replicas)
        zero_since = None
        if desired == 0:
            if not cfg.enable_scale_to_zero:
                desired, rule = 1, "scale-to-zero-disabled"
            else:
                zero_since = now_s if state.zero_since_s is None else state.zero_since_s
                if now_s - zero_since < cfg.scale_to_zero_grace_s:
                    desired, rule = min(1, cfg.max_replicas), "scale-to-zero-grace"
                else:
                    rule = "scale-to-zero"

        inputs: dict[str, float | None] = {
            "observed_stable": stable,
            "observed_panic": panic,
            "target": cfg.target_concurrency,
            "desired_stable_pods": float(dspc),
            "desired_panic_pods": float(dppc),
            "ready": ready,
            "max_scale_up": float(max_up),
            "max_scale_down": float(max_down),
            "in_panic": 1.0 if panic_time is not None else 0.0,
        }
        next_state = KpaState(
            samples=samples,
            panic_time_s=panic_time,
            max_panic_pods=max_panic,
            started=True,
            delay_window=delay_window,
            zero_since_s=zero_since,
        )
        return Decision(desired, rule, inputs), next_state


_PARAMS: dict[str, Param] = params_of(KpaConfig)


@register(
    "knative-kpa",
    "Knative KPA on in-flight requests per pod (target 70): 60 s stable / 6 s panic windows",
    _PARAMS,
    reads=("queue_waiting", "running"),
)
def _make(ctx: Deployment, params: Mapping[str, Any]) -> KpaPolicy:
    cfg = config_from(
        KpaConfig,
        params,
        min_replicas=ctx.min_replicas,
        max_replicas=ctx.max_replicas,
    )
    return KpaPolicy(cfg)
