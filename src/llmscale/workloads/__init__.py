"""Request workloads: trace loaders, synthetic generators, presets and transformations.

Everything produces a :class:`Workload` (sorted arrival times from 0, prompt
and output token counts, provenance in ``meta``). Importing this package reads
no files; loaders read only the path they are given.

>>> from llmscale.workloads import make_preset, rate_scale
>>> w = make_preset("default", seed=1)
>>> w.name
'preset:default'
"""

from __future__ import annotations

from llmscale.workloads.arrivals import arrivals_from_rate_curve
from llmscale.workloads.lengths import (
    DEFAULT_LENGTHS,
    LengthModel,
    LengthSampler,
    LognormalLengths,
    lognormal_from_mean_p99,
)
from llmscale.workloads.loaders import (
    FORMATS,
    detect_format,
    load_azure,
    load_burstgpt,
    load_csv,
    load_mooncake,
    load_trace,
)
from llmscale.workloads.model import Workload
from llmscale.workloads.presets import PRESETS, Preset, make_preset
from llmscale.workloads.servegen import load_servegen
from llmscale.workloads.synthetic import (
    bursty,
    diurnal,
    diurnal_curve,
    flash_crowd,
    on_off,
    on_off_curve,
    poisson,
    with_spike,
    workload_from_rate_curve,
)
from llmscale.workloads.transform import entropy_bursts, rate_scale, window

__all__ = [
    "DEFAULT_LENGTHS",
    "FORMATS",
    "PRESETS",
    "LengthModel",
    "LengthSampler",
    "LognormalLengths",
    "Preset",
    "Workload",
    "arrivals_from_rate_curve",
    "bursty",
    "detect_format",
    "diurnal",
    "diurnal_curve",
    "entropy_bursts",
    "flash_crowd",
    "load_azure",
    "load_burstgpt",
    "load_csv",
    "load_mooncake",
    "load_servegen",
    "load_trace",
    "lognormal_from_mean_p99",
    "make_preset",
    "on_off",
    "on_off_curve",
    "poisson",
    "rate_scale",
    "window",
    "with_spike",
    "workload_from_rate_curve",
]
