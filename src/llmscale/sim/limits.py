"""The longest request a simulated replica admits, and which requests exceed it.

vLLM's OpenAI server refuses a request whose prompt tokens plus ``max_tokens``
exceed ``max_model_len`` with HTTP 400 ("This model's maximum context length
is 8192 tokens. However, you requested 8193 tokens ..."), before the request
reaches the engine; ``prompt + max_tokens == max_model_len`` is served (vLLM's
tests/v1/e2e/test_context_length.py runs 2047 + 1 on a 2048 model).
``max_model_len`` defaults to the model's trained context, and vLLM refuses to
*start* when one sequence of that length does not fit the KV cache ("The
model's max seq len (131072) is larger than the maximum number of tokens that
can be stored in KV cache (25648)", vllm-project/vllm#2163): such a deployment
runs with ``--max-model-len`` lowered to what fits.

The simulator's fleet (:meth:`Fleet._arrive`, :meth:`Fleet.submit`) applies
exactly that: a request is rejected when ``input + output`` exceeds
``max_model_len`` or needs more KV blocks than one replica has, i.e. when it
exceeds :func:`admitted_tokens`. Everything outside the fleet (the backtest's
warning and sizing, the emulator's 400 message) reads the limit from here, so
the two cannot drift apart (tests/backtest/test_context_limit.py checks the
mask below against the fleet's own rejections).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from llmscale.sim.replica import BLOCK_TOKENS

__all__ = ["ContextLimit", "context_limit", "exceeds_context"]


@dataclass(frozen=True)
class ContextLimit:
    """One replica's request-length limit, in tokens of prompt + output.

    ``max_model_len_tokens``: vLLM's ``max_model_len`` as configured (the
    model's trained context unless set). ``kv_pool_tokens``: tokens one
    replica's KV pool holds (blocks x 16). The replica admits requests up to
    the smaller of the two (:attr:`admitted_tokens`).
    """

    max_model_len_tokens: int
    kv_pool_tokens: int

    @property
    def admitted_tokens(self) -> int:
        """The longest request (prompt + max_tokens) the replica serves; longer ones get HTTP 400."""
        return min(self.max_model_len_tokens, self.kv_pool_tokens)

    @property
    def kv_bound(self) -> bool:
        """True when the KV pool, not max_model_len, sets the limit (vLLM would not start unlowered)."""
        return self.kv_pool_tokens < self.max_model_len_tokens


def context_limit(fleet: Any) -> ContextLimit:
    """The limit a :class:`~llmscale.sim.fleet.Fleet` applies on arrival (its two fields, read once)."""
    return ContextLimit(int(fleet.max_model_len), int(fleet.total_blocks) * BLOCK_TOKENS)


def exceeds_context(
    input_tokens: npt.ArrayLike, output_tokens: npt.ArrayLike, limit_tokens: int
) -> npt.NDArray[np.bool_]:
    """Per request: True when prompt + output tokens exceed ``limit_tokens`` (vLLM's 400 rule)."""
    need = np.asarray(input_tokens, dtype=np.int64) + np.asarray(output_tokens, dtype=np.int64)
    over: npt.NDArray[np.bool_] = need > limit_tokens
    return over
