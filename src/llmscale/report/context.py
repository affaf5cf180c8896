"""Words for the ``context`` facts of a backtest's workload: requests longer than the model admits.

Written from the JSON entry (:meth:`llmscale.backtest.context_check.ContextCheck.as_json`), so
the CLI's warning before a backtest and the report's workload summary say the same thing, and a
report rendered later from a saved ``--json`` file says it too. Plain strings, no markup.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llmscale.backtest.context_check import alternatives_sentence, fmt_share

__all__ = ["context_summary", "context_warning"]


def _limit(ctx: Mapping[str, Any]) -> str:
    admitted = int(ctx["admitted_tokens"])
    max_len = int(ctx["max_model_len_tokens"])
    if admitted < max_len:
        return (
            f"the {admitted:,d} tokens {ctx['model']} admits (its context is {max_len:,d}, but one "
            f"replica's KV cache holds only {int(ctx['kv_pool_tokens']):,d} and vLLM does not start "
            "with a longer --max-model-len)"
        )
    return f"{ctx['model']}'s context of {admitted:,d} tokens"


def context_warning(ctx: Mapping[str, Any]) -> str | None:
    """The warning for requests beyond the limit (None when every request fits).

    E.g. "2,121 of 3,993 requests (53.1%) are longer than llama-3-8b's context of 8,192
    tokens, prompt + output (the longest: 191,386). vLLM answers them HTTP 400: ..."
    """
    over = int(ctx.get("over_context_requests") or 0)
    if over <= 0:
        return None
    return (
        f"{over:,d} of {int(ctx['requests']):,d} requests ({fmt_share(float(ctx['over_context_share']))}) "
        f"are longer than {_limit(ctx)}, prompt + output (the longest: "
        f"{int(ctx['longest_request_tokens']):,d}). vLLM answers them HTTP 400: they are counted as "
        f"rejected and as SLO misses, and no policy scales for them. {alternatives_sentence(ctx)}"
    )


def context_summary(ctx: Mapping[str, Any]) -> str:
    """One line for the report's workload card: the warning, or that every request fits."""
    warning = context_warning(ctx)
    if warning is not None:
        return warning
    return f"every request within {_limit(ctx)}"
