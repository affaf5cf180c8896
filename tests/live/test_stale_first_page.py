"""Start-up with old first pages: the rate ``llmscale run`` reads stays near the load offered.

Four real emulated vLLM replicas (``EmulatorThread``) serve a steady :data:`RATE_RPS` through
their front door. Their pages reach ``llmscale run`` (the real CLI: static scrape targets, the
``slo`` policy, 0.5 s ticks) through a caching proxy that started cold: it answers each replica's
first scrape with the copy it kept from :data:`STALE_S` seconds before, and every later one
fresh, as a stale-while-revalidate cache (or a sidecar exporter's first snapshot) does. Read as
a rate's baseline, those copies made the first rate read 113 req/s for a true 20 (every replica
at (span + 4 s) / span of its rate, over the first short spans), decaying over ~10 ticks.

The bound: every tick reads at most :data:`MAX_OVER_READ` x the offered rate. A replica's rate
counts over a span of at least 4 sample lags (``MIN_SPAN_LAGS``), so timing alone reads at most
1.25x; over the shortest span that counts, one tick of 0.5 s, a replica at 5 req/s finishes 2.5
requests, and one request more finishing just before the later page reads (2.5 + 1) / 2.5 =
1.4x; 1.25 x 1.4 = 1.75. A replica without a rate yet stands in at the mean of the others,
which stays under the same bound.

And a surge at start-up is still read: honest replicas already serving 3x the load when the
scrape starts are read by the real pod scrape, and the rates of its observations with the
undated marks are at most one tick later than with them stripped (the rate before the marks),
and read the surge.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from tests.support.run_config import standalone_run_config

from llmscale.emulate import EmulatorThread
from llmscale.metrics.exposition import parse_exposition
from llmscale.metrics.names import VLLM
from llmscale.metrics.scrape import PodScrapeSource, ScrapeTarget
from llmscale.types import Observation
from support.stale_fleet import ColdCache, Load, emulated_fleet, finished, fleet_request_rates
from support.wait import wait_for

REPLICAS = 4
RATE_RPS = 20.0  # offered to the fleet: 5 req/s a replica
STALE_S = 4.0  # how old the cache's copies are when the controller first asks
TICK_S = 0.5
TICKS = 14
MAX_OVER_READ = 2.0  # the 1.75x derived in the module docstring, rounded up
E2E = VLLM.e2e


@pytest.fixture
def fleet() -> Iterator[tuple[EmulatorThread, list[str]]]:
    yield from emulated_fleet(REPLICAS)


def _config(tmp_path: Path, urls: list[str]) -> Path:
    return standalone_run_config(tmp_path, urls, tick_s=TICK_S, timeout_s=1.0)


def test_old_first_pages_do_not_inflate_the_rate_read_at_start_up(tmp_path: Path, fleet) -> None:
    emu, urls = fleet
    with Load(emu.base_url, lambda t: RATE_RPS):
        # load flowing: the fleet has finished a second of it
        wait_for("the fleet to finish requests", lambda: finished(urls) >= RATE_RPS, 60.0, every_s=0.2)
        copies = [httpx.get(u, timeout=5.0).content for u in urls]
        kept = sum(parse_exposition(c.decode()).histograms[E2E].count for c in copies)
        # the copies are STALE_S old in the fleet's own count: that many seconds of requests since
        wait_for(
            f"{STALE_S} s of requests after the copies",
            lambda: finished(urls) >= kept + RATE_RPS * STALE_S,
            60.0,
            every_s=0.1,
        )
        with ColdCache(urls, copies) as cache:
            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "llmscale.cli",
                    "run",
                    "--config",
                    str(_config(tmp_path, [cache.url(i) for i in range(REPLICAS)])),
                    "--max-ticks",
                    str(TICKS),
                ],
                capture_output=True,
                text=True,
                timeout=TICKS * 5 + 60,
                env={**os.environ, "KUBECONFIG": os.devnull},
            )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert cache.served == set(range(REPLICAS))
    lines = [json.loads(x) for x in (tmp_path / "decisions.jsonl").read_text().splitlines()]
    assert len(lines) == TICKS
    rates = [ln["observed"].get("request_rate_rps") for ln in lines]
    read = [r for r in rates if r is not None]
    assert read, rates  # the controller is not left blind
    assert max(read) <= MAX_OVER_READ * RATE_RPS, rates
    assert read[-1] >= RATE_RPS / MAX_OVER_READ, rates


def test_a_surge_at_start_up_is_read_one_tick_later_at_most(fleet) -> None:
    emu, urls = fleet
    base_rps, surge_rps = RATE_RPS / 4, 3 * RATE_RPS / 4
    surge_at = [0.0]

    def rate_at(t: float) -> float:
        return surge_rps if surge_at[0] and t >= surge_at[0] else base_rps

    with Load(emu.base_url, rate_at) as load:
        wait_for("the fleet to finish requests", lambda: finished(urls) >= base_rps, 60.0, every_s=0.2)
        surge_at[0] = time.monotonic() - load.started
        # the surge is on when the controller starts: a second of it finished
        before = finished(urls)
        wait_for(
            "the surge to finish requests", lambda: finished(urls) >= before + surge_rps, 60.0, every_s=0.1
        )
        targets = [ScrapeTarget(f"r{i}", u) for i, u in enumerate(urls)]
        window: list[Observation] = []
        with PodScrapeSource(targets, timeout_s=1.0) as source:
            t0 = time.monotonic()
            for k in range(TICKS):
                window.append(source.observe(time.time()))
                time.sleep(max(0.0, t0 + TICK_S * (k + 1) - time.monotonic()))
    assert window[0].undated_replicas == {f"r{i}" for i in range(REPLICAS)}
    marked = fleet_request_rates(window)
    plain = fleet_request_rates([replace(o, undated_replicas=frozenset()) for o in window])
    first_plain = next(k for k, r in enumerate(plain) if r is not None)
    first_marked = next(k for k, r in enumerate(marked) if r is not None)
    assert first_marked <= first_plain + 1, (plain, marked)
    # the surge is what is read, from the first rate on (the bound of the other test, below)
    assert all(r is None or r >= 2 * base_rps for r in marked), (plain, marked)
    assert all(r is None or r <= MAX_OVER_READ * surge_rps for r in marked), (plain, marked)
