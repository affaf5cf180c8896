"""``llmscale loadgen``: replay a request trace against an OpenAI-compatible endpoint and time it.

Client-side TTFT, TPOT and E2E per request from the SSE stream, summarised as
percentiles. Works against ``llmscale emulate`` and against a real vLLM.
"""

from __future__ import annotations

from llmscale.loadgen.client import Outcome, RequestRecord
from llmscale.loadgen.runner import LoadgenError, LoadgenResult, base_url_of, run_loadgen, run_loadgen_async

__all__ = [
    "LoadgenError",
    "LoadgenResult",
    "Outcome",
    "RequestRecord",
    "base_url_of",
    "run_loadgen",
    "run_loadgen_async",
]
