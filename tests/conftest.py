"""Shared test helpers: where ../shared/data is, and a skip with a clear reason when it is absent."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[dict[str, Any]]:
    """One local Ray instance (``support/ray_local.py``) for every test that runs work on a Ray
    cluster: starting one takes 10-30 s, and each test only connects to it from a subprocess, as
    a user's command would. Stopped, with every process it started, when the session ends."""
    from support.ray_local import local_ray

    with pytest.MonkeyPatch.context() as mp:
        yield from local_ray(mp)
