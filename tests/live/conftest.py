"""tests/live: the live controller over small in-process fakes of a MetricSource and a Cluster."""

from __future__ import annotations

import sys
from pathlib import Path

# live_fakes.py is imported by plain module name, like tests/sim's helpers.
_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
