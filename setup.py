"""Build hook: compile the simulator's hot path to C with mypyc.

Everything else about the package is in pyproject.toml. The modules below run
the discrete-event loop (every arrival, iteration and completion goes through
them, and the step-time kernel prices every prefill iteration); they are
typed so that mypyc keeps them native (see the docstring of sim/replica.py),
which is what lets the default ``llmscale backtest`` and the oracle's search
finish in reasonable time. The modules stay plain, typed Python: set
``LLMSCALE_PURE_PYTHON=1`` to install without compiling (the results are
identical; tests/sim/test_compiled.py checks which one is imported). Keep the
list in step with ``llmscale._source_first.HOT_MODULES`` and
scripts/bootstrap.sh.
"""

from __future__ import annotations

import os

from setuptools import setup

HOT_MODULES = [
    "src/llmscale/perf/kernel.py",
    "src/llmscale/sim/request.py",
    "src/llmscale/sim/histogram.py",
    "src/llmscale/sim/replica.py",
    "src/llmscale/sim/fleet.py",
]

ext_modules = []
if os.environ.get("LLMSCALE_PURE_PYTHON", "") != "1":
    from mypyc.build import mypycify

    ext_modules = mypycify(HOT_MODULES, opt_level="3")

setup(ext_modules=ext_modules)
