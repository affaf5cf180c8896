"""How each simulated replica is configured and how the fleet behaves.

Kept out of the mypyc-compiled modules (setup.py): it is read once per
replica, not on the hot path, and a plain dataclass pickles and copies the
usual way (settings cross process boundaries in parallel backtests).
"""

from __future__ import annotations

from dataclasses import dataclass

from llmscale.errors import ConfigError
from llmscale.sim.faults import AdaptiveBatchConfig, HbmGlitch

__all__ = ["SimConfig"]


@dataclass(frozen=True)
class SimConfig:
    """How each replica is configured and how the fleet behaves. Durations in seconds."""

    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    #: Split prompts into chunks that share iterations with decodes (vLLM V1 always; V0 opt-in).
    #: Off: whole prompts in prefill-only iterations, max_num_batched_tokens >= max_model_len.
    chunked_prefill: bool = True
    #: keep vLLM's tokens-per-iteration histogram of mixed iterations (the emulator exports it)
    step_token_stats: bool = False
    gpu_memory_utilization: float = 0.9
    max_model_len: int | None = None  # None: the model's context length
    pending_s: float = 60.0
    loading_s: float = 20.0
    warmup_s: float = 10.0
    #: the warm-node start tier (image and weights cached on a kept node; perf.start_tiers)
    warm_node_pending_s: float = 5.0
    warm_node_loading_s: float = 20.0
    warm_node_warmup_s: float = 10.0
    #: how long a node outlives its replica, keeping image and weights (0: it goes with it, every
    #: start is cold). Kubernetes' cluster-autoscaler removes a node unneeded for 10 minutes
    #: (--scale-down-unneeded-time, default 10m): 600 s models a cluster-autoscaled node pool
    node_keep_s: float = 0.0
    #: the node pool (off while both are None: every start finds a node, the backtest before the
    #: pool): a start no kept node takes waits ``node_start_s`` for a new node (Phase.NODE_PENDING),
    #: then starts cold. A new GPU node takes minutes (perf.cold_start.NODE_PROVISION_S, 120 s)
    node_start_s: float | None = None
    #: most nodes the pool holds: provisioning, running a replica (serving, starting or asleep) or
    #: kept (``node_keep_s``). A start beyond waits unschedulable, holding no GPU, until a
    #: replica's node frees; None = unbounded. One replica per node
    max_nodes: int | None = None
    #: waking a replica from vLLM level-1 sleep (the standby pool's start tier; perf.start_tiers)
    wake_s: float = 2.0
    grace_s: float = 30.0  # Kubernetes' default terminationGracePeriodSeconds
    timeout_s: float = 60.0  # a client gives up after this long without a first token
    max_queue: int | None = None  # gateway queue bound while no replica is ready; None = unbounded
    router: str = "least-outstanding"
    step_noise: float = 0.0  # sigma of a lognormal factor on step time, drawn once per jump
    #: cap on decode steps per jump; None = unbounded. 1 steps token by token (the benchmark's baseline)
    max_jump_steps: int | None = None
    seed: int = 0
    #: windows of HBM-bandwidth glitches (seed 004 4.4; :mod:`llmscale.sim.faults`); () = none
    hbm_glitches: tuple[HbmGlitch, ...] = ()
    #: seed 004 4.4's adaptive batching fuse on every replica; None = off (vLLM's fixed max_num_seqs)
    adaptive_batch: AdaptiveBatchConfig | None = None

    def __post_init__(self) -> None:
        if self.max_num_seqs < 1:
            raise ConfigError(f"max_num_seqs = {self.max_num_seqs}, must be >= 1")
        if self.max_num_batched_tokens < 1:
            raise ConfigError(f"max_num_batched_tokens = {self.max_num_batched_tokens}, must be >= 1")
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ConfigError(f"gpu_memory_utilization = {self.gpu_memory_utilization}, must be in (0, 1]")
        for name in (
            "pending_s",
            "loading_s",
            "warmup_s",
            "warm_node_pending_s",
            "warm_node_loading_s",
            "warm_node_warmup_s",
            "node_keep_s",
            "wake_s",
            "grace_s",
            "timeout_s",
            "step_noise",
        ):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} = {getattr(self, name)}, must be >= 0")
        if self.node_start_s is not None and not 0.0 <= self.node_start_s < float("inf"):
            raise ConfigError(f"node_start_s = {self.node_start_s}, must be >= 0 and finite")
        if self.max_nodes is not None and self.max_nodes < 1:
            raise ConfigError(f"max_nodes = {self.max_nodes}, must be >= 1")
        if not all(isinstance(g, HbmGlitch) for g in self.hbm_glitches):
            raise ConfigError("hbm_glitches must be a tuple of HbmGlitch")
        if self.router not in ("least-outstanding", "round-robin"):
            raise ConfigError(f"router = {self.router!r}, must be 'least-outstanding' or 'round-robin'")

    @property
    def node_pool(self) -> bool:
        """Whether starts wait for nodes (``node_start_s`` or ``max_nodes`` given)."""
        return self.node_start_s is not None or self.max_nodes is not None
