"""What one emulated replica's vLLM counts per finished request: how it ended, its token counts.

vLLM observes these when a request finishes (vllm/v1/metrics/loggers.py:
``vllm:request_success_total{finished_reason}``, ``vllm:request_prompt_tokens``,
``vllm:request_generation_tokens``), aborted requests included. The simulator's
replica does not keep them (the backtest never reads them), so the emulator
records them for the requests its HTTP clients sent, as each one ends.
"""

from __future__ import annotations

from llmscale.metrics.names import vllm_1_2_5_buckets
from llmscale.sim.histogram import BucketHistogram

__all__ = ["FINISHED_REASONS", "RequestStats"]

#: vLLM's finish reasons the emulator produces, as its metrics label them (FINISH_REASON_STRINGS
#: of vllm/v1/engine/__init__.py: stop, length, abort; newer vLLMs add error and repetition).
FINISHED_REASONS = ("stop", "length", "abort")


class RequestStats:
    """One replica's finished requests. Buckets: vLLM's 1-2-5 series up to ``max_model_len``."""

    def __init__(self, max_model_len: int) -> None:
        bounds = tuple(float(b) for b in vllm_1_2_5_buckets(max_model_len))
        self.finished = dict.fromkeys(FINISHED_REASONS, 0)
        self.prompt_tokens = BucketHistogram(bounds)
        self.generation_tokens = BucketHistogram(bounds)

    def record(self, reason: str, prompt_tokens: int, generation_tokens: int) -> None:
        """A request ended for ``reason`` (one of FINISHED_REASONS) after ``generation_tokens``."""
        if reason not in self.finished:
            raise ValueError(f"finished_reason {reason!r} is not one of {FINISHED_REASONS}")
        self.finished[reason] += 1
        self.prompt_tokens.observe(float(prompt_tokens))
        self.generation_tokens.observe(float(generation_tokens))
