"""Build hook: compile the simulator's hot path to C with mypyc, and the page reader's C scan.

Everything else about the package is in pyproject.toml. The modules below run
the discrete-event loop (every arrival, iteration and completion goes through
them, and the step-time kernel prices every prefill iteration); they are
typed so that mypyc keeps them native (see the docstring of sim/replica.py),
which is what lets the default ``llmscale backtest`` and the oracle's search
finish in reasonable time. The modules stay plain, typed Python: set
``LLMSCALE_PURE_PYTHON=1`` to install without compiling (the results are
identical; tests/sim/test_compiled.py checks which one is imported). The list
is ``llmscale._source_first.HOT_MODULES`` (and ``NATIVE_SOURCES`` for the module written in
C), read from its file without importing the package (which is not installed yet).
"""

from __future__ import annotations

import os
import runpy
from pathlib import Path

from setuptools import setup

_SOURCE_FIRST = Path(__file__).resolve().parent / "src" / "llmscale" / "_source_first.py"
_LISTS = runpy.run_path(str(_SOURCE_FIRST))
HOT_MODULES = _LISTS["hot_module_paths"]()
NATIVE_SCAN = _LISTS["NATIVE_SOURCES"]["llmscale.metrics._scan"]

ext_modules = []
if os.environ.get("LLMSCALE_PURE_PYTHON", "") != "1":
    from mypyc.build import mypycify
    from setuptools import Extension

    ext_modules = mypycify(HOT_MODULES, opt_level="3")
    # The live controller's page reader in C (see the file): one pass over a page read through its
    # learnt layout. Its Python reader stays the reference and the fallback.
    ext_modules.append(
        Extension("llmscale.metrics._scan", [NATIVE_SCAN], extra_compile_args=["-O2", "-std=c11"])
    )

setup(ext_modules=ext_modules)
