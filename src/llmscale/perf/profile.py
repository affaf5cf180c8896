"""A calibration profile: the committed model scaled to one user's engine, and how well it fits.

``llmscale calibrate`` fits four factors to a user's own measurements (closed batches, a
``vllm bench serve`` result, or a live fleet's histograms) and writes them with the error at
every input point. The factors scale the physics rather than the answers, so a profile fitted
on a few batch sizes and lengths carries over to others:

* ``bandwidth`` multiplies every achieved HBM bandwidth (weight streaming, KV reads,
  element-wise kernels): a faster decode kernel or a different memory clock;
* ``compute`` multiplies the sustained FLOP rate of GEMMs and attention: prefill speed;
* ``host`` multiplies the engine's per-iteration and per-sequence host work and the fixed
  time per kernel: a C++ runtime (TensorRT-LLM) or a leaner scheduler (vLLM V1) shows here;
* ``comm`` multiplies tensor-parallel all-reduce times (only fitted when the data has TP > 1).

The profile also records the engine's scheduler settings it was measured with, which the
backtest and the emulator can reuse. ``backtest --calibration``, ``emulate --calibration``
and ``run`` (``target.calibration``) build their step-time model from
:meth:`CalibrationProfile.coefficients`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

from llmscale.errors import ConfigError
from llmscale.perf.coefficients import PerfCoefficients, load_coefficients

__all__ = [
    "FACTOR_NAMES",
    "CalibrationProfile",
    "FactorScale",
    "PointError",
    "load_profile",
    "profile_coefficients",
    "profile_factors",
]

PROFILE_FORMAT = "llmscale calibration profile v1"
#: The fitted scale factors, in vector order.
FACTOR_NAMES = ("bandwidth", "compute", "host", "comm")
#: A factor outside this range means the data describe another model or GPU, not another engine.
FACTOR_RANGE = (0.1, 10.0)


@dataclass(frozen=True, slots=True)
class FactorScale:
    """Multipliers on a profile's four factors (1: as calibrated), hashable so models can be memoised.

    The live controller's online drift adjustment (:mod:`llmscale.perf.drift`) hands one to the
    capacity-model policies: the factors they plan with are the profile's (or 1 without a
    profile) times these. Scaling is multiplicative in every factor (:func:`scale_coefficients`
    multiplies or divides each coefficient by one factor), so a profile's ``bandwidth: 0.8``
    adjusted by ``bandwidth=0.9`` is exactly ``bandwidth: 0.72``.
    """

    bandwidth: float = 1.0
    compute: float = 1.0
    host: float = 1.0
    comm: float = 1.0

    def __post_init__(self) -> None:
        for name in FACTOR_NAMES:
            v = getattr(self, name)
            if not math.isfinite(v) or v <= 0.0:
                raise ConfigError(f"factor scale {name} = {v!r}, must be a finite number > 0")

    def as_dict(self) -> dict[str, float]:
        return {name: float(getattr(self, name)) for name in FACTOR_NAMES}

    def applied_to(self, factors: Mapping[str, float]) -> dict[str, float]:
        """``factors`` (a profile's; missing ones are 1) times these multipliers."""
        return {name: float(factors.get(name, 1.0)) * getattr(self, name) for name in FACTOR_NAMES}

    @property
    def identity(self) -> bool:
        return all(getattr(self, name) == 1.0 for name in FACTOR_NAMES)


@dataclass(frozen=True, slots=True)
class PointError:
    """One input measurement against the calibrated prediction."""

    label: str
    measured_s: float
    predicted_s: float
    #: predicted before calibration (the committed model), for the table
    uncalibrated_s: float
    fitted: bool = True

    @property
    def error_pct(self) -> float:
        return (self.predicted_s / self.measured_s - 1.0) * 100.0


@dataclass(frozen=True)
class CalibrationProfile:
    """Scale factors on the committed coefficients, with provenance and per-point errors."""

    model: str
    gpu: str
    tp: int
    factors: Mapping[str, float]
    #: scheduler settings of the measured engine (EngineSettings fields)
    engine: Mapping[str, Any] = field(default_factory=dict)
    engine_name: str = "unknown"
    sources: tuple[str, ...] = ()
    points: tuple[PointError, ...] = ()

    def __post_init__(self) -> None:
        lo, hi = FACTOR_RANGE
        for name in FACTOR_NAMES:
            v = self.factors.get(name, 1.0)
            if (
                not isinstance(v, int | float)
                or isinstance(v, bool)
                or not math.isfinite(v)
                or not lo <= v <= hi
            ):
                raise ConfigError(f"factors.{name} = {v!r}, must be a number in [{lo}, {hi}]")
        unknown = set(self.factors) - set(FACTOR_NAMES)
        if unknown:
            raise ConfigError(f"factors: unknown {sorted(unknown)}; known: {', '.join(FACTOR_NAMES)}")

    def factor(self, name: str) -> float:
        return float(self.factors.get(name, 1.0))

    def coefficients(self, base: PerfCoefficients | None = None) -> PerfCoefficients:
        """``base`` (the committed coefficients) with this profile's factors applied."""
        return scale_coefficients(base or load_coefficients(), self.factors)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": PROFILE_FORMAT,
            "model": self.model,
            "gpu": self.gpu,
            "tp": self.tp,
            "engine_name": self.engine_name,
            "engine": dict(self.engine),
            "factors": {k: round(self.factor(k), 6) for k in FACTOR_NAMES},
            "sources": list(self.sources),
            "points": [
                {
                    "label": p.label,
                    "measured_s": round(p.measured_s, 6),
                    "predicted_s": round(p.predicted_s, 6),
                    "uncalibrated_s": round(p.uncalibrated_s, 6),
                    "error_pct": round(p.error_pct, 2),
                    "fitted": p.fitted,
                }
                for p in self.points
            ],
        }

    def save(self, path: Path) -> None:
        import yaml

        try:
            path.write_text(yaml.safe_dump(self.to_dict(), sort_keys=False), encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"{path}: cannot write the profile: {exc.strerror or exc}") from exc


def scale_coefficients(c: PerfCoefficients, factors: Mapping[str, float]) -> PerfCoefficients:
    """Apply bandwidth / compute / host / comm factors to every GPU family and serving stack."""
    bw = float(factors.get("bandwidth", 1.0))
    fl = float(factors.get("compute", 1.0))
    host = float(factors.get("host", 1.0))
    comm = float(factors.get("comm", 1.0))
    fams = {
        name: replace(
            f,
            gemm_flops_eff=f.gemm_flops_eff * fl,
            weight_bw_eff=f.weight_bw_eff * bw,
            act_bw_eff=f.act_bw_eff * bw,
            gemm_kernel_s=f.gemm_kernel_s * host,
            elementwise_kernel_s=f.elementwise_kernel_s * host,
            launch_per_layer_s=f.launch_per_layer_s * host,
            allreduce_latency_s=MappingProxyType({k: v * comm for k, v in f.allreduce_latency_s.items()}),
            allreduce_bw_bytes_s=MappingProxyType({k: v / comm for k, v in f.allreduce_bw_bytes_s.items()}),
        )
        for name, f in c.families.items()
    }
    stacks = {
        name: replace(
            s,
            iter_s=s.iter_s * host,
            per_seq_s=s.per_seq_s * host,
            prefill_iter_s=s.prefill_iter_s * host,
            sample_s_per_logit=s.sample_s_per_logit * host,
            allreduce_latency_s=s.allreduce_latency_s * comm,
        )
        for name, s in c.stacks.items()
    }
    return replace(
        c,
        families=MappingProxyType(fams),
        stacks=MappingProxyType(stacks),
        attn_prefill_flops_eff=c.attn_prefill_flops_eff * fl,
        attn_kv_bw_eff=c.attn_kv_bw_eff * bw,
        attn_kernel_s=c.attn_kernel_s * host,
        cpu_iter_s=c.cpu_iter_s * host,
        cpu_per_seq_s=c.cpu_per_seq_s * host,
        cpu_tp_s=c.cpu_tp_s * host,
    )


def _num(d: Mapping[str, Any], key: str, where: str) -> float:
    v = d.get(key)
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise ConfigError(f"{where}: {key} = {v!r}, must be a finite number")
    return float(v)


def profile_from_dict(d: Any, where: str) -> CalibrationProfile:
    """Validate a parsed profile document; errors name ``where`` (the file) and the field."""
    if not isinstance(d, dict):
        raise ConfigError(f"{where}: a calibration profile is a mapping, got {type(d).__name__}")
    if d.get("format") != PROFILE_FORMAT:
        raise ConfigError(f"{where}: format = {d.get('format')!r}, expected {PROFILE_FORMAT!r}")
    factors = d.get("factors")
    if not isinstance(factors, dict):
        raise ConfigError(f"{where}: factors must be a mapping of {', '.join(FACTOR_NAMES)}")
    for k in factors:
        if k not in FACTOR_NAMES:
            raise ConfigError(f"{where}: factors.{k} is unknown; known: {', '.join(FACTOR_NAMES)}")
    vals = {k: _num(factors, k, f"{where}: factors") for k in factors}
    tp = d.get("tp")
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise ConfigError(f"{where}: tp = {tp!r}, must be a positive integer")
    engine = d.get("engine") or {}
    if not isinstance(engine, dict):
        raise ConfigError(f"{where}: engine must be a mapping")
    _check_engine(engine, where)
    try:
        return CalibrationProfile(
            model=str(d.get("model", "")),
            gpu=str(d.get("gpu", "")),
            tp=tp,
            factors=MappingProxyType(vals),
            engine=MappingProxyType(dict(engine)),
            engine_name=str(d.get("engine_name", "unknown")),
            sources=tuple(str(s) for s in d.get("sources") or ()),
        )
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from exc


#: the engine settings a profile records, each with its type and least value (a token budget of 0
#: is vLLM V0's "the model's context" without chunked prefill, as `calibrate --no-chunked-prefill`
#: writes it)
_ENGINE_FIELDS: dict[str, tuple[type, int]] = {
    "max_num_seqs": (int, 1),
    "max_num_batched_tokens": (int, 0),
    "chunked_prefill": (bool, 0),
}


def _check_engine(engine: Mapping[str, Any], where: str) -> None:
    """Strict types: ``chunked_prefill: "no"`` was read with ``bool()`` and meant True."""
    for key, value in engine.items():
        if key not in _ENGINE_FIELDS:
            raise ConfigError(f"{where}: engine.{key} is unknown; known: {', '.join(_ENGINE_FIELDS)}")
        kind, least = _ENGINE_FIELDS[key]
        if kind is bool:
            if not isinstance(value, bool):
                raise ConfigError(f"{where}: engine.{key} = {value!r}, must be true or false")
        elif isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ConfigError(f"{where}: engine.{key} = {value!r}, must be an integer >= {least}")


def check_profile_target(path: str | Path, model: str, gpu: str, tp: int) -> None:
    """The profile at ``path`` was fitted on ``model`` / ``gpu`` / ``tp``; ConfigError naming both if not.

    A profile's factors describe one engine on one GPU at one TP degree: a Llama-3-8B / H100 / TP1
    profile applied to a 70B on A100s at TP 4 scaled the wrong model without a word. Names are
    compared as the catalogue resolves them (``meta-llama/Meta-Llama-3-8B`` is ``llama-3-8b``); a
    profile that names no model or GPU is not checked on that field.
    """
    from llmscale.perf.catalogue import get_gpu, get_model

    profile = load_profile(path)

    def canon(name: str, get: Any) -> str:
        try:
            return str(get(name).name)
        except ConfigError:
            return name.strip().lower()

    mismatched = []
    if profile.model and canon(profile.model, get_model) != canon(model, get_model):
        mismatched.append(("model", profile.model, model))
    if profile.gpu and canon(profile.gpu, get_gpu) != canon(gpu, get_gpu):
        mismatched.append(("GPU", profile.gpu, gpu))
    if profile.tp != int(tp):
        mismatched.append(("TP", str(profile.tp), str(tp)))
    if mismatched:
        said = ", ".join(f"{what} {theirs}" for what, theirs, _ in mismatched)
        ours = ", ".join(f"{what} {mine}" for what, _, mine in mismatched)
        raise ConfigError(
            f"{path}: calibration profile fitted on {said}, but this run is {ours}; "
            "calibrate on the deployment you run, or drop the profile"
        )


@cache
def _load(path: str, mtime_ns: int) -> CalibrationProfile:
    from llmscale.documents import read_yaml_file

    return profile_from_dict(read_yaml_file(path, "the calibration profile"), path)


def load_profile(path: str | Path) -> CalibrationProfile:
    """Read and validate a profile written by ``llmscale calibrate`` (cached per file version)."""
    from llmscale.edge import MAX_DOCUMENT_BYTES, InputFileError, check_input_file

    p = Path(path)
    try:
        check_input_file(p, MAX_DOCUMENT_BYTES)
        mtime = p.stat().st_mtime_ns
    except InputFileError as exc:
        raise ConfigError(f"{exc.path}: cannot read the calibration profile: {exc.problem}") from exc
    except OSError as exc:
        raise ConfigError(f"{p}: calibration profile not found ({exc.strerror or exc})") from exc
    return _load(str(p), mtime)


def profile_factors(path: str | Path | None) -> dict[str, float]:
    """The four factors of the profile at ``path`` (all 1 without one)."""
    if path is None:
        return {name: 1.0 for name in FACTOR_NAMES}
    profile = load_profile(path)
    return {name: profile.factor(name) for name in FACTOR_NAMES}


def profile_coefficients(path: str | Path | None, scale: FactorScale | None = None) -> PerfCoefficients:
    """The committed coefficients, scaled by the profile at ``path`` when one is given, then by ``scale``."""
    if scale is not None and not scale.identity:
        return scale_coefficients(load_coefficients(), scale.applied_to(profile_factors(path)))
    if path is None:
        return load_coefficients()
    return load_profile(path).coefficients()
