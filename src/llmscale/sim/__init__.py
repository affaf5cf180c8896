"""The simulated serving fleet.

Its four hot modules (request, histogram, replica, fleet) are compiled with
mypyc when the package is installed (setup.py). ``LLMSCALE_PURE_PYTHON=1`` in
the environment, set before this package is first imported, loads their
``.py`` sources instead of the compiled builds: for debugging with a Python
debugger or profiler, and for benchmarks/sim_speed.py's compiled-vs-source ratio.
"""

from __future__ import annotations

import os

if os.environ.get("LLMSCALE_PURE_PYTHON") == "1":
    from llmscale.sim._source_first import install as _install

    _install()
