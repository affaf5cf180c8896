"""Shared test helpers: where ../shared/data is, and a skip with a clear reason when it is absent."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: ../shared/data beside the checkout, or $LLMSCALE_SHARED_DATA (a git worktree elsewhere)
SHARED_DATA = Path(os.environ.get("LLMSCALE_SHARED_DATA") or REPO.parent / "shared" / "data")

# tests/sim/fake_perf.py and friends are imported by plain module name.
for sub in ("sim",):
    p = str(REPO / "tests" / sub)
    if p not in sys.path:
        sys.path.insert(0, p)


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"../shared/data not found at {SHARED_DATA}: the real traces are not on this machine")
    return SHARED_DATA
