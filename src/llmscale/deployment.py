"""What a policy may know about the deployment it scales, besides signals: one frozen value.

The backtest builds it from its settings (:meth:`llmscale.backtest.runner.BacktestSettings.deployment`),
``llmscale run`` from its configuration (:func:`llmscale.config.deployment_of`); every policy factory
and the guard merge read it, so a policy plans alike in both. It replaced a ``PolicyContext`` whose
engine settings travelled in a dict of magic keys (three in the backtest, one live: live ``slo``
planned with 256 sequences and no client time-out whatever the target ran).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol, runtime_checkable

from llmscale.guards import GuardConfig

if TYPE_CHECKING:
    from llmscale.mix.prices import GpuPrices
    from llmscale.perf.profile import FactorScale
    from llmscale.precision import Precision

__all__ = ["DEFAULT_DEPLOYMENT", "Deployment", "GuardOverriding", "guard_config"]


@dataclass(frozen=True)
class Deployment:
    """Model, GPU, TP, engine settings, client time-out, SLOs and bounds of one scaled target.

    Defaults are vLLM V1's scheduler defaults on Llama-3-8B / H100 with the backtest's SLOs.
    They are the one statement of the default target: :data:`DEFAULT_DEPLOYMENT` carries them to
    the backtest's settings, ``run``'s configuration, the policies' own configs and the command
    line's option defaults (tests/architecture/test_facts.py checks each reads them from here).
    """

    min_replicas: int = 1
    max_replicas: int = 100
    #: replicas at the start (the backtest's warm fleet; live: ``min_replicas``); ``static``'s default
    initial_replicas: int = 1
    slo_ttft_s: float = 2.0
    slo_tpot_s: float = 0.1
    #: length-aware TTFT SLO: seconds more per 1,000 prompt tokens (0: one target for every request)
    slo_ttft_per_1k_tokens_s: float = 0.0
    model: str = "llama-3-8b"
    gpu: str = "h100-80gb"
    tp: int = 1
    #: cold start of a new replica, seconds (pending + loading + warmup): the simulator's default
    #: lifecycle, 60 + 20 + 10 s (``sim.SimConfig``), so a backtest without
    #: ``with_cold_start()`` plans with the fleet it runs. ``run`` and ``with_cold_start()`` use
    #: the catalogue's published figure for the model and GPU instead (Llama-3-8B / H100: 108 s).
    cold_start_s: float = 90.0
    #: waking a replica from vLLM level-1 sleep, seconds (a standby pool's start tier;
    #: :func:`llmscale.perf.start_tiers`: 1.6 s for Llama-3-8B on an H100)
    wake_s: float = 2.0
    #: path of a calibration profile (``llmscale calibrate``) for the step-time model, or None
    calibration: str | None = None
    #: multipliers on the profile's factors from the live controller's online drift adjustment
    #: (``drift.adapt``; :mod:`llmscale.perf.drift`), or None: the profile as written
    perf_scale: FactorScale | None = None
    #: the engine's scheduler settings (vLLM's ``--max-num-seqs``, ``--max-num-batched-tokens``)
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    #: the clients' time-out, seconds: a request still unanswered after it is abandoned (None: never)
    client_timeout_s: float | None = None
    #: GPU types a mixed fleet may hold (``backtest --gpus``; () = ``gpu`` alone): what ``gpu-mix``
    #: chooses among
    gpus: tuple[str, ...] = ()
    #: prices per GPU-hour and limits per type (:class:`llmscale.mix.prices.GpuPrices`; None: the
    #: cited defaults, no limits)
    gpu_prices: GpuPrices | None = None
    #: the served model's number formats, as vLLM names its arguments (``--dtype``,
    #: ``--quantization``, ``--kv-cache-dtype``; :mod:`llmscale.precision`): bf16 throughout
    #: by default; ``quantization="fp8"`` halves the linear weights' bytes, ``kv_cache_dtype="fp8"``
    #: the KV cache's
    dtype: str = "auto"
    quantization: str = "none"
    kv_cache_dtype: str = "auto"

    @property
    def precision(self) -> Precision:
        """The validated :class:`~llmscale.precision.Precision` (ConfigError if a name is unknown)."""
        from llmscale.precision import precision_of

        return precision_of(self.dtype, self.kv_cache_dtype, self.quantization)


#: the default target's facts, read wherever a default model, GPU, SLO, cold start or bound is needed
DEFAULT_DEPLOYMENT: Final = Deployment()


@runtime_checkable
class GuardOverriding(Protocol):
    """A policy that declares guard settings it needs (its documented cooldowns, a GPU budget):
    field values of :class:`~llmscale.guards.GuardConfig`, merged by :func:`guard_config`."""

    @property
    def guard_overrides(self) -> Mapping[str, Any]: ...


def guard_config(deployment: Deployment, policy: Any, user: Mapping[str, Any] | None = None) -> GuardConfig:
    """The one place guard settings are merged: the deployment's bounds and GPUs per replica, then
    what ``policy`` declares it needs (its ``guard_overrides``), then the user's (``guards:``).

    Raises ConfigError for an unknown guard name or an invalid combination.
    """
    base = GuardConfig(deployment.min_replicas, deployment.max_replicas, gpus_per_replica=deployment.tp)
    overrides = policy.guard_overrides if isinstance(policy, GuardOverriding) else {}
    return base.merged(overrides or {}).merged(user or {})
