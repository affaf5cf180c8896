"""Named synthetic workloads for demos, tests and benchmarks.

Every preset is computed from published numbers written in this file: the
package never reads ``../shared/data`` at run time. ``make_preset(name, seed,
**params)`` builds one; ``PRESETS[name].description`` is its one-line help and
``PRESETS[name].parameters()`` its tunable parameters with defaults.

Sizing: ``rate_rps_mean`` defaults to 60 req/s for the chat-shaped presets.
At the Azure conversation lengths (1155 prompt / 211 output tokens on
average) that is ~69k prompt tokens/s and ~12.7k output tokens/s. A rough
guess of one Llama-3-8B H100 replica under a latency SLO (~13 ms per output
token at light load, batches of a few dozen: ~1-2k output tokens/s plus the
prefill) puts that at 10-20+ replicas, and 2-3x more at the flash crowd. It is
a parameter because the team will tune it once the simulator runs.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import numpy as np

from llmscale.errors import ConfigError
from llmscale.workloads.arrivals import cumulative_rate
from llmscale.workloads.lengths import LengthModel, LognormalLengths
from llmscale.workloads.model import Workload
from llmscale.workloads.synthetic import (
    Curve,
    diurnal_curve,
    on_off_curve,
    with_spike,
    workload_from_rate_curve,
)

__all__ = [
    "AZURE_CONV_LENGTHS",
    "BANDWIDTH_BOUND_LENGTHS",
    "PRESETS",
    "SERVEGEN_DAY_LEVEL",
    "SERVEGEN_HOUR_SHAPE",
    "Preset",
    "make_preset",
    "multi_day_curve",
]

# Azure LLM inference trace 2023, conversation: prompts mean 1155 / p99 4142,
# outputs mean 211 / p99 601 tokens. Closed-form lognormal fit
# (lognormal_from_mean_p99, z = 2.3263):
#   prompts: sigma = 2.3263 - sqrt(5.4119 - 2*ln(4142/1155) = 2.8577) = 0.6359,
#            mu = ln(1155) - 0.6359^2/2 = 7.0518 - 0.2022 = 6.8497 (median 944)
#   outputs: sigma = 2.3263 - sqrt(5.4119 - 2*ln(601/211) = 3.3186) = 0.5047,
#            mu = ln(211) - 0.5047^2/2 = 5.3519 - 0.1274 = 5.2245 (median 186)
AZURE_CONV_LENGTHS: Final = LognormalLengths.from_mean_p99(1155.0, 4142.0, 211.0, 601.0)

# Decode-heavy: short-ish prompts (mean 256, p99 1024 -> mu 5.2989, sigma 0.7018)
# and long answers (mean 900, p99 2800 -> mu 6.6490, sigma 0.5538). At the
# default 15 req/s that is 13.5k output tokens/s (like `default`'s 12.7k) but
# only 3.8k prompt tokens/s (vs 69k): KV-cache reads dominate, not prefill FLOPs.
BANDWIDTH_BOUND_LENGTHS: Final = LognormalLengths.from_mean_p99(256.0, 1024.0, 900.0, 2800.0)

# Azure conversation inter-arrival CV (measured 1.09 on the 19,366 requests).
_AZURE_CV: Final = 1.1
_CURVE_STEP_S: Final = 10.0  # ramp resolution; the ramp moves <0.5% of peak per 10 s


def _normalise(curve: Curve, rate_rps_mean: float) -> Curve:
    """Scale a curve so its time-average is ``rate_rps_mean``."""
    t, r = curve
    area = float(cumulative_rate(t, r)[-1])
    if not area > 0:
        raise ConfigError("preset curve has zero rate everywhere")
    return t, r * (rate_rps_mean * float(t[-1] - t[0]) / area)


def _ramp_curve(duration_s: float, rate_rps_mean: float) -> Curve:
    # Day-shaped hour: 0.4 + 0.6*sin(0.8*pi*u), u = t/duration: 40% of peak at
    # the start, peak at 62.5% (minute 37.5 of 60), back to 75% at the end.
    # Its mean is 0.4 + 0.6*(1 - cos(0.8*pi))/(0.8*pi) = 0.832 of peak, so at
    # 60 req/s mean the peak is 72.1 and the start 28.8 req/s.
    if not duration_s > 0:
        raise ConfigError(f"duration_s = {duration_s}, must be > 0")
    t = np.linspace(0.0, duration_s, max(2, int(np.ceil(duration_s / _CURVE_STEP_S)) + 1))
    shape = 0.4 + 0.6 * np.sin(0.8 * np.pi * t / duration_s)
    return _normalise((t, shape), rate_rps_mean)


def _positive_rate(rate_rps_mean: float) -> None:
    if not rate_rps_mean > 0:
        raise ConfigError(f"rate_rps_mean = {rate_rps_mean}, must be > 0")


def _preset_workload(
    name: str,
    curve: Curve,
    seed: int,
    cv: float,
    generator: str,
    *,
    lengths: LengthModel = AZURE_CONV_LENGTHS,
    **meta: object,
) -> Workload:
    """Preset ``name``'s workload on ``curve``: named ``preset:<name>`` and drawn from its own random
    stream ``<name>`` (so two presets at one seed share no draws); ``meta`` follows ``generator``."""
    return workload_from_rate_curve(
        *curve,
        seed=seed,
        cv=cv,
        lengths=lengths,
        name=f"preset:{name}",
        stream=name,
        meta={"generator": generator, **meta},
    )


def _default(
    seed: int,
    *,
    rate_rps_mean: float = 60.0,
    duration_s: float = 3600.0,
    spike_multiplier: float = 3.0,
    spike_duration_s: float = 120.0,
    cv: float = _AZURE_CV,
) -> Workload:
    _positive_rate(rate_rps_mean)
    # Spike centred at 2/3 of the span: minute 39-41 of the hour, where the
    # ramp is at 99.7% of its peak, so x3 gives ~216 req/s. It adds
    # 2 * 71.9 * 120 = 17.3k requests: the hour averages ~64.8 req/s, not 60
    # (rate_rps_mean is the ramp's mean, shared with `azure-like`).
    spike_start_s = max(0.0, duration_s * 2.0 / 3.0 - spike_duration_s / 2.0)
    curve = with_spike(
        _ramp_curve(duration_s, rate_rps_mean), spike_start_s, spike_duration_s, spike_multiplier
    )
    return _preset_workload("default", curve, seed, cv, "ramp+spike", spike_start_s=spike_start_s)


def _azure_like(
    seed: int, *, rate_rps_mean: float = 60.0, duration_s: float = 3600.0, cv: float = _AZURE_CV
) -> Workload:
    _positive_rate(rate_rps_mean)
    curve = _ramp_curve(duration_s, rate_rps_mean)
    return _preset_workload("azure-like", curve, seed, cv, "ramp")


def _flash_crowd(
    seed: int,
    *,
    rate_rps_mean: float = 60.0,
    duration_s: float = 1800.0,
    spike_start_s: float = 600.0,
    spike_duration_s: float = 120.0,
    spike_multiplier: float = 4.0,
    cv: float = _AZURE_CV,
) -> Workload:
    _positive_rate(rate_rps_mean)
    flat = (np.array([0.0, duration_s]), np.array([rate_rps_mean, rate_rps_mean]))
    if not duration_s > 0:
        raise ConfigError(f"duration_s = {duration_s}, must be > 0")
    curve = with_spike(flat, spike_start_s, spike_duration_s, spike_multiplier)
    return _preset_workload("flash-crowd", curve, seed, cv, "flat+spike")


def _diurnal(
    seed: int,
    *,
    rate_rps_mean: float = 60.0,
    duration_s: float = 7200.0,
    period_s: float = 7200.0,
    trough_ratio: float = 0.25,
    cv: float = _AZURE_CV,
) -> Workload:
    _positive_rate(rate_rps_mean)
    if not 0 <= trough_ratio <= 1:
        raise ConfigError(f"trough_ratio = {trough_ratio}, must be in [0, 1]")
    # Mean of a raised cosine over whole periods is (min + max)/2, so
    # max = 2*mean/(1 + ratio): 96 req/s peak, 24 req/s trough at the defaults.
    # ServeGen m-large swings 12x over a real day (48 to 583 req/s); 4x over a
    # compressed 2-hour "day" keeps the backtest short but the swing visible.
    peak_rps = 2.0 * rate_rps_mean / (1.0 + trough_ratio)
    curve = diurnal_curve(trough_ratio * peak_rps, peak_rps, period_s, duration_s)
    return _preset_workload("diurnal", curve, seed, cv, "diurnal")


def _bandwidth_bound(
    seed: int, *, rate_rps_mean: float = 15.0, duration_s: float = 3600.0, cv: float = 1.0
) -> Workload:
    _positive_rate(rate_rps_mean)
    flat = (np.array([0.0, duration_s]), np.array([rate_rps_mean, rate_rps_mean]))
    return _preset_workload("bandwidth-bound", flat, seed, cv, "flat", lengths=BANDWIDTH_BOUND_LENGTHS)


def _on_off(
    seed: int,
    *,
    rate_rps_mean: float = 60.0,
    duration_s: float = 3600.0,
    on_s: float = 300.0,
    off_s: float = 300.0,
    off_ratio: float = 0.0,
    cv: float = _AZURE_CV,
) -> Workload:
    _positive_rate(rate_rps_mean)
    if not 0 <= off_ratio <= 1:
        raise ConfigError(f"off_ratio = {off_ratio}, must be in [0, 1]")
    # Mean over a cycle = on_rate * (on_s + off_ratio*off_s) / (on_s + off_s):
    # 5 min on / 5 min off at 60 req/s mean means 120 req/s when on, 0 when off.
    on_rate_rps = rate_rps_mean * (on_s + off_s) / (on_s + off_ratio * off_s)
    curve = on_off_curve(on_rate_rps, on_s, off_s, duration_s, off_rate_rps=off_ratio * on_rate_rps)
    return _preset_workload("on-off", curve, seed, cv, "on_off")


# ServeGen language m-large (alibaba/ServeGen, Apache-2.0; 14 days of 10-minute total rates, mean
# 195.8 req/s), summarised to two tables: the mean rate of each hour of the day over the 14 days,
# and each day's mean, both over the overall mean. The hour shape is mild (0.79 at 08:00 to 1.14 at
# 19:00); the days differ more (0.54 to 1.43): the same hour's rate spreads ~30% from day to day,
# which is what the same-hour history (llmscale.history) measures and the in-window spread cannot.
SERVEGEN_HOUR_SHAPE: Final = (
    0.994, 1.002, 0.986, 0.936, 0.908, 0.883, 0.854, 0.817, 0.788, 0.868, 1.046, 1.106,
    0.971, 0.981, 1.047, 1.047, 1.109, 1.078, 1.040, 1.143, 1.133, 1.074, 1.103, 1.086,
)  # fmt: skip
SERVEGEN_DAY_LEVEL: Final = (
    1.426, 1.068, 1.027, 0.895, 1.057, 0.926, 1.091, 1.234, 1.179, 0.985, 0.682, 0.645, 0.536, 1.248,
)  # fmt: skip


def multi_day_curve(days: int, day_s: float, rate_rps_mean: float, first_day: int = 0) -> Curve:
    """Hourly rate points of ``days`` ServeGen-shaped days of ``day_s`` seconds each, mean ``rate_rps_mean``.

    Hour h of day d runs at mean x hour_shape[h] x day_level[(first_day + d) mod 14], as a
    piecewise-linear curve through the middle of each hour (and flat to both ends).
    """
    bin_s = day_s / 24.0
    times = [0.0]
    rates = []
    for d in range(days):
        level = SERVEGEN_DAY_LEVEL[(first_day + d) % len(SERVEGEN_DAY_LEVEL)]
        for h, shape in enumerate(SERVEGEN_HOUR_SHAPE):
            times.append((d * 24 + h + 0.5) * bin_s)
            rates.append(level * shape)
    times.append(days * day_s)
    r = np.array([rates[0], *rates, rates[-1]]) * rate_rps_mean
    return _normalise((np.array(times), r), rate_rps_mean)


def _multi_day(
    seed: int,
    *,
    rate_rps_mean: float = 4.0,
    duration_s: float = 3 * 86_400.0,
    day_s: float = 86_400.0,
    first_day: float = 0.0,
    cv: float = _AZURE_CV,
) -> Workload:
    _positive_rate(rate_rps_mean)
    if not day_s > 0:
        raise ConfigError(f"day_s = {day_s}, must be > 0")
    if not 0 < duration_s <= 28 * day_s:
        raise ConfigError(f"duration_s = {duration_s}, must be in (0, 28 days of day_s = {day_s})")
    if first_day != int(first_day) or first_day < 0:
        raise ConfigError(f"first_day = {first_day}, must be a whole number >= 0")
    # whole days, then cut at duration_s (its rate interpolated there)
    t, r = multi_day_curve(math.ceil(duration_s / day_s), day_s, rate_rps_mean, int(first_day))
    keep = t < duration_s
    t_cut = np.append(t[keep], duration_s)
    r_cut = np.append(r[keep], np.interp(duration_s, t, r))
    return _preset_workload(
        "multi-day", _normalise((t_cut, r_cut), rate_rps_mean), seed, cv, "multi_day", day_s=day_s
    )


@dataclass(frozen=True)
class Preset:
    """A named workload recipe: ``preset(seed, **params) -> Workload``."""

    name: str
    description: str
    build: Callable[..., Workload]

    def parameters(self) -> dict[str, float]:
        """Tunable keyword parameters and their defaults."""
        sig = inspect.signature(self.build)
        return {
            p.name: p.default for p in sig.parameters.values() if p.kind is inspect.Parameter.KEYWORD_ONLY
        }

    def __call__(self, seed: int = 0, **params: float) -> Workload:
        allowed = self.parameters()
        unknown = sorted(set(params) - set(allowed))
        if unknown:
            raise ConfigError(
                f"preset {self.name!r} has no parameter {', '.join(unknown)}; "
                f"it takes {', '.join(f'{k} (default {v})' for k, v in allowed.items())}"
            )
        resolved = dict(allowed)
        for key, value in params.items():
            try:
                resolved[key] = float(value)
            except (TypeError, ValueError):
                raise ConfigError(f"preset {self.name!r}: {key} = {value!r}, must be a number") from None
        w = self.build(seed, **resolved)
        meta = dict(w.meta)
        meta.update({"format": "preset", "preset": self.name, "params": resolved})
        return Workload(w.name, w.arrival_s, w.input_tokens, w.output_tokens, meta)


PRESETS: Final[dict[str, Preset]] = {
    p.name: p
    for p in (
        Preset(
            "default",
            "1 h Azure-chat-shaped ramp (40%->100%->75%), x3 flash crowd at min 40, "
            "60 req/s mean (rate_rps_mean)",
            _default,
        ),
        Preset(
            "azure-like",
            "the default hour without the flash crowd: Azure chat lengths, CV 1.1, 60 req/s mean",
            _azure_like,
        ),
        Preset("flash-crowd", "30 min flat at 60 req/s with a x4 spike for 2 min at minute 10", _flash_crowd),
        Preset(
            "diurnal",
            "a day compressed into 2 h: raised cosine 24->96->24 req/s (4x swing), 60 req/s mean",
            _diurnal,
        ),
        Preset(
            "bandwidth-bound",
            "1 h steady Poisson 15 req/s, short prompts (256) and long answers (900): decode-heavy",
            _bandwidth_bound,
        ),
        Preset("on-off", "1 h of 5 min at 120 req/s / 5 min idle: scale-up and scale-to-zero", _on_off),
        Preset(
            "multi-day",
            "3 days shaped as ServeGen m-large's hours and days, 4 req/s mean; day_s compresses a day",
            _multi_day,
        ),
    )
}


def make_preset(name: str, seed: int = 0, **params: float) -> Workload:
    """Build preset ``name`` (``"default"`` or ``"preset:default"``) with ``seed`` and parameter overrides.

    Raises ConfigError for an unknown name or parameter, listing the valid ones.
    """
    key = name.removeprefix("preset:")
    preset = PRESETS.get(key)
    if preset is None:
        raise ConfigError(f"unknown preset {name!r}; available: {', '.join(PRESETS)}")
    return preset(seed, **params)
