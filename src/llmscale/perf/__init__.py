"""Performance model of vLLM replicas: model/GPU catalogue, step time, KV capacity, cold start.

``get_perf_model("llama-3-8b", "h100", 1).step(...)`` gives the duration of
one engine iteration from roofline physics with efficiencies fitted to public
measurements (Vidur, Splitwise, Sarathi-Serve; see ``scripts/fit_perf.py``).
Importing this package reads no file: the fitted coefficients are loaded on
first use.
"""

from __future__ import annotations

from llmscale.perf.catalogue import GPUS, MODELS, GpuSpec, ModelSpec, get_gpu, get_model
from llmscale.perf.cold_start import ColdStart, StartTiers, cold_start, start_tiers
from llmscale.perf.step_time import DecodeAffine, PerfModel, StepCost, get_perf_model
from llmscale.precision import Precision, precision_of

__all__ = [
    "GPUS",
    "MODELS",
    "ColdStart",
    "DecodeAffine",
    "GpuSpec",
    "ModelSpec",
    "PerfModel",
    "Precision",
    "StartTiers",
    "StepCost",
    "cold_start",
    "get_gpu",
    "get_model",
    "get_perf_model",
    "precision_of",
    "start_tiers",
]
