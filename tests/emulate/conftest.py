"""Fixtures that start `llmscale emulate` as a real subprocess (``support/emulate_proc.py``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support.emulate_proc import ADMIN_TOKEN, TIME_SCALE, EmulateProcess, start_emulate, stop_emulate


@pytest.fixture(scope="module")
def emulate_slow() -> Iterator[EmulateProcess]:
    """One replica at quarter speed (TIME_SCALE): every simulated latency is four times as long on the
    wall clock, so the fixed HTTP and scheduling overheads are a smaller share of what is measured."""
    ep = start_emulate(
        "--replicas",
        "1",
        "--time-scale",
        str(TIME_SCALE),
        "--default-max-tokens",
        "8",
        "--admin-api",
        env={"LLMSCALE_EMULATE_ADMIN_TOKEN": ADMIN_TOKEN},
    )
    try:
        yield ep
    finally:
        stop_emulate(ep.proc)
