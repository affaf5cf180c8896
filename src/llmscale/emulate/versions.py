"""Which vLLM the emulator plays: the error body and the metric names of one release line.

Two things a client or a scraper sees changed between the vLLM releases in use:

* **The error body.** vLLM 0.10.1 nested it the way OpenAI's API does,
  ``{"error": {"message", "type", "param", "code"}}``; earlier releases answered the flat
  ``{"object": "error", "message", "type", "param", "code"}``. ``code`` is the HTTP status
  (an int) in both. A client that reads ``body["error"]["message"]`` (the ``openai`` package)
  gets a plain status error from the older body, which is what it gets from that vLLM too.
* **The metric names.** 0.11 dropped the names deprecated in 0.9
  (``vllm:gpu_cache_usage_perc``, ``vllm:gpu_prefix_cache_{queries,hits}``) and renamed the
  per-token latency histogram ``vllm:time_per_output_token_seconds`` to
  ``vllm:inter_token_latency_seconds``, adding the per-request mean
  ``vllm:request_time_per_output_token_seconds``. A 0.10 page therefore has both KV-usage
  gauges, both prefix-cache counter pairs, the old per-token histogram and no per-request TPOT.

Releases before 0.10.0 are refused: their V0 engine's page differs in more than names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from llmscale.errors import ConfigError
from llmscale.metrics.names import VllmMetric as V

__all__ = ["DEFAULT_VLLM_VERSION", "VllmVersion", "parse_vllm_version"]

#: The release the emulator plays unless told otherwise.
DEFAULT_VLLM_VERSION = "0.11.0"
_OLDEST = (0, 10, 0)
_NESTED_ERRORS = (0, 10, 1)
_CURRENT_NAMES = (0, 11, 0)
_VERSION = re.compile(r"^(\d+)\.(\d+)\.(\d+)(?:[.+-]?[0-9A-Za-z.+-]*)?$")

#: Series a 0.10 page has and a 0.11 page does not (deprecated in 0.9, dropped in 0.11).
_ONLY_BEFORE_0_11 = frozenset(
    {V.KV_USAGE_OLD, V.ITL_OLD, V.PREFIX_CACHE_QUERIES_OLD, V.PREFIX_CACHE_HITS_OLD}
)
#: Series new in 0.11.
_SINCE_0_11 = frozenset({V.ITL, V.TPOT})


@dataclass(frozen=True)
class VllmVersion:
    """One vLLM release as the emulator plays it; ``text`` is what ``/version`` answers."""

    text: str
    release: tuple[int, int, int]

    @property
    def nested_errors(self) -> bool:
        """True from 0.10.1: errors are ``{"error": {...}}``."""
        return self.release >= _NESTED_ERRORS

    def exports(self, name: str) -> bool:
        """Whether this release's ``/metrics`` page has the series ``name`` (vLLM's names only)."""
        if self.release >= _CURRENT_NAMES:
            return name not in _ONLY_BEFORE_0_11
        return name not in _SINCE_0_11

    def error_body(self, message: str, kind: str, status: int, param: str | None = None) -> dict[str, Any]:
        """The JSON body this release answers an error with (see the module docstring)."""
        if self.nested_errors:
            return {"error": {"message": message, "type": kind, "param": param, "code": status}}
        return {"object": "error", "message": message, "type": kind, "param": param, "code": status}


def parse_vllm_version(text: str) -> VllmVersion:
    """``"0.10.0"`` -> the release it names; ConfigError for text that is not one, or before 0.10.0."""
    m = _VERSION.match(text.strip())
    if m is None:
        raise ConfigError(f"vllm_version = {text!r}: expected a release such as 0.10.0 or 0.11.0")
    release = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
    if release < _OLDEST:
        raise ConfigError(
            f"vllm_version = {text!r}: the emulator plays vLLM 0.10.0 and later (V1 engine pages)"
        )
    return VllmVersion(text.strip(), release)
