"""A calibration profile: the committed model scaled to one user's engine, and how well it fits.

``llmscale calibrate`` fits factors to a user's own measurements (closed batches, a
``vllm bench serve`` result, or a live fleet's histograms) and writes them with the error at
every input point. The factors scale the physics rather than the answers, so a profile fitted
on a few batch sizes and lengths carries over to others. Each has a physical range
(:data:`FACTORS`); the rate factors are further capped so that no step outruns its GPU's data
sheet (:mod:`llmscale.perf.bounds`, checked when a profile is loaded):

* ``bandwidth`` multiplies every achieved HBM bandwidth (weight streaming, element-wise
  kernels, and KV reads): a different memory clock or GEMV kernel;
* ``kv`` multiplies the KV-cache read bandwidth of decode attention on top of ``bandwidth``:
  an engine's own paged-attention kernel;
* ``kv_reread`` is the share of a grouped-query model's per-query-head KV re-reads that reach
  HBM (vLLM 2024: 0.18; a kernel that reads each KV head once, as TensorRT-LLM's: 0); not a
  multiplier, and without effect on a model whose KV heads equal its query heads;
* ``compute`` multiplies the sustained FLOP rate of GEMMs and attention: prefill speed;
* ``host`` multiplies the engine's per-iteration host work and the fixed time per kernel: a
  C++ runtime (TensorRT-LLM) or a leaner scheduler (vLLM V1) shows here;
* ``per_seq`` multiplies the per-sequence host work (scheduling, sampling, detokenising) on
  top of ``host``: what makes a step's time grow with the batch beyond KV and FLOPs;
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
from llmscale.ranges import finite_number, shown_value

__all__ = [
    "FACTORS",
    "FACTOR_NAMES",
    "FACTOR_SPECS",
    "PROFILE_FACTOR_NAMES",
    "CalibrationProfile",
    "FactorScale",
    "FactorSpec",
    "PointError",
    "load_profile",
    "profile_coefficients",
    "profile_factors",
    "validate_factors",
    "within_data_sheet",
]

PROFILE_FORMAT = "llmscale calibration profile v1"
#: The factors the live drift adjustment multiplies (:class:`FactorScale`), in vector order.
FACTOR_NAMES = ("bandwidth", "compute", "host", "comm")


@dataclass(frozen=True, slots=True)
class FactorSpec:
    """One factor of a profile: what it scales, its physical range and its neutral value."""

    name: str
    help: str
    #: physical range; the rate factors are further capped by the data sheet (perf.bounds)
    lo: float
    hi: float
    #: a multiplier (fitted in log space, neutral 1) or a share (fitted linearly, in [lo, hi])
    multiplier: bool = True


#: Every factor a profile may hold. The ranges say what an engine can be, not what a fit
#: found: an engine streaming weights at under 40% of vLLM's rate (0.36 of an H100's peak) or
#: spending 5x vLLM's host time per step is another model, GPU or measurement, not an engine.
FACTORS: tuple[FactorSpec, ...] = (
    FactorSpec("bandwidth", "HBM bandwidth of weight streaming, element-wise kernels and KV reads", 0.4, 4.0),
    FactorSpec("kv", "KV-cache read bandwidth of decode attention, on top of bandwidth", 0.25, 4.0),
    FactorSpec(
        "kv_reread",
        "share of per-query-head KV re-reads reaching HBM (GQA models)",
        0.0,
        1.0,
        multiplier=False,
    ),
    FactorSpec("compute", "sustained FLOP rate of GEMMs and attention (prefill)", 0.4, 4.0),
    FactorSpec("host", "per-iteration host time and fixed time per kernel", 0.05, 5.0),
    FactorSpec("per_seq", "per-sequence host time (scheduling, sampling), on top of host", 0.05, 5.0),
    FactorSpec("comm", "tensor-parallel all-reduce time", 0.2, 5.0),
)
FACTOR_SPECS: Mapping[str, FactorSpec] = MappingProxyType({f.name: f for f in FACTORS})
PROFILE_FACTOR_NAMES = tuple(f.name for f in FACTORS)


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
        """``factors`` (a profile's; missing ones are 1) times these multipliers (others kept)."""
        out = {k: float(v) for k, v in factors.items()}
        out.update({name: float(factors.get(name, 1.0)) * getattr(self, name) for name in FACTOR_NAMES})
        return out

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

    #: per fitted factor: its standard error (multiplicative, e.g. 0.03 = +-3%) and the labels
    #: of the points that determine it most; factors not fitted are absent
    uncertainty: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: what the fit found worth saying (rows refused, factors left at their prior, a held-out
    #: error worse than the default profile's)
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        validate_factors(self.factors, self.gpu, "factors")

    def factor(self, name: str) -> float:
        """A multiplier's value (1 when the profile does not hold it)."""
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
            "factors": {k: round(float(v), 6) for k, v in self.factors.items()},
            "uncertainty": {k: dict(v) for k, v in self.uncertainty.items()},
            "notes": list(self.notes),
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


def validate_factors(factors: Mapping[str, Any], gpu: str, where: str) -> None:
    """Each factor known, a finite number in its physical range, and within the data sheet of
    ``gpu``'s family (every family when ``gpu`` is not a catalogue GPU); errors name ``where``."""
    from llmscale.perf.bounds import check_physical
    from llmscale.perf.catalogue import get_gpu

    unknown = set(factors) - set(PROFILE_FACTOR_NAMES)
    if unknown:
        raise ConfigError(f"{where}: unknown {sorted(unknown)}; known: {', '.join(PROFILE_FACTOR_NAMES)}")
    for name, v in factors.items():
        spec = FACTOR_SPECS[name]
        if finite_number(v) is None:
            raise ConfigError(
                f"{where}.{name} = {shown_value(v)}, must be a finite number in [{spec.lo}, {spec.hi}]"
            )
        if not spec.lo <= v <= spec.hi:
            raise ConfigError(
                f"{where}.{name} = {v!r}, must be in [{spec.lo}, {spec.hi}] ({spec.help}): a value "
                "outside describes another model, GPU or measurement, not another engine"
            )
    base = load_coefficients()
    try:
        families = [get_gpu(gpu).family]
    except ConfigError:
        families = sorted(base.families)
    check_physical(base, factors, families, where)


def scale_coefficients(c: PerfCoefficients, factors: Mapping[str, float]) -> PerfCoefficients:
    """Apply a profile's factors (:data:`FACTORS`) to every GPU family and serving stack."""
    bw = float(factors.get("bandwidth", 1.0))
    kv = float(factors.get("kv", 1.0))
    fl = float(factors.get("compute", 1.0))
    host = float(factors.get("host", 1.0))
    per_seq = host * float(factors.get("per_seq", 1.0))
    comm = float(factors.get("comm", 1.0))
    reread = factors.get("kv_reread")
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
            per_seq_s=s.per_seq_s * per_seq,
            prefill_iter_s=s.prefill_iter_s * host,
            sample_s_per_logit=s.sample_s_per_logit * per_seq,
            sample_s_per_vocab=s.sample_s_per_vocab * host,
            allreduce_latency_s=s.allreduce_latency_s * comm,
            allreduce_peer_s=s.allreduce_peer_s * comm,
            gqa_kv_reread=s.gqa_kv_reread if reread is None else float(reread),
        )
        for name, s in c.stacks.items()
    }
    return replace(
        c,
        families=MappingProxyType(fams),
        stacks=MappingProxyType(stacks),
        attn_prefill_flops_eff=c.attn_prefill_flops_eff * fl,
        attn_kv_bw_eff=c.attn_kv_bw_eff * bw * kv,
        attn_kernel_s=c.attn_kernel_s * host,
        cpu_iter_s=c.cpu_iter_s * host,
        cpu_per_seq_s=c.cpu_per_seq_s * per_seq,
        cpu_tp_s=c.cpu_tp_s * host,
    )


def _num(d: Mapping[str, Any], key: str, where: str) -> float:
    v = d.get(key)
    f = finite_number(v)
    if f is None:
        raise ConfigError(f"{where}: {key} = {shown_value(v)}, must be a finite number")
    return f


def profile_from_dict(d: Any, where: str) -> CalibrationProfile:
    """Validate a parsed profile document; errors name ``where`` (the file) and the field."""
    if not isinstance(d, dict):
        raise ConfigError(f"{where}: a calibration profile is a mapping, got {type(d).__name__}")
    if d.get("format") != PROFILE_FORMAT:
        raise ConfigError(f"{where}: format = {d.get('format')!r}, expected {PROFILE_FORMAT!r}")
    factors = d.get("factors")
    if not isinstance(factors, dict):
        raise ConfigError(f"{where}: factors must be a mapping of {', '.join(PROFILE_FACTOR_NAMES)}")
    for k in factors:
        if k not in PROFILE_FACTOR_NAMES:
            raise ConfigError(f"{where}: factors.{k} is unknown; known: {', '.join(PROFILE_FACTOR_NAMES)}")
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
    """The factors of the profile at ``path``: the drift's four always (1 if absent), others as written."""
    if path is None:
        return {name: 1.0 for name in FACTOR_NAMES}
    profile = load_profile(path)
    out = {k: float(v) for k, v in profile.factors.items()}
    out.update({name: profile.factor(name) for name in FACTOR_NAMES})
    return out


def within_data_sheet(factors: Mapping[str, float], family: str | None = None) -> dict[str, float]:
    """``factors`` with each rate factor lowered to the data-sheet ceiling of GPU ``family``
    (of every family when None: the strictest).

    For the live drift adjustment (:class:`FactorScale`), which moves a profile's factors by
    up to 2x: an engine measured faster than its model is not faster than its GPU, so the
    adjustment stops at the ceiling (:func:`llmscale.perf.bounds.factor_ceilings`).
    """
    from llmscale.perf.bounds import factor_ceilings

    base = load_coefficients()
    families = sorted(base.families) if family is None else [family]
    out = dict(factors)
    for name in ("compute", "bandwidth", "kv"):
        caps = factor_ceilings(base, families, out)
        out[name] = min(float(out.get(name, 1.0)), caps[name])
    return out


def profile_coefficients(
    path: str | Path | None, scale: FactorScale | None = None, *, family: str | None = None
) -> PerfCoefficients:
    """The committed coefficients, scaled by the profile at ``path`` when one is given, then by ``scale``
    (kept within the data sheet of GPU ``family``; of every family when None)."""
    if scale is not None and not scale.identity:
        factors = within_data_sheet(scale.applied_to(profile_factors(path)), family)
        return scale_coefficients(load_coefficients(), factors)
    if path is None:
        return load_coefficients()
    return load_profile(path).coefficients()
