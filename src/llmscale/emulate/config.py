"""Settings of an emulated fleet, validated once at the edge."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from llmscale.deployment import DEFAULT_DEPLOYMENT
from llmscale.emulate.versions import DEFAULT_VLLM_VERSION, parse_vllm_version
from llmscale.errors import ConfigError
from llmscale.precision import Precision, precision_of
from llmscale.sim.faults import AdaptiveBatchConfig, HbmGlitch

__all__ = ["ADMIN_TOKEN_ENV", "MIN_ADMIN_TOKEN_CHARS", "EmulateConfig", "admin_token"]

#: Where ``llmscale emulate`` and its clients (the emulate actuator, scrape discovery) read the
#: admin API's bearer token when no token file is given.
ADMIN_TOKEN_ENV = "LLMSCALE_EMULATE_ADMIN_TOKEN"
#: Shortest token accepted: 16 characters of ``secrets.token_urlsafe`` carry 96 bits.
MIN_ADMIN_TOKEN_CHARS = 16


def admin_token(token_file: str | None = None, *, what: str = "token_file") -> str | None:
    """The admin bearer token: ``token_file``'s content (stripped), else ``$LLMSCALE_EMULATE_ADMIN_TOKEN``.

    None when neither is set (the client then sends no token, and an emulate
    whose admin API is on answers 401, which the caller reports). A token file
    that cannot be read or is empty is a ConfigError naming ``what``.
    """
    if token_file is not None:
        from llmscale.edge import MAX_TOKEN_BYTES, InputFileError, read_input_text

        try:
            token = read_input_text(Path(token_file), MAX_TOKEN_BYTES, what="a token").strip()
        except InputFileError as e:
            raise ConfigError(f"{what} {e.path}: cannot read it: {e.problem}") from e
        if not token:
            raise ConfigError(f"{what} {token_file}: the file is empty")
        return token
    return os.environ.get(ADMIN_TOKEN_ENV) or None


@dataclass(frozen=True)
class EmulateConfig:
    """How ``llmscale emulate`` runs. Durations in seconds of simulated time.

    ``port`` is the front door; replica k listens on the next free port above
    it (``port + k`` on a quiet machine). ``port = 0`` lets the OS pick every
    port, which is what tests use; the chosen ports are in the admin API.
    ``time_scale`` is simulated seconds per wall second: 1.0 is real time; 0.5
    makes every simulated latency twice as long on the wall clock.
    Lifecycle durations left as None come from the performance catalogue's
    cold-start model (108 s in all for Llama-3-8B on one H100).

    The admin API (``/admin/*``: scale the fleet, list replicas and scrape
    targets) is off unless ``admin_api``; then every call must carry
    ``Authorization: Bearer <admin_token>`` and one call may add at most
    ``admin_max_scale_up`` replicas. ``tokenizer`` is a local tokenizer.json
    (or a directory holding one, or ``"builtin"`` for the one shipped) to count
    prompt tokens with; None estimates them (see emulate/tokens.py).
    ``vllm_version`` is the vLLM release played: its error body, its metric
    names and what ``/version`` says (emulate/versions.py).
    """

    model: str = DEFAULT_DEPLOYMENT.model
    gpu: str = DEFAULT_DEPLOYMENT.gpu
    tp: int = DEFAULT_DEPLOYMENT.tp
    replicas: int = 1
    host: str = "127.0.0.1"
    port: int = 8000
    time_scale: float = 1.0
    pending_s: float | None = None
    loading_s: float | None = None
    warmup_s: float | None = None
    grace_s: float = 30.0
    timeout_s: float = 60.0
    max_num_seqs: int = 256
    #: vLLM's token budget per iteration and chunked prefill (V1's defaults; see SimConfig)
    max_num_batched_tokens: int = 8192
    chunked_prefill: bool = True
    #: a calibration profile (``llmscale calibrate``) scaling the step-time model, or None
    calibration: str | None = None
    max_replicas: int = 512
    #: ``max_tokens`` when a request does not say (the OpenAI completions default)
    default_max_tokens: int = 16
    #: longest wall-clock pause of the engine loop while requests stream, s
    tick_s: float = 0.01
    served_model_name: str | None = None  # None: the model's Hugging Face id, as vLLM serves it
    seed: int = 0
    tokenizer: str | None = None
    admin_api: bool = False
    admin_token: str | None = field(default=None, repr=False)  # a secret: kept out of reprs and logs
    #: replicas one ``/admin/scale`` call may add (a typo of 1000 for 10 must not start 1000)
    admin_max_scale_up: int = 16
    #: HBM-bandwidth glitch windows, in simulated seconds from the start (seed 004 4.4; sim/faults.py)
    hbm_glitches: tuple[HbmGlitch, ...] = ()
    #: seed 004 4.4's adaptive batch fuse on every replica; None = off
    adaptive_batch: AdaptiveBatchConfig | None = None
    #: vLLM's ``--enable-sleep-mode``: each replica serves ``POST /sleep?level=1``, ``POST /wake_up``
    #: and ``GET /is_sleeping`` (emulate/standby.py), and the admin API ``POST /admin/standby``
    sleep_mode: bool = False
    #: how long waking a level-1 sleeper takes, s of simulated time; None: the catalogue's sleeping
    #: tier (perf.start_tiers: 1.6 s for Llama-3-8B on one H100)
    wake_s: float | None = None
    #: the vLLM release played (emulate/versions.py: 0.10.0 and later)
    vllm_version: str = DEFAULT_VLLM_VERSION
    #: the served number formats, as vLLM's ``--dtype``, ``--quantization`` and
    #: ``--kv-cache-dtype`` (:mod:`llmscale.precision`; docs/fp8.md): bf16 throughout by default
    dtype: str = DEFAULT_DEPLOYMENT.dtype
    quantization: str = DEFAULT_DEPLOYMENT.quantization
    kv_cache_dtype: str = DEFAULT_DEPLOYMENT.kv_cache_dtype

    @property
    def precision(self) -> Precision:
        """The validated :class:`~llmscale.precision.Precision` of the replicas served."""
        return precision_of(self.dtype, self.kv_cache_dtype, self.quantization)

    def __post_init__(self) -> None:
        parse_vllm_version(self.vllm_version)  # a ConfigError naming vllm_version
        self.precision  # a ConfigError naming dtype, quantization or kv_cache_dtype  # noqa: B018
        if not 0 <= self.replicas <= self.max_replicas:
            raise ConfigError(
                f"replicas = {self.replicas}, must be within [0, max_replicas {self.max_replicas}]"
            )
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"port = {self.port}, must be within [0, 65535]")
        # `not (x > 0)` and isfinite, not `x <= 0`: NaN compares false with everything and was
        # accepted (`--pending-s nan` started a fleet whose replicas never became ready).
        if not (math.isfinite(self.time_scale) and self.time_scale > 0):
            raise ConfigError(f"time_scale = {self.time_scale}, must be a finite number > 0")
        for name in ("pending_s", "loading_s", "warmup_s", "wake_s"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise ConfigError(f"{name} = {value}, must be a finite number >= 0")
        if not (math.isfinite(self.grace_s) and self.grace_s >= 0):
            raise ConfigError(f"grace_s = {self.grace_s}, must be a finite number >= 0")
        if not (self.timeout_s > 0):  # inf is fine: no client time-out
            raise ConfigError(f"timeout_s = {self.timeout_s}, must be > 0")
        if self.served_model_name is not None and not self.served_model_name.strip():
            raise ConfigError("served_model_name is empty; omit it to serve the model's Hugging Face id")
        if self.default_max_tokens < 1 or self.max_num_seqs < 1:
            raise ConfigError(
                f"default_max_tokens = {self.default_max_tokens} and max_num_seqs = {self.max_num_seqs} "
                "must be >= 1"
            )
        if not 0.001 <= self.tick_s <= 1.0:
            raise ConfigError(f"tick_s = {self.tick_s}, must be within [0.001, 1.0]")
        if self.admin_max_scale_up < 1:
            raise ConfigError(f"admin_max_scale_up = {self.admin_max_scale_up}, must be >= 1")
        if self.admin_api:
            token = self.admin_token or ""
            if len(token) < MIN_ADMIN_TOKEN_CHARS or token != token.strip():
                raise ConfigError(
                    f"the admin API needs a bearer token of at least {MIN_ADMIN_TOKEN_CHARS} characters "
                    f"without surrounding spaces (--admin-token-file FILE, or the {ADMIN_TOKEN_ENV} "
                    "environment variable); make one with: "
                    'python -c "import secrets; print(secrets.token_urlsafe(32))"'
                )
