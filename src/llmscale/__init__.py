"""llmscale: an SLO-aware autoscaler for LLM inference fleets, with a simulator to prove policies.

The simulator's hot modules and the step-time kernel are compiled with mypyc
when the package is installed (setup.py). ``LLMSCALE_PURE_PYTHON=1`` in the
environment, set before llmscale is first imported, loads their ``.py`` sources
instead of the compiled builds: for debugging with a Python debugger or
profiler, and for benchmarks/sim_speed.py's compiled-vs-source ratio.
"""

from __future__ import annotations

import os

__all__ = ["__version__"]

__version__ = "0.1.0"

if os.environ.get("LLMSCALE_PURE_PYTHON") == "1":
    from llmscale._source_first import install as _install

    _install()
