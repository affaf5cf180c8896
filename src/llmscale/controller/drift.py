"""The live controller's model-drift hook: is the fleet as fast as the step-time model says?

Each tick, :meth:`DriftMonitor.tick` reads the signal window (:mod:`llmscale.signals.drift`),
asks the deployment's step-time model for the same means (:mod:`llmscale.perf.drift`), and

- adds ``model_drift_itl_ratio`` and ``model_drift_ttft_ratio`` to the tick's signals (the
  catalogue declares them; outside the live controller they read "not computed");
- sets ``llmscale_model_drift_ratio{quantity="itl"|"ttft"}`` and
  ``llmscale_model_factor{factor=...}`` (the factors the policies plan with) on the
  controller's ``/metrics``;
- logs one warning when a ratio first leaves 1 +- ``drift.warn`` and one when it is back
  (:func:`~llmscale.perf.drift.alarm_step`'s hysteresis), not one per tick;
- with ``drift.adapt``, moves the factors (:func:`~llmscale.perf.drift.adapt_step`) and
  rebuilds the policies around them (:class:`AdjustablePolicy`) when they have moved by 1%;
- keeps a record of all that for the tick's decision-log line (:attr:`DriftMonitor.last`) and
  a document of the adjustment for the controller's saved state (:meth:`DriftMonitor.to_state`).

What is measured and predicted, and the physics of the adjustment, are in those two modules.

Cost: the hook reads the tick's indexed window (shared with the signals) and, adapting, builds
seven small step-time models for the elasticities (~0.1 ms each). Over 500 replicas x 20
observations (``tests/signals``' synthetic fleet) it adds ~4 ms of CPU to a tick whose whole
signal catalogue takes ~41 ms on the same machine.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from llmscale.deployment import GuardOverriding
from llmscale.perf.drift import (
    ADJUSTS,
    PREDICTORS,
    AdaptConfig,
    AdaptState,
    DriftAlarm,
    DriftLimits,
    Evidence,
    OperatingPoint,
    Reading,
    adapt_step,
    alarm_step,
    clear_threshold,
    elasticities,
    predict_itl_s,
    predict_prefill_s,
    predict_ttft_s,
    quantized,
)
from llmscale.perf.profile import FACTOR_NAMES, FactorScale
from llmscale.perf.step_time import PerfModel
from llmscale.policies.base import Policy
from llmscale.precision import Precision
from llmscale.signals.drift import DriftWindow, drift_window
from llmscale.signals.fleet import SignalValues
from llmscale.signals.histograms import LATENCY_WINDOW_S
from llmscale.signals.window import FleetWindow
from llmscale.types import Decision, Observation, Signals, SignalValue

__all__ = [
    "DRIFT_METRICS",
    "DRIFT_SIGNALS",
    "AdjustablePolicy",
    "DriftMonitor",
    "DriftSettings",
    "DriftTick",
    "measure",
]

log = logging.getLogger(__name__)

#: quantity -> the catalogue's signal name
DRIFT_SIGNALS: Mapping[str, str] = {"itl": "model_drift_itl_ratio", "ttft": "model_drift_ttft_ratio"}
#: the names this hook adds to the controller's /metrics
DRIFT_METRICS = ("llmscale_model_drift_ratio", "llmscale_model_factor")


@dataclass(frozen=True)
class DriftSettings:
    """``run``'s ``drift:`` section, as plain values."""

    warn: float = 0.15
    adapt: bool = False
    limits: DriftLimits = field(default_factory=DriftLimits)
    adapt_config: AdaptConfig = field(default_factory=AdaptConfig)
    window_s: float = LATENCY_WINDOW_S


def measure(
    w: DriftWindow, model: PerfModel, limits: DriftLimits, budget_tokens: int
) -> tuple[OperatingPoint | None, dict[str, Reading]]:
    """The operating point of ``w`` and the ITL / TTFT readings against ``model``; pure.

    A reading has no prediction (so no ratio) when its window is thin (:class:`DriftLimits`),
    when the fleet's shape is unknown, or — for TTFT — when requests queued: they waited on
    average more than a step to be scheduled (queue-time histogram), or, without that
    histogram, some observation of the window saw one waiting. Its note says which.
    """
    batch, ctx, prompt = w.batch, w.context_mean_tokens, w.prompt_mean_tokens
    shape = (("running gauge", batch), ("finished requests", ctx), ("prompts", prompt))
    missing = [n for n, v in shape if v is None]
    op = None
    if batch is not None and ctx is not None and prompt is not None:
        op = OperatingPoint(batch, ctx, prompt, w.prefill_rps_per_replica or 0.0, budget_tokens)
    # ITL
    itl_obs = w.itl_mean_s
    if itl_obs is None:
        itl = Reading("itl", None, None, 0.0, "no inter-token latency observed in the window")
    elif w.itl_count < limits.min_tokens or w.finished < limits.min_requests:
        itl = Reading(
            "itl", itl_obs, None, w.itl_count,
            f"thin window: {w.itl_count:.0f} tokens (min {limits.min_tokens:.0f}), "
            f"{w.finished:.0f} finished requests (min {limits.min_requests:.0f})",
        )  # fmt: skip
    elif op is None:
        itl = Reading("itl", itl_obs, None, w.itl_count, f"no {', '.join(missing)} in the window")
    else:
        itl = Reading(
            "itl", itl_obs, predict_itl_s(model, op), w.itl_count,
            f"batch {op.batch:.1f}, context {op.context_tokens:.0f} tokens, "
            f"{op.prefill_rps:.2f} prefills/s per replica",
        )  # fmt: skip
    # TTFT
    ttft_obs = w.ttft_mean_s
    if ttft_obs is None:
        ttft = Reading("ttft", None, None, 0.0, "no first token observed in the window")
    elif w.ttft_count < limits.min_first_tokens:
        ttft = Reading(
            "ttft", ttft_obs, None, w.ttft_count,
            f"thin window: {w.ttft_count:.0f} first tokens (min {limits.min_first_tokens:.0f})",
        )  # fmt: skip
    elif op is None:
        ttft = Reading("ttft", ttft_obs, None, w.ttft_count, f"no {', '.join(missing)} in the window")
    elif w.queue_seen:
        # The engine's own part of TTFT: from scheduling to first token, against its prefill steps.
        queued = w.queue_mean_s or 0.0
        step = predict_itl_s(model, op)
        if queued > step:
            ttft = Reading(
                "ttft", ttft_obs - queued, None, w.ttft_count,
                f"queueing: requests waited {queued * 1e3:.1f} ms on average to be scheduled, "
                f"more than one step ({step * 1e3:.1f} ms)",
            )  # fmt: skip
        else:
            ttft = Reading(
                "ttft", ttft_obs - queued, predict_prefill_s(model, op), w.ttft_count,
                f"prompt {op.prompt_tokens:.0f} tokens next to a batch of {op.batch:.1f}; "
                f"{queued * 1e3:.1f} ms of queue time taken off",
                basis="prefill",
            )  # fmt: skip
    elif not w.queue_free:
        why = "unknown" if w.waiting_max is None else f"up to {w.waiting_max:.0f}"
        ttft = Reading("ttft", ttft_obs, None, w.ttft_count, f"requests waited in the window ({why})")
    else:
        ttft = Reading(
            "ttft", ttft_obs, predict_ttft_s(model, op), w.ttft_count,
            f"prompt {op.prompt_tokens:.0f} tokens next to a batch of {op.batch:.1f}, "
            "nothing waiting (no queue-time histogram)",
            basis="wait+prefill",
        )  # fmt: skip
    return op, {"itl": itl, "ttft": ttft}


class AdjustablePolicy:
    """A policy rebuilt around adjusted step-time factors; its state carries over (the same class).

    ``factory(scale)`` builds the policy with ``Deployment.perf_scale = scale``. Policies that
    do not use the step-time model are rebuilt identical, which costs a factory call.
    """

    def __init__(self, factory: Callable[[FactorScale | None], Policy[Any]]) -> None:
        self._factory = factory
        self.scale: FactorScale | None = None
        self.inner: Policy[Any] = factory(None)

    def rescale(self, scale: FactorScale) -> None:
        """Rebuild around ``scale`` (None-equivalent when it is all ones)."""
        new = None if scale.identity else scale
        if new != self.scale:
            self.inner = self._factory(new)
            self.scale = new

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def tick_s(self) -> float:
        return self.inner.tick_s

    @property
    def guard_overrides(self) -> Mapping[str, Any]:
        overrides: Mapping[str, Any] = (
            self.inner.guard_overrides if isinstance(self.inner, GuardOverriding) else {}
        ) or {}
        return overrides

    def initial_state(self) -> Any:
        return self.inner.initial_state()

    def decide(self, signals: Signals, state: Any, now_s: float) -> tuple[Decision, Any]:
        return self.inner.decide(signals, state, now_s)


class _WithDrift(Mapping[str, SignalValue]):
    """The tick's signal values with the drift ratios set (the others read through, lazily)."""

    __slots__ = ("_base", "_extra")

    def __init__(self, base: Mapping[str, SignalValue], extra: Mapping[str, SignalValue]) -> None:
        self._base = base
        self._extra = extra

    def __getitem__(self, name: str) -> SignalValue:
        v = self._extra.get(name)
        return v if v is not None else self._base[name]

    def __contains__(self, name: object) -> bool:
        return name in self._extra or name in self._base

    def __iter__(self) -> Iterator[str]:
        yield from self._base
        for name in self._extra:
            if name not in self._base:
                yield name

    def __len__(self) -> int:
        return sum(1 for _ in self)


@dataclass(frozen=True)
class DriftTick:
    """What the drift hook saw and did at one tick (the decision log's ``drift`` object)."""

    readings: Mapping[str, Reading]
    #: the factors the policies plan with after this tick (start x adjustment)
    factors: Mapping[str, float]
    adapt: bool
    #: per quantity, what the adjustment did or why it held
    adapted: Mapping[str, str] = field(default_factory=dict)
    events: Mapping[str, str] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {q: r.as_json() for q, r in self.readings.items()}
        doc["factors"] = {k: round(v, 4) for k, v in self.factors.items()}
        doc["adapt"] = self.adapt
        if self.adapted:
            doc["adapted"] = dict(self.adapted)
        if self.events:
            doc["events"] = dict(self.events)
        return doc


class DriftMonitor:
    """The stateful part around the pure functions: alarms, the adjustment, gauges, log lines."""

    def __init__(
        self,
        settings: DriftSettings,
        *,
        model: str,
        gpu: str,
        tp: int,
        calibration: str | None,
        budget_tokens: int,
        target: str,
        registry: Any = None,
        policies: Sequence[AdjustablePolicy] = (),
        precision: Precision | None = None,
    ) -> None:
        """Raises ConfigError when the model, GPU or profile is unknown (the caller may run without).

        ``precision``: the served number formats (None: bf16 throughout). Drift is the observed
        step time over the model's prediction, so the prediction must be the FP8 one for an FP8
        fleet: judged against bf16, an FP8 replica's decode (~1.4x faster at small batches,
        docs/fp8.md) reads as the engine running fast, and ``drift.adapt`` would shrink the
        bandwidth factor the bf16 plan uses instead of planning FP8."""
        from llmscale.perf.catalogue import get_gpu, get_model, validate_tp
        from llmscale.perf.profile import profile_factors

        self.settings = settings
        self._model, self._gpu = get_model(model), get_gpu(gpu)
        validate_tp(self._model, tp)
        self._tp = tp
        self._calibration = calibration
        self._precision = precision
        self.start = profile_factors(calibration)
        self._budget = budget_tokens
        self.target = target
        self.policies = tuple(policies)
        self.alarms = {q: DriftAlarm() for q in DRIFT_SIGNALS}
        self.state = AdaptState()
        self.last: DriftTick | None = None
        #: the factors the policies plan with changed at the last tick (the controller saves them)
        self.moved = False
        self._ratio_gauge: Any = None
        self._factor_gauge: Any = None
        if registry is not None:
            from prometheus_client import Gauge

            self._ratio_gauge = Gauge(
                "llmscale_model_drift_ratio",
                "Observed mean ITL / TTFT over the step-time model's prediction at the observed batch "
                "and context (1 = as modelled); absent when the window says too little",
                ["quantity"],
                registry=registry,
            )
            self._factor_gauge = Gauge(
                "llmscale_model_factor",
                "The step-time model's scale factors the capacity-model policies plan with "
                "(the calibration profile's, adjusted online when drift.adapt is on)",
                ["factor"],
                registry=registry,
            )
            self._export_factors()

    # -- models -------------------------------------------------------------------------------

    def model_for(self, scale: FactorScale) -> PerfModel:
        """The deployment's step-time model with the profile's factors times ``scale`` (not cached:
        ~0.1 ms to build; the elasticities ask for a handful per tick)."""
        from llmscale.perf.catalogue import get_gpu
        from llmscale.perf.profile import profile_coefficients

        coeffs = profile_coefficients(self._calibration, scale, family=get_gpu(self._gpu).family)
        return PerfModel(self._model, self._gpu, self._tp, coeffs, precision=self._precision)

    @property
    def factors(self) -> dict[str, float]:
        """The factors the policies plan with: the profile's times the (quantized) adjustment."""
        scale = quantized(self.state.scale) if self.settings.adapt else FactorScale()
        return scale.applied_to(self.start)

    # -- the tick -----------------------------------------------------------------------------

    def tick(self, now_s: float, window: Sequence[Observation], signals: Signals) -> Signals:
        """One tick: measure, warn, adapt; returns ``signals`` with the two drift ratios set."""
        values = signals.values
        fw = values.window if isinstance(values, SignalValues) else FleetWindow.build(window)
        w = drift_window(fw, self.settings.window_s)
        scale = self.state.scale if self.settings.adapt else FactorScale()
        model = self.model_for(scale)
        op, readings = measure(w, model, self.settings.limits, self._budget)
        events: dict[str, str] = {}
        for q, reading in readings.items():
            alarm, event = alarm_step(self.alarms[q], reading.ratio, now_s, self.settings.warn)
            self.alarms[q] = alarm
            if event is not None:
                events[q] = event
                self._log_event(q, event, reading)
        adapted: dict[str, str] = {}
        self.moved = False
        if self.settings.adapt:
            adapted = self._adapt(now_s, op, readings, scale)
        tick = DriftTick(readings, self.factors, self.settings.adapt, adapted, events)
        self.last = tick
        self._export(readings)
        extra = {}
        for q, name in DRIFT_SIGNALS.items():
            r = readings[q]
            extra[name] = SignalValue(r.ratio, r.note)
        return replace(signals, values=_WithDrift(values, extra))

    def _adapt(
        self, now_s: float, op: OperatingPoint | None, readings: Mapping[str, Reading], scale: FactorScale
    ) -> dict[str, str]:
        evidence = []
        notes: dict[str, str] = {}
        if op is not None:
            for q, reading in readings.items():
                ratio = reading.ratio
                if ratio is None:
                    notes[q] = "held: no ratio this tick"
                    continue
                predict = PREDICTORS[reading.basis]

                def predicted(s: FactorScale, predict: Any = predict, op: OperatingPoint = op) -> float:
                    return float(predict(self.model_for(s), op))

                evidence.append(Evidence(q, math.log(ratio), elasticities(predicted, scale, ADJUSTS[q])))
        else:
            notes = {q: "held: no operating point this tick" for q in readings}
        before = quantized(self.state.scale)
        self.state, moved = adapt_step(self.state, evidence, self.settings.adapt_config, now_s)
        notes.update(moved)
        after = quantized(self.state.scale)
        if after != before:
            for p in self.policies:
                p.rescale(after)
            self._export_factors()
            self.moved = True
        return notes

    # -- outputs ------------------------------------------------------------------------------

    def _log_event(self, quantity: str, event: str, reading: Reading) -> None:
        what = "inter-token latency" if quantity == "itl" else "time to first token"
        ratio = reading.ratio
        assert ratio is not None and reading.observed_s is not None and reading.predicted_s is not None
        numbers = (
            f"observed mean {what} {reading.observed_s * 1e3:.1f} ms vs the step-time model's "
            f"{reading.predicted_s * 1e3:.1f} ms ({reading.note})"
        )
        if event == "drifting":
            log.warning(
                "model drift for %s: %s is %.2fx the model: capacity plans are off by as much%s",
                self.target, numbers, ratio,
                "; adjusting the factors online (drift.adapt)" if self.settings.adapt
                else "; recalibrate (llmscale calibrate) or set drift.adapt",
            )  # fmt: skip
        else:
            log.warning(
                "model drift for %s is back within %.0f%%: %s, ratio %.2f",
                self.target, clear_threshold(self.settings.warn) * 100, numbers, ratio,
            )  # fmt: skip

    def _export(self, readings: Mapping[str, Reading]) -> None:
        gauge = self._ratio_gauge
        if gauge is None:
            return
        for q, r in readings.items():
            ratio = r.ratio
            if ratio is None:
                # Invalid this tick: the series disappears rather than repeating an old value.
                with contextlib.suppress(KeyError):
                    gauge.remove(q)
            else:
                gauge.labels(quantity=q).set(ratio)

    def _export_factors(self) -> None:
        if self._factor_gauge is None:
            return
        for name, v in self.factors.items():
            self._factor_gauge.labels(factor=name).set(v)

    # -- saved state --------------------------------------------------------------------------

    def to_state(self) -> dict[str, Any]:
        """The adjustment, for the controller's saved state (JSON-safe)."""
        return {
            "start": {k: round(v, 9) for k, v in self.start.items()},
            "scale": {k: round(getattr(self.state.scale, k), 9) for k in FACTOR_NAMES},
        }

    def restore(self, doc: Any) -> str | None:
        """Take a saved adjustment back (only with ``adapt``, and only over the same starting factors).

        Returns why it was not taken, or None when it was.
        """
        if not self.settings.adapt:
            return "drift.adapt is off"
        if not isinstance(doc, Mapping):
            return "no saved adjustment"
        start, scale = doc.get("start"), doc.get("scale")
        if not isinstance(start, Mapping) or not isinstance(scale, Mapping):
            return "the saved adjustment has no start or scale"
        for k in FACTOR_NAMES:
            s0, m = start.get(k), scale.get(k)
            if not isinstance(s0, int | float) or not isinstance(m, int | float) or isinstance(m, bool):
                return f"the saved adjustment lacks {k}"
            if not math.isclose(float(s0), self.start[k], rel_tol=1e-6):
                return f"the profile changed since ({k} {s0} -> {self.start[k]})"
            bound = self.settings.adapt_config.bound
            if not (math.isfinite(m) and 1.0 / bound - 1e-9 <= m <= bound + 1e-9):
                return f"the saved {k} multiplier {m} is outside [1/{bound:g}, {bound:g}]"
        self.state = AdaptState(FactorScale(**{k: float(scale[k]) for k in FACTOR_NAMES}), None)
        q = quantized(self.state.scale)
        for p in self.policies:
            p.rescale(q)
        self._export_factors()
        return None
