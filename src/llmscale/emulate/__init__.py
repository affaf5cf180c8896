"""``llmscale emulate``: simulated vLLM replicas served over HTTP in wall-clock time.

The replicas are the backtest's simulator, driven by the wall clock, so TTFT
and TPOT seen by a client are the simulator's. Importing this package starts
nothing and imports no web framework until a server is built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from llmscale.emulate.config import EmulateConfig

if TYPE_CHECKING:
    from llmscale.emulate.background import EmulatorThread
    from llmscale.emulate.cluster import EmulateCluster
    from llmscale.emulate.server import EmulateServer, serve

__all__ = ["EmulateCluster", "EmulateConfig", "EmulateServer", "EmulatorThread", "serve"]

_LAZY = {
    "EmulateCluster": "llmscale.emulate.cluster",
    "EmulatorThread": "llmscale.emulate.background",
    "EmulateServer": "llmscale.emulate.server",
    "serve": "llmscale.emulate.server",
}


def __getattr__(name: str) -> Any:
    # aiohttp and httpx are imported on first use, so `import llmscale.emulate` stays cheap.
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'llmscale.emulate' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
