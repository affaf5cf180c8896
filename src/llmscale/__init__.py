"""llmscale: an SLO-aware autoscaler for LLM inference fleets, with a simulator to prove policies."""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
