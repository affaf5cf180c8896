"""Settings of an emulated fleet, validated once at the edge."""

from __future__ import annotations

from dataclasses import dataclass

from llmscale.errors import ConfigError

__all__ = ["EmulateConfig"]


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
    """

    model: str = "llama-3-8b"
    gpu: str = "h100-80gb"
    tp: int = 1
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

    def __post_init__(self) -> None:
        if not 0 <= self.replicas <= self.max_replicas:
            raise ConfigError(
                f"replicas = {self.replicas}, must be within [0, max_replicas {self.max_replicas}]"
            )
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"port = {self.port}, must be within [0, 65535]")
        if self.time_scale <= 0:
            raise ConfigError(f"time_scale = {self.time_scale}, must be > 0")
        for name in ("pending_s", "loading_s", "warmup_s"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ConfigError(f"{name} = {value}, must be >= 0")
        if self.grace_s < 0 or self.timeout_s <= 0:
            raise ConfigError(f"grace_s = {self.grace_s} must be >= 0 and timeout_s = {self.timeout_s} > 0")
        if self.default_max_tokens < 1 or self.max_num_seqs < 1:
            raise ConfigError(
                f"default_max_tokens = {self.default_max_tokens} and max_num_seqs = {self.max_num_seqs} "
                "must be >= 1"
            )
        if not 0.001 <= self.tick_s <= 1.0:
            raise ConfigError(f"tick_s = {self.tick_s}, must be within [0.001, 1.0]")
