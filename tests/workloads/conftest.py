"""Fixtures for the workloads tests: tiny trace files written into tmp_path, and the shared data dir."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from workload_fixtures import CHUNK_0_TEXT, CHUNK_1_TEXT

# tests/workloads/conftest.py -> parents[2] is the repo root; the shared data
# sits beside the repo (../shared/data), never inside it.
SHARED_DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"


@pytest.fixture
def write(tmp_path: Path) -> Callable[[str, str], Path]:
    """Write ``text`` to ``tmp_path / name`` (creating parent dirs) and return the path."""

    def _write(name: str, text: str) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return path

    return _write


@pytest.fixture
def servegen_dir(tmp_path: Path) -> Path:
    """Two ServeGen clients over 3600 s: 13,800 expected requests.

    Client 0: 5 req/s in three windows + 2 req/s in one = 10,200; client 1:
    2 req/s in three windows = 3,600. The path mentions m-large (default lengths).
    """
    d = tmp_path / "clients_m-large"
    d.mkdir()
    (d / "chunk-0-trace.csv").write_text(CHUNK_0_TEXT)
    (d / "chunk-1-trace.csv").write_text(CHUNK_1_TEXT)
    (d / "notes.txt").write_text("not a chunk file")
    return d


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real traces directory, or skip with the reason."""
    if not SHARED_DATA.is_dir():
        pytest.skip(
            f"../shared/data not found: {SHARED_DATA.resolve()} (real-trace tests need it beside the repo)"
        )
    return SHARED_DATA
